package partition

import (
	"time"

	"github.com/fero-go/fero/internal/errs"
)

// Exactly-once (rule 16, docs/engine.md). A write may carry its writer's
// ID and a sequence number (in its record: the State reads them). The
// state remembers, per partition, the outcome of each writer's recent
// sequences, as part of what every copy applies and snapshots, so the
// memory moves with the partition. Before the owner commits a record that
// carries a writer, it asks the state: a sequence already committed is
// not committed again; its caller is answered with the first commit's
// position (and, for a verb, its reply), once that commit is as durable
// as the caller asked. So a caller that got an indefinite error may send
// the same write again, with the same sequence, and it applies once.

// DedupStatus is what a state remembers of a writer's sequence.
type DedupStatus uint8

const (
	// DedupNew: not committed that the state knows of: commit it.
	DedupNew DedupStatus = iota
	// DedupDone: committed; the state has its outcome.
	DedupDone
	// DedupTooOld: the sequence is older than what the state remembers of
	// its writer: whether it was committed cannot be told.
	DedupTooOld
)

// Deduper is a State that remembers recent writes' outcomes by writer.
type Deduper interface {
	// WriterOf returns the writer and sequence entry e carries ("" for
	// none). e is a record about to be committed, of any type.
	WriterOf(e Entry) (writer string, seq uint64)
	// Outcome returns what partition p remembers of writer's sequence
	// seq: for DedupDone, the offset its record got and the reply it
	// keeps (a verb's; nil for a write).
	Outcome(p int, writer string, seq uint64) (offset uint64, reply []byte, status DedupStatus)
}

// ErrTooOldToDedup refuses a write whose sequence is older than what the
// owner remembers of its writer: this attempt is not committed, but an
// earlier one may have been, so the error is indefinite (Aborted), and
// retrying it cannot help.
var ErrTooOldToDedup = errs.New(errs.Aborted, "a retry older than the owner's memory of its writer: an earlier attempt may have been committed")

// dedup looks a batch record up before the owner commits it (only a batch
// names its writer): done says that it was answered (a duplicate, or too
// old to tell), with err when refused.
func (e *Engine) dedup(pt *part, w *write, o origin) (done bool, err error) {
	d := e.dd
	if d == nil {
		return false, nil
	}
	writer, seq := d.WriterOf(Entry{Type: w.typ, Key: w.key, Value: w.value})
	if writer == "" {
		return false, nil
	}
	return e.answerDuplicate(pt, d, writer, seq, w, o)
}

// answerDuplicate answers a write or a turn of writer's sequence seq if
// the state has its outcome: with it, once a majority holds it when the
// write asked for replicas (a retry's caller cannot tell how durable the
// first commit became; the copies' acks of this epoch say).
func (e *Engine) answerDuplicate(pt *part, d Deduper, writer string, seq uint64, w *write, o origin) (bool, error) {
	off, reply, st := d.Outcome(pt.p, writer, seq)
	switch st {
	case DedupNew:
		return false, nil
	case DedupTooOld:
		return true, ErrTooOldToDedup
	}
	// The first commit's epoch, if the log still holds its offset; past
	// the history cap it is not known here, and the position says only
	// the offset (FuzzSchedules found the owner's own epoch named there,
	// which never committed that offset).
	pos := Position{Offset: off}
	if ep, ok := pt.log.epochAt(off); ok {
		pos.Epoch = ep
	}
	k, voters := 0, false
	switch {
	case w.turn == TurnBegin:
		// A verb's reply is given again only once its record is on a
		// majority: its first caller may have asked for that much.
		k, voters = e.majority()-1, true
		if !e.isVoter(e.id) {
			k++
		}
	case w.wait == WaitReplicas:
		k = min(w.k, len(pt.group)-1)
	case w.wait == WaitMajority:
		k, voters = e.majority()-1, true
		if !e.isVoter(e.id) {
			k++
		}
	}
	if !o.wants {
		return true, nil
	}
	if k == 0 {
		e.completeDuplicate(pt, o, pos, reply)
		return true, nil
	}
	// Acks of this epoch at or past the first commit's offset mean the
	// copies hold it (each copy is a prefix of the owner's log).
	pt.waits = append(pt.waits, wait{pos: Position{Epoch: pt.accepted, Offset: off}, k: k, voters: voters, origin: o,
		deadline: timeOf(w.deadline), reply: reply, dup: true, first: pos})
	e.checkWaits(pt)
	return true, nil
}

// completeDuplicate answers a duplicate with its first commit's position
// and reply.
func (e *Engine) completeDuplicate(pt *part, o origin, pos Position, reply []byte) {
	if o.node == "" {
		e.rd.Completions = append(e.rd.Completions, Completion{Token: o.token, Partition: pt.p, Position: pos, Reply: reply, Duplicate: true})
		return
	}
	e.complete(pt, o, pos, nil)
}

// timeOf is a deadline in Unix nanoseconds as a time.
func timeOf(ns int64) time.Time { return time.Unix(0, ns) }
