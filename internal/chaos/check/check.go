package check

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fero-go/fero/internal/chaos/history"
)

// Anomaly kinds, one or more per checker.
const (
	// Linearizability (checker 1).
	KindNotLinearizable = "not-linearizable"
	KindUnknown         = "linearizability-unknown"
	KindLocalRead       = "local-read"
	// No Majority-acked write lost or overwritten (checker 2).
	KindMajorityLost = "majority-write-lost"
	KindStaleFinal   = "stale-final-value"
	KindLogsDiverge  = "logs-diverge"
	// No write applied after its answer (checker 3).
	KindAppliedAfterAnswer = "applied-after-answer"
	KindFailedApplied      = "failed-write-applied"
	// Every copy identical after heal (checker 4).
	KindCopiesDiffer = "copies-differ"
	KindNoFinal      = "no-final-line"
	// Offsets gap-free and monotone (checker 5).
	KindOffsets = "offsets"
	// dropped only for writes never Majority-acked (checker 6).
	KindMajorityDropped = "majority-write-dropped"
)

// Anomaly is one broken promise.
type Anomaly struct {
	Kind string
	// Key is the key it concerns, if one.
	Key string
	Msg string
	// Slice is the shortest part of the history that shows it, as text.
	Slice string
}

func (a Anomaly) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", a.Kind)
	if a.Key != "" {
		fmt.Fprintf(&b, " key %q", a.Key)
	}
	fmt.Fprintf(&b, ": %s\n", a.Msg)
	if a.Slice != "" {
		for _, l := range strings.Split(strings.TrimRight(a.Slice, "\n"), "\n") {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	return b.String()
}

// Report is what the checkers found in one run.
type Report struct {
	// Ops counts the operations invoked; the rest break them down.
	Ops                     int
	Writes, Reads           int
	OK, Fail, Info, Pending int
	Procs                   int
	// Changes counts the trace lines.
	Changes int
	// Keys is how many keys the linearizability checker tried; Unknown of
	// them ran out of time (each is also an anomaly: not a pass).
	Keys, Unknown int
	// Workload is the workload the histories came from (history.Register,
	// Counter, Bank, CAS or Set), and Lines what its checker found, key
	// by key. Keys and Unknown count the register's keys and the CAS's.
	Workload  string
	Lines     []string
	Anomalies []Anomaly
}

// Passed reports whether the run showed no anomaly.
func (r Report) Passed() bool { return len(r.Anomalies) == 0 }

// String summarizes the report: counts, then each anomaly (at most five
// of each kind in full).
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d ops from %d processes (%d writes, %d reads; %d ok, %d fail, %d info, %d pending), %d changes traced\n",
		r.Ops, r.Procs, r.Writes, r.Reads, r.OK, r.Fail, r.Info, r.Pending, r.Changes)
	if r.Workload == "" || r.Workload == history.Register || r.Workload == history.CAS {
		fmt.Fprintf(&b, "linearizability: %d keys, %d unknown\n", r.Keys, r.Unknown)
	}
	for _, l := range r.Lines {
		fmt.Fprintf(&b, "%s\n", l)
	}
	if len(r.Anomalies) == 0 {
		b.WriteString("no anomalies\n")
		return b.String()
	}
	count := map[string]int{}
	var kinds []string
	for _, a := range r.Anomalies {
		if count[a.Kind] == 0 {
			kinds = append(kinds, a.Kind)
		}
		count[a.Kind]++
	}
	fmt.Fprintf(&b, "%d anomalies:", len(r.Anomalies))
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s %d", k, count[k])
	}
	b.WriteString("\n")
	shown := map[string]int{}
	for _, a := range r.Anomalies {
		if shown[a.Kind]++; shown[a.Kind] <= 5 {
			b.WriteString(a.String())
		}
	}
	return b.String()
}

// Options tune the checkers.
type Options struct {
	// LinearizabilityTimeout bounds the search for each key (default 10s);
	// a key whose search runs out is reported unknown.
	LinearizabilityTimeout time.Duration
	// Parallel is how many keys are searched at once (default GOMAXPROCS).
	Parallel int
}

// Run checks the histories and traces in dir with default options.
func Run(dir string) (Report, error) { return RunOptions(dir, Options{}) }

// RunOptions checks the histories and traces in dir. On a linearizability
// anomaly it also writes porcupine's visualization of the anomaly's slice
// to dir/linearizability-<key>.html.
func RunOptions(dir string, opts Options) (Report, error) {
	if opts.LinearizabilityTimeout <= 0 {
		opts.LinearizabilityTimeout = 10 * time.Second
	}
	if opts.Parallel <= 0 {
		opts.Parallel = runtime.GOMAXPROCS(0)
	}
	r, err := load(dir)
	if err != nil {
		return Report{}, err
	}
	rep := r.counts()
	if rep.Workload = r.workload(); rep.Workload != history.Register {
		var as []Anomaly
		switch rep.Workload {
		case history.Counter:
			rep.Lines, as = checkCounter(r)
		case history.Bank:
			rep.Lines, as = checkBank(r)
		case history.CAS:
			var lin linResult
			rep.Lines, lin = checkCAS(r, opts, dir)
			rep.Keys, rep.Unknown, as = lin.keys, lin.unknown, lin.anomalies
		case history.Set:
			rep.Lines, as = checkSet(r)
		}
		// The copies still end equal, and apply commits in order; the
		// register checkers' other promises are about unique values.
		for _, as := range [][]Anomaly{as, checkCopies(r), checkOffsets(r)} {
			rep.Anomalies = append(rep.Anomalies, as...)
		}
		return rep, nil
	}
	lin := checkLinearizable(r, opts, dir)
	rep.Keys, rep.Unknown = lin.keys, lin.unknown
	for _, as := range [][]Anomaly{
		lin.anomalies,
		checkLocalReads(r),
		checkMajorityWrites(r),
		checkAppliedAfterAnswer(r),
		checkCopies(r),
		checkOffsets(r),
		checkDropped(r),
	} {
		rep.Anomalies = append(rep.Anomalies, as...)
	}
	return rep, nil
}

// op is one operation, its invocation and completion joined.
type op struct {
	proc   int
	id     uint64
	f      history.Func
	via    history.Via
	key    string
	value  string
	absent bool
	wait   string
	// call and ret are the invocation and completion times; ret is the
	// run's end for an operation that never completed (its process died).
	call, ret int64
	// typ is OK, Fail or Info; empty if the operation never completed.
	typ       history.Type
	err, code string
	// deadline is a write's deadline (0 if its line has none).
	deadline int64
	// amount, from and to are an incr's or a transfer's; proposed is the
	// bank a bank-init proposed, balances the bank it found or a read
	// returned; final marks a read after the heal.
	amount             int64
	from, to           string
	proposed, balances map[string]int64
	final              bool
	// version is the version a read returned or a cas expects; expect
	// (expectAbsent) the value a cas expects; current the version a
	// refused cas's error carried; elements the array a read returned.
	version, current uint64
	expect           string
	expectAbsent     bool
	elements         []string
}

func (o *op) isWrite() bool { return o.f == history.Write }

// majorityOK: the caller was told a majority of the group applied it.
func (o *op) majorityOK() bool { return o.isWrite() && o.wait == "majority" && o.typ == history.OK }

// effectBy is the latest time write o may take effect, by rule 11: its
// answer; or its deadline for a NoWait write (answered when queued), one
// whose context was canceled and one never answered (its process died);
// or after the run (math.MaxInt64) when nothing bounds it.
func (o *op) effectBy() int64 {
	switch {
	case o.typ == "" || o.wait == "none" || o.code == "canceled":
		if o.deadline == 0 {
			return math.MaxInt64
		}
		return o.deadline
	}
	return o.ret
}

// trace is one process's change stream.
type trace struct {
	proc    int
	file    string
	changes []history.Change
	// whole: the stream began before the copy's first change, so it
	// holds every change of every partition from offset 1.
	whole bool
}

type final struct {
	*history.Final
	file string
}

// run is everything in a run's directory.
type run struct {
	ops    []*op
	writes map[string]*op // by value: every value is unique
	traces []trace
	finals []final
	// procs lists the processes with a history file, and noFinal those
	// whose history has no final line.
	procs   []int
	noFinal []string
	// start and end bound every timestamp in the run.
	start, end int64
	// serverCommits are the commits the servers' tails (<node>.tail.jsonl,
	// `fero tail` of each server) show, by value: a commit a client learned
	// only through a restore (a snapshot, which names no values) is there.
	serverCommits map[string][]history.Change
}

// TailSuffix ends the name of a server's tail, beside the histories.
const TailSuffix = ".tail.jsonl"

// loadTails reads the servers' tails in dir into r.serverCommits. A tail
// holds what its server committed or applied (lives one after another);
// a torn last line is skipped.
func (r *run) loadTails(dir string) error {
	ts, err := filepath.Glob(filepath.Join(dir, "*"+TailSuffix))
	if err != nil {
		return err
	}
	r.serverCommits = map[string][]history.Change{}
	for _, path := range ts {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			var c history.Change
			if json.Unmarshal(sc.Bytes(), &c) != nil || c.Value == "" {
				continue
			}
			if c.Kind == kindCommitted || c.Kind == kindApplied {
				r.serverCommits[c.Value] = append(r.serverCommits[c.Value], c)
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return fmt.Errorf("check: %s: %w", path, err)
		}
	}
	return nil
}

func load(dir string) (*run, error) {
	hs, err := filepath.Glob(filepath.Join(dir, "*"+history.HistorySuffix))
	if err != nil {
		return nil, err
	}
	if len(hs) == 0 {
		return nil, fmt.Errorf("check: no *%s in %s", history.HistorySuffix, dir)
	}
	sort.Strings(hs)
	r := &run{writes: map[string]*op{}, start: math.MaxInt64, end: math.MinInt64}
	seen := func(t int64) {
		r.start, r.end = min(r.start, t), max(r.end, t)
	}
	var pending []*op
	for _, path := range hs {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		lines, fin, err := history.Lines(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("check: %s: %w", path, err)
		}
		open := map[uint64]*op{}
		proc := -1
		for _, l := range lines {
			seen(l.Time)
			proc = l.Proc
			if l.Type == history.Invoke {
				o := &op{proc: l.Proc, id: l.ID, f: l.F, via: l.Via, key: l.Key, value: l.Value, wait: l.Wait, call: l.Time, deadline: l.Deadline,
					amount: l.Amount, from: l.From, to: l.To, proposed: l.Balances, final: l.Final,
					version: l.Version, expect: l.Expect, expectAbsent: l.ExpectAbsent}
				open[l.ID] = o
				r.ops = append(r.ops, o)
				if o.isWrite() {
					if prev := r.writes[o.value]; prev != nil {
						return nil, fmt.Errorf("check: %s: value %q written twice (procs %d and %d)", path, o.value, prev.proc, o.proc)
					}
					r.writes[o.value] = o
				}
				continue
			}
			o := open[l.ID]
			if o == nil {
				return nil, fmt.Errorf("check: %s: %s of op %d, never invoked", path, l.Type, l.ID)
			}
			delete(open, l.ID)
			o.typ, o.ret, o.err, o.code = l.Type, l.Time, l.Error, l.Code
			switch o.f {
			case history.Read, history.Incr:
				o.value, o.absent, o.balances = l.Value, l.Absent, l.Balances
				o.version, o.elements = l.Version, l.Elements
			case history.Cas:
				o.current = l.Current
			case history.BankInit:
				o.balances = l.Balances
			}
		}
		for _, o := range open {
			pending = append(pending, o)
		}
		if fin == nil {
			r.noFinal = append(r.noFinal, filepath.Base(path))
		} else {
			seen(fin.Time)
			proc = fin.Proc
			r.finals = append(r.finals, final{fin, filepath.Base(path)})
		}
		if proc >= 0 {
			r.procs = append(r.procs, proc)
		}

		tpath := history.TracePath(path)
		tf, err := os.Open(tpath)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		changes, err := history.Changes(tf)
		tf.Close()
		if err != nil {
			return nil, fmt.Errorf("check: %s: %w", tpath, err)
		}
		for _, c := range changes {
			seen(c.Time)
		}
		t := trace{proc: proc, file: filepath.Base(tpath), changes: changes}
		if len(changes) > 0 && changes[0].Kind == history.Subscribed {
			t.whole, t.changes = changes[0].Missed == 0, changes[1:]
		}
		r.traces = append(r.traces, t)
	}
	if err := r.loadTails(dir); err != nil {
		return nil, err
	}
	for _, o := range pending {
		o.ret = r.end + 1
	}
	sort.SliceStable(r.ops, func(i, j int) bool { return r.ops[i].call < r.ops[j].call })
	return r, nil
}

func (r *run) counts() Report {
	rep := Report{Ops: len(r.ops), Procs: len(r.procs)}
	for _, o := range r.ops {
		if o.f == history.Read {
			rep.Reads++
		} else {
			rep.Writes++
		}
		switch o.typ {
		case history.OK:
			rep.OK++
		case history.Fail:
			rep.Fail++
		case history.Info:
			rep.Info++
		default:
			rep.Pending++
		}
	}
	for _, t := range r.traces {
		rep.Changes += len(t.changes)
	}
	return rep
}

// at formats a timestamp as seconds since the run's first line.
func (r *run) at(t int64) string {
	if t > r.end {
		return "never"
	}
	return fmt.Sprintf("%.6fs", float64(t-r.start)/1e9)
}

// describe writes an operation as one line of a slice.
func (r *run) describe(o *op) string {
	var what string
	switch {
	case o.isWrite():
		what = fmt.Sprintf("write %q = %q (%s)", o.key, o.value, o.wait)
	case o.f == history.Incr && o.typ == history.OK:
		what = fmt.Sprintf("incr %q by %d -> %s", o.key, o.amount, o.value)
	case o.f == history.Incr:
		what = fmt.Sprintf("incr %q by %d", o.key, o.amount)
	case o.f == history.Transfer:
		what = fmt.Sprintf("transfer %q %d from %s to %s", o.key, o.amount, o.from, o.to)
	case o.f == history.BankInit:
		what = fmt.Sprintf("bank-init %q -> %s", o.key, showBank(o.balances))
	case o.f == history.Cas:
		exp := strconv.Quote(o.expect)
		if o.expectAbsent {
			exp = "absent"
		}
		what = fmt.Sprintf("cas %q %s (version %d) -> %q (majority)", o.key, exp, o.version, o.value)
		if o.current != 0 {
			what += fmt.Sprintf(", refused at version %d", o.current)
		}
	case o.f == history.Push:
		what = fmt.Sprintf("push %q %q (majority)", o.key, o.value)
	case o.elements != nil:
		what = fmt.Sprintf("read(%s) %q -> %d elements", o.via, o.key, len(o.elements))
	case o.typ == history.OK && o.version != 0:
		what = fmt.Sprintf("read(%s) %q -> %q version %d", o.via, o.key, o.value, o.version)
	case o.balances != nil:
		what = fmt.Sprintf("read(%s) %q -> %s", o.via, o.key, showBank(o.balances))
	case o.typ != history.OK:
		what = fmt.Sprintf("read(%s) %q", o.via, o.key)
	case o.absent:
		what = fmt.Sprintf("read(%s) %q -> absent", o.via, o.key)
	default:
		what = fmt.Sprintf("read(%s) %q -> %q", o.via, o.key, o.value)
	}
	typ := string(o.typ)
	if typ == "" {
		typ = "pending"
	}
	s := fmt.Sprintf("p%d #%d %s  [%s .. %s] %s", o.proc, o.id, what, r.at(o.call), r.at(o.ret), typ)
	if o.err != "" {
		s += ": " + o.err
	}
	return s
}

// describeChange writes a trace line as one line of a slice.
func (r *run) describeChange(c history.Change) string {
	s := fmt.Sprintf("p%d %s %s  partition %d term %d offset %d", c.Proc, r.at(c.Time), c.Kind, c.Partition, c.Term, c.Offset)
	if c.Key != "" {
		s += fmt.Sprintf(" %s %q", c.Type, c.Key)
	}
	if c.Value != "" {
		s += fmt.Sprintf(" = %q", c.Value)
	}
	if o := r.writes[c.Value]; o != nil && c.Value != "" {
		typ := string(o.typ)
		if typ == "" {
			typ = "pending"
		}
		s += fmt.Sprintf(" (%s, %s at %s)", o.wait, typ, r.at(o.ret))
	}
	return s
}
