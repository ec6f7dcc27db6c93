package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fero-go/fero/bench"
	"github.com/fero-go/fero/pkg/fero"
)

// Fail fast (issue 41, point 5): a write in flight to an owner that dies
// fails over at once, retried exactly-once at the new owner. FailFast
// measures it as a caller sees it: a default client node (fero's retries
// on, a generous deadline per write) pushes unique elements at a fixed
// rate, open loop, onto arrays spread over every server; the biggest owner
// is SIGKILLed after a warm-up; once every write has returned and the
// copies agree, the arrays read through an owner say which acked writes
// were lost and which elements applied twice.

// FailFastConfig says what to measure.
type FailFastConfig struct {
	Config
	// Rate is the writes per second, open loop (default 600).
	Rate float64
	// Arrays is how many arrays the writes push onto, round robin
	// (default 48, so that each server owns some).
	Arrays int
	// Warmup is how long writes run before the kill (default 3s), After
	// how long they are still invoked after it (default 15s).
	Warmup, After time.Duration
	// Deadline is each write's context deadline (default 30s): long, so
	// that what ends a write is fero, not the caller.
	Deadline time.Duration
	// WithoutRetry opens the client with fero.WithoutRetry: the before.
	WithoutRetry bool
}

func (c *FailFastConfig) defaults() {
	c.Config.defaults()
	if c.Rate == 0 {
		c.Rate = 600
	}
	if c.Arrays == 0 {
		c.Arrays = 48
	}
	if c.Warmup == 0 {
		c.Warmup = 3 * time.Second
	}
	if c.After == 0 {
		c.After = 15 * time.Second
	}
	if c.Deadline == 0 {
		c.Deadline = 30 * time.Second
	}
}

// Write is one push as the caller saw it: element Elem onto Array, due at
// Intended and returned at Done (both from the start of the load), with
// Code (OK when acked).
type Write struct {
	Elem     int64
	Array    string
	Intended time.Duration
	Done     time.Duration
	Code     fero.Code
	// Err is the error's text when it failed.
	Err string
}

// arrayName is the array the i-th write pushes onto.
func arrayName(i, arrays int) string { return fmt.Sprintf("a%d", i%arrays) }

// FailFast runs one kill.
func FailFast(ctx context.Context, c FailFastConfig) (*Report, error) {
	c.defaults()
	var opts []fero.NodeOption
	if c.WithoutRetry {
		opts = append(opts, fero.WithoutRetry())
	}
	cl, servers, stopAll, err := startCluster(ctx, c.Config, opts...)
	defer stopAll()
	if err != nil {
		return nil, err
	}
	m, err := serverMap(servers)
	if err != nil {
		return nil, err
	}
	victim := biggest(m, servers)
	owned := map[string]bool{}
	var arrays []string
	for i := range c.Arrays {
		a := arrayName(i, c.Arrays)
		arrays = append(arrays, a)
		if o, _ := m.OwnerOfKey(a); o.ID == victim.id {
			owned[a] = true
		}
	}
	// Every array exists, empty, and its partition takes writes.
	for _, a := range arrays {
		if err := emptyUntil(ctx, cl, a, c.Config); err != nil {
			return nil, fmt.Errorf("failover: before the load, %s: %w", a, err)
		}
	}

	n := int(c.Rate * (c.Warmup + c.After).Seconds())
	ws := make([]Write, n) // each write's goroutine fills its own slot
	lag := make([]time.Duration, n)
	stat0, _ := bench.ReadProcStat()
	load0 := loadavg()
	var (
		wg     sync.WaitGroup
		kill   time.Duration
		killed = make(chan error, 1)
	)
	t0 := time.Now()
	timer := time.AfterFunc(c.Warmup, func() {
		err := victim.cmd.Process.Signal(syscall.SIGKILL)
		kill = time.Since(t0)
		killed <- err
	})
	defer timer.Stop()
	interval := time.Duration(float64(time.Second) / c.Rate)
	for i := range n {
		if ctx.Err() != nil {
			break // the writes not invoked leave zero slots: no report
		}
		due := time.Duration(i) * interval
		if d := due - time.Since(t0); d > 0 {
			time.Sleep(d)
		}
		lag[i] = time.Since(t0) - due
		a := arrayName(i, c.Arrays)
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, c.Deadline)
			err := cl.Push(wctx, a, int64(i), fero.Majority)
			cancel()
			ws[i] = Write{Elem: int64(i), Array: a, Intended: due, Done: time.Since(t0), Code: fero.CodeOf(err)}
			if err != nil {
				ws[i].Err = err.Error()
			}
		})
	}
	if err := <-killed; err != nil {
		wg.Wait()
		return nil, fmt.Errorf("failover: kill %s: %w", victim.id, err)
	}
	wg.Wait()
	loaded := time.Since(t0)
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	var alive []*server
	for _, s := range servers {
		if s != victim {
			alive = append(alive, s)
		}
	}
	present, converged, err := converge(ctx, cl, alive, arrays, c.Limit)
	if err != nil {
		return nil, err
	}
	stat1, _ := bench.ReadProcStat()
	rep := Account(ws, kill, owned, present)
	rep.Preset, rep.Victim, rep.Retry = c.Preset, victim.id, !c.WithoutRetry
	rep.Rate, rep.Loaded, rep.VictimArrays, rep.Arrays = c.Rate, loaded, len(owned), len(arrays)
	rep.Converged = converged
	rep.Busy = bench.BusynessBetween(stat0, stat1).Busy
	rep.Load = [2]string{load0, loadavg()}
	slices.Sort(lag)
	rep.LagP99, rep.LagMax = quantile(lag, 0.99), lag[len(lag)-1]
	return rep, nil
}

// emptyUntil makes a an empty array, trying until a Majority write
// succeeds (the cluster may still be syncing its first epochs).
func emptyUntil(ctx context.Context, cl *fero.Resource, a string, c Config) error {
	deadline := time.Now().Add(c.Limit)
	for {
		try, cancel := context.WithTimeout(ctx, c.Try*4)
		err := cl.Update(try, a, []int64{}, fero.Majority)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// converge reads every array through each surviving server (which asks
// the key's owner) until two rounds a second apart agree with each other
// and across the servers, or limit passes; it returns how many times each
// element is present in the last round.
func converge(ctx context.Context, cl *fero.Resource, alive []*server, arrays []string, limit time.Duration) (map[string][]int64, bool, error) {
	var rs []*fero.Remote
	defer func() {
		for _, r := range rs {
			_ = r.Close()
		}
	}()
	for _, s := range alive {
		r, err := fero.Dial(ctx, s.data)
		if err != nil {
			return nil, false, fmt.Errorf("failover: dial %s: %w", s.id, err)
		}
		rs = append(rs, r)
	}
	read := func() (map[string][]int64, bool) {
		var first map[string][]int64
		for _, r := range rs {
			got := map[string][]int64{}
			for _, a := range arrays {
				var v []int64
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := r.Get(rctx, a, &v)
				cancel()
				if err != nil {
					return nil, false
				}
				got[a] = v
			}
			if first != nil && !maps.EqualFunc(first, got, slices.Equal) {
				return nil, false
			}
			first = got
		}
		return first, true
	}
	deadline := time.Now().Add(limit)
	var prev map[string][]int64
	for {
		got, ok := read()
		if ok && prev != nil && maps.EqualFunc(prev, got, slices.Equal) {
			return got, true, nil
		}
		if ok {
			prev = got
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if prev == nil {
				return nil, false, fmt.Errorf("failover: no read of every array through the survivors within %v", limit)
			}
			return prev, false, nil
		}
		time.Sleep(time.Second)
	}
}

// loadavg is /proc/loadavg's three load averages, or "" where there is
// none.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// Latency is a latency distribution's summary, from intended send times.
type Latency struct {
	N                   int
	P50, P99, P999, Max time.Duration
}

func latencyOf(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	return Latency{N: len(ds), P50: quantile(ds, 0.5), P99: quantile(ds, 0.99), P999: quantile(ds, 0.999), Max: ds[len(ds)-1]}
}

// quantile of sorted ds: the smallest value at or above a fraction q of
// them (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(q*float64(len(ds)) + 0.999999999)
	return ds[min(max(i, 1), len(ds))-1]
}

// Report is one kill's figures.
type Report struct {
	Preset, Victim string
	Retry          bool
	Rate           float64
	// Arrays pushed onto, VictimArrays of them owned by the victim.
	Arrays, VictimArrays int
	// Writes invoked, Window of them in flight at the kill or invoked
	// after it; Acked of all.
	Writes, Window, Acked int
	// Kill is when the victim was killed, Loaded when the last write
	// returned, both from the start of the load.
	Kill, Loaded time.Duration
	// First and All: from the kill until the first, and the last, of the
	// victim's arrays took a write invoked after the kill (acked).
	First, All time.Duration
	// Latency of the window's writes, all and those to the victim's
	// arrays; failed writes included, with their latency.
	Latency, VictimLatency Latency
	// Over is how many of the window's writes took longer than All + 1s.
	Over int
	// Errors that reached the caller, by code, and the text of each
	// code's first (in invocation order).
	Errors  map[string]int
	Samples map[string]string
	// ErrFirst and ErrLast are when the first and the last failed write
	// returned, from the kill; ErrVictim is how many failed writes were
	// to the victim's arrays.
	ErrFirst, ErrLast time.Duration
	ErrVictim         int
	// After convergence, read through an owner: acked writes absent
	// (Lost), elements present more than once (Duplicated), writes not
	// acked but present (UnackedPresent), present elements never written
	// to that array (Unknown).
	Lost, Duplicated, UnackedPresent, Unknown int
	Converged                                 bool
	// LagP99 and LagMax are the generator's lag behind intended times.
	LagP99, LagMax time.Duration
	// Busy is the machine's non-idle CPU fraction over the run (from
	// /proc/stat), Load its load averages at the start and the end.
	Busy float64
	Load [2]string
}

// Account works out a report's figures from the writes as the caller saw
// them, the kill's time, the victim's arrays and the arrays read after
// convergence.
func Account(ws []Write, kill time.Duration, owned map[string]bool, present map[string][]int64) *Report {
	r := &Report{Writes: len(ws), Kill: kill, Errors: map[string]int{}, Samples: map[string]string{}}
	first := map[string]time.Duration{}
	for _, w := range ws {
		if w.Code == fero.CodeOK {
			r.Acked++
			if owned[w.Array] && w.Intended >= kill {
				if d, ok := first[w.Array]; !ok || w.Done < d {
					first[w.Array] = w.Done
				}
			}
		} else {
			c := w.Code.String()
			if len(r.Samples) == 0 || w.Done-kill < r.ErrFirst {
				r.ErrFirst = w.Done - kill
			}
			r.ErrLast = max(r.ErrLast, w.Done-kill)
			if owned[w.Array] {
				r.ErrVictim++
			}
			if r.Errors[c] == 0 {
				r.Samples[c] = w.Err
			}
			r.Errors[c]++
		}
	}
	for _, d := range first {
		d -= kill
		if r.First == 0 || d < r.First {
			r.First = d
		}
		r.All = max(r.All, d)
	}
	if len(first) < len(owned) {
		r.All = -1 // some array of the victim's never took a write after the kill
	}
	var all, victim []time.Duration
	for _, w := range ws {
		if w.Done < kill { // returned before the kill
			continue
		}
		d := w.Done - w.Intended
		all = append(all, d)
		if owned[w.Array] {
			victim = append(victim, d)
		}
		if r.All >= 0 && d > r.All+time.Second {
			r.Over++
		}
	}
	r.Window = len(all)
	r.Latency, r.VictimLatency = latencyOf(all), latencyOf(victim)

	count := map[int64]int{}
	for a, elems := range present {
		for _, e := range elems {
			if e < 0 || e >= int64(len(ws)) || ws[e].Array != a {
				r.Unknown++
				continue
			}
			count[e]++
		}
	}
	for _, w := range ws {
		c := count[w.Elem]
		switch {
		case c == 0 && w.Code == fero.CodeOK:
			r.Lost++
		case c > 0 && w.Code != fero.CodeOK:
			r.UnackedPresent++
		}
		if c > 1 {
			r.Duplicated++
		}
	}
	return r
}

// ms rounds d to the millisecond for printing.
func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// Print writes r as a few human lines.
func (r *Report) Print(w io.Writer) {
	retry := "retries on (default client)"
	if !r.Retry {
		retry = "WithoutRetry"
	}
	all := "never (some array of the victim's took no write after the kill)"
	if r.All >= 0 {
		all = ms(r.All).String()
	}
	fmt.Fprintf(w, "%s, %s: victim %s (%d of %d arrays), %d writes at %.0f/s, kill at %v, last write returned at %v\n",
		r.Preset, retry, r.Victim, r.VictimArrays, r.Arrays, r.Writes, r.Rate, ms(r.Kill), ms(r.Loaded))
	fmt.Fprintf(w, "  failover: first array %v, all arrays %v\n", ms(r.First), all)
	for _, l := range []struct {
		name string
		l    Latency
	}{{"window", r.Latency}, {"victim's", r.VictimLatency}} {
		fmt.Fprintf(w, "  latency from intended, %s writes (%d): p50 %v p99 %v p99.9 %v max %v\n",
			l.name, l.l.N, ms(l.l.P50), ms(l.l.P99), ms(l.l.P999), ms(l.l.Max))
	}
	fmt.Fprintf(w, "  over failover + 1s: %d; errors to the caller: %s\n", r.Over, errorList(r.Errors))
	if len(r.Errors) > 0 {
		fmt.Fprintf(w, "    returned %v to %v after the kill; %d to the victim's arrays\n", ms(r.ErrFirst), ms(r.ErrLast), r.ErrVictim)
	}
	for _, c := range slices.Sorted(maps.Keys(r.Samples)) {
		fmt.Fprintf(w, "    first %s: %s\n", c, r.Samples[c])
	}
	conv := "converged"
	if !r.Converged {
		conv = "NOT converged"
	}
	fmt.Fprintf(w, "  %s: acked %d, lost %d, duplicated %d, unacked present %d, unknown %d\n",
		conv, r.Acked, r.Lost, r.Duplicated, r.UnackedPresent, r.Unknown)
	flag := ""
	if r.LagP99 > time.Duration(float64(time.Second)/r.Rate) {
		flag = " (generator-bound: lag p99 above the interval)"
	}
	fmt.Fprintf(w, "  generator lag p99 %v max %v%s; machine busy %.0f%%, load %s -> %s\n",
		ms(r.LagP99), ms(r.LagMax), flag, 100*r.Busy, r.Load[0], r.Load[1])
}

// errorList is errs by code, in code order, or "none".
func errorList(errs map[string]int) string {
	if len(errs) == 0 {
		return "none"
	}
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(errs)) {
		parts = append(parts, fmt.Sprintf("%s %d", c, errs[c]))
	}
	return strings.Join(parts, ", ")
}
