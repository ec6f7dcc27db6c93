// Run: one run for one seed, from an empty network to a checked history
// (Config, Result, the runner and its schedule), and its result.txt. The
// workloads it starts are in workloads.go, its wait for the servers to
// agree in converge.go.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fero-go/fero/internal/chaos/history"
)

// Anomaly is one broken promise, as the checker reports it or as the
// runner finds it (servers that never agree, a server that died).
type Anomaly struct {
	Kind, Key, Message string
	// Slice is the shortest part of the history that shows it, as text.
	Slice string
}

// Verdict is what a checker says of one run's directory.
type Verdict struct {
	Ops       int
	Anomalies []Anomaly
	// Text is the checker's report, for people.
	Text string
}

// Config is one run: one seed, from an empty network to a verdict.
type Config struct {
	Seed uint64
	// Servers (3 or 5, say) start with the cluster; with Spare, one more
	// server is ready for join faults. Clients is the number of workload
	// processes, each a client node in a namespace of its own.
	Servers, Clients int
	Spare            bool
	// Duration is how long faults are injected, Settle how long the run
	// goes on healed before it waits for the copies to agree. Gap is the
	// mean time between fault starts (default 2s).
	Duration, Settle, Gap time.Duration
	// Kinds to draw from; nil means DefaultKinds, less the netem kinds on
	// a kernel without netem.
	Kinds []Kind
	// Scenario, if set, runs that fixed schedule (see [Scenarios]) in
	// place of the seed's random one, for its own duration (Duration and
	// Gap are not used). The seed then varies the workload: its
	// operations, and its keys, named after the seed so that each seed
	// puts them in other partitions.
	Scenario string

	// Fero is the fero binary; ServerArgs are extra `fero serve` flags.
	Fero       string
	ServerArgs []string
	// Upgrade is the fero binary the servers run after their upgrade
	// (ScenarioUpgrade; Fero is then the build they start on).
	Upgrade string
	// DataDirs gives every server a data directory in Out (--data-dir,
	// --fsync group): a killed server restarts with its data and its vote.
	DataDirs bool
	// Workload is the command that runs one workload process (the
	// harness adds the workload's flags, see workloadArgs).
	Workload []string
	// Rate is each client's operations per second; Keys how many keys
	// the clients share.
	Rate float64
	Keys int
	// Kind is the workload (history.Register, Counter, Bank, CAS or Set;
	// empty is Register). Counter and Bank start the servers with
	// --jepsen-verbs and use counterKeys counters or one bank; CAS and Set
	// use casKeys registers or setKeys arrays.
	Kind string

	// Out is this run's directory: schedule, logs, histories, results.
	Out string
	// Converge bounds the wait for every server's digest to agree after
	// the heal (default 60s).
	Converge time.Duration
	// Check judges the directory once every process is gone; nil skips.
	Check func(dir string) (Verdict, error)
	// ClockJump applies clock faults (see KindClock).
	ClockJump func(ctx context.Context, node string, jump time.Duration) error
	// Logf receives progress lines, besides Out/harness.log.
	Logf func(format string, args ...any)
}

// Result is what one run found.
type Result struct {
	Seed    uint64
	Servers int
	Dir     string
	// Schedule is the schedule run (nil if the run failed before).
	Schedule *Schedule
	// Injected counts the faults whose start took effect, by kind.
	Injected map[Kind]int
	// Skipped counts process faults not applied because restarted servers
	// had not caught up (ErrSkipped).
	Skipped   int
	Ops       int
	Anomalies []Anomaly
	// Report is the checker's text.
	Report string
	// Notes are what the harness saw that breaks no promise but is worth
	// a look (a graceful leave that never finished, a restart that never
	// came up).
	Notes []string
	// Err is a harness error: the run could not do what it should, so
	// its verdict, if any, is incomplete.
	Err     error
	Elapsed time.Duration
}

// Failed reports whether the run found an anomaly or could not run.
func (r *Result) Failed() bool { return r.Err != nil || len(r.Anomalies) > 0 }

// Nodes names a run's nodes: servers n1…nN, the spare n(N+1), clients
// c1…cK.
func (c Config) Nodes() (servers []string, spare string, clients []string) {
	for i := 1; i <= c.Servers; i++ {
		servers = append(servers, "n"+strconv.Itoa(i))
	}
	if c.Spare {
		spare = "n" + strconv.Itoa(c.Servers+1)
	}
	for i := 1; i <= c.Clients; i++ {
		clients = append(clients, "c"+strconv.Itoa(i))
	}
	return servers, spare, clients
}

// ScheduleConfig is the schedule config this run uses, given whether the
// kernel has netem.
func (c Config) ScheduleConfig(netem bool) ScheduleConfig {
	servers, spare, clients := c.Nodes()
	kinds := c.Kinds
	if kinds == nil {
		for _, k := range DefaultKinds {
			if netem || !slices.Contains(NetemKinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	return ScheduleConfig{
		Seed: c.Seed, Servers: servers, Spare: spare, Clients: clients,
		Duration: c.Duration, Settle: c.Settle, Gap: c.Gap, Kinds: kinds, Scenario: c.Scenario,
	}
}

// Run runs one seed. It always stops by itself: every wait has a
// deadline, every process it started is ended and the network removed
// before it returns.
func Run(ctx context.Context, cfg Config) *Result {
	start := time.Now()
	res := &Result{Seed: cfg.Seed, Servers: cfg.Servers, Dir: cfg.Out, Injected: map[Kind]int{}}
	r := &runner{cfg: cfg, res: res}
	res.Err = r.run(ctx)
	res.Elapsed = time.Since(start)
	r.writeResult()
	return res
}

type runner struct {
	cfg Config
	res *Result
	// viaOps and viaReport are the one-way scenario's writes through the
	// servers and CheckVia's report (checkVia).
	viaOps    int
	viaReport string
	log       *os.File // Out/harness.log

	mu sync.Mutex
}

func (r *runner) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	r.mu.Lock()
	if r.log != nil {
		fmt.Fprintf(r.log, "%s %s\n", time.Now().Format("15:04:05.000"), line)
	}
	r.mu.Unlock()
	if r.cfg.Logf != nil {
		r.cfg.Logf("seed %d: %s", r.cfg.Seed, line)
	}
}

func (r *runner) run(ctx context.Context) (err error) {
	cfg := r.cfg
	switch {
	case cfg.Servers < 1:
		return errors.New("chaos: a run needs servers")
	case cfg.Duration <= 0 && cfg.Scenario == "":
		return errors.New("chaos: a run needs a duration")
	case cfg.Fero == "":
		return errors.New("chaos: no fero binary")
	case cfg.Clients > 0 && len(cfg.Workload) == 0:
		return errors.New("chaos: clients but no workload command")
	case cfg.Scenario == ScenarioUpgrade && (cfg.Upgrade == "" || !cfg.DataDirs):
		return fmt.Errorf("chaos: %s needs the build to upgrade to (Config.Upgrade) and data directories", cfg.Scenario)
	}
	if cfg.Converge <= 0 {
		r.cfg.Converge, cfg.Converge = 60*time.Second, 60*time.Second
	}
	if cfg.Keys <= 0 {
		r.cfg.Keys, cfg.Keys = 16, 16
	}
	if cfg.Rate <= 0 {
		r.cfg.Rate, cfg.Rate = 50, 50
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if r.log, err = os.Create(filepath.Join(cfg.Out, "harness.log")); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	defer func() {
		r.mu.Lock()
		r.log.Close()
		r.log = nil
		r.mu.Unlock()
	}()

	servers, spare, clients := cfg.Nodes()
	all := slices.Concat(servers, clients)
	if spare != "" {
		all = slices.Concat(servers, []string{spare}, clients)
	}
	nt, err := NewNet(ctx, all)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, nt.Close()) }()
	r.logf("net %s: %s on %s (netem: %v)", nt.Prefix(), strings.Join(all, " "), nt.Subnet(), nt.Netem())

	sched, err := NewSchedule(cfg.ScheduleConfig(nt.Netem()))
	if err != nil {
		return err
	}
	r.res.Schedule = sched
	if err := os.WriteFile(filepath.Join(cfg.Out, "schedule.txt"), []byte(sched.String()), 0o644); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}

	args := cfg.ServerArgs
	if cfg.Kind == history.Counter || cfg.Kind == history.Bank {
		args = append(slices.Clip(args), "--jepsen-verbs")
	}
	cl, err := StartCluster(ctx, nt, ClusterConfig{
		Fero: cfg.Fero, Resource: "chaos", Servers: servers, Spare: spare,
		Args: args, Dir: cfg.Out, Logf: r.logf, DataDirs: cfg.DataDirs, Upgrade: cfg.Upgrade,
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cl.Close()) }()
	r.logf("cluster up: %v", cl.PIDs())

	// Clients write through the faults and part of the settle, so writes
	// meet a healed cluster too, and stop before the copies are compared.
	writeFor := sched.Config.Duration + cfg.Settle/2
	t0 := time.Now()
	wls, err := r.startWorkloads(ctx, nt, cl, clients, writeFor)
	defer func() { err = errors.Join(err, stopWorkloads(wls, 0)) }()
	if err != nil {
		return err
	}

	var via *viaRun
	if cfg.Scenario == ScenarioOneWay || cfg.Scenario == ScenarioUpgrade {
		if len(clients) == 0 {
			return fmt.Errorf("chaos: %s writes through the servers from a client's namespace: it needs a client", cfg.Scenario)
		}
		if via, err = startVia(ctx, nt, cl, clients[len(clients)-1], servers, cfg.Seed, t0, sched.Config.Duration); err != nil {
			return err
		}
		defer func() { via.wait(); via.close() }()
	}

	inj := NewInjector(nt, cl)
	inj.ClockJump = cfg.ClockJump
	stepErr := r.runSchedule(ctx, inj, sched, t0)
	// Whatever happened, leave no fault behind.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := inj.UndoAll(hctx); err != nil {
		stepErr = errors.Join(stepErr, err)
	}
	if err := ctx.Err(); err != nil {
		return errors.Join(err, stepErr)
	}
	r.logf("healed")
	if err := sleepUntil(ctx, t0.Add(max(sched.Length(), writeFor+500*time.Millisecond))); err != nil {
		return err
	}

	// A client that joined late (its first servers were cut off) ends
	// its operations late: every client's operations end before any
	// client writes its final copy, or that copy misses the last writes.
	waitOpsDone(ctx, wls, time.Minute)
	r.converge(ctx, cl)
	if via != nil {
		r.checkVia(ctx, via, sched, cl)
	}
	for _, c := range cl.Crashes() {
		r.res.Anomalies = append(r.res.Anomalies, Anomaly{Kind: "server-crashed", Message: c})
	}
	cl.StopTails()
	// The clients' final lines (their copies and digests) come once
	// their stdin closes.
	if err := stopWorkloads(wls, time.Minute); err != nil {
		stepErr = errors.Join(stepErr, err)
	}
	wls = nil
	r.saveStatus(ctx, cl)
	if err := cl.Close(); err != nil {
		stepErr = errors.Join(stepErr, err)
	}
	r.res.Notes = cl.Notes()
	if err := nt.Close(); err != nil {
		stepErr = errors.Join(stepErr, err)
	}
	if cfg.Check != nil {
		v, err := cfg.Check(cfg.Out)
		if err != nil {
			return errors.Join(stepErr, fmt.Errorf("chaos: check: %w", err))
		}
		r.res.Ops, r.res.Report = v.Ops, v.Text
		r.res.Anomalies = append(r.res.Anomalies, v.Anomalies...)
	}
	r.res.Ops += r.viaOps
	r.res.Report += r.viaReport
	return stepErr
}

// checkVia waits for the writers through the servers, reads their acked
// writes back and runs the availability checker (CheckVia) over the
// schedule's one fault.
func (r *runner) checkVia(ctx context.Context, via *viaRun, sched *Schedule, cl *Cluster) {
	via.wait()
	f := sched.Faults[0]
	servers, _, _ := r.cfg.Nodes()
	recs := via.records()
	var report string
	var anomalies []Anomaly
	if r.cfg.Scenario == ScenarioUpgrade {
		report, anomalies = CheckUpgradeVia(recs, servers, sched.Faults)
	} else {
		var reps []ViaReport
		reps, anomalies = CheckVia(recs, servers, f.Start, f.Stop, OneWayBound)
		report = FormatVia(reps, f.Start, f.Stop)
	}
	vctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	reader := cl.Running()
	if len(reader) > 0 {
		anomalies = append(anomalies, via.verify(vctx, reader[0])...)
	}
	acked := 0
	for _, rec := range recs {
		if rec.OK {
			acked++
		}
	}
	report += fmt.Sprintf("%d writes through the servers, %d acked and read back after the heal: %d anomalies\n", len(recs), acked, len(anomalies))
	r.logf("%s", strings.TrimSpace(report))
	if err := writeVia(r.cfg.Out, report, recs); err != nil {
		r.logf("via: %v", err)
	}
	r.viaOps, r.viaReport = len(recs), report
	r.res.Anomalies = append(r.res.Anomalies, anomalies...)
}

// runSchedule applies each step at its time. A step that fails is
// logged and counted as a harness error; the schedule goes on, since its
// undo steps must still run.
func (r *runner) runSchedule(ctx context.Context, inj *Injector, s *Schedule, t0 time.Time) error {
	var errs []error
	for _, st := range s.Steps {
		if err := sleepUntil(ctx, t0.Add(st.At)); err != nil {
			return err
		}
		f := s.Faults[st.Fault]
		late := time.Since(t0.Add(st.At))
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		var err error
		if st.Undo {
			err = inj.Undo(sctx, f)
		} else if err = inj.Start(sctx, f); err == nil {
			r.res.Injected[f.Kind]++
		}
		cancel()
		skipped := errors.Is(err, ErrSkipped)
		if skipped {
			r.res.Skipped++
		}
		verb := "start"
		if st.Undo {
			verb = "undo"
		}
		r.logf("%8.3fs %s %s (late %v, took %v)%s", st.At.Seconds(), verb, f,
			late.Round(time.Millisecond), (time.Since(t0.Add(st.At)) - late).Round(time.Millisecond), errSuffix(err))
		if err != nil && !skipped {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writeResult writes result.txt: what the run found, the schedule, the
// checker's report.
func (r *runner) writeResult() {
	res := r.res
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %d servers: %s in %v\n", res.Seed, res.Servers, verdictWord(res), res.Elapsed.Round(time.Millisecond))
	if res.Err != nil {
		fmt.Fprintf(&b, "harness error: %v\n", res.Err)
	}
	fmt.Fprintf(&b, "faults injected: %s\n", FormatCounts(res.Injected))
	fmt.Fprintf(&b, "operations: %d, anomalies: %d\n", res.Ops, len(res.Anomalies))
	for _, n := range res.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	for _, a := range res.Anomalies {
		fmt.Fprintf(&b, "\n%s", a)
	}
	if res.Schedule != nil {
		fmt.Fprintf(&b, "\n%s", res.Schedule)
	}
	if res.Report != "" {
		fmt.Fprintf(&b, "\nchecker:\n%s", res.Report)
	}
	_ = os.WriteFile(filepath.Join(r.cfg.Out, "result.txt"), []byte(b.String()), 0o644)
}

func verdictWord(r *Result) string {
	switch {
	case r.Err != nil:
		return "HARNESS ERROR"
	case len(r.Anomalies) > 0:
		return "ANOMALIES"
	}
	return "ok"
}

// String prints the anomaly with its slice indented.
func (a Anomaly) String() string {
	var b strings.Builder
	b.WriteString(a.Kind)
	if a.Key != "" {
		fmt.Fprintf(&b, " key %q", a.Key)
	}
	fmt.Fprintf(&b, ": %s\n", a.Message)
	if a.Slice != "" {
		for _, l := range strings.Split(strings.TrimRight(a.Slice, "\n"), "\n") {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	return b.String()
}

// FormatCounts prints fault counts in AllKinds order: "partition 3,
// kill 1"; "none" when empty.
func FormatCounts(c map[Kind]int) string {
	var parts []string
	for _, k := range AllKinds {
		if c[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c)) {
		if !slices.Contains(AllKinds, k) && c[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
