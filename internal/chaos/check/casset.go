package check

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/cespare/xxhash/v2"

	"github.com/fero-go/fero/internal/chaos/history"
)

// The checkers of Jepsen's CAS register and set workloads
// (workload/casset.go), on pkg/fero's compare-and-set and exactly-once
// retries (docs/engine.md, rules 15 and 16).
const (
	// KindCASVersion: versions and values that do not name each other
	// (one version read with two values, one value with two versions), a
	// version that went back, or a refusal that carried the version the
	// cas expected.
	KindCASVersion = "cas-version"
	// KindSetLost: an element acknowledged (or read) before a read was
	// invoked is missing from it.
	KindSetLost = "set-lost"
	// KindSetDuplicate: an element present twice in one read: a push
	// applied twice (exactly-once broken).
	KindSetDuplicate = "set-duplicate"
	// KindSetFailedPresent: an element whose push failed definite, or that
	// nobody pushed, is present.
	KindSetFailedPresent = "set-failed-present"
	// KindSetOrder: two acknowledged pushes, one answered before the
	// other was invoked, read in the other order.
	KindSetOrder = "set-order"
)

// otherValue stands for every value no read returned: the model cannot
// tell them apart, and one state for all keeps its state sets small.
const otherValue = "\x00other"

// casKind is what one operation does in the CAS model.
type casKind int

const (
	casRead    casKind = iota // returns the state
	casWrite                  // sets the state
	casSwap                   // sets the state to value if it is expect
	casRefused                // the state is not expect (a definite refusal)
)

// casInput is one operation as the CAS model sees it.
type casInput struct {
	op   *op
	kind casKind
	// maybe: a write or swap that may have taken effect once within its
	// window, or never.
	maybe         bool
	expect, value string
}

// casModel is a register with compare-and-set that starts absent. Values
// are unique in a run, so a version names one value: a cas expecting the
// version it read with a value expects that value (checkVersions holds
// fero to versions and values naming each other).
var casModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{absentValue} },
	Step: func(state, input, output any) []any {
		s, in := state.(string), input.(casInput)
		switch in.kind {
		case casRead:
			if output.(string) == s {
				return []any{s}
			}
		case casWrite:
			if in.maybe {
				return []any{s, in.value}
			}
			return []any{in.value}
		case casSwap:
			switch {
			case s != in.expect && in.maybe:
				return []any{s}
			case s != in.expect:
				return nil
			case in.maybe:
				return []any{s, in.value}
			}
			return []any{in.value}
		case casRefused:
			if s != in.expect {
				return []any{s}
			}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in := input.(casInput)
		may := ""
		if in.maybe {
			may = "maybe "
		}
		switch in.kind {
		case casRead:
			return fmt.Sprintf("read -> %s", showValue(output.(string)))
		case casWrite:
			return fmt.Sprintf("%swrite %s", may, showValue(in.value))
		case casSwap:
			return fmt.Sprintf("%scas %s -> %s", may, showValue(in.expect), showValue(in.value))
		}
		return fmt.Sprintf("cas %s refused", showValue(in.expect))
	},
	DescribeState: func(state any) string { return showValue(state.(string)) },
	Hash:          func(state any) uint64 { return xxhash.Sum64String(state.(string)) },
}).ToModel()

// casHistories builds each key's history for the CAS model, with counts
// for the report's line.
func casHistories(r *run) (map[string][]porcupine.Operation, map[string]*casCounts) {
	// referenced: the values some read returned (a cas expects one).
	referenced := map[string]bool{absentValue: true}
	for _, o := range r.ops {
		if o.f == history.Read && o.typ == history.OK && !o.absent {
			referenced[o.value] = true
		}
	}
	state := func(v string, absent bool) string {
		switch {
		case absent:
			return absentValue
		case referenced[v]:
			return v
		}
		return otherValue
	}
	out := map[string][]porcupine.Operation{}
	counts := map[string]*casCounts{}
	for _, o := range r.ops {
		c := counts[o.key]
		if c == nil {
			c = &casCounts{}
			counts[o.key] = c
		}
		in := casInput{op: o}
		end := o.ret
		var output any = ""
		switch o.f {
		case history.Read:
			c.reads++
			if o.via != history.ViaOwner || o.typ != history.OK {
				continue // a failed read saw nothing
			}
			in.kind, output = casRead, state(o.value, o.absent)
		case history.Write, history.Cas:
			in.kind, in.value = casWrite, state(o.value, false)
			if o.f == history.Cas {
				in.kind, in.expect = casSwap, state(o.expect, o.expectAbsent)
			}
			c.count(o)
			switch {
			case o.typ == history.Fail && o.f == history.Cas && o.code == "failed_precondition":
				in.kind = casRefused
			case o.typ == history.Fail:
				continue // definite: never happened
			case o.typ != history.OK:
				// Rule 11 bounds it by its answer, or its deadline.
				in.maybe, end = true, min(o.effectBy(), r.end+1)
			}
		default:
			continue
		}
		out[o.key] = append(out[o.key], porcupine.Operation{ClientId: o.proc, Input: in, Call: o.call, Output: output, Return: end})
	}
	return out, counts
}

// casCounts counts one key's operations for the report.
type casCounts struct {
	reads                                  int
	writes, cas                            [4]int // ok, refused, failed, indefinite
	linearizable, unknown, notLinearizable bool
}

func (c *casCounts) count(o *op) {
	n := &c.writes
	if o.f == history.Cas {
		n = &c.cas
	}
	switch {
	case o.typ == history.OK:
		n[0]++
	case o.typ == history.Fail && o.code == "failed_precondition":
		n[1]++
	case o.typ == history.Fail:
		n[2]++
	default:
		n[3]++
	}
}

// checkCAS checks every key's history for linearizability as a register
// with compare-and-set (casModel), and versions against values
// (checkVersions). A key whose search runs out of its timeout is
// reported unknown, never as a pass.
func checkCAS(r *run, opts Options, dir string) (lines []string, res linResult) {
	byKey, counts := casHistories(r)
	keys := sortedKeys(byKey)
	res.keys = len(keys)
	for _, key := range keys {
		ops := byKey[key]
		c := counts[key]
		switch porcupine.CheckOperationsTimeout(casModel, ops, opts.LinearizabilityTimeout) {
		case porcupine.Ok:
			c.linearizable = true
		case porcupine.Unknown:
			c.unknown = true
			res.unknown++
			res.anomalies = append(res.anomalies, Anomaly{
				Kind: KindUnknown, Key: key,
				Msg: fmt.Sprintf("the search over %d operations ran out of its %v: not a pass", len(ops), opts.LinearizabilityTimeout),
			})
		default:
			c.notLinearizable = true
			res.anomalies = append(res.anomalies, casAnomaly(r, key, ops, opts.LinearizabilityTimeout, dir))
		}
	}
	res.anomalies = append(res.anomalies, checkVersions(r)...)
	res.anomalies = append(res.anomalies, checkCASFailedApplied(r)...)
	for _, key := range sortedKeys(counts) {
		c := counts[key]
		verdict := "linearizable"
		switch {
		case c.unknown:
			verdict = "unknown (search timed out)"
		case c.notLinearizable:
			verdict = "NOT linearizable"
		case !c.linearizable:
			verdict = "no operations"
		}
		lines = append(lines, fmt.Sprintf("cas %q: %s; %d reads; writes %d ok, %d failed, %d indefinite; cas %d ok, %d refused, %d failed, %d indefinite",
			key, verdict, c.reads, c.writes[0], c.writes[2], c.writes[3], c.cas[0], c.cas[1], c.cas[2], c.cas[3]))
	}
	return lines, res
}

// casAnomaly shrinks a key's illegal history and describes the slice.
func casAnomaly(r *run, key string, ops []porcupine.Operation, timeout time.Duration, dir string) Anomaly {
	slice, minimal := shrink(casModel, ops, timeout, casWithout)
	a := Anomaly{Kind: KindNotLinearizable, Key: key}
	a.Msg = fmt.Sprintf("no linearization of the %d operations on the register (with compare-and-set); these %d have none by themselves", len(ops), len(slice))
	if minimal {
		a.Msg += " (without any one of those the shrinking may remove, they would)"
	}
	_, info := porcupine.CheckOperationsVerbose(casModel, slice, timeout)
	a.Slice = describeSlice(r, casModel, slice, info, describeCASOp)
	if dir != "" {
		path := filepath.Join(dir, "linearizability-"+safeName(key)+".html")
		if err := porcupine.VisualizePath(casModel, info, path); err == nil {
			a.Msg += "; visualization: " + path
		} else {
			_ = os.Remove(path)
		}
	}
	return a
}

// casWithout is h minus those of its operations [i, j) whose removal
// keeps a linearizable history linearizable: reads and refusals (they
// only constrain), and, once no refusal is left, writes and swaps whose
// value no remaining read returns nor swap expects (a refusal could need
// the state such a write leaves).
func casWithout(h []porcupine.Operation, i, j int) []porcupine.Operation {
	used := map[string]bool{}
	refusals := false
	for k, o := range h {
		in := o.Input.(casInput)
		if k >= i && k < j && (in.kind == casRead || in.kind == casRefused) {
			continue
		}
		switch in.kind {
		case casRead:
			used[o.Output.(string)] = true
		case casSwap, casRefused:
			used[in.expect] = true
			refusals = refusals || in.kind == casRefused
		}
	}
	out := make([]porcupine.Operation, 0, len(h))
	for k, o := range h {
		in := o.Input.(casInput)
		drop := k >= i && k < j && (in.kind == casRead || in.kind == casRefused ||
			!refusals && !used[in.value] && in.value != absentValue)
		if !drop {
			out = append(out, o)
		}
	}
	return out
}

// describeCASOp writes one operation of a CAS history.
func describeCASOp(r *run, o porcupine.Operation) string {
	in := o.Input.(casInput)
	switch {
	case in.kind == casRead:
		return r.describe(in.op)
	case in.kind == casRefused:
		return r.describe(in.op) + "  [refused: the value was not the one expected]"
	case in.maybe:
		return r.describe(in.op) + "  [may: until " + r.at(o.Return) + " or never]"
	}
	return r.describe(in.op) + "  [must]"
}

// checkCASFailedApplied finds the writes and compare-and-sets answered
// with a definite error whose value a copy applied all the same (rule 12),
// from the change streams: the model, which leaves them out, then
// usually finds no linearization, and this names the reason.
func checkCASFailedApplied(r *run) []Anomaly {
	failed := map[string]*op{}
	for _, o := range r.ops {
		if (o.f == history.Write || o.f == history.Cas) && o.typ == history.Fail {
			failed[o.value] = o
		}
	}
	var out []Anomaly
	seen := map[*op]bool{}
	for _, t := range r.traces {
		for i, c := range t.changes {
			o := failed[c.Value]
			if o == nil || seen[o] || !isApply(c) {
				continue
			}
			seen[o] = true
			dropped := ""
			for _, d := range t.changes[i+1:] {
				if d.Kind == kindDropped && d.Partition == c.Partition && d.Offset == c.Offset {
					dropped = fmt.Sprintf(", then dropped at %s", r.at(d.Time))
					break
				}
			}
			out = append(out, Anomaly{Kind: KindFailedApplied, Key: o.key,
				Msg:   fmt.Sprintf("%q failed definite (%s), yet %s applied it at version %d%s", o.value, o.code, t.file, c.Offset, dropped),
				Slice: r.describe(o) + "\n" + r.describeChange(c)})
		}
	}
	return out
}

// checkVersions holds versions to what docs/engine.md (rule 15) promises
// of them, read through the owner: a version names one value and a value
// one version (values are unique, and a key is never removed here), the
// absent key is at 0, a version read after another's read returned is no
// lower, a cas's new value is at a version past the one it expected, and a
// refusal carries a version other than the expected one.
func checkVersions(r *run) []Anomaly {
	var out []Anomaly
	type seen struct {
		o   *op
		val string
	}
	byVer := map[string]map[uint64]seen{}
	byVal := map[string]map[string]*op{}
	var reads []*op
	for _, o := range r.ops {
		if o.f != history.Read || o.via != history.ViaOwner || o.typ != history.OK {
			continue
		}
		reads = append(reads, o)
		v := o.value
		if o.absent {
			v = absentValue
		}
		if (o.version == 0) != o.absent {
			out = append(out, Anomaly{Kind: KindCASVersion, Key: o.key, Msg: fmt.Sprintf("read %s at version %d: absent is version 0, and only absent", showValue(v), o.version), Slice: r.describe(o)})
			continue
		}
		if byVer[o.key] == nil {
			byVer[o.key], byVal[o.key] = map[uint64]seen{}, map[string]*op{}
		}
		if s, ok := byVer[o.key][o.version]; ok && s.val != v {
			out = append(out, Anomaly{Kind: KindCASVersion, Key: o.key, Msg: fmt.Sprintf("version %d read with two values", o.version), Slice: r.describe(s.o) + "\n" + r.describe(o)})
		} else if !ok {
			byVer[o.key][o.version] = seen{o, v}
		}
		if p := byVal[o.key][v]; p != nil && p.version != o.version {
			out = append(out, Anomaly{Kind: KindCASVersion, Key: o.key, Msg: fmt.Sprintf("%s read at two versions: written twice?", showValue(v)), Slice: r.describe(p) + "\n" + r.describe(o)})
		} else if p == nil {
			byVal[o.key][v] = o
		}
	}
	// A version that went back: the highest version of the reads returned
	// before each read was invoked, in one pass over reads by return.
	byRet := slices.Clone(reads)
	sort.Slice(byRet, func(i, j int) bool { return byRet[i].ret < byRet[j].ret })
	for _, key := range sortedKeys(byVer) {
		var maxOp *op
		k := 0
		for _, o := range reads { // by call
			if o.key != key {
				continue
			}
			for ; k < len(byRet) && byRet[k].ret < o.call; k++ {
				if b := byRet[k]; b.key == key && (maxOp == nil || b.version > maxOp.version) {
					maxOp = b
				}
			}
			if maxOp != nil && o.version < maxOp.version {
				out = append(out, Anomaly{Kind: KindCASVersion, Key: key,
					Msg:   fmt.Sprintf("read version %d after a read of version %d had returned", o.version, maxOp.version),
					Slice: r.describe(maxOp) + "\n" + r.describe(o)})
			}
		}
	}
	for _, o := range r.ops {
		if o.f != history.Cas {
			continue
		}
		if p := byVal[o.key][o.value]; o.typ == history.OK && p != nil && p.version <= o.version {
			out = append(out, Anomaly{Kind: KindCASVersion, Key: o.key,
				Msg:   fmt.Sprintf("the cas's value read at version %d, not past the %d it expected", p.version, o.version),
				Slice: r.describe(o) + "\n" + r.describe(p)})
		}
		if o.typ == history.Fail && o.code == "failed_precondition" && o.current == o.version {
			out = append(out, Anomaly{Kind: KindCASVersion, Key: o.key,
				Msg: fmt.Sprintf("refused, with the version %d it expected", o.version), Slice: r.describe(o)})
		}
	}
	return out
}

// checkSet checks every array against the pushes: in every read through
// the owner, no element twice, none whose push failed definite or that
// nobody pushed, and every element acknowledged, or read, before the
// read was invoked; in a final read, acknowledged pushes in the order
// they were answered and invoked. Every array must have a final read.
func checkSet(r *run) (lines []string, out []Anomaly) {
	pushes := map[string]*op{} // by element: unique in a run
	byKey := map[string][]*op{}
	for _, o := range r.ops {
		switch {
		case o.f == history.Push:
			pushes[o.value] = o
			byKey[o.key] = append(byKey[o.key], o)
		case o.f == history.Read && o.via == history.ViaOwner && o.typ == history.OK:
			byKey[o.key] = append(byKey[o.key], o)
		}
	}
	for _, key := range sortedKeys(byKey) {
		var reads []*op
		n := map[history.Type]int{}
		// known: when each element was known present, from its ack or
		// the first read of it to return.
		known := map[string]int64{}
		for _, o := range byKey[key] {
			if o.f == history.Push {
				n[o.typ]++
				if o.typ == history.OK {
					known[o.value] = o.ret
				}
				continue
			}
			reads = append(reads, o)
			for _, e := range o.elements {
				if t, ok := known[e]; !ok || o.ret < t {
					known[e] = o.ret
				}
			}
		}
		var final *op
		// An element wrongly present shows in every read after: one
		// anomaly per element and kind, its first read, and a count.
		first := map[[2]string]int{}
		var reported []Anomaly
		var times []int
		for _, rd := range reads {
			for _, a := range checkSetRead(r, key, rd, pushes, known) {
				if a.elem == "" {
					reported, times = append(reported, a.Anomaly), append(times, 1)
					continue
				}
				id := [2]string{a.Kind, a.elem}
				if i, ok := first[id]; ok {
					times[i]++
					continue
				}
				first[id] = len(reported)
				reported, times = append(reported, a.Anomaly), append(times, 1)
			}
			if rd.final && final == nil {
				final = rd
			}
		}
		for i, a := range reported {
			if times[i] > 1 {
				a.Msg += fmt.Sprintf(" (and in %d later reads)", times[i]-1)
			}
			out = append(out, a)
		}
		if final == nil {
			out = append(out, Anomaly{Kind: KindNoFinalRead, Key: key, Msg: "no read of the array after the heal was answered"})
			lines = append(lines, fmt.Sprintf("set %q: %d pushes: %d ok, %d failed, %d indefinite, %d pending; no final read",
				key, n[history.OK]+n[history.Fail]+n[history.Info]+n[""], n[history.OK], n[history.Fail], n[history.Info], n[""]))
			continue
		}
		out = append(out, checkSetOrder(r, key, final, pushes)...)
		in := map[history.Type]int{}
		for _, e := range final.elements {
			if p := pushes[e]; p != nil {
				in[p.typ]++
			}
		}
		lines = append(lines, fmt.Sprintf("set %q: %d pushes: %d ok, %d failed, %d indefinite, %d pending; final read of %d elements: %d acked, %d indefinite, %d pending; %d reads",
			key, n[history.OK]+n[history.Fail]+n[history.Info]+n[""], n[history.OK], n[history.Fail], n[history.Info], n[""],
			len(final.elements), in[history.OK], in[history.Info], in[""], len(reads)))
	}
	return lines, out
}

// setAnomaly is an anomaly of one read, and the element it is about ("":
// several).
type setAnomaly struct {
	Anomaly
	elem string
}

// checkSetRead checks one read of the array at key.
func checkSetRead(r *run, key string, rd *op, pushes map[string]*op, known map[string]int64) []setAnomaly {
	var out []setAnomaly
	what := "read"
	if rd.final {
		what = "final read"
	}
	count := map[string]int{}
	for _, e := range rd.elements {
		count[e]++
	}
	for _, e := range sortedKeys(count) {
		p := pushes[e]
		switch {
		case count[e] > 1:
			slice := r.describe(rd)
			if p != nil {
				slice = r.describe(p) + "\n" + slice
			}
			out = append(out, setAnomaly{Anomaly{Kind: KindSetDuplicate, Key: key, Msg: fmt.Sprintf("%s holds %q %d times", what, e, count[e]), Slice: slice}, e})
		}
		switch {
		case p == nil || p.key != key:
			out = append(out, setAnomaly{Anomaly{Kind: KindSetFailedPresent, Key: key, Msg: fmt.Sprintf("%s holds %q, which nobody pushed onto it", what, e), Slice: r.describe(rd)}, e})
		case p.typ == history.Fail:
			out = append(out, setAnomaly{Anomaly{Kind: KindSetFailedPresent, Key: key, Msg: fmt.Sprintf("%s holds %q, whose push failed definite (%s)", what, e, p.code), Slice: r.describe(p) + "\n" + r.describe(rd)}, e})
		case p.call > rd.ret:
			out = append(out, setAnomaly{Anomaly{Kind: KindSetFailedPresent, Key: key, Msg: fmt.Sprintf("%s holds %q, pushed only after it returned", what, e), Slice: r.describe(rd) + "\n" + r.describe(p)}, e})
		}
	}
	var lost []string
	for _, e := range sortedKeys(known) {
		if known[e] < rd.call && count[e] == 0 {
			lost = append(lost, e)
		}
	}
	if len(lost) > 0 {
		var b strings.Builder
		for _, e := range lost[:min(len(lost), 5)] {
			if p := pushes[e]; p != nil {
				fmt.Fprintf(&b, "%s\n", r.describe(p))
			}
		}
		fmt.Fprintf(&b, "%s\n", r.describe(rd))
		out = append(out, setAnomaly{Anomaly: Anomaly{Kind: KindSetLost, Key: key,
			Msg:   fmt.Sprintf("%s lacks %d elements acknowledged or read before it was invoked: %s", what, len(lost), abbreviate(lost, 10)),
			Slice: b.String()}})
	}
	return out
}

// checkSetOrder: of two acknowledged pushes, the one answered before the
// other was invoked comes first in the final read.
func checkSetOrder(r *run, key string, final *op, pushes map[string]*op) []Anomaly {
	var acked []*op
	pos := map[string]int{}
	for i, e := range final.elements {
		if p := pushes[e]; p != nil && p.typ == history.OK {
			if _, dup := pos[e]; !dup {
				pos[e] = i
				acked = append(acked, p)
			}
		}
	}
	// acked is in the read's order; find a before b in it with b
	// answered before a was invoked, from the end, keeping the earliest
	// answer among the elements after a.
	var out []Anomaly
	var minOp *op
	for i := len(acked) - 1; i >= 0; i-- {
		a := acked[i]
		if minOp != nil && minOp.ret < a.call {
			out = append(out, Anomaly{Kind: KindSetOrder, Key: key,
				Msg:   fmt.Sprintf("final read has %q before %q, whose push was answered before %q's was invoked", a.value, minOp.value, a.value),
				Slice: r.describe(minOp) + "\n" + r.describe(a) + "\n" + r.describe(final)})
			break
		}
		if minOp == nil || a.ret < minOp.ret {
			minOp = a
		}
	}
	return out
}

// abbreviate lists up to n strings, and how many more.
func abbreviate(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, " ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(s[:n], " "), len(s)-n)
}
