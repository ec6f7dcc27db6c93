package check

import (
	"fmt"
	"sort"
	"strings"

	"github.com/fero-go/fero/internal/chaos/history"
)

// The trace kinds the checkers read (fero.ChangeKind's names).
const (
	kindCommitted = "committed"
	kindApplied   = "applied"
	kindDropped   = "dropped"
	kindRestored  = "restored"
)

func isApply(c history.Change) bool { return c.Kind == kindApplied || c.Kind == kindCommitted }

// logEntry is one commit that survives in a copy's log.
type logEntry struct {
	key, value string
	term       uint64
}

// logs is each partition's committed order as the traces show it: what
// every copy's log holds at the end of its trace, merged.
type logs struct {
	// merged[p][offset] is the entry at offset in partition p.
	merged map[int]map[uint64]logEntry
	// held[i] is the set of values trace i's copy holds at its end.
	held []map[string]bool
	// restored[i][p]: trace i's copy of p was replaced by a snapshot, so
	// the trace may have skipped some of p's entries.
	restored []map[int]bool
	// whole[i]: trace i began before its copy's first change.
	whole []bool
	// part is each key's partition.
	part map[string]int
	// pos is each value's place: its partition and offset.
	pos        map[string]uint64
	anomalies  []Anomaly
	divergedAt map[int]bool
}

func buildLogs(r *run) *logs {
	l := &logs{merged: map[int]map[uint64]logEntry{}, part: map[string]int{}, pos: map[string]uint64{}, divergedAt: map[int]bool{}}
	for _, t := range r.traces {
		own := map[int]map[uint64]logEntry{}
		restored := map[int]bool{}
		for _, c := range t.changes {
			if c.Key != "" {
				l.part[c.Key] = c.Partition
			}
			p := own[c.Partition]
			if p == nil {
				p = map[uint64]logEntry{}
				own[c.Partition] = p
			}
			switch {
			case isApply(c):
				p[c.Offset] = logEntry{key: c.Key, value: c.Value, term: c.Term}
			case c.Kind == kindDropped:
				delete(p, c.Offset)
			case c.Kind == kindRestored:
				restored[c.Partition] = true
			}
		}
		held := map[string]bool{}
		for pt, entries := range own {
			m := l.merged[pt]
			if m == nil {
				m = map[uint64]logEntry{}
				l.merged[pt] = m
			}
			for off, e := range entries {
				held[e.value] = true
				prev, ok := m[off]
				if !ok {
					m[off] = e
					continue
				}
				if prev != e && !l.divergedAt[pt] {
					l.divergedAt[pt] = true
					l.anomalies = append(l.anomalies, Anomaly{
						Kind: KindLogsDiverge, Key: e.key,
						Msg: fmt.Sprintf("partition %d holds two entries at offset %d at the end of two traces: %q (term %d) and %q (term %d)",
							pt, off, prev.value, prev.term, e.value, e.term),
					})
				}
			}
		}
		l.held = append(l.held, held)
		l.restored = append(l.restored, restored)
		l.whole = append(l.whole, t.whole)
	}
	for _, m := range l.merged {
		for off, e := range m {
			l.pos[e.value] = off
		}
	}
	return l
}

// checkMajorityWrites is checker 2: for each key, every ok Majority write
// is in the partition's log, and every copy's final value is a write not
// ordered before the last of them. Where the log cannot say (a copy was
// restored from a snapshot past the entry), a final value whose write was
// answered before the Majority write was invoked is older all the same.
func checkMajorityWrites(r *run) []Anomaly {
	l := buildLogs(r)
	out := l.anomalies
	converged := map[int]bool{}
	for _, f := range r.finals {
		converged[f.Proc] = f.Converged
	}
	byKey := map[string][]*op{}
	for _, o := range r.ops {
		if o.majorityOK() {
			byKey[o.key] = append(byKey[o.key], o)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var last *op
		for _, w := range byKey[k] {
			off, ok := l.pos[w.value]
			if !ok {
				if witness := l.missedBy(r, w, converged); witness != "" {
					out = append(out, Anomaly{
						Kind: KindMajorityLost, Key: k,
						Msg:   fmt.Sprintf("the Majority-acked write %q is in no copy's log (%s holds the partition's whole log, without it)", w.value, witness),
						Slice: r.describe(w) + "\n" + r.valueTrace(w.value),
					})
				}
				continue
			}
			if last == nil || off > l.pos[last.value] {
				last = w
			}
		}
		if last == nil {
			continue
		}
		stale := map[string][]string{} // final value -> the processes holding it
		for _, f := range r.finals {
			v, ok := f.Values[k]
			if !ok {
				v = absentValue
			}
			if v == last.value || !l.older(r, v, last) {
				continue
			}
			stale[v] = append(stale[v], fmt.Sprintf("p%d", f.Proc))
		}
		for _, v := range sortedKeys(stale) {
			msg := fmt.Sprintf("%s end with %s, older than the Majority-acked write %q", strings.Join(stale[v], ", "), showValue(v), last.value)
			slice := r.describe(last) + "\n"
			if w := r.writes[v]; w != nil {
				slice += r.describe(w) + "\n"
			}
			slice += l.keyLog(r, k, v, last.value)
			out = append(out, Anomaly{Kind: KindStaleFinal, Key: k, Msg: msg, Slice: slice})
		}
	}
	return out
}

// older reports whether the final value v is ordered before the write
// last.
func (l *logs) older(r *run, v string, last *op) bool {
	if v == absentValue {
		return true
	}
	w := r.writes[v]
	if w == nil {
		return true // nobody wrote it: not a write ordered after last
	}
	if off, ok := l.pos[v]; ok {
		return off < l.pos[last.value]
	}
	return w.effectBy() < last.call
}

// missedBy names a trace that would show w had it been committed: it is
// whole, its copy converged, and never restored w's partition from a
// snapshot, so it applied every entry of the partition in order. Empty if
// there is none.
func (l *logs) missedBy(r *run, w *op, converged map[int]bool) string {
	p, known := l.part[w.key]
	for i, t := range r.traces {
		if !converged[t.proc] || !l.whole[i] {
			continue
		}
		if known && l.restored[i][p] || !known && len(l.restored[i]) > 0 {
			continue
		}
		if !l.held[i][w.value] {
			return t.file
		}
	}
	return ""
}

// keyLog writes the log entries of key's partition on the key, from the
// earlier of the two values' places on, at most a dozen.
func (l *logs) keyLog(r *run, key, a, b string) string {
	p, ok := l.part[key]
	if !ok {
		return ""
	}
	from := uint64(0)
	for _, v := range []string{a, b} {
		if off, ok := l.pos[v]; ok && (from == 0 || off < from) {
			from = off
		}
	}
	var offs []uint64
	for off, e := range l.merged[p] {
		if off >= from && e.key == key {
			offs = append(offs, off)
		}
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	var b2 strings.Builder
	fmt.Fprintf(&b2, "partition %d's log on the key:\n", p)
	for i, off := range offs {
		if i == 12 {
			fmt.Fprintf(&b2, "  ... %d more\n", len(offs)-i)
			break
		}
		e := l.merged[p][off]
		fmt.Fprintf(&b2, "  offset %d term %d: %q", off, e.term, e.value)
		if w := r.writes[e.value]; w != nil {
			fmt.Fprintf(&b2, " (%s, %s)", w.wait, w.typ)
		}
		b2.WriteString("\n")
	}
	return b2.String()
}

// valueTrace writes every trace line that carries value.
func (r *run) valueTrace(value string) string {
	var b strings.Builder
	for _, t := range r.traces {
		for _, c := range t.changes {
			if c.Value == value {
				b.WriteString(r.describeChange(c) + "\n")
			}
		}
	}
	if b.Len() == 0 {
		return "(no trace line holds it)\n"
	}
	return b.String()
}

// checkAppliedAfterAnswer is checker 3, from each trace's order rather
// than clocks: if write w was answered at T, and a write invoked after T
// comes before w in a partition's order, w was applied after its caller
// had its answer. For a NoWait write (answered when queued) and one whose
// context was canceled, T is its deadline (rule 11). And a write with a
// definite failure is never applied.
func checkAppliedAfterAnswer(r *run) []Anomaly {
	var out []Anomaly
	late := map[*op]bool{}
	failed := map[*op]bool{}
	for _, t := range r.traces {
		// latest[p] is the index of the applied entry of p, so far, whose
		// write was invoked last.
		latest := map[int]int{}
		for i, c := range t.changes {
			if !isApply(c) {
				continue
			}
			w := r.writes[c.Value]
			if w == nil {
				continue
			}
			if w.typ == history.Fail && !failed[w] {
				failed[w] = true
				out = append(out, Anomaly{
					Kind: KindFailedApplied, Key: w.key,
					Msg:   fmt.Sprintf("%q failed definitely, yet %s applied it", w.value, t.file),
					Slice: r.describe(w) + "\n" + r.describeChange(c),
				})
			}
			j, ok := latest[c.Partition]
			var prev *op
			if ok {
				prev = r.writes[t.changes[j].Value]
			}
			if prev != nil && prev.call > w.effectBy() && !late[w] {
				late[w] = true
				what := fmt.Sprintf("answered (%s)", w.typ)
				if w.effectBy() != w.ret {
					what = "past its deadline"
				}
				out = append(out, Anomaly{
					Kind: KindAppliedAfterAnswer, Key: w.key,
					Msg: fmt.Sprintf("%q was %s at %s, but %s applied it after %q, invoked at %s",
						w.value, what, r.at(w.effectBy()), t.file, prev.value, r.at(prev.call)),
					Slice: r.describe(w) + "\n" + r.describe(prev) + "\n" + r.traceBetween(t, j, i),
				})
			}
			if prev == nil || w.call > prev.call {
				latest[c.Partition] = i
			}
		}
	}
	return out
}

// traceBetween writes t's lines i..j of one partition, eliding the middle
// of a long run.
func (r *run) traceBetween(t trace, i, j int) string {
	p := t.changes[i].Partition
	var lines []string
	for k := i; k <= j; k++ {
		if t.changes[k].Partition == p {
			lines = append(lines, r.describeChange(t.changes[k]))
		}
	}
	if len(lines) > 12 {
		lines = append(append(lines[:6:6], fmt.Sprintf("... %d more", len(lines)-12)), lines[len(lines)-6:]...)
	}
	return strings.Join(lines, "\n") + "\n"
}

// checkOffsets is checker 5: in each trace, each partition's applied
// offsets go up by one from 1; a dropped entry takes its offset back; a
// restore puts the copy at the snapshot's offset. A trace that is not
// whole (its stream began after the copy's first change) starts each
// partition where its first line does. One record may change several keys
// (a handler's turn commits its writes as one record): its changes share
// its offset and come one after another, each of another key.
func checkOffsets(r *run) []Anomaly {
	var out []Anomaly
	for _, t := range r.traces {
		last := map[int]uint64{}
		bad := map[int]int{}
		prevLine := map[int]int{}
		// record[p] holds the keys the partition's last applied record
		// changed so far.
		record := map[int]map[string]bool{}
		for i, c := range t.changes {
			if j, ok := prevLine[c.Partition]; ok && (isApply(c) || c.Kind == kindDropped) {
				// The next change of the record applied or dropped.
				if p := t.changes[j]; p.Kind == c.Kind && p.Term == c.Term && p.Offset == c.Offset && !record[c.Partition][c.Key] {
					record[c.Partition][c.Key] = true
					prevLine[c.Partition] = i
					continue
				}
			}
			if c.Kind == kindDropped {
				record[c.Partition] = map[string]bool{c.Key: true}
			}
			if isApply(c) {
				record[c.Partition] = map[string]bool{c.Key: true}
			}
			if _, started := prevLine[c.Partition]; !started && !t.whole && isApply(c) {
				last[c.Partition] = c.Offset - 1
			}
			want := last[c.Partition] + 1
			switch {
			case isApply(c):
				if c.Offset != want {
					bad[c.Partition]++
					if bad[c.Partition] == 1 {
						slice := r.describeChange(c)
						if j, ok := prevLine[c.Partition]; ok {
							slice = r.describeChange(t.changes[j]) + "\n" + slice
						}
						out = append(out, Anomaly{
							Kind:  KindOffsets,
							Msg:   fmt.Sprintf("%s: partition %d applied offset %d after %d", t.file, c.Partition, c.Offset, want-1),
							Slice: slice,
						})
					}
				}
				last[c.Partition] = c.Offset
			case c.Kind == kindDropped:
				if c.Offset >= want && bad[c.Partition] == 0 {
					bad[c.Partition]++
					out = append(out, Anomaly{
						Kind:  KindOffsets,
						Msg:   fmt.Sprintf("%s: partition %d dropped offset %d, which it never applied (at %d)", t.file, c.Partition, c.Offset, want-1),
						Slice: r.describeChange(c),
					})
				}
				last[c.Partition] = min(last[c.Partition], c.Offset-1)
			case c.Kind == kindRestored:
				last[c.Partition] = c.Offset
			}
			prevLine[c.Partition] = i
		}
	}
	return out
}

// checkDropped is checker 6: a copy drops only writes that were never
// acknowledged at Majority. A Majority write that the history holds after
// all is not lost: its first attempt, committed by an owner that then lost
// the partition, was dropped, and its retry (rule 16) committed it. The
// clients may learn the retry's commit only through a restore (seed 41920:
// the new owner's sync restored every client at the retry's offset), so a
// commit of the value in a later term that a server's tail shows, and no
// client trace dropped, counts too.
func checkDropped(r *run) []Anomaly {
	var out []Anomaly
	reported := map[*op]bool{}
	final := buildLogs(r).pos
	dropped := map[[3]uint64]bool{}
	for _, t := range r.traces {
		for _, c := range t.changes {
			if c.Kind == kindDropped {
				dropped[[3]uint64{uint64(c.Partition), c.Term, c.Offset}] = true
			}
		}
	}
	committedLater := func(c history.Change) bool {
		for _, s := range r.serverCommits[c.Value] {
			if s.Partition == c.Partition && s.Term > c.Term && !dropped[[3]uint64{uint64(s.Partition), s.Term, s.Offset}] {
				return true
			}
		}
		return false
	}
	for _, t := range r.traces {
		for _, c := range t.changes {
			if c.Kind != kindDropped {
				continue
			}
			if _, kept := final[c.Value]; kept || committedLater(c) {
				continue
			}
			if w := r.writes[c.Value]; w != nil && w.majorityOK() && !reported[w] {
				reported[w] = true
				out = append(out, Anomaly{
					Kind: KindMajorityDropped, Key: w.key,
					Msg:   fmt.Sprintf("%s dropped %q, acknowledged at Majority", t.file, w.value),
					Slice: r.describe(w) + "\n" + r.valueTrace(w.value),
				})
			}
		}
	}
	return out
}

// checkCopies is checker 4: after the heal every process's copy has the
// same digest and the same value for every key, agrees with what the
// owners answer (the workload compares before its final line), and every
// process wrote its final line.
func checkCopies(r *run) []Anomaly {
	var out []Anomaly
	for _, f := range r.noFinal {
		out = append(out, Anomaly{Kind: KindNoFinal, Msg: f + " has no final line: its process did not finish"})
	}
	for _, f := range r.finals {
		if !f.Converged {
			out = append(out, Anomaly{
				Kind:  KindCopiesDiffer,
				Msg:   fmt.Sprintf("p%d's copy and the owners' (read with GET) still differed on %d keys when it gave up waiting", f.Proc, len(f.Differ)),
				Slice: strings.Join(f.Differ, "\n"),
			})
		}
	}
	if len(r.finals) < 2 {
		return out
	}
	// A final line read before some process's last write shows a harness
	// that signalled the heal too early, not two copies that disagree.
	var lastWrite int64
	for _, o := range r.ops {
		if o.isWrite() {
			lastWrite = max(lastWrite, o.call)
		}
	}
	digests := map[string][]string{}
	for _, f := range r.finals {
		name := fmt.Sprintf("p%d", f.Proc)
		if !f.Converged {
			name += " (gave up waiting to converge)"
		}
		if f.Time < lastWrite {
			name += fmt.Sprintf(" (read at %s, before the last write was invoked at %s: the heal came too early)", r.at(f.Time), r.at(lastWrite))
		}
		digests[f.Digest] = append(digests[f.Digest], name)
	}
	if len(digests) > 1 {
		var b strings.Builder
		for _, d := range sortedKeys(digests) {
			fmt.Fprintf(&b, "digest %s: %s\n", d, strings.Join(digests[d], ", "))
		}
		out = append(out, Anomaly{Kind: KindCopiesDiffer, Msg: fmt.Sprintf("%d different digests after the heal", len(digests)), Slice: b.String()})
	}
	keys := map[string]bool{}
	for _, f := range r.finals {
		for k := range f.Values {
			keys[k] = true
		}
		for _, k := range f.Absent {
			keys[k] = true
		}
	}
	for _, k := range sortedKeys(keys) {
		vals := map[string][]string{}
		for _, f := range r.finals {
			v, ok := f.Values[k]
			if !ok {
				v = absentValue
			}
			vals[v] = append(vals[v], fmt.Sprintf("p%d", f.Proc))
		}
		if len(vals) == 1 {
			continue
		}
		var b strings.Builder
		for _, v := range sortedKeys(vals) {
			fmt.Fprintf(&b, "%s: %s\n", showValue(v), strings.Join(vals[v], ", "))
		}
		out = append(out, Anomaly{Kind: KindCopiesDiffer, Key: k, Msg: "processes end with different values", Slice: b.String()})
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
