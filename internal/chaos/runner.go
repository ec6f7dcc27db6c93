package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// converge waits until every running server reports the same digest and
// key count twice in a row, or until Converge; servers that never agree
// are an anomaly.
func (r *runner) converge(ctx context.Context, cl *Cluster) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Converge)
	defer cancel()
	start := time.Now()
	var last, prev string
	for {
		last = r.digests(ctx, cl)
		if last != "" && last == prev && !strings.Contains(last, "error") && agree(last) {
			r.logf("servers agree after %v: %s", time.Since(start).Round(time.Millisecond), last)
			return
		}
		prev = last
		if sleepUntil(ctx, time.Now().Add(500*time.Millisecond)) != nil {
			break
		}
	}
	r.logf("servers still disagree after %v: %s", r.cfg.Converge, last)
	r.res.Anomalies = append(r.res.Anomalies, Anomaly{
		Kind:    "servers-disagree",
		Message: fmt.Sprintf("after the heal, the servers' copies did not agree within %v: %s%s", r.cfg.Converge, last, r.partsDiffer(cl)),
	})
}

// partsDiffer lists the partitions (at most 10) whose digests differ
// between the running servers, with each server's role, epochs and keys
// there: what a servers-disagree anomaly needs to be read.
func (r *runner) partsDiffer(cl *Cluster) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sts := map[string]*Status{}
	for _, n := range cl.Running() {
		if st, _, err := cl.StatusFull(ctx, n); err == nil && len(st.Parts) > 0 {
			sts[n] = st
		}
	}
	nodes := slices.Sorted(maps.Keys(sts))
	if len(nodes) < 2 {
		return ""
	}
	var b strings.Builder
	shown := 0
	for p := range sts[nodes[0]].Parts {
		var ds []uint64
		for _, n := range nodes {
			if p < len(sts[n].Parts) {
				ds = append(ds, sts[n].Parts[p].Digest)
			}
		}
		slices.Sort(ds)
		if len(slices.Compact(ds)) <= 1 {
			continue
		}
		if shown == 10 {
			b.WriteString("\n    (more partitions differ)")
			break
		}
		shown++
		fmt.Fprintf(&b, "\n    partition %d:", p)
		for _, n := range nodes {
			if p < len(sts[n].Parts) {
				x := sts[n].Parts[p]
				fmt.Fprintf(&b, " %s %s accepted %s at %s, %d keys, %016x;", n, x.Role, x.Accepted, x.Position, x.Keys, x.Digest)
			}
		}
	}
	return b.String()
}

// digests asks every running server for its digest: "n1=<digest>/<keys>
// n2=…", sorted by node.
func (r *runner) digests(ctx context.Context, cl *Cluster) string {
	nodes := cl.Running()
	out := make([]string, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			t0 := time.Now()
			st, text, err := cl.Status(sctx, n)
			if err != nil {
				// The error, once per node and round, for the harness log;
				// the digest line keeps the short form agree() compares.
				r.logf("status of %s (after %v): %v %s", n, time.Since(t0).Round(time.Millisecond), err, strings.TrimSpace(text))
				out[i] = n + "=error"
				return
			}
			out[i] = fmt.Sprintf("%s=%016x/%d", n, st.Digest, st.Keys)
		})
	}
	wg.Wait()
	return strings.Join(out, " ")
}

// agree reports whether every "node=value" of s has the same value.
func agree(s string) bool {
	var first string
	for i, f := range strings.Fields(s) {
		_, v, _ := strings.Cut(f, "=")
		if i == 0 {
			first = v
		} else if v != first {
			return false
		}
	}
	return first != ""
}

// saveStatus writes every running server's full status to status.json.
func (r *runner) saveStatus(ctx context.Context, cl *Cluster) {
	all := map[string]json.RawMessage{}
	for _, n := range cl.Running() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, raw, err := cl.StatusFull(sctx, n)
		cancel()
		if err != nil {
			raw = strconv.Quote(err.Error())
		}
		all[n] = json.RawMessage(raw)
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(r.cfg.Out, "status.json"), b, 0o644)
	}
	if err != nil {
		r.logf("status.json: %v", err)
	}
}

// workload is one running workload process.
type workload struct {
	node   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    string // its history file
	exited chan struct{}
	err    error
}

// WorkloadArgs are the flags the runner gives the workload process of
// client node (number proc, address ip) that writes for d; the
// `fero-chaos workload` command reads them. seeds are the servers' gossip
// addresses, data their data addresses. Every second client (even proc)
// is an attached client (docs/engine.md, "Attached clients"): it proves
// the cluster's client token to the servers at data and joins no gossip;
// the others hold the cluster secret and gossip.
func WorkloadArgs(cfg Config, seeds, data []string, node, ip string, proc int, d time.Duration) []string {
	n, prefix := cfg.Keys, "k"
	switch cfg.Kind {
	case history.Counter:
		n, prefix = counterKeys, "ctr"
	case history.Bank:
		n, prefix = 1, "bank"
	case history.CAS:
		n, prefix = casKeys, "cas"
	case history.Set:
		n, prefix = setKeys, "set"
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
		if cfg.Scenario != "" {
			// No '.': the partitioner hashes only what comes before it.
			keys[i] = fmt.Sprintf("s%d-%s%d", cfg.Seed, prefix, i)
		}
	}
	kind := cfg.Kind
	if kind == "" {
		kind = history.Register
	}
	join := []string{
		"--seeds", strings.Join(seeds, ","),
		"--cluster-secret-file", SecretFile(cfg.Out),
		"--bind", fmt.Sprintf("%s:%d", ip, GossipPort),
		"--id", node,
	}
	if Attached(proc) {
		join = []string{"--attach", strings.Join(data, ","), "--token-file", TokenFile(cfg.Out), "--id", "~" + node}
	}
	return append(join,
		"--resource", "chaos",
		"--kind", kind,
		"--listen", fmt.Sprintf("%s:%d", ip, DataPort),
		"--proc", strconv.Itoa(proc),
		"--keys", strings.Join(keys, ","),
		"--rate", strconv.FormatFloat(cfg.Rate, 'f', -1, 64),
		"--duration", d.String(),
		// Each client its own stream of operations, fixed by the seed.
		"--seed", strconv.FormatUint(cfg.Seed*1000+uint64(proc), 10),
		"--servers", strconv.Itoa(cfg.Servers),
		"--out", filepath.Join(cfg.Out, node+".history.jsonl"),
	)
}

// counterKeys is how many counters the counter workload's clients share:
// few, so that INCRs of one key queue for its turn.
const counterKeys = 3

// casKeys and setKeys are the registers of the cas workload and the
// arrays of the set workload: few, so that operations contend.
const (
	casKeys = 3
	setKeys = 3
)

// Attached reports whether workload client proc attaches with a token
// rather than gossip with the secret (WorkloadArgs).
func Attached(proc int) bool { return proc%2 == 0 }

func (r *runner) startWorkloads(ctx context.Context, nt *Net, cl *Cluster, clients []string, d time.Duration) ([]*workload, error) {
	var wls []*workload
	for i, node := range clients {
		argv := append(slices.Clone(r.cfg.Workload), WorkloadArgs(r.cfg, cl.Seeds(), cl.DataAddrs(), node, nt.IP(node), i+1, d)...)
		logf, err := os.Create(filepath.Join(r.cfg.Out, node+".log"))
		if err != nil {
			return wls, fmt.Errorf("chaos: %w", err)
		}
		fmt.Fprintf(logf, "--- chaos: %s\n", strings.Join(argv, " "))
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", nt.NS(node)}, argv...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		cmd.Stdout, cmd.Stderr = logf, logf
		stdin, err := cmd.StdinPipe()
		if err != nil {
			logf.Close()
			return wls, fmt.Errorf("chaos: %w", err)
		}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return wls, fmt.Errorf("chaos: start workload %s: %w", node, err)
		}
		logf.Close()
		w := &workload{node: node, cmd: cmd, stdin: stdin, exited: make(chan struct{}), out: filepath.Join(r.cfg.Out, node+".history.jsonl")}
		go func() {
			w.err = cmd.Wait()
			close(w.exited)
		}()
		r.logf("workload %s: pid %d", node, cmd.Process.Pid)
		wls = append(wls, w)
	}
	return wls, nil
}

// OpsDoneFile is the marker a workload process writes beside its history
// (history path out) once its operations have ended.
func OpsDoneFile(out string) string { return out + ".opsdone" }

// waitOpsDone waits, up to limit, until every workload has ended its
// operations (its marker exists) or exited.
func waitOpsDone(ctx context.Context, wls []*workload, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for _, w := range wls {
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if _, err := os.Stat(OpsDoneFile(w.out)); err == nil {
				break
			}
			select {
			case <-w.exited:
			case <-time.After(50 * time.Millisecond):
				continue
			}
			break
		}
	}
}

// stopWorkloads closes every workload's stdin, which tells it the
// cluster healed, and waits up to grace for it to write its final line
// and exit; then SIGTERM, then SIGKILL. A workload that exited with an
// error, or had to be killed, is a harness error.
func stopWorkloads(wls []*workload, grace time.Duration) error {
	for _, w := range wls {
		_ = w.stdin.Close()
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	var errs []error
	for _, w := range wls {
		select {
		case <-w.exited:
		case <-deadline.C:
		}
		select {
		case <-w.exited:
		default:
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
			t := time.NewTimer(10 * time.Second)
			select {
			case <-w.exited:
			case <-t.C:
				_ = w.cmd.Process.Kill()
				<-w.exited
			}
			t.Stop()
			errs = append(errs, fmt.Errorf("chaos: workload %s did not finish within %v of the heal", w.node, grace))
			continue
		}
		if w.err != nil {
			errs = append(errs, fmt.Errorf("chaos: workload %s: %w (see %s.log)", w.node, w.err, w.node))
		}
	}
	return errors.Join(errs...)
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
