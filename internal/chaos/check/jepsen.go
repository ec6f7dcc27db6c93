package check

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/fero-go/fero/internal/chaos/history"
)

// The checkers of Jepsen's counter and bank workloads (workload/jepsen.go).
// Both prove what a verb's turn promises (pkg/fero's Handler): a
// read-modify-write of one key runs alone, and its writes commit as one
// record, at Majority, or not at all.
const (
	// KindCounterBounds: a counter read outside what the INCRs allow.
	KindCounterBounds = "counter-out-of-bounds"
	// KindCounterDuplicate: two INCRs answered OK with the same count: one
	// of them read before the other's write (a lost update).
	KindCounterDuplicate = "counter-duplicate-reply"
	// KindBankTotal: a bank read whose total (or set of accounts) is not
	// the initial one: a transfer's two writes applied apart.
	KindBankTotal = "bank-total"
	// KindBankNegative: a bank read with a negative balance: a transfer
	// that read a stale balance.
	KindBankNegative = "bank-negative"
	// KindBankAbsent: the bank read absent after a BANKINIT was answered.
	KindBankAbsent = "bank-absent"
	// KindNoFinalRead: no read after the heal answered, so the run proved
	// nothing.
	KindNoFinalRead = "no-final-read"
)

// workload says which workload wrote the run's histories, by the
// functions its operations use.
func (r *run) workload() string {
	for _, o := range r.ops {
		switch o.f {
		case history.Incr:
			return history.Counter
		case history.Transfer, history.BankInit:
			return history.Bank
		case history.Cas:
			return history.CAS
		case history.Push:
			return history.Set
		}
	}
	return history.Register
}

// checkCounter bounds each counter read by the INCRs around it. A read
// returns at least the sum of the INCRs answered OK before it was invoked,
// and at most the sum of those invoked before it returned that may have
// happened (answered OK or indefinite, or never answered); INCRs answered
// with a definite error count nowhere. For a read after the heal, when
// every INCR has completed, that is acked <= final <= acked + indefinite.
// INCRs answered OK of one key reply distinct counts, since each ran
// alone and added at least 1. Every counter must have a final read.
func checkCounter(r *run) (lines []string, out []Anomaly) {
	byKey := map[string][]*op{}
	for _, o := range r.ops {
		byKey[o.key] = append(byKey[o.key], o)
	}
	for _, key := range sortedKeys(byKey) {
		var incrs, reads []*op
		var acked, indef, failed int64
		for _, o := range byKey[key] {
			switch {
			case o.f == history.Incr:
				incrs = append(incrs, o)
				switch o.typ {
				case history.OK:
					acked += o.amount
				case history.Fail:
					failed += o.amount
				default:
					indef += o.amount
				}
			case o.f == history.Read && o.typ == history.OK:
				reads = append(reads, o)
			}
		}
		finals := 0
		var finalVals []string
		for _, rd := range reads {
			v, err := readCount(rd)
			if err != nil {
				out = append(out, Anomaly{Kind: KindCounterBounds, Key: key, Msg: err.Error(), Slice: r.describe(rd)})
				continue
			}
			var lo, hi int64
			for _, in := range incrs {
				if in.typ == history.OK && in.ret < rd.call {
					lo += in.amount
				}
				if in.typ != history.Fail && in.call < rd.ret {
					hi += in.amount
				}
			}
			if rd.final {
				finals++
				finalVals = append(finalVals, strconv.FormatInt(v, 10))
			}
			if v < lo || v > hi {
				what := "read"
				if rd.final {
					what = "final read"
				}
				out = append(out, Anomaly{
					Kind: KindCounterBounds, Key: key,
					Msg: fmt.Sprintf("%s %d, want %d <= count <= %d (of all INCRs: %d acked, %d indefinite, %d failed)",
						what, v, lo, hi, acked, indef, failed),
					Slice: r.describe(rd),
				})
			}
		}
		if len(incrs) == 0 && len(reads) == 0 {
			continue
		}
		if finals == 0 {
			out = append(out, Anomaly{Kind: KindNoFinalRead, Key: key, Msg: "no read of the counter after the heal was answered"})
		}
		out = append(out, duplicateCounts(r, key, incrs)...)
		lines = append(lines, fmt.Sprintf("counter %q: final %s; %d INCRs: %d acked, %d indefinite, %d failed; bounds %d..%d",
			key, strings.Join(slices.Compact(finalVals), ","), len(incrs), acked, indef, failed, acked, acked+indef))
	}
	return lines, out
}

// readCount is a counter read's count: 0 when absent.
func readCount(o *op) (int64, error) {
	if o.absent {
		return 0, nil
	}
	v, err := strconv.ParseInt(o.value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read %q, not a count", o.value)
	}
	return v, nil
}

// duplicateCounts finds INCRs of key answered OK with the same count.
func duplicateCounts(r *run, key string, incrs []*op) []Anomaly {
	by := map[string][]*op{}
	for _, o := range incrs {
		if o.typ == history.OK {
			by[o.value] = append(by[o.value], o)
		}
	}
	var out []Anomaly
	for _, v := range sortedKeys(by) {
		if same := by[v]; len(same) > 1 {
			var b strings.Builder
			for _, o := range same {
				fmt.Fprintf(&b, "%s\n", r.describe(o))
			}
			out = append(out, Anomaly{Kind: KindCounterDuplicate, Key: key, Msg: fmt.Sprintf("%d INCRs answered OK with count %s", len(same), v), Slice: b.String()})
		}
	}
	return out
}

// checkBank wants every bank a read (or a BANKINIT's answer) returned to
// hold the initial accounts and total, with no balance negative, and no
// read to find the bank absent once a BANKINIT was answered OK. The
// initial bank is the one the first BANKINIT proposed (every client
// proposes the same). At least one read after the heal must answer.
func checkBank(r *run) (lines []string, out []Anomaly) {
	var initial map[string]int64
	var inited int64 = -1 // when the first BANKINIT was answered OK
	transfers := map[history.Type]int{}
	refused := 0 // for want of funds
	for _, o := range r.ops {
		switch o.f {
		case history.BankInit:
			if initial == nil {
				initial = o.proposed
			}
			if o.typ == history.OK && (inited < 0 || o.ret < inited) {
				inited = o.ret
			}
		case history.Transfer:
			if o.typ == history.Fail && o.code == "failed_precondition" {
				refused++
			} else {
				transfers[o.typ]++
			}
		}
	}
	if initial == nil {
		return nil, []Anomaly{{Kind: KindNoFinalRead, Msg: "no BANKINIT in the histories: nothing to check against"}}
	}
	total := sum(initial)
	reads, finals := 0, 0
	for _, o := range r.ops {
		if o.typ != history.OK || (o.f != history.Read && o.f != history.BankInit) {
			continue
		}
		reads++
		if o.final {
			finals++
		}
		if o.f == history.Read && o.absent {
			if inited >= 0 && inited < o.call {
				out = append(out, Anomaly{Kind: KindBankAbsent, Key: o.key, Msg: fmt.Sprintf("read the bank absent, after a BANKINIT was answered OK at %s", r.at(inited)), Slice: r.describe(o)})
			}
			continue
		}
		b := o.balances
		if got := sum(b); got != total || !slices.Equal(slices.Sorted(maps.Keys(b)), slices.Sorted(maps.Keys(initial))) {
			out = append(out, Anomaly{Kind: KindBankTotal, Key: o.key, Msg: fmt.Sprintf("total %d, want %d: %s", got, total, showBank(b)), Slice: r.describe(o)})
		}
		for _, a := range slices.Sorted(maps.Keys(b)) {
			if b[a] < 0 {
				out = append(out, Anomaly{Kind: KindBankNegative, Key: o.key, Msg: fmt.Sprintf("account %s at %d: %s", a, b[a], showBank(b)), Slice: r.describe(o)})
				break
			}
		}
	}
	if finals == 0 {
		out = append(out, Anomaly{Kind: KindNoFinalRead, Msg: "no read of the bank after the heal was answered"})
	}
	lines = append(lines, fmt.Sprintf("bank: total %d; %d reads checked (%d final); transfers: %d ok, %d refused, %d failed, %d indefinite, %d pending",
		total, reads, finals, transfers[history.OK], refused, transfers[history.Fail], transfers[history.Info], transfers[""]))
	return lines, out
}

func sum(b map[string]int64) int64 {
	var s int64
	for _, v := range b {
		s += v
	}
	return s
}

// showBank writes a bank in account order.
func showBank(b map[string]int64) string {
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(b)) {
		parts = append(parts, fmt.Sprintf("%s=%d", a, b[a]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}
