package workload

import (
	"context"
	"math/rand/v2"
	"strconv"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/chaos/history"
	"github.com/fero-go/fero/pkg/fero"
)

// Jepsen's CAS register and set workloads, on pkg/fero's built-in
// compare-and-set and exactly-once retries (docs/engine.md, rules 15 and
// 16); the servers need no verbs of their own.
//
// CAS: each operation, on one of Keys, is a read through the owner with
// the key's version (VERSION), a write at Majority, or a compare-and-set:
// a VERSION read (recorded as a read of its own), then UpdateIf at the
// version it returned, at Majority, recorded as cas(the value read ->
// a new value). Values are unique in the run, so a version names one
// value. After the heal each key is read once more (Final). The checker
// (check.checkCAS) wants every key's history linearizable as a register
// with compare-and-set, and versions and values to name each other.
//
// Set: each operation pushes an element unique in the run
// ("c<proc>-<id>") onto one of Keys at Majority, with fero's retries,
// or (one in ten) reads an array through the owner; after the heal every
// array is read once more (Final). The checker (check.checkSet) wants
// every acknowledged element present exactly once, none twice, and none
// whose push failed definite.

// The CAS mix, of every mixTotal operations: casReadShare reads,
// casWriteShare writes, the rest compare-and-sets.
const (
	casReadShare  = 3
	casWriteShare = 2
	// setReadShare of every mixTotal set operations are reads.
	setReadShare = 1
)

// casTicket draws a CAS operation: n (drawn from mixTotal) picks it.
func casTicket(id uint64, key string, n int) ticket {
	t := ticket{id: id, key: key}
	switch {
	case n < casReadShare:
		t.f, t.via = history.Read, history.ViaOwner
	case n < casReadShare+casWriteShare:
		t.f = history.Write
	default:
		t.f = history.Cas
	}
	return t
}

// setTicket draws a set operation.
func setTicket(id uint64, key string, n int) ticket {
	t := ticket{id: id, key: key, f: history.Push}
	if n < setReadShare {
		t.f, t.via = history.Read, history.ViaOwner
	}
	return t
}

// ticketFor draws the next operation of cfg.Kind's mix.
func (w *worker) ticketFor(rng *rand.Rand, id uint64, writes *int) ticket {
	t := ticket{id: id, key: w.cfg.Keys[rng.IntN(len(w.cfg.Keys))]}
	switch n := rng.IntN(mixTotal); {
	case w.cfg.Kind == history.Counter:
		t.f, t.amount = history.Incr, 1
	case w.cfg.Kind == history.Bank:
		t = bankTicket(rng, id, w.cfg.Keys[0], n)
	case w.cfg.Kind == history.CAS:
		t = casTicket(id, t.key, n)
	case w.cfg.Kind == history.Set:
		t = setTicket(id, t.key, n)
	case n < writeShare:
		t.f, t.wait = history.Write, *writes%len(waits)
		*writes++
	case n < writeShare+ownerReadShare:
		t.f, t.via = history.Read, history.ViaOwner
	default:
		t.f, t.via = history.Read, history.ViaLocal
	}
	return t
}

// versioned is VERSION's reply: [version, value].
type versioned struct {
	//lint:ignore U1000 msgpack reads its tag: the reply is an array
	_msgpack struct{} `msgpack:",as_array"`
	Version  uint64
	Value    msgpack.RawMessage
}

// readVersion reads op.Key through its owner with its version, into
// op.Value (or op.Absent) and op.Version.
func (w *worker) readVersion(ctx context.Context, op *history.Op) error {
	var pair versioned
	if err := w.r.Call(ctx, fero.VerbVersion, op.Key, nil, &pair); err != nil {
		return err
	}
	op.Version = pair.Version
	var v any
	if len(pair.Value) > 0 {
		if err := msgpack.Unmarshal(pair.Value, &v); err != nil {
			return err
		}
	}
	var err error
	op.Value, op.Absent, err = asString(v)
	return err
}

// readArray reads the array at op.Key through its owner into
// op.Elements (or op.Absent).
func (w *worker) readArray(ctx context.Context, op *history.Op) error {
	var v []string
	if err := w.r.Call(ctx, fero.VerbGet, op.Key, nil, &v); err != nil {
		return err
	}
	op.Elements, op.Absent = v, v == nil
	return nil
}

// doCAS invokes one CAS operation and records it; a compare-and-set is
// two operations, its VERSION read (ID id|casReadBit) and the cas.
func (w *worker) doCAS(ctx context.Context, t ticket) error {
	value := "p" + strconv.Itoa(w.cfg.Proc) + "-" + strconv.FormatUint(t.id, 10)
	switch t.f {
	case history.Read:
		op := history.Op{Proc: w.cfg.Proc, ID: t.id, F: history.Read, Via: history.ViaOwner, Key: t.key}
		return w.record(ctx, op, w.readVersion)
	case history.Write:
		op := history.Op{Proc: w.cfg.Proc, ID: t.id, F: history.Write, Key: t.key, Value: value, Wait: "majority"}
		return w.record(ctx, op, func(ctx context.Context, op *history.Op) error {
			return w.r.Update(ctx, op.Key, op.Value, fero.Majority)
		})
	}
	read := history.Op{Proc: w.cfg.Proc, ID: t.id | casReadBit, F: history.Read, Via: history.ViaOwner, Key: t.key}
	var ok bool
	if err := w.record(ctx, read, func(ctx context.Context, op *history.Op) error {
		err := w.readVersion(ctx, op)
		ok, read = err == nil, *op
		return err
	}); err != nil || !ok {
		return err // no version, no cas
	}
	op := history.Op{Proc: w.cfg.Proc, ID: t.id, F: history.Cas, Key: t.key, Value: value, Wait: "majority",
		Version: read.Version, Expect: read.Value, ExpectAbsent: read.Absent}
	return w.record(ctx, op, func(ctx context.Context, op *history.Op) error {
		err := w.r.UpdateIf(ctx, op.Key, fero.Version(op.Version), op.Value, fero.Majority)
		if cur, ok := fero.VersionOf(err); ok {
			op.Current = uint64(cur)
		}
		return err
	})
}

// casReadBit marks the ID of a compare-and-set's VERSION read: apart from
// the tickets' 1, 2, ... and the final reads' (from 1<<40).
const casReadBit = 1 << 42

// doSet invokes one set operation and records it.
func (w *worker) doSet(ctx context.Context, t ticket) error {
	op := history.Op{Proc: w.cfg.Proc, ID: t.id, F: t.f, Via: t.via, Key: t.key}
	if t.f == history.Read {
		return w.record(ctx, op, w.readArray)
	}
	op.Value, op.Wait = "c"+strconv.Itoa(w.cfg.Proc)+"-"+strconv.FormatUint(t.id, 10), "majority"
	return w.record(ctx, op, func(ctx context.Context, op *history.Op) error {
		return w.r.Push(ctx, op.Key, op.Value, fero.Majority)
	})
}
