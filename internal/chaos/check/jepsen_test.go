package check

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/chaos/history"
)

// op records one operation given whole: its invoke line, and its
// completion at ret unless typ is "" (pending).
func (b *builder) op(o history.Op, call, ret int64, typ history.Type) {
	o.ID, o.Type, o.Time = b.id(o.Proc), history.Invoke, call
	result := o
	// An invoke line carries what was asked, not what came back.
	o.Value, o.Absent = "", false
	if o.F != history.BankInit {
		o.Balances = nil
	}
	b.hist[o.Proc] = append(b.hist[o.Proc], o)
	if typ == "" {
		return
	}
	result.Type, result.Time = typ, ret
	if typ != history.OK {
		result.Error = "some error"
	}
	b.hist[o.Proc] = append(b.hist[o.Proc], result)
}

func incrOp(proc int, key, reply string) history.Op {
	return history.Op{Proc: proc, F: history.Incr, Key: key, Amount: 1, Value: reply}
}

func counterRead(proc int, key, value string, final bool) history.Op {
	return history.Op{Proc: proc, F: history.Read, Via: history.ViaOwner, Key: key, Value: value, Absent: value == "", Final: final}
}

// counterHistory: three clients; c0 gets 3 INCRs acked, one indefinite,
// one failed; then final reads of finalValue by every client.
func counterHistory(t *testing.T, finalValue string) *builder {
	b := newBuilder(t)
	b.op(incrOp(1, "c0", "1"), 10, 20, history.OK)
	b.op(incrOp(2, "c0", "2"), 15, 30, history.OK)
	b.op(incrOp(3, "c0", ""), 16, 40, history.Info)
	b.op(incrOp(1, "c0", ""), 25, 35, history.Fail)
	b.op(incrOp(3, "c0", "4"), 50, 60, history.OK)
	b.op(counterRead(2, "c0", "2", false), 31, 45, history.OK)
	for p := 1; p <= 3; p++ {
		b.op(counterRead(p, "c0", finalValue, true), 100+int64(p), 110+int64(p), history.OK)
		b.final(p, 200, "d", map[string]string{"c0": "int64(" + finalValue + ")"})
	}
	return b
}

func TestCounter(t *testing.T) {
	for _, tc := range []struct {
		final string
		want  []string
	}{
		{"3", nil}, // the indefinite INCR never happened
		{"4", nil}, // it did
		{"2", []string{KindCounterBounds, KindCounterBounds, KindCounterBounds}},
		{"5", []string{KindCounterBounds, KindCounterBounds, KindCounterBounds}}, // the failed one happened
	} {
		t.Run(tc.final, func(t *testing.T) {
			rep, err := Run(counterHistory(t, tc.final).dir())
			require.NoError(t, err)
			assert.Equal(t, history.Counter, rep.Workload)
			assert.Equal(t, tc.want, kinds(rep.Anomalies), "%s", rep)
			require.Len(t, rep.Lines, 1)
			assert.Contains(t, rep.Lines[0], "3 acked, 1 indefinite, 1 failed; bounds 3..4")
			if tc.want != nil {
				assert.Contains(t, rep.Anomalies[0].Msg, "want 3 <= count <= 4")
			}
		})
	}
}

// TestCounterReadDuringRun: a read during the run is bounded by the INCRs
// acked before it began and those invoked before it returned.
func TestCounterReadDuringRun(t *testing.T) {
	b := counterHistory(t, "4")
	// p2's read at [31, 45] saw 2: the acked INCRs before 31 are two, the
	// ones invoked before 45 that may have happened three. 0 is too few.
	b.hist[2][len(b.hist[2])-4] = func() history.Op {
		o := b.hist[2][len(b.hist[2])-4].(history.Op)
		o.Value = "0"
		return o
	}()
	rep, err := Run(b.dir())
	require.NoError(t, err)
	assert.Equal(t, []string{KindCounterBounds}, kinds(rep.Anomalies), "%s", rep)
	assert.Contains(t, rep.Anomalies[0].Msg, "read 0, want 2 <= count <= 3")
}

func TestCounterDuplicateReply(t *testing.T) {
	b := newBuilder(t)
	b.op(incrOp(1, "c0", "1"), 10, 20, history.OK)
	b.op(incrOp(2, "c0", "1"), 11, 21, history.OK) // a lost update
	b.op(counterRead(1, "c0", "2", true), 100, 110, history.OK)
	rep, err := Run(b.dir())
	require.NoError(t, err)
	assert.Equal(t, []string{KindCounterDuplicate, KindNoFinal, KindNoFinal}, kinds(rep.Anomalies), "%s", rep)
}

func TestCounterNoFinalRead(t *testing.T) {
	b := newBuilder(t)
	b.op(incrOp(1, "c0", "1"), 10, 20, history.OK)
	b.op(counterRead(1, "c0", "", true), 100, 110, history.Info)
	b.final(1, 200, "d", nil)
	rep, err := Run(b.dir())
	require.NoError(t, err)
	assert.Equal(t, []string{KindNoFinalRead}, kinds(rep.Anomalies), "%s", rep)
}

func bankRead(proc int, balances map[string]int64, final bool) history.Op {
	return history.Op{Proc: proc, F: history.Read, Via: history.ViaOwner, Key: "bank", Balances: balances, Absent: balances == nil, Final: final}
}

func transferOp(proc int, from, to string, amount int64) history.Op {
	return history.Op{Proc: proc, F: history.Transfer, Key: "bank", From: from, To: to, Amount: amount}
}

func TestBank(t *testing.T) {
	initial := map[string]int64{"a0": 10, "a1": 10, "a2": 10}
	for _, tc := range []struct {
		name string
		read map[string]int64
		want []string
	}{
		{"good", map[string]int64{"a0": 3, "a1": 17, "a2": 10}, nil},
		{"half a transfer", map[string]int64{"a0": 3, "a1": 10, "a2": 10}, []string{KindBankTotal}},
		{"overdrawn", map[string]int64{"a0": -4, "a1": 24, "a2": 10}, []string{KindBankNegative}},
		{"account lost", map[string]int64{"a0": 13, "a1": 17}, []string{KindBankTotal}},
		{"absent", nil, []string{KindBankAbsent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder(t)
			for p := 1; p <= 3; p++ {
				o := history.Op{Proc: p, F: history.BankInit, Key: "bank", Balances: initial}
				b.op(o, int64(p), 5+int64(p), history.OK)
			}
			b.op(transferOp(1, "a0", "a1", 7), 10, 20, history.OK)
			b.op(transferOp(2, "a0", "a1", 7), 12, 22, history.Fail)
			b.op(transferOp(3, "a1", "a2", 1), 14, 30, history.Info)
			// The indefinite transfer did not happen: reads before and
			// after it may show either.
			b.op(bankRead(2, map[string]int64{"a0": 3, "a1": 17, "a2": 10}, false), 21, 25, history.OK)
			b.op(bankRead(3, map[string]int64{"a0": 3, "a1": 16, "a2": 11}, false), 31, 35, history.OK)
			b.op(bankRead(1, tc.read, true), 100, 110, history.OK)
			for p := 1; p <= 3; p++ {
				b.final(p, 200, "d", map[string]string{"bank": "x"})
			}
			rep, err := Run(b.dir())
			require.NoError(t, err)
			assert.Equal(t, history.Bank, rep.Workload)
			assert.Equal(t, tc.want, kinds(rep.Anomalies), "%s", rep)
			assert.Equal(t, []string{"bank: total 30; 6 reads checked (1 final); transfers: 1 ok, 0 refused, 1 failed, 1 indefinite, 0 pending"}, rep.Lines)
		})
	}
}

func TestBankNoFinalRead(t *testing.T) {
	b := newBuilder(t)
	b.op(history.Op{Proc: 1, F: history.BankInit, Key: "bank", Balances: map[string]int64{"a0": 1}}, 1, 2, history.OK)
	b.op(bankRead(1, nil, true), 100, 110, history.Info)
	b.final(1, 200, "d", nil)
	rep, err := Run(b.dir())
	require.NoError(t, err)
	assert.Equal(t, []string{KindNoFinalRead}, kinds(rep.Anomalies), "%s", rep)
}
