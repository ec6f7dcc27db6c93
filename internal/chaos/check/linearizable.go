package check

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/cespare/xxhash/v2"

	"github.com/fero-go/fero/internal/chaos/history"
)

// absentValue is the register's value when the key has none. Workload
// values never hold a NUL byte.
const absentValue = "\x00absent"

// linInput is one operation as the register model sees it.
type linInput struct {
	op    *op
	write bool
	// maybe: a write that may have taken effect once within its window,
	// or never.
	maybe bool
	value string
}

// registerModel is a register that starts absent. A maybe-write steps to
// two states (it happened, or it never will), which porcupine explores as
// a set of possible values.
var registerModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{absentValue} },
	Step: func(state, input, output any) []any {
		s, in := state.(string), input.(linInput)
		switch {
		case in.write && in.maybe:
			return []any{s, in.value}
		case in.write:
			return []any{in.value}
		case output.(string) == s:
			return []any{s}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in := input.(linInput)
		if in.write {
			if in.maybe {
				return fmt.Sprintf("maybe write %s", showValue(in.value))
			}
			return fmt.Sprintf("write %s", showValue(in.value))
		}
		return fmt.Sprintf("read -> %s", showValue(output.(string)))
	},
	DescribeState: func(state any) string { return showValue(state.(string)) },
	Hash:          func(state any) uint64 { return xxhash.Sum64String(state.(string)) },
}).ToModel()

func showValue(v string) string {
	if v == absentValue {
		return "absent"
	}
	return fmt.Sprintf("%q", v)
}

type linResult struct {
	keys, unknown int
	anomalies     []Anomaly
}

// checkLinearizable is checker 1: the operations fero promises are
// linearizable, as a register per key (see doc.go for which and why).
func checkLinearizable(r *run, opts Options, dir string) linResult {
	byKey := linHistories(r)
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([][]Anomaly, len(keys))
	unknown := make([]bool, len(keys))
	next := make(chan int)
	var wg sync.WaitGroup
	for range opts.Parallel {
		wg.Go(func() {
			for i := range next {
				out[i], unknown[i] = checkKey(r, keys[i], byKey[keys[i]], opts.LinearizabilityTimeout, dir)
			}
		})
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	res := linResult{keys: len(keys)}
	for i := range keys {
		res.anomalies = append(res.anomalies, out[i]...)
		if unknown[i] {
			res.unknown++
		}
	}
	return res
}

// linHistories builds each key's history for the register model.
func linHistories(r *run) map[string][]porcupine.Operation {
	// seen is when some copy first held each value in an entry it kept:
	// the write took effect at its owner before that. An entry a copy
	// dropped later does not count: a write retried with its sequence
	// (rule 16) may have a first attempt committed by an owner that lost
	// it, dropped, and its effect is the retry's commit.
	seen := map[string]int64{}
	type at struct {
		p   int
		off uint64
	}
	for _, t := range r.traces {
		kept := map[at]history.Change{}
		for _, c := range t.changes {
			switch {
			case c.Kind == kindDropped:
				delete(kept, at{c.Partition, c.Offset})
			case (c.Kind == "applied" || c.Kind == "committed") && c.Value != "":
				kept[at{c.Partition, c.Offset}] = c
			}
		}
		for _, c := range kept {
			if s, ok := seen[c.Value]; !ok || c.Time < s {
				seen[c.Value] = c.Time
			}
		}
	}
	// A maybe-write no read returned can always be placed as "never": it
	// constrains nothing, and leaving it out keeps the search small (a
	// NoWait write lost with its owner stays open to the run's end).
	returned := map[string]bool{}
	for _, o := range r.ops {
		if o.f == history.Read && o.via == history.ViaOwner && o.typ == history.OK && !o.absent {
			returned[o.value] = true
		}
	}
	out := map[string][]porcupine.Operation{}
	for _, o := range r.ops {
		in := linInput{op: o, write: o.isWrite(), value: o.value}
		end := o.ret
		var output any
		switch {
		case o.isWrite() && o.typ == history.Fail:
			continue // definite: never happened
		case o.isWrite():
			// Only an ok Majority write must have happened. Rule 11 bounds
			// every write by its answer, or its deadline (effectBy).
			in.maybe = !o.majorityOK()
			if in.maybe && !returned[o.value] {
				continue
			}
			end = min(o.effectBy(), r.end+1)
			if s, ok := seen[o.value]; ok && s < end {
				end = max(s, o.call)
			}
			output = ""
		case o.via != history.ViaOwner || o.typ != history.OK:
			continue // local reads are not linearizable; failed reads saw nothing
		default:
			output = o.value
			if o.absent {
				output = absentValue
			}
		}
		out[o.key] = append(out[o.key], porcupine.Operation{ClientId: o.proc, Input: in, Call: o.call, Output: output, Return: end})
	}
	return out
}

// checkKey checks one key's history; on an anomaly it shrinks the history
// to a minimal slice that is not linearizable by itself.
func checkKey(r *run, key string, ops []porcupine.Operation, timeout time.Duration, dir string) ([]Anomaly, bool) {
	res := porcupine.CheckOperationsTimeout(registerModel, ops, timeout)
	switch res {
	case porcupine.Ok:
		return nil, false
	case porcupine.Unknown:
		return []Anomaly{{
			Kind: KindUnknown, Key: key,
			Msg: fmt.Sprintf("the search over %d operations ran out of its %v: not a pass", len(ops), timeout),
		}}, true
	}
	slice, minimal := shrink(registerModel, ops, timeout, without)
	a := Anomaly{Kind: KindNotLinearizable, Key: key}
	a.Msg = fmt.Sprintf("no linearization of the %d operations on the key; these %d have none by themselves", len(ops), len(slice))
	if minimal {
		a.Msg += " (without any one of its reads, or of the writes no read returns, they would)"
	}
	_, info := porcupine.CheckOperationsVerbose(registerModel, slice, timeout)
	a.Slice = describeSlice(r, registerModel, slice, info, describeRegisterOp)
	if dir != "" {
		path := filepath.Join(dir, "linearizability-"+safeName(key)+".html")
		if err := porcupine.VisualizePath(registerModel, info, path); err == nil {
			a.Msg += "; visualization: " + path
		} else {
			_ = os.Remove(path)
		}
	}
	return []Anomaly{a}, false
}

// shrink removes operations from a non-linearizable history while it stays
// non-linearizable under model m, as delta debugging does: chunks of
// halving size, each removal kept if the rest is still illegal. cut(h, i,
// j) is h without those of its operations [i, j) whose removal from a
// linearizable history leaves it linearizable (for the register: reads,
// and writes whose value no remaining read returned; see without), so the
// slice being illegal proves the whole history is. minimal reports that
// no single removal is left to try (the search had the time it needed).
func shrink(m porcupine.Model, ops []porcupine.Operation, timeout time.Duration, cut func(h []porcupine.Operation, i, j int) []porcupine.Operation) (slice []porcupine.Operation, minimal bool) {
	// Each try gets a fraction of the key's budget: a try that runs out
	// counts as linearizable, so its operations stay in the slice.
	deadline := time.Now().Add(2 * timeout)
	try := min(timeout, time.Second)
	cur := ops
	illegal := func(h []porcupine.Operation) bool {
		return porcupine.CheckOperationsTimeout(m, h, try) == porcupine.Illegal
	}
	for chunk := max(len(cur)/2, 1); ; chunk = max(chunk/2, 1) {
		removed := false
		for i := 0; i < len(cur); {
			if time.Now().After(deadline) {
				return cur, false
			}
			cand := cut(cur, i, min(i+chunk, len(cur)))
			if len(cand) < len(cur) && illegal(cand) {
				cur, removed = cand, true
				continue
			}
			i += chunk
		}
		if chunk == 1 && !removed {
			return cur, true
		}
	}
}

// without returns h minus its operations [i, j), keeping the writes among
// them whose value a remaining read returned.
func without(h []porcupine.Operation, i, j int) []porcupine.Operation {
	read := map[string]bool{}
	for k, o := range h {
		if (k < i || k >= j) && !o.Input.(linInput).write {
			read[o.Output.(string)] = true
		}
	}
	out := make([]porcupine.Operation, 0, len(h))
	for k, o := range h {
		in := o.Input.(linInput)
		if k < i || k >= j || in.write && read[in.value] {
			out = append(out, o)
		}
	}
	return out
}

// describeRegisterOp writes one operation of a register history.
func describeRegisterOp(r *run, o porcupine.Operation) string {
	in := o.Input.(linInput)
	note := ""
	if in.write {
		note = "  [must]"
		if in.maybe {
			note = "  [may: until " + r.at(o.Return) + " or never]"
		}
	}
	return r.describe(in.op) + note
}

// describeSlice writes a slice's operations in call order (each with
// describeOp), then the longest order of them porcupine could justify
// under model m and what it could not.
func describeSlice(r *run, m porcupine.Model, slice []porcupine.Operation, info porcupine.LinearizationInfo,
	describeOp func(*run, porcupine.Operation) string) string {
	var b strings.Builder
	for i, o := range slice {
		fmt.Fprintf(&b, "%d: %s\n", i, describeOp(r, o))
	}
	var longest []int
	for _, part := range info.PartialLinearizations() {
		for _, seq := range part {
			if len(seq) > len(longest) {
				longest = seq
			}
		}
	}
	states := m.Init()
	var steps []string
	for _, id := range longest {
		_, states = m.Step(states, slice[id].Input, slice[id].Output)
		steps = append(steps, fmt.Sprint(id))
	}
	var possible []string
	for _, s := range states.([]any) {
		possible = append(possible, showValue(s.(string)))
	}
	fmt.Fprintf(&b, "longest linearization: [%s], after which the key may hold %s; no remaining operation can come next\n",
		strings.Join(steps, " "), strings.Join(possible, " or "))
	return b.String()
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

func safeName(s string) string { return unsafeName.ReplaceAllString(s, "_") }

// checkLocalReads is the weaker check for reads of a process's own copy,
// which may lag: a local read returns a value some write invoked before the
// read returned, and never one whose write failed definitely.
func checkLocalReads(r *run) []Anomaly {
	var out []Anomaly
	for _, o := range r.ops {
		if o.f != history.Read || o.via != history.ViaLocal || o.typ != history.OK || o.absent {
			continue
		}
		w := r.writes[o.value]
		var msg, slice string
		switch {
		case w == nil:
			msg = fmt.Sprintf("read %q, which no operation wrote", o.value)
			slice = r.describe(o)
		case w.call > o.ret:
			msg = fmt.Sprintf("read %q before its write was invoked", o.value)
			slice = r.describe(w) + "\n" + r.describe(o)
		case w.typ == history.Fail:
			msg = fmt.Sprintf("read %q, whose write failed definitely", o.value)
			slice = r.describe(w) + "\n" + r.describe(o)
		default:
			continue
		}
		out = append(out, Anomaly{Kind: KindLocalRead, Key: o.key, Msg: msg, Slice: slice})
	}
	return out
}
