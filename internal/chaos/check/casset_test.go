package check

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/chaos/history"
)

// lines records one operation from its invoke line (what was asked) and
// its completion (what came back, typ at ret; "" leaves it pending).
func (b *builder) lines(invoke, result history.Op, call, ret int64, typ history.Type) {
	invoke.ID, invoke.Type, invoke.Time = b.id(invoke.Proc), history.Invoke, call
	b.hist[invoke.Proc] = append(b.hist[invoke.Proc], invoke)
	if typ == "" {
		return
	}
	result.Proc, result.ID, result.Type, result.Time = invoke.Proc, invoke.ID, typ, ret
	result.F, result.Key, result.Via = invoke.F, invoke.Key, invoke.Via
	if typ != history.OK {
		result.Error = "some error"
	}
	b.hist[invoke.Proc] = append(b.hist[invoke.Proc], result)
}

// vread records a VERSION read of value (absent if "") at ver.
func (b *builder) vread(proc int, key, value string, ver uint64, call, ret int64, final bool) {
	in := history.Op{Proc: proc, F: history.Read, Via: history.ViaOwner, Key: key, Final: final}
	b.lines(in, history.Op{Value: value, Absent: value == "", Version: ver, Final: final}, call, ret, history.OK)
}

// cas records a cas of key from expect (absent if "") at ver to value;
// code is the completion's code.
func (b *builder) cas(proc int, key, expect string, ver uint64, value string, call, ret int64, typ history.Type, code string) {
	in := history.Op{Proc: proc, F: history.Cas, Key: key, Value: value, Wait: "majority", Version: ver, Expect: expect, ExpectAbsent: expect == ""}
	res := in
	res.Code = code
	if code == "failed_precondition" {
		res.Current = ver + 1
	}
	b.lines(in, res, call, ret, typ)
}

func (b *builder) finals(procs int, at int64) {
	for p := 1; p <= procs; p++ {
		b.final(p, at, "d", nil)
	}
}

// casHistory: three clients on one register. p1 creates it with a cas
// from absent; p2 and p3 both cas from "a", p3 refused; p1 writes "d";
// p3's cas from "d" to "e" is indefinite; then last is read at the end.
func casHistory(t *testing.T, last string, lastVer uint64) *builder {
	b := newBuilder(t)
	b.vread(1, "r", "", 0, 0, 10, false)
	b.cas(1, "r", "", 0, "a", 11, 20, history.OK, "")
	b.vread(2, "r", "a", 5, 21, 30, false)
	b.vread(3, "r", "a", 5, 22, 32, false)
	b.cas(2, "r", "a", 5, "b", 31, 40, history.OK, "")
	b.cas(3, "r", "a", 5, "c", 35, 45, history.Fail, "failed_precondition")
	b.write(1, "r", "d", "majority", 50, 60, history.OK)
	b.vread(3, "r", "d", 9, 61, 70, false)
	b.cas(3, "r", "d", 9, "e", 71, 80, history.Info, "deadline_exceeded")
	b.cas(2, "r", "d", 9, "f", 72, 74, history.Fail, "unavailable")
	b.vread(1, "r", last, lastVer, 100, 110, true)
	b.finals(3, 200)
	return b
}

func TestCASLinearizable(t *testing.T) {
	for _, tc := range []struct {
		name string
		last string
		ver  uint64
	}{
		{"indefinite cas applied", "e", 11},
		{"indefinite cas not applied", "d", 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Run(casHistory(t, tc.last, tc.ver).dir())
			require.NoError(t, err)
			assert.Equal(t, history.CAS, rep.Workload)
			assert.Empty(t, rep.Anomalies, "%s", rep)
			assert.Equal(t, 1, rep.Keys)
			require.Len(t, rep.Lines, 1)
			assert.Contains(t, rep.Lines[0], `cas "r": linearizable; 5 reads; writes 1 ok, 0 failed, 0 indefinite; cas 2 ok, 1 refused, 1 failed, 1 indefinite`)
		})
	}
}

func TestCASNotLinearizable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *builder)
		want  []string
	}{
		{"the failed cas applied", func(b *builder) {
			b.vread(1, "r", "f", 12, 100, 110, true)
		}, []string{KindNotLinearizable}},
		{"a refused cas's value was current", func(b *builder) {
			b.vread(1, "r", "d", 9, 100, 110, true)
			b.cas(1, "r", "d", 9, "g", 111, 120, history.Fail, "failed_precondition")
			b.vread(2, "r", "d", 9, 121, 130, true)
		}, []string{KindNotLinearizable}},
		{"two cas from one value", func(b *builder) {
			b.vread(1, "r", "d", 9, 100, 110, false)
			b.cas(1, "r", "d", 9, "g", 111, 120, history.OK, "")
			b.cas(2, "r", "d", 9, "h", 121, 130, history.OK, "")
		}, []string{KindNotLinearizable}},
		{"a stale read", func(b *builder) {
			b.vread(1, "r", "a", 5, 100, 110, true)
		}, []string{KindNotLinearizable, KindCASVersion}},
		{"a value at two versions", func(b *builder) {
			b.vread(1, "r", "d", 10, 100, 110, true)
		}, []string{KindCASVersion}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder(t)
			h := casHistory(t, "d", 9)
			// The good history without its final read and lines, then the bad end.
			for p, ls := range h.hist {
				var keep []any
				for _, l := range ls {
					if o, ok := l.(history.Op); ok && !o.Final {
						keep = append(keep, l)
					}
				}
				b.hist[p], b.nextID[p] = keep, h.nextID[p]
			}
			tc.build(b)
			b.finals(3, 200)
			dir := b.dir()
			rep, err := RunOptions(dir, Options{})
			require.NoError(t, err)
			assert.Equal(t, tc.want, kinds(rep.Anomalies), "%s", rep)
			if tc.want[0] == KindNotLinearizable {
				assert.Contains(t, rep.Lines[0], "NOT linearizable")
				assert.Contains(t, rep.Anomalies[0].Slice, "longest linearization")
				assert.FileExists(t, dir+"/linearizability-r.html")
			}
		})
	}
}

func TestCASUnknown(t *testing.T) {
	b := newBuilder(t)
	// Many concurrent maybe-writes and reads make the search explode; the
	// last read returns what nobody wrote, so it cannot pass.
	const n = 40
	for i := range n {
		b.write(1+i%4, "r", fmt.Sprintf("v%d", i), "majority", 1, 1000, history.Info)
	}
	for i := range n {
		b.vread(5+i%4, "r", fmt.Sprintf("v%d", (i*7)%n), uint64(1+(i*7)%n), int64(2+i), 1000, false)
	}
	b.cas(9, "r", "v3", 4, "w", 1001, 1002, history.Info, "")
	b.vread(9, "r", "nobody", 99, 1003, 1004, true)
	lines, res := checkCAS(b.run(), Options{LinearizabilityTimeout: time.Millisecond}, "")
	require.Equal(t, []string{KindUnknown}, kinds(res.anomalies))
	require.Equal(t, 1, res.unknown)
	assert.Contains(t, lines[0], "unknown (search timed out)")
}

func TestCASVersions(t *testing.T) {
	b := newBuilder(t)
	b.vread(1, "r", "", 0, 0, 10, false)
	b.write(1, "r", "a", "majority", 11, 20, history.OK)
	b.vread(2, "r", "a", 5, 21, 30, false)
	b.write(1, "r", "b", "majority", 31, 40, history.OK)
	b.vread(2, "r", "b", 5, 41, 50, false) // version 5 again, another value
	b.vread(3, "r", "b", 4, 51, 60, true)  // and back to 4
	refused := history.Op{Proc: 3, F: history.Cas, Key: "r", Value: "c", Wait: "majority", Version: 4, Expect: "b"}
	res := refused
	res.Code, res.Current = "failed_precondition", 4
	b.lines(refused, res, 61, 70, history.Fail)
	b.finals(3, 200)
	as := checkVersions(b.run())
	require.Len(t, as, 4, "%v", as)
	assert.Contains(t, as[0].Msg, "version 5 read with two values")
	assert.Contains(t, as[1].Msg, `"b" read at two versions`)
	assert.Contains(t, as[2].Msg, "read version 4 after a read of version 5 had returned")
	assert.Contains(t, as[3].Msg, "refused, with the version 4 it expected")
}

// setHistory: c1-1 acked, c2-1 indefinite, c3-1 pending (its process
// died), c1-2 failed definite, c2-2 acked after c1-1 was answered; a read
// in between, then final reads of final by every client.
func setHistory(t *testing.T, final ...string) *builder {
	b := newBuilder(t)
	push := func(proc int, e string, call, ret int64, typ history.Type) {
		in := history.Op{Proc: proc, F: history.Push, Key: "s", Value: e, Wait: "majority"}
		b.lines(in, in, call, ret, typ)
	}
	read := func(proc int, es []string, call, ret int64, final bool) {
		in := history.Op{Proc: proc, F: history.Read, Via: history.ViaOwner, Key: "s", Final: final}
		b.lines(in, history.Op{Elements: es, Absent: es == nil, Final: final}, call, ret, history.OK)
	}
	read(1, nil, 0, 5, false)
	push(1, "c1-1", 10, 20, history.OK)
	push(2, "c2-1", 11, 30, history.Info)
	push(3, "c3-1", 12, 0, "")
	push(1, "c1-2", 21, 25, history.Fail)
	read(3, []string{"c1-1"}, 22, 26, false)
	push(2, "c2-2", 31, 40, history.OK)
	for p := 1; p <= 3; p++ {
		read(p, final, 100+int64(p), 110+int64(p), true)
	}
	b.finals(3, 200)
	return b
}

func TestSet(t *testing.T) {
	for _, tc := range []struct {
		name  string
		final []string
		want  []string
	}{
		{"indefinite absent", []string{"c1-1", "c2-2"}, nil},
		{"indefinite present", []string{"c2-1", "c1-1", "c3-1", "c2-2"}, nil},
		{"acked lost", []string{"c1-1"}, []string{KindSetLost, KindSetLost, KindSetLost}},
		// One anomaly per element, however many reads show it.
		{"pushed twice", []string{"c1-1", "c2-1", "c2-2", "c2-1"}, []string{KindSetDuplicate}},
		{"acked twice", []string{"c1-1", "c2-2", "c1-1"}, []string{KindSetDuplicate}},
		{"failed present", []string{"c1-1", "c1-2", "c2-2"}, []string{KindSetFailedPresent}},
		{"never pushed", []string{"c1-1", "c2-2", "c9-9"}, []string{KindSetFailedPresent}},
		{"out of order", []string{"c2-2", "c1-1"}, []string{KindSetOrder}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Run(setHistory(t, tc.final...).dir())
			require.NoError(t, err)
			assert.Equal(t, history.Set, rep.Workload)
			assert.Equal(t, tc.want, kinds(rep.Anomalies), "%s", rep)
			require.Len(t, rep.Lines, 1)
			assert.Contains(t, rep.Lines[0], `set "s": 5 pushes: 2 ok, 1 failed, 1 indefinite, 1 pending`)
			if len(tc.want) == 1 && tc.want[0] != KindSetOrder {
				assert.Contains(t, rep.Anomalies[0].Msg, "(and in 2 later reads)")
			}
		})
	}
}

func TestSetReadLosesWhatAReadSaw(t *testing.T) {
	b := setHistory(t, "c1-1", "c2-2")
	// c2-1 (indefinite) was read, then a later read lacks it.
	in := history.Op{Proc: 2, F: history.Read, Via: history.ViaOwner, Key: "s"}
	b.lines(in, history.Op{Elements: []string{"c1-1", "c2-1"}}, 32, 35, history.OK)
	rep, err := Run(b.dir())
	require.NoError(t, err)
	assert.Equal(t, []string{KindSetLost, KindSetLost, KindSetLost}, kinds(rep.Anomalies), "%s", rep)
	assert.Contains(t, rep.Anomalies[0].Msg, "c2-1")
}

func TestSetNoFinalRead(t *testing.T) {
	b := newBuilder(t)
	in := history.Op{Proc: 1, F: history.Push, Key: "s", Value: "c1-1", Wait: "majority"}
	b.lines(in, in, 1, 2, history.OK)
	b.finals(1, 10)
	rep, err := Run(b.dir())
	require.NoError(t, err)
	assert.Equal(t, []string{KindNoFinalRead}, kinds(rep.Anomalies), "%s", rep)
}

func TestCASFailedApplied(t *testing.T) {
	b := casHistory(t, "d", 9)
	// p2's definite-failed cas to "f" shows up applied in p1's copy.
	b.change(1, 73, "applied", 1, 1, 10, "r", "f")
	b.missed[1] = 9 // the trace starts at offset 10
	rep, err := Run(b.dir())
	require.NoError(t, err)
	assert.Equal(t, []string{KindFailedApplied}, kinds(rep.Anomalies), "%s", rep)
	assert.Contains(t, rep.Anomalies[0].Msg, `"f" failed definite (unavailable), yet p1.trace.jsonl applied it at version 10`)
}
