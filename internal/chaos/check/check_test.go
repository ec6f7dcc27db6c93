package check

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/chaos/history"
)

// builder writes a hand-built run: each process's history and trace.
// Times are small integers; only their order matters to the checkers.
type builder struct {
	t      *testing.T
	hist   map[int][]any
	traces map[int][]history.Change
	nextID map[int]uint64
	// missed[proc] is the Missed count of proc's subscribed line.
	missed map[int]uint64
	// tails are servers' tails, by node.
	tails map[string][]history.Change
}

func newBuilder(t *testing.T) *builder {
	return &builder{t: t, hist: map[int][]any{}, traces: map[int][]history.Change{}, nextID: map[int]uint64{}, missed: map[int]uint64{}, tails: map[string][]history.Change{}}
}

func (b *builder) id(proc int) uint64 {
	b.nextID[proc]++
	return b.nextID[proc]
}

// write records a write of value, invoked at call and answered typ at ret
// (typ "" leaves it pending: its process died before the answer).
func (b *builder) write(proc int, key, value, wait string, call, ret int64, typ history.Type) {
	b.writeBy(proc, key, value, wait, call, ret, typ, 0)
}

// writeBy is write with a deadline on the write's lines.
func (b *builder) writeBy(proc int, key, value, wait string, call, ret int64, typ history.Type, deadline int64) {
	id := b.id(proc)
	op := history.Op{Type: history.Invoke, Time: call, Proc: proc, ID: id, F: history.Write, Key: key, Value: value, Wait: wait, Deadline: deadline}
	b.hist[proc] = append(b.hist[proc], op)
	if typ != "" {
		op.Type, op.Time = typ, ret
		if typ != history.OK {
			op.Error = "some error"
		}
		b.hist[proc] = append(b.hist[proc], op)
	}
}

// read records an ok read; value "" means absent.
func (b *builder) read(proc int, via history.Via, key, value string, call, ret int64) {
	id := b.id(proc)
	op := history.Op{Type: history.Invoke, Time: call, Proc: proc, ID: id, F: history.Read, Via: via, Key: key}
	b.hist[proc] = append(b.hist[proc], op)
	op.Type, op.Time, op.Value, op.Absent = history.OK, ret, value, value == ""
	b.hist[proc] = append(b.hist[proc], op)
}

func (b *builder) change(proc int, time int64, kind string, partition int, term, offset uint64, key, value string) {
	b.traces[proc] = append(b.traces[proc], history.Change{
		Time: time, Proc: proc, Kind: kind, Partition: partition, Term: term, Offset: offset, Key: key, Value: value, Type: "UPDATE",
	})
}

// final records proc's final line; values maps key to value, "" for
// absent.
func (b *builder) final(proc int, time int64, digest string, values map[string]string) {
	f := history.Final{Type: history.FinalLine, Time: time, Proc: proc, Values: map[string]string{}, Digest: digest, Converged: true}
	for k, v := range values {
		if v == "" {
			f.Absent = append(f.Absent, k)
		} else {
			f.Values[k] = v
		}
	}
	b.hist[proc] = append(b.hist[proc], f)
}

// unconverged marks proc's final line as written after giving up waiting
// for its copy to agree with the owners on the keys in differ.
func (b *builder) unconverged(proc int, differ ...string) {
	lines := b.hist[proc]
	f := lines[len(lines)-1].(history.Final)
	f.Converged, f.Differ = false, differ
	lines[len(lines)-1] = f
}

func (b *builder) dir() string {
	dir := b.t.TempDir()
	for proc := range b.traces {
		if _, ok := b.hist[proc]; !ok {
			b.hist[proc] = nil
		}
	}
	for proc, lines := range b.hist {
		path := filepath.Join(dir, fmt.Sprintf("p%d%s", proc, history.HistorySuffix))
		w, err := history.Create(path)
		require.NoError(b.t, err)
		for _, l := range lines {
			require.NoError(b.t, w.Write(l))
		}
		require.NoError(b.t, w.Close())
		if len(b.traces[proc]) == 0 {
			continue
		}
		tw, err := history.Create(history.TracePath(path))
		require.NoError(b.t, err)
		require.NoError(b.t, tw.Write(history.Change{Proc: proc, Kind: history.Subscribed, Missed: b.missed[proc]}))
		for _, c := range b.traces[proc] {
			require.NoError(b.t, tw.Write(c))
		}
		require.NoError(b.t, tw.Close())
	}
	for node, cs := range b.tails {
		w, err := history.Create(filepath.Join(dir, node+TailSuffix))
		require.NoError(b.t, err)
		for _, c := range cs {
			require.NoError(b.t, w.Write(c))
		}
		require.NoError(b.t, w.Close())
	}
	return dir
}

func (b *builder) run() *run {
	r, err := load(b.dir())
	require.NoError(b.t, err)
	return r
}

func kinds(as []Anomaly) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Kind)
	}
	return out
}

func linearizable(t *testing.T, b *builder) linResult {
	t.Helper()
	return checkLinearizable(b.run(), Options{LinearizabilityTimeout: 10 * time.Second, Parallel: 2}, "")
}

func TestLinearizableRegister(t *testing.T) {
	b := newBuilder(t)
	b.write(1, "k", "a", "majority", 1, 2, history.OK)
	b.read(2, history.ViaOwner, "k", "a", 3, 4)
	b.write(1, "k", "b", "ack", 5, 6, history.Info)      // may have happened
	b.write(1, "k", "c", "majority", 5, 7, history.Info) // may have happened
	b.read(2, history.ViaOwner, "k", "c", 8, 9)          // it did: c after b, or b never
	b.write(2, "k", "d", "majority", 10, 11, history.Fail)
	b.read(1, history.ViaOwner, "k", "c", 12, 13)
	b.read(1, history.ViaLocal, "k", "a", 14, 15) // local: lags, not checked here
	b.read(1, history.ViaOwner, "j", "", 1, 2)
	res := linearizable(t, b)
	require.Empty(t, res.anomalies)
	require.Equal(t, 2, res.keys)
}

func TestNotLinearizableStaleRead(t *testing.T) {
	b := newBuilder(t)
	b.write(1, "k", "a", "majority", 1, 2, history.OK)
	b.write(1, "k", "b", "majority", 3, 4, history.OK)
	// Noise the slice must shed.
	for i := range 10 {
		b.read(2, history.ViaOwner, "k", "b", int64(5+2*i), int64(6+2*i))
	}
	b.write(3, "k", "x", "ack", 10, 11, history.Info)
	b.read(3, history.ViaOwner, "k", "a", 30, 31) // stale: b was acked before
	res := linearizable(t, b)
	require.Equal(t, []string{KindNotLinearizable}, kinds(res.anomalies))
	a := res.anomalies[0]
	require.Equal(t, "k", a.Key)
	require.Contains(t, a.Msg, "these 3 have none by themselves")
	for _, want := range []string{`write "k" = "a"`, `write "k" = "b"`, `-> "a"`, "longest linearization"} {
		require.Contains(t, a.Slice, want)
	}
	require.NotContains(t, a.Slice, `"x"`)
}

// Rule 1: an indefinite write took effect before its answer or never, so
// a value first seen after the answer, following an older value, is an
// anomaly; a write with no answer at all stays open.
func TestInfoWriteBoundedByItsAnswer(t *testing.T) {
	history1 := func(typ history.Type) *builder {
		b := newBuilder(t)
		b.write(1, "k", "a", "majority", 1, 2, history.OK)
		b.write(1, "k", "c", "majority", 3, 4, typ)
		b.read(2, history.ViaOwner, "k", "a", 5, 6)
		b.read(2, history.ViaOwner, "k", "c", 7, 8)
		return b
	}
	require.Equal(t, []string{KindNotLinearizable}, kinds(linearizable(t, history1(history.Info)).anomalies))
	require.Empty(t, linearizable(t, history1("")).anomalies)
}

func TestFailedWriteNeverHappened(t *testing.T) {
	for _, typ := range []history.Type{history.Fail, history.Info} {
		b := newBuilder(t)
		b.write(1, "k", "d", "majority", 1, 2, typ)
		b.read(2, history.ViaOwner, "k", "d", 3, 4)
		got := linearizable(t, b).anomalies
		if typ == history.Fail {
			require.Equal(t, []string{KindNotLinearizable}, kinds(got))
		} else {
			require.Empty(t, got)
		}
	}
}

// A NoWait write took effect before some copy first applied it: a read
// after that which finds the key still absent, then a read of the write,
// is an anomaly; without the trace line the write stays open.
func TestNoWaitWindowEndsAtFirstCopy(t *testing.T) {
	build := func(traced bool) *builder {
		b := newBuilder(t)
		b.write(1, "k", "e", "none", 1, 2, history.OK)
		if traced {
			b.change(1, 5, kindApplied, 0, 1, 1, "k", "e")
		}
		b.read(2, history.ViaOwner, "k", "", 6, 7)
		b.read(2, history.ViaOwner, "k", "e", 8, 9)
		return b
	}
	require.Equal(t, []string{KindNotLinearizable}, kinds(linearizable(t, build(true)).anomalies))
	require.Empty(t, linearizable(t, build(false)).anomalies)
}

// A NoWait write lives until its deadline: seen first after a read that
// followed the deadline, it is an anomaly; with a later deadline, not.
func TestNoWaitWindowEndsAtDeadline(t *testing.T) {
	build := func(deadline int64) *builder {
		b := newBuilder(t)
		b.writeBy(1, "k", "e", "none", 1, 2, history.OK, deadline)
		b.read(2, history.ViaOwner, "k", "", 6, 7)
		b.read(2, history.ViaOwner, "k", "e", 8, 9)
		return b
	}
	require.Equal(t, []string{KindNotLinearizable}, kinds(linearizable(t, build(5)).anomalies))
	require.Empty(t, linearizable(t, build(8)).anomalies)
}

// A search that runs out of time is reported, never passed.
func TestLinearizabilityUnknown(t *testing.T) {
	b := newBuilder(t)
	// Many concurrent maybe-writes and reads make the search explode.
	const n = 40
	for i := range n {
		b.write(1+i%4, "k", fmt.Sprintf("v%d", i), "ack", 1, 1000, history.Info)
	}
	for i := range n {
		b.read(5+i%4, history.ViaOwner, "k", fmt.Sprintf("v%d", (i*7)%n), int64(2+i), 1000)
	}
	b.read(9, history.ViaOwner, "k", "nobody", 1001, 1002)
	res := checkLinearizable(b.run(), Options{LinearizabilityTimeout: time.Millisecond, Parallel: 1}, "")
	require.Equal(t, []string{KindUnknown}, kinds(res.anomalies))
	require.Equal(t, 1, res.unknown)
}

func TestLocalReads(t *testing.T) {
	b := newBuilder(t)
	b.write(1, "k", "a", "majority", 1, 2, history.OK)
	b.write(1, "k", "b", "majority", 3, 4, history.OK)
	b.read(2, history.ViaLocal, "k", "a", 5, 6) // lagging copy: fine
	b.read(2, history.ViaLocal, "k", "", 7, 8)
	require.Empty(t, checkLocalReads(b.run()))

	b.write(1, "k", "f", "majority", 9, 10, history.Fail)
	b.read(2, history.ViaLocal, "k", "f", 11, 12)
	b.read(2, history.ViaLocal, "k", "g", 13, 14)
	b.write(1, "k", "h", "ack", 20, 21, history.OK)
	b.read(2, history.ViaLocal, "k", "h", 15, 16)
	got := checkLocalReads(b.run())
	require.Equal(t, []string{KindLocalRead, KindLocalRead, KindLocalRead}, kinds(got))
	require.Contains(t, got[0].Msg, "failed definitely")
	require.Contains(t, got[1].Msg, "no operation wrote")
	require.Contains(t, got[2].Msg, "before its write was invoked")
}

func TestMajorityWrites(t *testing.T) {
	base := func() *builder {
		b := newBuilder(t)
		b.write(1, "k", "a", "ack", 1, 2, history.OK)
		b.write(1, "k", "m", "majority", 3, 4, history.OK)
		b.write(2, "k", "n", "none", 5, 5, history.OK)
		b.change(1, 2, kindApplied, 7, 1, 1, "k", "a")
		b.change(1, 4, kindApplied, 7, 1, 2, "k", "m")
		b.change(1, 6, kindApplied, 7, 1, 3, "k", "n")
		return b
	}
	// The final value is the last write, or the Majority one.
	for _, v := range []string{"n", "m"} {
		b := base()
		b.final(1, 10, "d", map[string]string{"k": v})
		b.final(2, 10, "d", map[string]string{"k": v})
		require.Empty(t, checkMajorityWrites(b.run()), v)
	}

	// Older than m, or absent.
	for _, v := range []string{"a", ""} {
		b := base()
		b.final(1, 10, "d", map[string]string{"k": v})
		b.final(2, 10, "d", map[string]string{"k": "n"})
		got := checkMajorityWrites(b.run())
		require.Equal(t, []string{KindStaleFinal}, kinds(got), v)
		require.Contains(t, got[0].Msg, "p1 end with")
		require.Contains(t, got[0].Slice, "offset 2 term 1")
	}

	// Where no trace orders them, the answer times do.
	b := newBuilder(t)
	b.write(1, "k", "a", "ack", 1, 2, history.OK)
	b.write(1, "k", "m", "majority", 3, 4, history.OK)
	b.change(1, 3, kindRestored, 7, 1, 5, "", "")
	b.change(1, 4, kindApplied, 7, 1, 6, "k", "m")
	b.final(1, 10, "d", map[string]string{"k": "a"})
	require.Equal(t, []string{KindStaleFinal}, kinds(checkMajorityWrites(b.run())))

	// A Majority write in no log, though a converged copy saw the whole
	// partition.
	b = base()
	b.write(2, "k", "lost", "majority", 6, 7, history.OK)
	b.final(1, 10, "d", map[string]string{"k": "n"})
	got := checkMajorityWrites(b.run())
	require.Equal(t, []string{KindMajorityLost}, kinds(got))
	require.Contains(t, got[0].Slice, "no trace line holds it")
	// Unless that copy's stream began after its first change.
	b.missed[1] = 1
	require.Empty(t, checkMajorityWrites(b.run()))

	// Two copies whose logs disagree at one offset.
	b = base()
	b.change(2, 2, kindApplied, 7, 1, 1, "k", "a")
	b.change(2, 4, kindApplied, 7, 2, 2, "k", "n")
	b.final(1, 10, "d", map[string]string{"k": "n"})
	require.Contains(t, kinds(checkMajorityWrites(b.run())), KindLogsDiverge)
}

func TestAppliedAfterAnswer(t *testing.T) {
	base := func() *builder {
		b := newBuilder(t)
		b.write(1, "k", "w", "majority", 1, 4, history.Info) // gave up at 4
		b.write(2, "k", "w2", "ack", 5, 6, history.OK)       // invoked after
		return b
	}
	b := base()
	b.change(1, 3, kindApplied, 7, 1, 1, "k", "w")
	b.change(1, 6, kindApplied, 7, 1, 2, "k", "w2")
	require.Empty(t, checkAppliedAfterAnswer(b.run()))

	b = base()
	b.change(1, 6, kindApplied, 7, 1, 1, "k", "w2")
	b.change(1, 9, kindApplied, 7, 2, 2, "k", "w")
	got := checkAppliedAfterAnswer(b.run())
	require.Equal(t, []string{KindAppliedAfterAnswer}, kinds(got))
	require.Contains(t, got[0].Slice, "offset 2")

	// Another partition's order says nothing about w.
	b = base()
	b.change(1, 6, kindApplied, 8, 1, 1, "k2", "w2")
	b.change(1, 9, kindApplied, 7, 2, 1, "k", "w")
	require.Empty(t, checkAppliedAfterAnswer(b.run()))

	b = newBuilder(t)
	b.write(1, "k", "f", "majority", 1, 2, history.Fail)
	b.change(1, 3, kindApplied, 7, 1, 1, "k", "f")
	require.Equal(t, []string{KindFailedApplied}, kinds(checkAppliedAfterAnswer(b.run())))

	// A NoWait write is bounded by its deadline, not its answer.
	nowait := func(deadline int64) []Anomaly {
		b := newBuilder(t)
		b.writeBy(1, "k", "n", "none", 1, 1, history.OK, deadline)
		b.write(2, "k", "w2", "ack", 5, 6, history.OK)
		b.change(1, 6, kindApplied, 7, 1, 1, "k", "w2")
		b.change(1, 7, kindApplied, 7, 1, 2, "k", "n")
		return checkAppliedAfterAnswer(b.run())
	}
	got = nowait(4)
	require.Equal(t, []string{KindAppliedAfterAnswer}, kinds(got))
	require.Contains(t, got[0].Msg, "past its deadline")
	require.Empty(t, nowait(10))
}

func TestCopies(t *testing.T) {
	b := newBuilder(t)
	b.final(1, 10, "d1", map[string]string{"k": "a", "j": ""})
	b.final(2, 10, "d1", map[string]string{"k": "a", "j": ""})
	require.Empty(t, checkCopies(b.run()))

	b = newBuilder(t)
	b.final(1, 10, "d1", map[string]string{"k": "a", "j": ""})
	b.final(2, 10, "d2", map[string]string{"k": "b", "j": ""})
	b.write(3, "k", "x", "ack", 1, 2, history.OK)
	got := checkCopies(b.run())
	require.Equal(t, []string{KindNoFinal, KindCopiesDiffer, KindCopiesDiffer}, kinds(got))
	require.Equal(t, "k", got[2].Key)
	require.Contains(t, got[2].Slice, `"a": p1`)
	require.NotContains(t, got[1].Slice, "too early")

	// A copy that never agreed with the owners.
	b = newBuilder(t)
	b.final(1, 10, "d1", map[string]string{"k": "a"})
	b.unconverged(1, `k: local "a", owner "old"`)
	got = checkCopies(b.run())
	require.Equal(t, []string{KindCopiesDiffer}, kinds(got))
	require.Contains(t, got[0].Msg, "still differed on 1 keys")
	require.Contains(t, got[0].Slice, `owner "old"`)

	// A final line read before another process's last write.
	b = newBuilder(t)
	b.final(1, 10, "d1", map[string]string{"k": "a", "j": ""})
	b.final(2, 10, "d2", map[string]string{"k": "b", "j": ""})
	b.write(3, "k", "late", "ack", 20, 21, history.OK)
	got = checkCopies(b.run())
	require.Contains(t, got[1].Slice, "p1 (read at 0.000000s, before the last write was invoked at 0.000000s: the heal came too early)")
}

func TestOffsets(t *testing.T) {
	b := newBuilder(t)
	b.change(1, 1, kindApplied, 3, 1, 1, "k", "a")
	b.change(1, 2, kindApplied, 3, 1, 2, "k", "b")
	b.change(1, 3, kindApplied, 4, 1, 1, "j", "c")
	b.change(1, 4, kindDropped, 3, 1, 2, "k", "b")
	b.change(1, 5, kindRestored, 3, 2, 7, "", "")
	b.change(1, 6, kindApplied, 3, 2, 8, "k", "d")
	b.change(1, 7, kindDropped, 3, 2, 8, "k", "d")
	b.change(1, 8, kindApplied, 3, 3, 8, "k", "e")
	require.Empty(t, checkOffsets(b.run()))

	b = newBuilder(t)
	b.change(1, 1, kindApplied, 3, 1, 1, "k", "a")
	b.change(1, 2, kindApplied, 3, 1, 3, "k", "b") // gap
	b.change(1, 3, kindApplied, 4, 1, 2, "j", "c") // does not start at 1
	b.change(2, 1, kindApplied, 3, 1, 1, "k", "a")
	b.change(2, 2, kindApplied, 3, 1, 1, "k", "a") // twice
	b.change(2, 3, kindDropped, 5, 1, 4, "k", "z") // never applied
	got := checkOffsets(b.run())
	require.Equal(t, []string{KindOffsets, KindOffsets, KindOffsets, KindOffsets}, kinds(got))
	require.Contains(t, got[0].Msg, "applied offset 3 after 1")

	// A stream that began after the copy's first change starts each
	// partition where its first line does, and holds it to the rest.
	b = newBuilder(t)
	b.missed[1] = 3
	b.change(1, 1, kindApplied, 3, 1, 4, "k", "a")
	b.change(1, 2, kindApplied, 3, 1, 5, "k", "b")
	require.Empty(t, checkOffsets(b.run()))
	b.change(1, 3, kindApplied, 3, 1, 7, "k", "c")
	require.Equal(t, []string{KindOffsets}, kinds(checkOffsets(b.run())))

	// One record of several keys (a handler's turn): its changes share its
	// offset, one after another; the same key twice is still a repeat.
	b = newBuilder(t)
	b.change(1, 1, kindApplied, 3, 1, 1, "bank.a0", "")
	b.change(1, 2, kindApplied, 3, 1, 1, "bank.a2", "")
	b.change(1, 3, kindApplied, 4, 1, 1, "j", "c")
	b.change(1, 4, kindApplied, 3, 1, 2, "bank.a1", "")
	b.change(1, 5, kindApplied, 3, 1, 2, "bank.a3", "")
	// Dropped, the record's changes go one after another too.
	b.change(1, 6, kindDropped, 3, 1, 2, "bank.a3", "")
	b.change(1, 7, kindDropped, 3, 1, 2, "bank.a1", "")
	b.change(1, 8, kindDropped, 3, 1, 1, "bank.a2", "")
	b.change(1, 9, kindDropped, 3, 1, 1, "bank.a0", "")
	b.change(1, 10, kindApplied, 3, 2, 1, "bank.a0", "")
	require.Empty(t, checkOffsets(b.run()))
	b.change(1, 11, kindApplied, 3, 2, 1, "bank.a0", "")
	require.Equal(t, []string{KindOffsets}, kinds(checkOffsets(b.run())))
}

func TestDropped(t *testing.T) {
	b := newBuilder(t)
	b.write(1, "k", "a", "ack", 1, 2, history.OK)
	b.write(1, "k", "m", "majority", 3, 4, history.Info)
	b.change(1, 2, kindApplied, 3, 1, 1, "k", "a")
	b.change(1, 3, kindApplied, 3, 1, 2, "k", "m")
	b.change(1, 5, kindDropped, 3, 1, 2, "k", "m")
	b.change(1, 5, kindDropped, 3, 1, 1, "k", "a")
	require.Empty(t, checkDropped(b.run()))

	b.write(1, "k", "n", "majority", 5, 6, history.OK)
	b.change(1, 6, kindApplied, 3, 2, 1, "k", "n")
	b.change(1, 7, kindDropped, 3, 2, 1, "k", "n")
	b.change(2, 7, kindDropped, 3, 2, 1, "k", "n") // reported once
	got := checkDropped(b.run())
	require.Equal(t, []string{KindMajorityDropped}, kinds(got))
	require.Contains(t, got[0].Msg, `"n"`)
}

func TestRun(t *testing.T) {
	b := newBuilder(t)
	b.write(1, "k", "a", "majority", 1, 2, history.OK)
	b.change(1, 2, kindApplied, 3, 1, 1, "k", "a")
	b.change(2, 2, kindApplied, 3, 1, 1, "k", "a")
	b.read(2, history.ViaOwner, "k", "a", 3, 4)
	b.final(1, 10, "d", map[string]string{"k": "a"})
	b.final(2, 10, "d", map[string]string{"k": "a"})
	dir := b.dir()
	rep, err := Run(dir)
	require.NoError(t, err)
	require.True(t, rep.Passed(), rep.String())
	require.Equal(t, 2, rep.Ops)
	require.Equal(t, 2, rep.Procs)
	require.Equal(t, 2, rep.OK)
	require.Contains(t, rep.String(), "no anomalies")

	// A stale owner read makes the run fail, with a visualization.
	b.read(2, history.ViaOwner, "k", "", 5, 6)
	dir = b.dir()
	rep, err = Run(dir)
	require.NoError(t, err)
	require.False(t, rep.Passed())
	require.Equal(t, []string{KindNotLinearizable}, kinds(rep.Anomalies))
	require.Contains(t, rep.String(), "1 anomalies: not-linearizable 1")
	_, err = os.Stat(filepath.Join(dir, "linearizability-k.html"))
	require.NoError(t, err)

	_, err = Run(t.TempDir())
	require.ErrorContains(t, err, "no *.history.jsonl")
}

func TestDescribe(t *testing.T) {
	b := newBuilder(t)
	b.write(1, "k", "a", "majority", 1_000_000_000, 1_500_000_000, history.Info)
	r := b.run()
	got := r.describe(r.ops[0])
	require.True(t, strings.HasPrefix(got, `p1 #1 write "k" = "a" (majority)  [0.000000s .. 0.500000s] info: some error`), got)
}

func TestEffectBy(t *testing.T) {
	for _, tc := range []struct {
		o    op
		want int64
	}{
		{op{f: history.Write, wait: "majority", typ: history.OK, ret: 5, deadline: 9}, 5},
		{op{f: history.Write, wait: "ack", typ: history.Info, ret: 5, deadline: 9}, 5},
		{op{f: history.Write, wait: "ack", typ: history.Info, code: "canceled", ret: 5, deadline: 9}, 9},
		{op{f: history.Write, wait: "none", typ: history.OK, ret: 1, deadline: 9}, 9},
		{op{f: history.Write, wait: "none", typ: history.OK, ret: 1}, math.MaxInt64},
		{op{f: history.Write, wait: "majority", ret: 99, deadline: 9}, 9}, // never answered
		{op{f: history.Write, wait: "majority", ret: 99}, math.MaxInt64},
	} {
		require.Equal(t, tc.want, tc.o.effectBy(), "%+v", tc.o)
	}
}

// A Majority write retried with its sequence (rule 16): its first attempt,
// committed by an owner that lost the partition, is dropped, and the retry
// commits it again; the history holds it, so nothing was lost.
func TestDroppedAttemptRetried(t *testing.T) {
	b := newBuilder(t)
	b.write(1, "k", "r", "majority", 1, 10, history.OK)
	b.change(1, 2, kindApplied, 3, 1, 2, "k", "r")
	b.change(1, 5, kindDropped, 3, 1, 2, "k", "r")
	b.change(1, 9, kindApplied, 3, 2, 1, "k", "r")
	require.Empty(t, checkDropped(b.run()))
}

// TestDroppedAttemptRetriedSeenInATail: the retry's commit reached the
// clients only through a restore (seed 41920); a server's tail shows it,
// in a later term. A commit in the same term, or one a client dropped,
// does not count.
func TestDroppedAttemptRetriedSeenInATail(t *testing.T) {
	build := func(tail ...history.Change) *builder {
		b := newBuilder(t)
		b.write(1, "k", "r", "majority", 1, 10, history.OK)
		b.change(1, 2, kindApplied, 3, 1, 2, "k", "r")
		b.change(1, 5, kindDropped, 3, 1, 2, "k", "r")
		b.change(1, 6, kindRestored, 3, 2, 2, "", "")
		b.tails["n1"] = tail
		return b
	}
	retry := history.Change{Kind: kindCommitted, Partition: 3, Term: 2, Offset: 2, Key: "k", Value: "r", Type: "UPDATE"}
	require.Equal(t, []string{KindMajorityDropped}, kinds(checkDropped(build().run())), "without the tail")
	require.Empty(t, checkDropped(build(retry).run()))
	same := retry
	same.Term = 1
	require.Equal(t, []string{KindMajorityDropped}, kinds(checkDropped(build(same).run())), "the dropped commit itself")
	b := build(retry)
	b.change(1, 7, kindDropped, 3, 2, 2, "k", "r")
	require.Equal(t, []string{KindMajorityDropped}, kinds(checkDropped(b.run())), "the later commit dropped too")
}

// The retried write's effect is its kept commit, not the dropped first
// attempt: a read through the owner between the two that does not see it
// is linearizable; one after the kept commit that does not is not.
func TestDroppedAttemptDoesNotBoundTheWrite(t *testing.T) {
	build := func(readAt int64) *builder {
		b := newBuilder(t)
		b.write(1, "k", "a", "majority", 1, 2, history.OK)
		b.change(1, 2, kindApplied, 3, 1, 1, "k", "a")
		b.write(2, "k", "r", "majority", 3, 20, history.OK)
		b.change(1, 4, kindApplied, 3, 1, 2, "k", "r") // the first attempt
		b.change(1, 6, kindDropped, 3, 1, 2, "k", "r")
		b.change(1, 12, kindApplied, 3, 2, 2, "k", "r") // the retry
		b.read(3, history.ViaOwner, "k", "a", readAt, readAt+1)
		return b
	}
	require.Empty(t, linearizable(t, build(8)).anomalies)
	require.Equal(t, []string{KindNotLinearizable}, kinds(linearizable(t, build(14)).anomalies))
}
