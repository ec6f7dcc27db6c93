// Package history owns the fault suite's record of what happened: the
// lines a workload process writes while it runs and the checkers
// (internal/chaos/check) read afterwards.
//
// A workload process writes two files, both JSON lines:
//
//   - <name>.history.jsonl: one [Op] line when an operation is invoked
//     (before anything is sent) and exactly one more when it completes (ok,
//     fail or info), then, after the run, one [Final] line with the
//     process's copy of every key and its digest;
//   - <name>.trace.jsonl: one [Change] line for every change the process's
//     copy of the resource went through (committed, applied, dropped,
//     restored), in the order the copy applied them.
//
// Every line carries a CLOCK_MONOTONIC timestamp in nanoseconds ([Now]),
// which processes on one machine share, so lines from different files
// compare. Go's own monotonic clock does not: each process counts from its
// own start.
//
// Values are strings, unique in a run, so a value names the write that
// wrote it. A read that found nothing says so with Absent, distinct from
// a read of the empty string.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// File suffixes: a workload's Out ends with HistorySuffix, and its trace
// is written beside it with TraceSuffix.
const (
	HistorySuffix = ".history.jsonl"
	TraceSuffix   = ".trace.jsonl"
)

// TracePath returns the trace file's path for a history file's path.
func TracePath(historyPath string) string {
	return strings.TrimSuffix(historyPath, HistorySuffix) + TraceSuffix
}

// Now reads CLOCK_MONOTONIC in nanoseconds.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// CLOCK_MONOTONIC exists on every Linux the suite runs on; a
		// history with a wrong clock is worse than no history.
		panic(fmt.Sprintf("history: clock_gettime(CLOCK_MONOTONIC): %v", err))
	}
	return ts.Nano()
}

// Type says what a history line records.
type Type string

// The line types. An operation has one Invoke line and then exactly one
// of OK, Fail and Info (none if its process died first).
const (
	Invoke Type = "invoke"
	// OK: the operation completed as asked (for a NoWait write: it was
	// queued).
	OK Type = "ok"
	// Fail: the operation certainly had no effect (a definite error, see
	// [Classify]).
	Fail Type = "fail"
	// Info: the operation may or may not have had an effect (an
	// indefinite error: a timeout, a lost connection, a lost ownership).
	Info Type = "info"
	// FinalLine: the process's copy after the run ([Final]).
	FinalLine Type = "final"
)

// Func is an operation's function.
type Func string

// The functions.
const (
	// Write sets a key to a value unique in the run.
	Write Func = "write"
	// Read reads a key, locally or through its owner (see [Via]). In the
	// counter workload Value is the integer read, in decimal; in the bank
	// workload Balances holds the bank read.
	Read Func = "read"
	// Incr adds Amount to the counter at Key (the INCR verb of `fero serve
	// --jepsen-verbs`); an OK line's Value is the new count, in decimal.
	Incr Func = "incr"
	// Transfer moves Amount from account From to account To of the bank
	// at Key (TRANSFER); a refusal for want of funds is a Fail.
	Transfer Func = "transfer"
	// BankInit creates the bank at Key with Balances unless it exists
	// (BANKINIT); an OK line's Balances is the bank as it then stood.
	BankInit Func = "bank-init"
	// Cas sets Key to Value only if it still holds Expect (ExpectAbsent:
	// nothing), the value a read through the owner returned with Version
	// just before (UpdateIf at that version, Majority). A refusal for a
	// version mismatch is a Fail with code failed_precondition.
	Cas Func = "cas"
	// Push appends Value, unique in the run, to the array at Key
	// (Majority, with fero's exactly-once retries).
	Push Func = "push"
)

// Workload names the workloads whose histories this package records: which
// functions a history's operations use says which one wrote it.
const (
	// Register: Write and Read of unique string values (the default).
	Register = "register"
	// Counter: Incr, then Final reads of every counter through its owner.
	Counter = "counter"
	// Bank: BankInit, then Transfer and Reads of the whole bank through
	// its owner, and a Final read.
	Bank = "bank"
	// CAS: Reads through the owner with the version (VERSION), Writes at
	// Majority and Cas of a few registers, then Final reads.
	CAS = "cas"
	// Set: Push of unique elements onto a few arrays, a few Reads of them
	// through the owner, then Final reads.
	Set = "set"
)

// Via says where a read was answered.
type Via string

// Where reads are answered.
const (
	// ViaOwner: a GET request answered by the key's owner.
	ViaOwner Via = "owner"
	// ViaLocal: the reading process's own copy (Resource.Get).
	ViaLocal Via = "local"
)

// Op is one line of an operation: its invocation or its completion. A
// completion repeats the invocation's fields, so either line reads alone.
type Op struct {
	Type Type   `json:"type"`
	Time int64  `json:"time"`
	Proc int    `json:"proc"`
	ID   uint64 `json:"id"`
	F    Func   `json:"f"`
	Via  Via    `json:"via,omitempty"`
	Key  string `json:"key"`
	// Value is the value written, or the value a read returned.
	Value string `json:"value,omitempty"`
	// Absent: the read found no value at the key.
	Absent bool `json:"absent,omitempty"`
	// Wait is a write's wait level: majority, ack or none.
	Wait string `json:"wait,omitempty"`
	// Deadline bounds a write's life (docs/engine.md, rule 11): its
	// context's deadline, no earlier than the real one. A NoWait write,
	// or one whose context was canceled, may take effect until then.
	Deadline int64  `json:"deadline,omitempty"`
	Error    string `json:"error,omitempty"`
	Code     string `json:"code,omitempty"`

	// Amount is an Incr's increment or a Transfer's amount.
	Amount int64 `json:"amount,omitempty"`
	// From and To are a Transfer's accounts.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Balances is a bank: the one a BankInit proposed (invoke) or found
	// (ok), or the one a Read returned.
	Balances map[string]int64 `json:"balances,omitempty"`
	// Final marks the reads a counter, bank, cas or set workload makes
	// after the heal, once every one of its operations has completed.
	Final bool `json:"final,omitempty"`

	// Version is the key's version a VERSION read returned with Value, or
	// the version a Cas expects.
	Version uint64 `json:"version,omitempty"`
	// Expect is the value a Cas expects (ExpectAbsent: none), the one
	// read with Version.
	Expect       string `json:"expect,omitempty"`
	ExpectAbsent bool   `json:"expect_absent,omitempty"`
	// Current is the version a refused Cas's error carried.
	Current uint64 `json:"current,omitempty"`
	// Elements is the array a set workload's Read returned.
	Elements []string `json:"elements,omitempty"`
}

// Final is the last line of a history: the process's copy of every key of
// the run, read after the harness healed the cluster.
type Final struct {
	Type Type  `json:"type"`
	Time int64 `json:"time"`
	Proc int   `json:"proc"`
	// Values holds every key that has a value; Absent lists the others.
	Values map[string]string `json:"values"`
	Absent []string          `json:"absent,omitempty"`
	// Digest is Resource.Digest of the whole copy, in hex.
	Digest string `json:"digest"`
	// Converged: before reading, the process saw its copy agree with the
	// owners' on every key. False means it gave up waiting; Differ then
	// lists the keys that still disagreed, with both values.
	Converged bool     `json:"converged"`
	Differ    []string `json:"differ,omitempty"`
}

// Subscribed is the Kind of a trace's first line, written when the
// stream began: its Missed counts the changes the copy went through
// before (pkg/fero has no way to subscribe before the node starts
// receiving commits, so a trace is whole only when Missed is 0).
const Subscribed = "subscribed"

// Change is one line of a trace: a change to the process's copy.
type Change struct {
	Time int64 `json:"time"`
	Proc int   `json:"proc"`
	// Kind is committed, applied, dropped or restored; or Subscribed.
	Kind      string `json:"kind"`
	Partition int    `json:"partition"`
	Term      uint64 `json:"term"`
	Offset    uint64 `json:"offset"`
	// Type is ADD, UPDATE or REMOVE (empty for restored).
	Type string `json:"type,omitempty"`
	Key  string `json:"key,omitempty"`
	// Value is the value when it is a msgpack string; Raw holds any other
	// encoding as it is.
	Value string `json:"value,omitempty"`
	Raw   []byte `json:"raw,omitempty"`
	// Missed is set on the Subscribed line only.
	Missed uint64 `json:"missed,omitempty"`
}

// Writer appends JSON lines to a file. Each line is written with one
// write system call as it comes, so a line is on its way to the disk
// before the operation it records is sent, and a process that is killed
// loses at most the line it was writing. It is safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	f   *os.File
	buf []byte
	err error
}

// Create creates (or truncates) the file at path.
func Create(path string) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &Writer{f: f}, nil
}

// Write appends v as one line. The first error sticks: later writes do
// nothing and Close returns it.
func (w *Writer) Write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("history: encode %T: %w", v, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.buf = append(append(w.buf[:0], b...), '\n')
	if _, err := w.f.Write(w.buf); err != nil {
		w.err = fmt.Errorf("history: write %s: %w", w.f.Name(), err)
	}
	return w.err
}

// Close closes the file and returns the first error of any write.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.f.Close(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// Lines reads a history: the operations' lines in file order, and the
// final line (nil if there is none). A truncated last line (its process
// was killed while writing it) is skipped; any other bad line is an
// error.
func Lines(r io.Reader) (ops []Op, final *Final, err error) {
	err = eachLine(r, func(line []byte) error {
		var head struct {
			Type Type `json:"type"`
		}
		if err := json.Unmarshal(line, &head); err != nil {
			return err
		}
		if head.Type == FinalLine {
			final = new(Final)
			return json.Unmarshal(line, final)
		}
		var op Op
		if err := json.Unmarshal(line, &op); err != nil {
			return err
		}
		ops = append(ops, op)
		return nil
	})
	return ops, final, err
}

// Changes reads a trace.
func Changes(r io.Reader) ([]Change, error) {
	var out []Change
	err := eachLine(r, func(line []byte) error {
		var c Change
		if err := json.Unmarshal(line, &c); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

func eachLine(r io.Reader, f func([]byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			// A line without its newline was cut off by a kill.
			return nil
		}
		if err != nil {
			return err
		}
		if len(line) <= 1 {
			continue
		}
		if err := f(line); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
	}
}
