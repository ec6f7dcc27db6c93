// Package workload owns the fault suite's client process: a fero.Client()
// node that reads and writes a fixed set of keys at a steady rate while the
// harness (internal/chaos) injects faults, and records every operation and
// every change to its copy (internal/chaos/history) for the checkers
// (internal/chaos/check).
//
// A run has four phases. Run opens the node and subscribes to its change
// stream before anything else, so the trace misses nothing; waits for the
// servers; for Duration invokes operations at Rate, a bounded number at
// once; then waits for the harness to say the cluster has healed (stdin
// closes or SIGTERM arrives) and writes its copy of every key and its
// digest as the history's last line.
package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"reflect"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/chaos/history"
	"github.com/fero-go/fero/pkg/fero"
)

// Config is one workload process's part of a run.
type Config struct {
	Resource string
	// Kind is the workload: history.Register (the default),
	// history.Counter or history.Bank (see jepsen.go; the servers must
	// run with --jepsen-verbs), history.CAS or history.Set (casset.go).
	Kind string
	// Seeds are gossip addresses to join.
	Seeds []string
	// Bind is this node's gossip address, ip:port.
	Bind string
	// Listen is this node's data-plane address, ip:port.
	Listen string
	ID     string
	// Proc numbers the process, unique in the run: it makes written
	// values unique ("p<Proc>-<op id>").
	Proc int
	// Keys are the keys the operations pick from, uniformly: registers,
	// or counters; for Bank, Keys[0] is the bank's key.
	Keys []string
	// Rate is the operations invoked per second.
	Rate     float64
	Duration time.Duration
	// Seed chooses the operations.
	Seed uint64
	// Out is the history file's path; it ends in history.HistorySuffix,
	// and the trace is written beside it (history.TracePath).
	Out string
	// Secrets are the cluster secrets (fero.WithClusterSecret).
	Secrets [][]byte
	// Attach, instead of Seeds, Bind and Secrets, are the servers' data
	// addresses the node attaches to, proving Token (fero.WithAttach).
	Attach []string
	Token  []byte

	// Optional.

	// Servers is how many servers to wait for before the first operation
	// (default 1).
	Servers int
	// InFlight bounds the operations in flight (default 4); when all are
	// busy, invocations fall behind Rate.
	InFlight int
	// OpTimeout is each operation's deadline (default 3s).
	OpTimeout time.Duration
	// Stdin is the stream whose end says the cluster has healed (default
	// os.Stdin).
	Stdin io.Reader
	// OpsDone, if set, is called once the operation phase is over and
	// every operation has completed, before the wait for the heal: a
	// harness in the same process signals the heal only after every
	// client's last write.
	OpsDone func()
	// Logger receives the node's logs (default none).
	Logger *slog.Logger
}

// The operation mix: of every ten, five writes, three reads through the
// owner and two local reads.
const (
	writeShare     = 5
	ownerReadShare = 3
	mixTotal       = 10
)

// waits rotate through the writes in this order.
var waits = []struct {
	name string
	w    fero.Wait
}{{"majority", fero.Majority}, {"ack", fero.Ack}, {"none", fero.NoWait}}

// Run runs the workload. It returns once the final line is written and the
// node has left, or with the first error that stops the run (the history
// written so far stays on disk).
func Run(ctx context.Context, cfg Config) (err error) {
	cfg = withDefaults(cfg)
	if len(cfg.Keys) == 0 || cfg.Rate <= 0 || cfg.Out == "" {
		return errors.New("workload: Keys, Rate and Out are required")
	}
	switch cfg.Kind {
	case history.Register, history.Counter, history.Bank, history.CAS, history.Set:
	default:
		return fmt.Errorf("workload: kind %q: want %s, %s, %s, %s or %s", cfg.Kind,
			history.Register, history.Counter, history.Bank, history.CAS, history.Set)
	}
	ctx, stopSignal := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stopSignal()

	hist, err := history.Create(cfg.Out)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, hist.Close()) }()
	trace, err := history.Create(history.TracePath(cfg.Out))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, trace.Close()) }()

	opts := []fero.NodeOption{fero.Client(), fero.WithPreset(fero.PresetLAN), fero.WithoutMulticast()}
	if len(cfg.Attach) > 0 {
		opts = append(opts, fero.WithAttach(cfg.Attach...), fero.WithToken(cfg.Token))
	} else {
		opts = append(opts, fero.WithSeeds(cfg.Seeds...))
	}
	if len(cfg.Secrets) > 0 {
		opts = append(opts, fero.WithClusterSecret(cfg.Secrets...))
	}
	if cfg.Bind != "" {
		opts = append(opts, fero.WithBind(cfg.Bind))
	}
	if cfg.Listen != "" {
		opts = append(opts, fero.WithListen(cfg.Listen))
	}
	if cfg.ID != "" {
		opts = append(opts, fero.WithID(cfg.ID))
	}
	if cfg.Logger != nil {
		opts = append(opts, fero.WithLogger(cfg.Logger))
	}
	r, err := fero.Open(ctx, cfg.Resource, opts...)
	if err != nil {
		return err
	}
	// Subscribed before any write of ours; a Block stream never drops.
	// Its consumer only writes lines, so it never waits for the node.
	sub := r.Subscribe(fero.Buffer(4096), fero.OnOverflow(fero.Block))
	// The node counts a change before it hands it to the streams, so a
	// count of 0 read now means the stream has every change.
	st := r.Stats()
	if err := trace.Write(history.Change{
		Time: history.Now(), Proc: cfg.Proc, Kind: history.Subscribed,
		Missed: st.Committed + st.Applied + st.Dropped + st.Restored,
	}); err != nil {
		sub.Close()
		_ = r.Close()
		return err
	}
	traced := make(chan error, 1)
	go func() { traced <- traceChanges(sub.C(), trace, cfg.Proc) }()
	defer func() {
		// Closing the node closes the stream once it has delivered
		// every change, so the trace ends after the final line's reads.
		err = errors.Join(err, r.Close(), <-traced)
	}()

	if err := r.WaitServers(ctx, cfg.Servers); err != nil {
		return err
	}
	w := &worker{cfg: cfg, r: r, hist: hist}
	if cfg.Kind == history.Bank {
		if err := w.bankInit(ctx); err != nil {
			return err
		}
	}
	if err := w.invoke(ctx); err != nil {
		return err
	}
	if cfg.OpsDone != nil {
		cfg.OpsDone()
	}
	waitForHeal(ctx, cfg.Stdin)
	if cfg.Kind != history.Register {
		if err := w.finalReads(ctx); err != nil {
			return err
		}
	}
	return w.final()
}

func withDefaults(cfg Config) Config {
	if cfg.Servers <= 0 {
		cfg.Servers = 1
	}
	if cfg.InFlight <= 0 {
		cfg.InFlight = 4
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 3 * time.Second
	}
	if cfg.Stdin == nil {
		cfg.Stdin = os.Stdin
	}
	if cfg.Kind == "" {
		cfg.Kind = history.Register
	}
	return cfg
}

// waitForHeal returns when stdin ends or ctx does (SIGTERM cancels it).
func waitForHeal(ctx context.Context, stdin io.Reader) {
	eof := make(chan struct{})
	go func() {
		// This goroutine outlives Run only while stdin stays open after a
		// SIGTERM, and the process is about to exit then.
		_, _ = io.Copy(io.Discard, stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-ctx.Done():
	}
}

type worker struct {
	cfg  Config
	r    *fero.Resource
	hist *history.Writer
}

// ticket is one operation to invoke, chosen ahead by the seeded source so
// a seed gives the same sequence of operations whatever the timing.
type ticket struct {
	id   uint64
	f    history.Func
	via  history.Via
	key  string
	wait int // index into waits
	// amount, from and to are an Incr's or a Transfer's.
	amount   int64
	from, to string
}

// invoke runs the operation phase: tickets are due at start + i/Rate and
// taken by InFlight goroutines. It returns when Duration is over (or ctx
// ends) and every operation in flight has completed.
func (w *worker) invoke(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(w.cfg.Proc)))
	tickets := make(chan ticket)
	errc := make(chan error, w.cfg.InFlight)
	var wg sync.WaitGroup
	for range w.cfg.InFlight {
		wg.Go(func() {
			for t := range tickets {
				if err := w.do(ctx, t); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	start := time.Now()
	end := start.Add(w.cfg.Duration)
	interval := time.Duration(float64(time.Second) / w.cfg.Rate)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var werr error
	writes := 0
loop:
	for i := uint64(1); ; i++ {
		due := start.Add(time.Duration(i-1) * interval)
		if !due.Before(end) {
			break
		}
		timer.Reset(time.Until(due))
		select {
		case <-timer.C:
		case <-ctx.Done():
			break loop
		case werr = <-errc:
			break loop
		}
		t := w.ticketFor(rng, i, &writes)
		select {
		case tickets <- t:
		case <-ctx.Done():
			break loop
		case werr = <-errc:
			break loop
		}
	}
	close(tickets)
	wg.Wait()
	if werr == nil {
		select {
		case werr = <-errc:
		default:
		}
	}
	return werr
}

// do invokes one operation and records it. Only a failure to record is an
// error: the operation's own error is part of the history.
func (w *worker) do(ctx context.Context, t ticket) error {
	switch w.cfg.Kind {
	case history.CAS:
		return w.doCAS(ctx, t)
	case history.Set:
		return w.doSet(ctx, t)
	case history.Counter, history.Bank:
		return w.doJepsen(ctx, t)
	}
	op := history.Op{Proc: w.cfg.Proc, ID: t.id, F: t.f, Via: t.via, Key: t.key}
	var err error
	if t.f == history.Write {
		op.Value = "p" + strconv.Itoa(w.cfg.Proc) + "-" + strconv.FormatUint(t.id, 10)
		op.Wait = waits[t.wait].name
		ctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
		defer cancel()
		op.Type, op.Time = history.Invoke, history.Now()
		// Read after the context's deadline was set, so it is no earlier.
		op.Deadline = op.Time + w.cfg.OpTimeout.Nanoseconds()
		if err := w.hist.Write(op); err != nil {
			return err
		}
		err = w.r.Update(ctx, t.key, op.Value, waits[t.wait].w)
	} else {
		op.Type, op.Time = history.Invoke, history.Now()
		if err := w.hist.Write(op); err != nil {
			return err
		}
	}
	switch {
	case t.f == history.Write:
	case t.via == history.ViaOwner:
		ctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
		var v any
		err = w.r.Call(ctx, fero.VerbGet, t.key, nil, &v)
		cancel()
		if err == nil {
			op.Value, op.Absent, err = asString(v)
		}
	default:
		v, ok := w.r.Get(t.key)
		if !ok {
			op.Absent = true
		} else {
			op.Value, op.Absent, err = asString(v)
		}
	}
	op.Time = history.Now()
	op.Type = history.OK
	if err != nil {
		// A read that failed changes nothing either way; classified all
		// the same, so every line means one thing.
		op.Type = history.Classify(err).Type()
		op.Error, op.Code = err.Error(), fero.CodeOf(err).String()
	}
	return w.hist.Write(op)
}

// asString takes a value the workload wrote back: a string, or nothing (a
// GET of a missing key replies nil). Anything else means the copy holds
// what nobody wrote, which the checkers must see, not a crash.
func asString(v any) (s string, absent bool, err error) {
	switch v := v.(type) {
	case nil:
		return "", true, nil
	case string:
		return v, false, nil
	}
	return "", false, fmt.Errorf("workload: read a %T, not a string: %v", v, v)
}

// final waits (up to a deadline) until this copy agrees with the owners on
// every key, then writes the final line. The harness heals the cluster
// and waits for the servers' digests to agree before it signals; the
// client's copy may still be a few commits behind.
func (w *worker) final() error {
	// Each pass is whole (its GETs have their own deadlines), so Differ
	// reports the last complete comparison.
	deadline := time.Now().Add(30 * time.Second)
	var differ []string
	for {
		differ = w.disagreements()
		if len(differ) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // between passes of a poll with a deadline
	}
	f := history.Final{Type: history.FinalLine, Proc: w.cfg.Proc, Values: map[string]string{}, Converged: len(differ) == 0, Differ: differ}
	for _, k := range w.cfg.Keys {
		v, ok := w.r.Get(k)
		s, absent, err := asString(v)
		switch {
		case !ok || absent:
			f.Absent = append(f.Absent, k)
		case err != nil:
			f.Values[k] = fmt.Sprintf("%#v", sameInts(v))
		default:
			f.Values[k] = s
		}
	}
	f.Digest = fmt.Sprintf("%016x", w.r.Digest())
	f.Time = history.Now()
	return w.hist.Write(f)
}

// disagreements lists the keys that read differently locally and through
// their owner, each with both values (or the GET's error).
func (w *worker) disagreements() []string {
	var out []string
	for _, k := range w.cfg.Keys {
		var remote any
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.OpTimeout)
		err := w.r.Call(ctx, fero.VerbGet, k, nil, &remote)
		cancel()
		v, _ := w.r.Get(k)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("%s: local %s, owner: %v", k, show(v), err))
		case show(remote) != show(v):
			out = append(out, fmt.Sprintf("%s: local %s, owner %s", k, show(v), show(remote)))
		}
	}
	return out
}

// show writes a value read back as the checkers do: quoted, or absent.
func show(v any) string {
	s, absent, err := asString(v)
	switch {
	case absent:
		return "absent"
	case err != nil:
		return fmt.Sprintf("%#v", sameInts(v))
	}
	return strconv.Quote(s)
}

// sameInts writes every integer in v as an int64: a GET's reply decodes a
// positive integer as a uint64, the node's copy holds an int64, and the
// two must compare equal.
func sameInts(v any) any {
	switch v := v.(type) {
	case uint64:
		if v <= math.MaxInt64 {
			return int64(v)
		}
	case int8, int16, int32, uint8, uint16, uint32:
		return reflect.ValueOf(v).Convert(reflect.TypeFor[int64]()).Interface()
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = sameInts(x)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, x := range v {
			s[i] = sameInts(x)
		}
		return s
	}
	return v
}

// traceChanges writes every change from c as a trace line until c closes.
// After an error it keeps draining, since a Block stream that nobody reads
// stops the node.
func traceChanges(c <-chan fero.Change, trace *history.Writer, proc int) error {
	var first error
	for ch := range c {
		line := history.Change{
			Time: history.Now(), Proc: proc, Kind: ch.Kind.String(),
			Partition: ch.Partition, Term: ch.Term, Offset: ch.Offset, Key: ch.Key,
		}
		if ch.Kind != fero.Restored {
			line.Type = ch.Type.String()
		}
		if len(ch.Value) > 0 {
			var s string
			if err := msgpack.Unmarshal(ch.Value, &s); err == nil {
				line.Value = s
			} else {
				line.Raw = append([]byte(nil), ch.Value...)
			}
		}
		if err := trace.Write(line); err != nil && first == nil {
			first = err
		}
	}
	return first
}
