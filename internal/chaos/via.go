package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fero-go/fero/internal/tlsfiles"
	"github.com/fero-go/fero/pkg/fero"
)

// The one-way scenario's writers "through" each server (issue 42): a
// Remote per server, dialed from a client's namespace, whose Majority
// writes the server forwards to each key's owner (rule 10). A writer
// through A reaches the owners A cannot reach only if the cluster routes
// around the cut (docs/engine.md, rule 17), so these writers, not the
// client nodes (which send to owners themselves), show whether it does.
const (
	// viaWriters is the writers per server, each its own Remote.
	viaWriters = 2
	// viaInterval paces each writer: at most one write per interval, so
	// a server's rate is bounded (40/s) and a quiet machine reaches it.
	viaInterval = 50 * time.Millisecond
	// viaTimeout is each write's deadline: a write to an owner nobody
	// reaches costs its writer this much.
	viaTimeout = time.Second
	// OneWayBound is the availability checker's bound on the time from
	// the start of a one-way fault until writes through every server keep
	// half their rate: twice the lan preset's failover (1.7-2.2 s
	// measured, docs/engine.md "Failover"), taken as 2 s.
	OneWayBound = 4 * time.Second
	// viaShare is the share of its rate before the fault that writes
	// through a server must keep, in every viaWindow, from OneWayBound on.
	viaShare = 0.5
	// viaWindow is what the rate is counted over. On a loaded machine
	// every server's writers lose a second or two to the load, whatever
	// the fault: with windows of 2 s, two of the first four runs with
	// the relays were flagged for dips that hit the writes through the
	// server the cut does not touch alike (8 to 20 acked in a second, none
	// failing; load average 33), and in one run before them a single
	// second of 14 through that server. Over 5 s those pass, while a cut
	// that is not routed around (never above 10 a second) and a map that
	// flaps for 30 s still fail.
	viaWindow = 5 * time.Second
)

// ViaRecord is one write through a server: when it was invoked and
// answered (since the run's start), and how.
type ViaRecord struct {
	Server     string
	Key        string
	Value      int
	Invoke, At time.Duration
	OK         bool
	Err        string
}

// viaRun is the writers of one run.
type viaRun struct {
	t0      time.Time
	remotes map[string]*fero.Remote
	wg      sync.WaitGroup

	mu   sync.Mutex
	recs []ViaRecord
}

// startVia dials a Remote to every server from node's namespace with the
// run's client token and starts the writers; they stop at t0+d.
func startVia(ctx context.Context, nt *Net, cl *Cluster, node string, servers []string, seed uint64, t0 time.Time, d time.Duration) (*viaRun, error) {
	tokens, err := fero.ReadSecretFile(TokenFile(cl.cfg.Dir))
	if err != nil {
		return nil, fmt.Errorf("chaos: via: %w", err)
	}
	dial := func(ctx context.Context, _, addr string) (net.Conn, error) { return nt.Dial(ctx, node, addr) }
	opts := []fero.DialOption{fero.WithToken(tokens[0]), fero.WithDialer(dial)}
	if cl.cfg.TLS {
		cfg, err := tlsfiles.Config(tlsfiles.Files{CA: filepath.Join(PKIDir(cl.cfg.Dir), "ca.pem")}, false)
		if err != nil {
			return nil, fmt.Errorf("chaos: via: %w", err)
		}
		opts = append(opts, fero.WithTLS(cfg))
	}
	v := &viaRun{t0: t0, remotes: map[string]*fero.Remote{}}
	for _, s := range servers {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rm, err := fero.Dial(dctx, cl.Addr(s), opts...)
		cancel()
		if err != nil {
			v.close()
			return nil, fmt.Errorf("chaos: via: dial %s: %w", s, err)
		}
		v.remotes[s] = rm
	}
	end := t0.Add(d)
	for _, s := range servers {
		for w := range viaWriters {
			v.wg.Go(func() { v.write(ctx, s, w, seed, end) })
		}
	}
	return v, nil
}

// write is one writer: paced Majority writes of fresh keys through
// server until end.
func (v *viaRun) write(ctx context.Context, server string, w int, seed uint64, end time.Time) {
	rm := v.remotes[server]
	next := time.Now()
	for i := 0; ; i++ {
		if sleepUntil(ctx, next) != nil || !time.Now().Before(end) {
			return
		}
		next = next.Add(viaInterval)
		if now := time.Now(); next.Before(now) {
			next = now // behind: no burst to catch up
		}
		// No '.': the partitioner hashes only what comes before it.
		key := fmt.Sprintf("s%d-via-%s-%d-%d", seed, server, w, i)
		wctx, cancel := context.WithTimeout(ctx, viaTimeout)
		inv := time.Since(v.t0)
		err := rm.Update(wctx, key, i, fero.Majority)
		cancel()
		rec := ViaRecord{Server: server, Key: key, Value: i, Invoke: inv, At: time.Since(v.t0), OK: err == nil}
		if err != nil {
			rec.Err = err.Error()
		}
		v.mu.Lock()
		v.recs = append(v.recs, rec)
		v.mu.Unlock()
	}
}

// wait waits for the writers to end.
func (v *viaRun) wait() { v.wg.Wait() }

func (v *viaRun) close() {
	for _, rm := range v.remotes {
		rm.Close()
	}
}

// records returns the writes so far, in the order they were answered.
func (v *viaRun) records() []ViaRecord {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.recs)
}

// verify reads every acknowledged write back through the owner (a Get
// through server) and returns the anomalies: a Majority-acked write
// missing or holding another value. Run after the heal, once the
// servers agree.
func (v *viaRun) verify(ctx context.Context, server string) []Anomaly {
	rm := v.remotes[server]
	var acked []ViaRecord
	for _, r := range v.records() {
		if r.OK {
			acked = append(acked, r)
		}
	}
	var mu sync.Mutex
	var out []Anomaly
	var wg sync.WaitGroup
	work := make(chan ViaRecord)
	for range 8 {
		wg.Go(func() {
			for r := range work {
				var got int
				var ok bool
				var err error
				for try := 0; try < 3; try++ {
					rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					ok, err = rm.Get(rctx, r.Key, &got)
					cancel()
					if err == nil {
						break
					}
				}
				var a *Anomaly
				switch {
				case err != nil:
					a = &Anomaly{Kind: "via-unreadable", Key: r.Key, Message: fmt.Sprintf("reading %s through %s after the heal: %v", r.Key, server, err)}
				case !ok || got != r.Value:
					a = &Anomaly{Kind: "via-write-lost", Key: r.Key, Message: fmt.Sprintf("Majority write %s=%d through %s acked at %v; after the heal the owner has %v (present: %v)", r.Key, r.Value, r.Server, r.At.Round(time.Millisecond), got, ok)}
				}
				if a != nil {
					mu.Lock()
					out = append(out, *a)
					mu.Unlock()
				}
			}
		})
	}
	for _, r := range acked {
		if ctx.Err() != nil {
			break
		}
		work <- r
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		out = append(out, Anomaly{Kind: "via-unreadable", Message: fmt.Sprintf("reading the acked writes back: %v", err)})
	}
	return out
}

// ViaReport is what CheckVia found for one server.
type ViaReport struct {
	Server string
	// Before is the acked writes per second before the fault.
	Before float64
	// Tens counts the acked writes in each 10 s of the fault (the last
	// may be shorter).
	Tens []int
	// Recovery is the time from the fault's start from which every
	// viaWindow until the heal (sliding by a second) held at least
	// viaShare of Before; -1: the last did not.
	Recovery time.Duration
	// Failed counts the writes through the server that failed during the
	// fault.
	Failed int
}

// CheckVia is the one-way fault's availability checker: writes through
// every server must keep viaShare of their rate before the fault, in
// every viaWindow (sliding by a second) from bound after the fault's
// start until its stop. recs are the
// writes of all servers; the fault ran from start to stop (since the
// run's start), and the writes before it from one second into the run
// set each server's rate.
func CheckVia(recs []ViaRecord, servers []string, start, stop, bound time.Duration) ([]ViaReport, []Anomaly) {
	var reps []ViaReport
	var out []Anomaly
	secs := int((stop - start) / time.Second)
	win := int(viaWindow / time.Second)
	for _, s := range servers {
		rep := ViaReport{Server: s, Recovery: -1}
		per := make([]int, secs) // acked per second of the fault
		before := 0
		for _, r := range recs {
			if r.Server != s {
				continue
			}
			if r.At >= start && r.At < stop && !r.OK {
				rep.Failed++
			}
			if !r.OK {
				continue
			}
			switch {
			case r.At >= time.Second && r.At < start:
				before++
			case r.At >= start && r.At < start+time.Duration(secs)*time.Second:
				per[(r.At-start)/time.Second]++
			}
		}
		if start > time.Second {
			rep.Before = float64(before) / (start - time.Second).Seconds()
		}
		for i := 0; i < secs; i += 10 {
			n := 0
			for _, c := range per[i:min(i+10, secs)] {
				n += c
			}
			rep.Tens = append(rep.Tens, n)
		}
		// Every window of win seconds, sliding by a second, from r on.
		held := func(w int) bool {
			n := 0
			for _, c := range per[w : w+win] {
				n += c
			}
			return float64(n) >= viaShare*rep.Before*float64(win)
		}
		r := secs - win + 1
		for r > 0 && held(r-1) {
			r--
		}
		if r <= secs-win {
			rep.Recovery = time.Duration(r) * time.Second
		}
		reps = append(reps, rep)
		switch {
		case rep.Before == 0:
			out = append(out, Anomaly{Kind: "via-unavailable", Message: fmt.Sprintf("no write through %s was acked before the fault: nothing to compare with", s)})
		case rep.Recovery < 0 || rep.Recovery > bound:
			rec := "never"
			if rep.Recovery >= 0 {
				rec = "after " + rep.Recovery.String()
			}
			out = append(out, Anomaly{Kind: "via-unavailable", Message: fmt.Sprintf(
				"Majority writes through %s held %.0f%% of their rate before the fault (%.1f/s) in every %v %s, not within %v; acked per 10 s during the fault: %v, %d failed",
				s, 100*viaShare, rep.Before, viaWindow, rec, bound, rep.Tens, rep.Failed)})
		}
	}
	return reps, out
}

// FormatVia is CheckVia's report, for people and for via.txt.
func FormatVia(reps []ViaReport, start, stop time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "writes through each server (Majority, %v deadline, %d writers of at most %d/s each); fault from %v to %v\n",
		viaTimeout, viaWriters, int(time.Second/viaInterval), start, stop)
	for _, r := range reps {
		rec := "never"
		if r.Recovery >= 0 {
			rec = r.Recovery.String()
		}
		fmt.Fprintf(&b, "  %s: before %.1f acked/s; during, acked per 10 s %v; failed %d; every %v at >= %.0f%% from %s after the start\n",
			r.Server, r.Before, r.Tens, r.Failed, viaWindow, 100*viaShare, rec)
	}
	return b.String()
}

// ReadViaRecords reads the records writeVia wrote (via.records.txt), so
// that CheckVia can judge a run again (fero-chaos via).
func ReadViaRecords(path string) ([]ViaRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []ViaRecord
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, " ", 7)
		if len(f) < 6 {
			return nil, fmt.Errorf("chaos: %s:%d: malformed", path, i+1)
		}
		r := ViaRecord{Server: f[0], Key: f[1], OK: f[5] == "ok=true"}
		var errs []error
		var e error
		r.Value, e = strconv.Atoi(f[2])
		errs = append(errs, e)
		r.Invoke, e = time.ParseDuration(strings.TrimPrefix(f[3], "invoke="))
		errs = append(errs, e)
		r.At, e = time.ParseDuration(strings.TrimPrefix(f[4], "at="))
		errs = append(errs, e)
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("chaos: %s:%d: %w", path, i+1, err)
		}
		if len(f) == 7 {
			r.Err = f[6]
		}
		out = append(out, r)
	}
	return out, nil
}

// writeVia writes the report and the records to the run's directory.
func writeVia(dir, report string, recs []ViaRecord) error {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s %s %d invoke=%v at=%v ok=%v %s\n", r.Server, r.Key, r.Value, r.Invoke, r.At, r.OK, r.Err)
	}
	return errors.Join(
		os.WriteFile(filepath.Join(dir, "via.txt"), []byte(report), 0o644),
		os.WriteFile(filepath.Join(dir, "via.records.txt"), []byte(b.String()), 0o644))
}

// CheckUpgradeVia is the rolling upgrade's availability checker: a write
// through a server may fail only within some server's upgrade, from its
// SIGTERM (less a write's deadline: one invoked just before may fail at
// it) to UpgradeWindow after its new build started. It returns a report
// of the failed writes per upgrade and an anomaly for each failed write
// outside every upgrade.
func CheckUpgradeVia(recs []ViaRecord, servers []string, ups []Fault) (string, []Anomaly) {
	var b strings.Builder
	fmt.Fprintf(&b, "writes through each server (Majority, %v deadline, %d writers of at most %d/s each) during the rolling upgrade:\n",
		viaTimeout, viaWriters, int(time.Second/viaInterval))
	within := make([]map[string]int, len(ups))
	for i := range within {
		within[i] = map[string]int{}
	}
	var out []Anomaly
	acked := map[string]int{}
	for _, r := range recs {
		if r.OK {
			acked[r.Server]++
			continue
		}
		in := -1
		for i, f := range ups {
			if r.Invoke >= f.Start-viaTimeout && r.Invoke < f.Stop+UpgradeWindow {
				in = i
				break
			}
		}
		if in < 0 {
			out = append(out, Anomaly{Kind: "via-unavailable", Key: r.Key, Message: fmt.Sprintf(
				"Majority write %s=%d through %s invoked at %v failed outside every server's upgrade: %s",
				r.Key, r.Value, r.Server, r.Invoke.Round(time.Millisecond), r.Err)})
			continue
		}
		within[in][r.Server]++
	}
	for i, f := range ups {
		fmt.Fprintf(&b, "  %s upgraded: down %v to %v, window to %v; failed through", f.Node, f.Start, f.Stop, f.Stop+UpgradeWindow)
		for _, s := range servers {
			fmt.Fprintf(&b, " %s %d", s, within[i][s])
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "  acked:")
	for _, s := range servers {
		fmt.Fprintf(&b, " %s %d", s, acked[s])
	}
	fmt.Fprintf(&b, "; failed outside every upgrade: %d\n", len(out))
	return b.String(), out
}
