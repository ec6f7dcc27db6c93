package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fero-go/fero/internal/chaos"
	"github.com/fero-go/fero/internal/chaos/history"
)

type runFlags struct {
	seeds    string
	seed     uint64
	nodes    []int
	clients  int
	duration time.Duration
	settle   time.Duration
	gap      time.Duration
	kinds    string
	scenario string
	noSpare  bool
	rate     float64
	keys     int
	out      string
	fero     string
	converge time.Duration
	args     []string
	verbose  bool
	maxTime  time.Duration
	parallel int
	dataDirs string
	// upgradeFrom and oldFero name the build a rolling upgrade starts on;
	// upgradeBin is the build it goes to (set by runRun).
	upgradeFrom, oldFero, upgradeBin string
	workload                         []string
}

func newRun() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run one schedule per seed and print a summary table",
		Long: `run builds fero once, then for each seed: builds the network, starts the
servers and the client workloads, runs the seed's fault schedule, heals,
waits for every server's copy to agree, stops the clients and checks their
histories. Each seed's schedule, logs, histories and result go to
OUT/seed-<seed>-n<servers>. It prints a line per seed, the details of every
failed seed, and a summary table; it exits non-zero on any anomaly or
harness error.

With --nodes 3,5, seed s runs with the (s mod 2)th count: seed 1 with 5
servers, seed 2 with 3. A failed seed prints the command that replays it.

With --workload register,counter,bank,cas,set, seed s runs the (s mod 5)th
workload:
  register  (the default) writes of unique values and reads, per key; checked
            for linearizability and the rest (internal/chaos/check)
  counter   INCRs of 3 counters, then a read of each through its owner after
            the heal: acked <= final <= acked + indefinite
  bank      TRANSFERs between 5 accounts of one key and reads of the whole
            bank: every read holds the initial total, no balance negative
  cas       reads with the version, writes and compare-and-sets (UpdateIf)
            of 3 registers: linearizable, per key
  set       pushes of unique elements onto 3 arrays, then a read of each:
            every acked element there once, none twice, no failed one
Counter and bank start the servers with --jepsen-verbs; these four run at
least 3 clients; their output directories end in -<workload>.

With --scenario, every seed runs that fixed schedule instead of a random
one; the seed varies only the workload (its keys and operations):
  paused-owner  SIGSTOP of the server owning the most partitions for 6s,
                past the dead timeout, then SIGCONT and 8s more of writes
  long-split    that server and client c1 cut off from the rest for 65s,
                both sides writing, then the heal
  oneway        that server's packets to another server dropped for 60s
                (gossip keeps both alive), while writers through every
                server write Majority: each server's acked writes must
                keep half their rate from 4s on, and none may be lost
  upgrade       a rolling upgrade: the servers start on the build of
                --upgrade-from (a commit) or --old-fero (a binary), and
                each in turn, 20s apart, gets SIGTERM and starts 4s later
                on its data with this build, while writers through every
                server write Majority: a write may fail only from a
                server's SIGTERM to 10s after its new start, and none may
                be lost`,
		Example: `  fero-chaos run --seeds 1-250 --nodes 3,5 --out .chaos/full
  fero-chaos run --seed 17 --nodes 5
  fero-chaos run --seed 3 --server-arg=--quorum=2
  fero-chaos run --scenario paused-owner --seeds 1-50
  fero-chaos run --scenario upgrade --upgrade-from 0a70971 --workload counter
  fero-chaos run --seeds 1-6 --nodes 3,5 --workload counter,bank`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRun(cmd.Context(), cmd, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.seeds, "seeds", "1", "seeds to run: a list of numbers and ranges, like 1-250 or 1,5,9-12")
	fl.Uint64Var(&f.seed, "seed", 0, "run (replay) this one seed; overrides --seeds")
	fl.IntSliceVar(&f.nodes, "nodes", []int{3}, "servers per run; with several, seed s uses the (s mod count)th")
	fl.IntVar(&f.clients, "clients", 2, "workload client processes per run (at least 3 for counter, bank, cas and set)")
	fl.StringSliceVar(&f.workload, "workload", []string{history.Register}, "workloads: register, counter, bank, cas, set; with several, seed s runs the (s mod count)th")
	fl.DurationVar(&f.duration, "duration", 20*time.Second, "how long faults are injected, per seed")
	fl.DurationVar(&f.settle, "settle", 8*time.Second, "how long the healed cluster runs before the copies are compared")
	fl.DurationVar(&f.gap, "gap", 2*time.Second, "mean time between fault starts")
	fl.StringVar(&f.kinds, "kinds", "", "fault kinds to draw from, comma-separated (default all the kernel supports): "+kindList())
	fl.StringVar(&f.scenario, "scenario", "", "run this fixed schedule for every seed instead of a random one: "+strings.Join(chaos.Scenarios, ", "))
	fl.BoolVar(&f.noSpare, "no-spare", false, "no spare server, so no join faults")
	fl.Float64Var(&f.rate, "rate", 40, "operations per second of each client")
	fl.IntVar(&f.keys, "keys", 16, "keys the clients share")
	fl.StringVar(&f.out, "out", "", "output directory (default .chaos/<date>-<time>)")
	fl.StringVar(&f.fero, "fero", "", "a fero binary to run (default: go build ./cmd/fero into OUT/bin)")
	fl.DurationVar(&f.converge, "converge", time.Minute, "how long to wait after the heal for every server's copy to agree")
	fl.StringArrayVar(&f.args, "server-arg", nil, "an extra `fero serve` flag, like --server-arg=--quorum=2 (repeatable)")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "print every step and process event as it happens")
	fl.IntVar(&f.parallel, "parallel", 1, "seeds run at once, each on a network of its own (lines print as seeds end)")
	fl.DurationVar(&f.maxTime, "max-time", 0, "start no seed after this long (0: no limit); seeds left out fail the run")
	fl.StringVar(&f.upgradeFrom, "upgrade-from", "", "with --scenario upgrade: the commit of this repository the servers start on (built from a git worktree of it); they are upgraded to this build")
	fl.StringVar(&f.oldFero, "old-fero", "", "with --scenario upgrade: the fero binary the servers start on, instead of --upgrade-from")
	fl.StringVar(&f.dataDirs, "data-dirs", "off", "servers keep data directories (--data-dir, --fsync group), so a killed server restarts with its data and vote: off, on, or odd (odd-numbered seeds)")
	return cmd
}

func kindList() string {
	s := make([]string, len(chaos.AllKinds))
	for i, k := range chaos.AllKinds {
		s[i] = string(k)
	}
	return strings.Join(s, ",")
}

func runRun(ctx context.Context, cmd *cobra.Command, f *runFlags) error {
	w := cmd.OutOrStdout()
	if err := chaos.Preflight(); err != nil {
		return err
	}
	seeds, err := parseSeeds(f.seeds)
	if err != nil {
		return err
	}
	if cmd.Flags().Changed("seed") {
		seeds = []uint64{f.seed}
	}
	for _, k := range f.workload {
		if !slices.Contains([]string{history.Register, history.Counter, history.Bank, history.CAS, history.Set}, k) {
			return fmt.Errorf("--workload %q: want register, counter, bank, cas or set", k)
		}
	}
	if len(f.workload) == 0 {
		return errors.New("--workload: give at least one")
	}
	if len(f.nodes) == 0 {
		return errors.New("--nodes: give at least one server count")
	}
	if !slices.Contains([]string{"off", "on", "odd"}, f.dataDirs) {
		return fmt.Errorf("--data-dirs %q: want off, on or odd", f.dataDirs)
	}
	for _, n := range f.nodes {
		if n < 1 || n > 9 {
			return fmt.Errorf("--nodes: %d servers: want 1 to 9", n)
		}
	}
	if (f.upgradeFrom != "" || f.oldFero != "") != (f.scenario == chaos.ScenarioUpgrade) || (f.upgradeFrom != "" && f.oldFero != "") {
		return fmt.Errorf("--scenario %s takes one of --upgrade-from and --old-fero, and they go with it alone", chaos.ScenarioUpgrade)
	}
	if f.scenario == chaos.ScenarioUpgrade {
		// An upgrade keeps each server's data across its restart.
		f.dataDirs = "on"
	}
	if f.scenario != "" {
		if !slices.Contains(chaos.Scenarios, f.scenario) {
			return fmt.Errorf("--scenario %q: want one of %s", f.scenario, strings.Join(chaos.Scenarios, ", "))
		}
		for _, name := range []string{"duration", "gap", "kinds"} {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("--%s: a scenario has its own schedule", name)
			}
		}
		// A scenario has no joins.
		f.noSpare = true
	}
	var kinds []chaos.Kind
	if f.kinds != "" {
		if kinds, err = chaos.ParseKinds(f.kinds); err != nil {
			return err
		}
	}
	if f.out == "" {
		f.out = filepath.Join(".chaos", time.Now().Format("20060102-150405"))
	}
	if f.out, err = filepath.Abs(f.out); err != nil {
		return err
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	// Output never belongs in git: "*" ignores the directory's every file,
	// itself included.
	if err := os.WriteFile(filepath.Join(f.out, ".gitignore"), []byte("*\n"), 0o644); err != nil {
		return err
	}
	feroBin := f.fero
	if feroBin == "" {
		if feroBin, err = buildFero(ctx, filepath.Join(f.out, "bin")); err != nil {
			return err
		}
	}
	f.upgradeBin = ""
	if f.scenario == chaos.ScenarioUpgrade {
		// The servers start on the old build and are upgraded to this one.
		old := f.oldFero
		if old == "" {
			fmt.Fprintf(w, "fero-chaos: building fero at %s\n", f.upgradeFrom)
			if old, err = buildFeroAt(ctx, filepath.Join(f.out, "bin"), f.upgradeFrom); err != nil {
				return err
			}
		}
		f.upgradeBin, feroBin = feroBin, old
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable (to run workloads): %w", err)
	}
	if f.scenario != "" {
		fmt.Fprintf(w, "fero-chaos: scenario %s, ", f.scenario)
	} else {
		fmt.Fprint(w, "fero-chaos: ")
	}
	fmt.Fprintf(w, "%d seeds, output in %s\n", len(seeds), f.out)

	var (
		sum     summary
		mu      sync.Mutex // guards sum, next, skipped and w
		next    int        // the next seed to start
		skipped bool
		wg      sync.WaitGroup
	)
	began := time.Now()
	// take hands a worker the next seed to run, or false when none is
	// left or the time is up.
	take := func() (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() != nil || next >= len(seeds) {
			return 0, false
		}
		if f.maxTime > 0 && time.Since(began) > f.maxTime {
			if !skipped {
				skipped = true
				fmt.Fprintf(w, "--max-time %v reached: %d seeds not started\n", f.maxTime, len(seeds)-next)
			}
			return 0, false
		}
		next++
		return seeds[next-1], true
	}
	for range max(1, min(f.parallel, len(seeds))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seed, ok := take()
				if !ok {
					return
				}
				runSeed(ctx, w, &mu, &sum, f, seed, feroBin, self, kinds)
			}
		}()
	}
	wg.Wait()
	sum.print(w, f.out)
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted after %d of %d seeds", sum.runs, len(seeds))
	}
	if len(sum.failed) > 0 {
		return fmt.Errorf("%d of %d seeds failed", len(sum.failed), sum.runs)
	}
	if sum.runs < len(seeds) {
		return fmt.Errorf("ran %d of %d seeds within --max-time %v", sum.runs, len(seeds), f.maxTime)
	}
	return nil
}

// runSeed runs one seed and reports it under mu.
func runSeed(ctx context.Context, w io.Writer, mu *sync.Mutex, sum *summary, f *runFlags, seed uint64, feroBin, self string, kinds []chaos.Kind) {
	servers := f.nodes[int(seed%uint64(len(f.nodes)))]
	kind := f.workload[int(seed%uint64(len(f.workload)))]
	clients, dir := f.clients, fmt.Sprintf("seed-%d-n%d", seed, servers)
	if kind != history.Register {
		clients, dir = max(clients, 3), dir+"-"+kind
	}
	cfg := chaos.Config{
		Seed: seed, Servers: servers, Clients: clients, Spare: !f.noSpare, Kind: kind,
		Duration: f.duration, Settle: f.settle, Gap: f.gap, Kinds: kinds, Scenario: f.scenario,
		Fero: feroBin, Upgrade: f.upgradeBin, ServerArgs: f.args, Workload: []string{self, "workload"},
		Rate: f.rate, Keys: f.keys, Converge: f.converge,
		Out:   filepath.Join(f.out, dir),
		Check: runCheck,
		// Odd-numbered seeds, or all, or none.
		DataDirs: f.dataDirs == "on" || (f.dataDirs == "odd" && seed%2 == 1),
	}
	if f.verbose {
		cfg.Logf = func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(w, "  "+format+"\n", args...)
		}
	}
	res := chaos.Run(ctx, cfg)
	mu.Lock()
	defer mu.Unlock()
	sum.add(res)
	disk := ""
	if cfg.DataDirs {
		disk = "  disk"
	}
	fmt.Fprintf(w, "seed %-5d n=%d %-8s  %-13s %3d faults  %6d ops  %3d anomalies  %5.1fs%s\n",
		seed, servers, kind, status(res), total(res.Injected), res.Ops, len(res.Anomalies), res.Elapsed.Seconds(), disk)
	for _, n := range res.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if res.Failed() {
		printFailure(w, res, replay(f, seed, servers, kind))
	}
}

// buildFero builds ./cmd/fero of the module fero-chaos runs in.
func buildFero(ctx context.Context, dir string) (string, error) { return buildCmd(ctx, dir, "fero") }

// buildFeroAt builds ./cmd/fero as it was at commit rev of the repository
// fero-chaos runs in, from a git worktree of it that it removes after.
func buildFeroAt(ctx context.Context, dir, rev string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("build fero at %s: run fero-chaos inside fero's repository, or give --old-fero (go env GOMOD: %q, %v)", rev, mod, err)
	}
	root := filepath.Dir(mod)
	if b, err := exec.CommandContext(ctx, "git", "-C", root, "cat-file", "-e", rev+"^{commit}").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build fero at %s: no such commit in %s (a shallow clone? git fetch --unshallow): %v %s", rev, root, err, b)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	src, err := os.MkdirTemp(dir, "src-")
	if err != nil {
		return "", err
	}
	if err := os.Remove(src); err != nil { // git worktree add makes it
		return "", err
	}
	if b, err := exec.CommandContext(ctx, "git", "-C", root, "worktree", "add", "--detach", src, rev).CombinedOutput(); err != nil {
		return "", fmt.Errorf("build fero at %s: git worktree add: %v\n%s", rev, err, b)
	}
	defer func() {
		_ = exec.Command("git", "-C", root, "worktree", "remove", "--force", src).Run()
	}()
	name := "fero-" + strings.Map(func(r rune) rune { // a file name, whatever the revision is spelled as (origin/main, v1.0~2)
		if r == '/' || r == '~' || r == '^' || r == ':' {
			return '-'
		}
		return r
	}, rev)
	if len(name) > 40 {
		name = name[:40]
	}
	bin := filepath.Join(dir, name)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/fero")
	build.Dir = src
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build fero at %s: %w\n%s", rev, err, b)
	}
	return bin, nil
}

// parseSeeds reads "1-250" or "1,5,9-12".
func parseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds: %q: want a number or a range like 1-250", part)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 64); err != nil || b < a {
				return nil, fmt.Errorf("--seeds: %q: want a range like 1-250", part)
			}
		}
		if b-a >= 100000 {
			return nil, fmt.Errorf("--seeds: %q: more than 100000 seeds", part)
		}
		for x := a; x <= b; x++ {
			if !slices.Contains(out, x) {
				out = append(out, x)
			}
		}
	}
	return out, nil
}

func status(r *chaos.Result) string {
	switch {
	case r.Err != nil:
		return "HARNESS-ERROR"
	case len(r.Anomalies) > 0:
		return "ANOMALIES"
	}
	return "ok"
}

func total(c map[chaos.Kind]int) int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// replay is the command line that runs seed again, the same way.
func replay(f *runFlags, seed uint64, servers int, kind string) string {
	wl := ""
	if kind != history.Register {
		wl = " --workload " + kind
	}
	if f.scenario != "" {
		return fmt.Sprintf("go run ./cmd/fero-chaos run --scenario %s --seed %d --nodes %d --clients %d --settle %v --rate %v --keys %d%s%s",
			f.scenario, seed, servers, f.clients, f.settle, f.rate, f.keys, wl, serverArgs(f))
	}
	s := fmt.Sprintf("go run ./cmd/fero-chaos run --seed %d --nodes %d --clients %d --duration %v --settle %v --gap %v --rate %v --keys %d%s",
		seed, servers, f.clients, f.duration, f.settle, f.gap, f.rate, f.keys, wl)
	if f.kinds != "" {
		s += " --kinds " + f.kinds
	}
	if f.noSpare {
		s += " --no-spare"
	}
	if f.dataDirs == "on" || (f.dataDirs == "odd" && seed%2 == 1) {
		s += " --data-dirs on"
	}
	return s + serverArgs(f)
}

func serverArgs(f *runFlags) string {
	var s string
	for _, a := range f.args {
		s += " --server-arg=" + a
	}
	return s
}

// printFailure prints what a failed seed needs to be understood: the
// error or anomalies with their history slices, the schedule, where the
// logs are, and how to replay it.
func printFailure(w io.Writer, r *chaos.Result, replay string) {
	fmt.Fprintf(w, "\n=== seed %d (%d servers) FAILED\n", r.Seed, r.Servers)
	if r.Err != nil {
		fmt.Fprintf(w, "harness error: %v\n", r.Err)
	}
	shown := map[string]int{}
	for _, a := range r.Anomalies {
		if shown[a.Kind]++; shown[a.Kind] <= 3 {
			fmt.Fprintf(w, "\n%s", a)
		}
	}
	for k, n := range shown {
		if n > 3 {
			fmt.Fprintf(w, "(%d more %s)\n", n-3, k)
		}
	}
	if r.Schedule != nil {
		fmt.Fprintf(w, "\n%s", r.Schedule)
	}
	fmt.Fprintf(w, "\nlogs, histories and result.txt: %s\n  (n*.log: servers, c*.log: clients, harness.log: every step)\n", r.Dir)
	fmt.Fprintf(w, "replay: %s\n\n", replay)
}

// summary adds up the runs.
type summary struct {
	runs, ops, errs, notes int
	skipped                int
	servers                []int
	faults                 map[chaos.Kind]int
	anomalies              map[string]int
	failed                 []string
	elapsed                time.Duration
}

func (s *summary) add(r *chaos.Result) {
	if s.faults == nil {
		s.faults, s.anomalies = map[chaos.Kind]int{}, map[string]int{}
	}
	s.runs++
	s.ops += r.Ops
	s.elapsed += r.Elapsed
	s.notes += len(r.Notes)
	s.skipped += r.Skipped
	if !slices.Contains(s.servers, r.Servers) {
		s.servers = append(s.servers, r.Servers)
	}
	for k, v := range r.Injected {
		s.faults[k] += v
	}
	for _, a := range r.Anomalies {
		s.anomalies[a.Kind]++
	}
	if r.Err != nil {
		s.errs++
	}
	if r.Failed() {
		s.failed = append(s.failed, fmt.Sprintf("%d(n%d)", r.Seed, r.Servers))
	}
}

func (s *summary) print(w io.Writer, out string) {
	slices.Sort(s.servers)
	ns := make([]string, len(s.servers))
	for i, n := range s.servers {
		ns[i] = strconv.Itoa(n)
	}
	nAnom := 0
	for _, v := range s.anomalies {
		nAnom += v
	}
	fmt.Fprintf(w, "\nsummary\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "schedules\tservers\tfaults\toperations\tanomalies\tharness errors\tnotes\ttime\t")
	fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%d\t%v\t\n", s.runs, strings.Join(ns, ","), total(s.faults), s.ops, nAnom, s.errs, s.notes, s.elapsed.Round(time.Second))
	_ = tw.Flush()
	fmt.Fprintf(w, "\nfaults injected by kind\n")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, k := range chaos.AllKinds {
		if s.faults[k] > 0 {
			fmt.Fprintf(tw, "  %s\t%d\n", k, s.faults[k])
		}
	}
	_ = tw.Flush()
	if s.skipped > 0 {
		fmt.Fprintf(w, "  (%d process faults skipped: restarted servers had not caught up)\n", s.skipped)
	}
	if nAnom > 0 {
		fmt.Fprintf(w, "\nanomalies by kind\n")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		kinds := make([]string, 0, len(s.anomalies))
		for k := range s.anomalies {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		for _, k := range kinds {
			fmt.Fprintf(tw, "  %s\t%d\n", k, s.anomalies[k])
		}
		_ = tw.Flush()
	}
	if len(s.failed) > 0 {
		fmt.Fprintf(w, "\nfailed seeds: %s\n", strings.Join(s.failed, " "))
	} else {
		fmt.Fprintf(w, "\nno seed failed\n")
	}
	fmt.Fprintf(w, "output: %s\n", out)
}
