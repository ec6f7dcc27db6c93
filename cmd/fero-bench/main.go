// Command fero-bench is fero's benchmark harness. It runs every server and
// client of a trial as a separate OS process (itself, re-executed with a
// hidden subcommand), measures throughput, unloaded round trips and
// latency at a fixed rate, and reports them against the raw TCP echo floor
// measured in the same run. The library behind it is package bench.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fero-go/fero/bench"
	"github.com/fero-go/fero/bench/echo"
	"github.com/fero-go/fero/bench/ferosut"
	"github.com/fero-go/fero/bench/origsut"
	"github.com/fero-go/fero/bench/redissut"
	"github.com/fero-go/fero/bench/redissut/rueidissut"
	"github.com/fero-go/fero/bench/transportsut"
)

// registry is every system fero-bench can measure. A new system under test
// plugs in here and nowhere else.
var registry = bench.Registry{
	"echo": echo.System{},
	"fero": ferosut.System{},
	// fero with its Prometheus metrics on (fero.WithMetrics) on every node.
	"fero-metrics": ferosut.System{Metrics: true},
	// fero with an OpenTelemetry tracer provider on every node, sampling
	// nothing or everything (fero.WithTracerProvider).
	"fero-trace-never": ferosut.System{Trace: "never"},
	"fero-trace-all":   ferosut.System{Trace: "all"},
	// fero driven by fero.Remote clients, which keep no copy (as a Redis
	// client keeps none): beside fero, what the client node's copy costs.
	"fero-remote": ferosut.System{Remote: true},
	// fero keeping its partitions on disk, one system per fsync policy.
	"fero-group":    ferosut.System{Fsync: "group"},
	"fero-interval": ferosut.System{Fsync: "interval"},
	"fero-never":    ferosut.System{Fsync: "never"},
	"transport":     transportsut.System{},
	// An optional peer: a real Redis (apt-get install redis-server), in
	// memory, or with its append-only file under each appendfsync policy.
	"redis":          redissut.System{},
	"redis-always":   redissut.System{AppendFsync: "always"},
	"redis-everysec": redissut.System{AppendFsync: "everysec"},
	"redis-no":       redissut.System{AppendFsync: "no"},
	// The same Redis servers driven by rueidis, the client a Go service
	// picks, with its auto-pipelining: the report names the faster driver.
	"redis-rueidis":          rueidissut.System{},
	"redis-rueidis-always":   rueidissut.System{AppendFsync: "always"},
	"redis-rueidis-everysec": rueidissut.System{AppendFsync: "everysec"},
	"redis-rueidis-no":       rueidissut.System{AppendFsync: "no"},
	// An optional peer: the original fero, the Node.js library (npm
	// install fero@1.7.1 into the user's cache directory on first use).
	"fero-" + origsut.Version: origsut.System{},
}

// preparedSystem is a system that must be set up on this machine before
// its first trial (the original fero: installed with npm). Prepare fails,
// saying why, where it cannot be.
type preparedSystem interface {
	Prepare(ctx context.Context) error
}

// limitedSystem is a system that cannot be measured in every scenario or
// with any number of servers. Supports says why not.
type limitedSystem interface {
	Supports(s bench.Scenario, servers int) error
}

// clientProgram is a system whose client runs each scenario itself, in a
// program of its own (the original fero's, in Node), rather than through a
// Go bench.Conn: the client process runs RunClient in place of
// bench.ClientChild, with the same protocol.
type clientProgram interface {
	RunClient(ctx context.Context, spec bench.ClientSpec, stdin io.Reader, stdout io.Writer) error
}

// fsyncPeer is what run --fsync adds for one fero fsync policy: fero with
// that policy, and the Redis whose appendfsync promises the most alike.
// Plain Redis keeps nothing on disk, so it is no one's peer.
type fsyncPeer struct{ policy, fero, redis string }

var fsyncPeers = []fsyncPeer{
	{"group", "fero-group", "redis-always"},
	{"interval", "fero-interval", "redis-everysec"},
	{"never", "fero-never", "redis-no"},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fero-bench:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "fero-bench",
		Short: "Benchmark fero against a raw TCP echo floor, in separate processes",
		Long: `fero-bench measures systems under test with three labelled scenarios:

  oneway     throughput (closed loop, pipelined): tacks, then yacks after a final sync
  reqreply   throughput (closed loop, pipelined): tacks, then sacks when every reply is back
  roundtrip  unloaded round trip: sequential ping-pong after a warm-up
  rate       latency at a fixed rate (open loop): send i due at t0 + i/R, latency from that time

Servers and clients run as separate processes on this host over loopback.
-m, -r, -l and -c take comma-separated lists and every permutation runs.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newBenchCmd("echo", "Measure the raw length-prefixed TCP echo alone (the floor)", []string{"echo"}, ""),
		newBenchCmd("transport", "Measure internal/transport side by side with the echo floor, as ratios to it", []string{"echo", "transport"}, "echo"),
		newBenchCmd("run", "Measure any registered systems (--systems) side by side", nil, ""),
		newServerCmd(),
		newServeCmd(),
		newClientCmd(),
	)
	return root
}

type benchFlags struct {
	sizes, records, clients, servers string
	scenarios                        string
	systems, baseline                string
	fsync, dataDir                   string
	window                           int
	warmupRecords                    int64
	count, warmupCount               int64
	rates, sweep, sweepBase          string
	duration, warmup, timeout        time.Duration
	trialTimeout                     time.Duration
	tick                             time.Duration
	runs                             int
	jsonPath, outDir                 string
	host                             string
	attach                           string
	short                            bool
	progress                         string
}

func newBenchCmd(use, short string, systems []string, baseline string) *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if systems != nil {
				f.systems = strings.Join(systems, ",")
				f.baseline = baseline
			}
			// A fixed-rate trial lasts its warm-up and duration: an
			// unchanged bound must leave it room (a 10-minute soak was
			// cut off by the 10-minute default).
			if need := f.warmup + f.duration + 5*time.Minute; !cmd.Flags().Changed("trial-timeout") && need > f.trialTimeout {
				f.trialTimeout = need
			}
			return runBench(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.sizes, "size", "m", "100", "message sizes in bytes, comma-separated")
	fl.StringVarP(&f.records, "records", "r", "1000000", "records per throughput trial (total over clients), comma-separated")
	fl.StringVarP(&f.clients, "clients", "l", "1", "client processes, comma-separated")
	fl.StringVarP(&f.servers, "servers", "c", "1", "server processes, comma-separated")
	fl.StringVarP(&f.scenarios, "scenario", "s", "", "scenarios: oneway,reqreply,roundtrip,rate (default oneway,reqreply,roundtrip, plus rate when --rate or --sweep is set)")
	if systems == nil {
		cmd.Long = runLong
		fl.StringVar(&f.systems, "systems", "echo", "systems to measure, comma-separated (known: "+strings.Join(registry.Names(), ", ")+")")
		fl.StringVar(&f.baseline, "baseline", "", "system to quote the others against")
		fl.StringVar(&f.fsync, "fsync", "", "fsync policies, comma-separated (group, interval, never): adds fero-<policy> and its Redis peer to --systems")
		fl.StringVar(&f.dataDir, "data-dir", os.TempDir(), "directory in which each server of a durable system makes a fresh data directory, removed after its trial (on the disk to measure: on tmpfs an fsync costs nothing)")
	}
	fl.IntVar(&f.window, "window", 1000, "request→reply: requests in flight per client")
	fl.Int64Var(&f.warmupRecords, "warmup-records", 10000, "throughput: unmeasured records per client before each trial")
	fl.Int64VarP(&f.count, "count", "n", 10000, "round trip: measured calls per client")
	fl.Int64Var(&f.warmupCount, "warmup-count", 1000, "round trip: unmeasured calls per client first")
	fl.StringVar(&f.rates, "rate", "", "fixed rate: total requests per second, comma-separated")
	fl.StringVar(&f.sweep, "sweep", "", "fixed rate: fractions of the lowest measured request→reply max, e.g. 0.25,0.5,0.75,0.9")
	fl.StringVar(&f.sweepBase, "sweep-base", "", "fixed rate: take --sweep's fractions of this system's own request→reply max rather than the lowest of all (one of --systems)")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "fixed rate: measured duration")
	fl.DurationVar(&f.warmup, "warmup", 2*time.Second, "fixed rate: unmeasured warm-up on the same schedule")
	fl.DurationVar(&f.timeout, "timeout", time.Second, "fixed rate: a slower request is an error (its latency is kept)")
	fl.DurationVar(&f.tick, "tick", bench.DefaultTick, "fixed rate: the generator's shortest sleep; sends falling due within it go out together (0: sleep until each)")
	fl.DurationVar(&f.trialTimeout, "trial-timeout", 10*time.Minute, "upper bound on one trial, processes included (at least warm-up + duration + 5m unless given)")
	fl.IntVar(&f.runs, "runs", 1, "repetitions, configurations interleaved; reports median [min … max]")
	fl.StringVar(&f.jsonPath, "json", "", "write the full report as JSON to this file")
	fl.StringVar(&f.outDir, "out", "", "write .hgrm distributions (µs) and SVG latency charts into this directory")
	fl.StringVar(&f.host, "host", "127.0.0.1", "loopback address servers listen on")
	if systems == nil {
		fl.StringVar(&f.attach, "attach", "", "servers already running on this host, comma-separated, each as `fero-bench server` printed it: start none, dial these (one system; -c is their number)")
	}
	fl.StringVar(&f.progress, "progress", "auto", "live progress line on stderr: auto (when a terminal), always, never")
	if use == "transport" {
		fl.BoolVar(&f.short, "short", false, "quick profile (under ~2 minutes): 200k records, the rate scenario at a quarter of the slower system's max for 5s")
	}
	return cmd
}

// runLong is run's help: what the durable systems are and what --fsync
// adds.
const runLong = `run measures the systems named by --systems side by side, quoted against
--baseline if one is given. fero-metrics is fero with every node's
Prometheus metrics on (fero.WithMetrics): run it beside fero to see what
the metrics cost. fero-trace-never and fero-trace-all give every node an
OpenTelemetry tracer provider (fero.WithTracerProvider) that samples no
request or every one (spans dropped by a no-op exporter): what tracing
costs when configured. fero-remote drives the same servers with
fero.Remote clients (fero.Dial), which keep no copy and apply no commits,
as a Redis client keeps none; a client node (fero) keeps a full copy.

redis drives a real Redis (apt-get install redis-server) with fero-bench's
own pipelined RESP client; redis-rueidis drives the same redis-server with
github.com/redis/rueidis, the client a Go service picks, one goroutine per
request so that its auto-pipelining batches them (rueidis has no callback
per command). Run both and the report ends with the faster driver per
scenario and configuration: quote that one as the Redis peer.

Durable systems keep each server's data in a fresh directory under
--data-dir, removed after its trial:

  fero-group, fero-interval, fero-never   fero with a data directory and that
                                          fsync policy (fero serve --fsync)
  redis-always, redis-everysec, redis-no  Redis with its append-only file and
                                          that appendfsync
  redis-rueidis-always, -everysec, -no    the same, driven by rueidis

fero-1.7.1 is the original fero, the Node.js library fero re-thinks: npm
install fero@1.7.1 into the user's cache directory on first use (node and
npm must be installed; the run stops at once, saying why, where they are
missing or the install fails). One server of the original serves with its
default handler: each record is a client's cache.update, appended, applied,
committed back to the client and answered. Its client is a Node program
that runs each scenario itself and reports the original's own milestones
(tacks, yacks = the server received, sacks = every reply back); its CPU is
the client's. oneway, reqreply and roundtrip only, with -c 1: rate and more
servers are refused before the run, with the reason (bench/origsut).

--fsync group,interval,never adds fero with each policy and its Redis peer to
--systems: group redis-always, interval redis-everysec, never redis-no
(fero-interval fsyncs every 100 ms, fero's default; redis-everysec every
second). The report gives each durable system's policy and, for fero, the
servers' fsyncs per second and records per fsync (Redis does not count its
fsyncs: n/a).`

func runBench(cmd *cobra.Command, f *benchFlags) error {
	if f.short {
		applyShort(cmd, f)
	}
	attach := splitList(f.attach)
	for _, a := range attach {
		if err := loopbackOnly(a); err != nil {
			return fmt.Errorf("--attach: %w", err)
		}
	}
	if len(attach) > 0 {
		n := strconv.Itoa(len(attach))
		if cmd.Flags().Changed("servers") && f.servers != n {
			return fmt.Errorf("-c %s: %d servers attached", f.servers, len(attach))
		}
		f.servers = n
	}
	m, err := parseMatrix(f)
	if err != nil {
		return err
	}
	systems, err := withFsyncPeers(splitList(f.systems), f.fsync)
	if err != nil {
		return err
	}
	if len(attach) > 0 && len(systems) != 1 {
		return fmt.Errorf("--attach: one system's servers, but --systems names %d", len(systems))
	}
	if len(attach) > 0 && f.sweep != "" {
		return errors.New("--attach: --sweep calibrates every system; give --rate instead")
	}
	for _, s := range systems {
		if _, err := registry.Lookup(s); err != nil {
			return err
		}
	}
	scenarios, err := parseScenarios(f)
	if err != nil {
		return err
	}
	skipped, err := checkLimits(systems, scenarios, m.Servers)
	if err != nil {
		return err
	}
	for _, line := range skipped {
		fmt.Fprintf(cmd.ErrOrStderr(), "fero-bench: leaving out %s\n", line)
	}
	sweep, err := parseFloats(f.sweep)
	if err != nil {
		return fmt.Errorf("--sweep: %w", err)
	}
	if f.sweepBase != "" {
		if len(sweep) == 0 {
			return errors.New("--sweep-base: give --sweep too")
		}
		if !slices.Contains(systems, f.sweepBase) {
			return fmt.Errorf("--sweep-base %s: not one of --systems (%s)", f.sweepBase, strings.Join(systems, ","))
		}
		if err := skipTrial(f.sweepBase, bench.FixedRate, m.Servers[0]); err != nil {
			return fmt.Errorf("--sweep-base %s: %w", f.sweepBase, err)
		}
	}
	if f.tick < 0 {
		return fmt.Errorf("--tick %s: want 0 or more", f.tick)
	}
	if err := loopbackOnly(net.JoinHostPort(f.host, "0")); err != nil {
		return fmt.Errorf("--host: %w", err)
	}
	// Make the output directories now: a run may take minutes, and a path
	// that cannot be written should fail it before, not after.
	for _, dir := range outputDirs(f) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("output directory: %w", err)
		}
	}
	// After every check of the flags: an install may take a while.
	for _, name := range systems {
		if p, ok := registry[name].(preparedSystem); ok {
			if err := p.Prepare(cmd.Context()); err != nil {
				return fmt.Errorf("%s: %w (leave it out of --systems)", name, err)
			}
		}
	}
	exe, err := bench.Executable()
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	showProgress := f.progress == "always" || (f.progress == "auto" && isTerminal(os.Stderr))
	runner := &bench.Runner{Exe: exe, ProgressEvery: 500 * time.Millisecond, Systems: registry}
	var current string
	if showProgress {
		runner.OnProgress = func(t bench.Trial, done, total int64, elapsed time.Duration) {
			pct := 0.0
			if total > 0 {
				pct = 100 * float64(done) / float64(total)
			}
			fmt.Fprintf(stderr, "\r\033[K%s  %5.1f%%  %s", current, pct, elapsed.Round(100*time.Millisecond))
		}
	}
	s := &bench.Session{
		Runner:    runner,
		Systems:   systems,
		Baseline:  f.baseline,
		Scenarios: scenarios,
		Matrix:    m,
		Runs:      f.runs,
		Sweep:     sweep,
		SweepBase: f.sweepBase,
		Skip:      skipTrial,
		Params: bench.Params{
			Window:        f.window,
			WarmupRecords: f.warmupRecords,
			Count:         f.count,
			WarmupCount:   f.warmupCount,
			Warmup:        f.warmup,
			Duration:      f.duration,
			Timeout:       f.timeout,
			Tick:          f.tick,
			TrialTimeout:  f.trialTimeout,
			Host:          f.host,
			Attach:        attach,
			DataDir:       f.dataDir,
		},
		OnTrial: func(t bench.Trial, i, n int) {
			pos := "calibration"
			if i >= 0 {
				pos = fmt.Sprintf("%d/%d", i+1, n)
			}
			current = fmt.Sprintf("[%s run %d] %s · %s · %s", pos, t.Run, t.System, t.Scenario, t.Config)
			if showProgress {
				fmt.Fprintf(stderr, "\r\033[K%s", current)
			} else {
				fmt.Fprintln(stderr, current)
			}
		},
		OnCalibrated: func(rate float64) {
			if showProgress {
				fmt.Fprint(stderr, "\r\033[K")
			}
			if f.sweepBase != "" {
				fmt.Fprintf(stderr, "sweep: rates are fractions of %s req/s, %s's request→reply throughput measured\n", strconv.FormatFloat(rate, 'f', 0, 64), f.sweepBase)
			} else {
				fmt.Fprintf(stderr, "sweep: rates are fractions of %s req/s, the lowest request→reply throughput measured\n", strconv.FormatFloat(rate, 'f', 0, 64))
			}
		},
	}
	rep, err := s.Run(cmd.Context(), bench.CollectEnvironment())
	if showProgress {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	if err := rep.WriteText(cmd.OutOrStdout()); err != nil {
		return err
	}
	if err := writeDriverRaces(cmd.OutOrStdout(), rep); err != nil {
		return err
	}
	if err := writeTargets(cmd.OutOrStdout(), rep); err != nil {
		return err
	}
	if f.jsonPath != "" {
		if err := writeJSON(f.jsonPath, rep); err != nil {
			return err
		}
	}
	if f.outDir != "" {
		paths, err := rep.WriteFiles(f.outDir)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "\nwrote %d files into %s\n", len(paths), f.outDir)
	}
	return nil
}

// checkLimits finds, before any trial, the scenarios and numbers of
// servers a system cannot be measured with: those trials are left out
// (skipTrial) and skipped says which and why, one line each. A system that
// can run none of the run's trials is an error.
func checkLimits(systems []string, scenarios []bench.Scenario, servers []int) (skipped []string, err error) {
	for _, name := range systems {
		l, ok := registry[name].(limitedSystem)
		if !ok {
			continue
		}
		runs := false
		var first error
		for _, s := range scenarios {
			for _, n := range servers {
				if err := l.Supports(s, n); err != nil {
					skipped = append(skipped, fmt.Sprintf("%s, scenario %s, %d server(s): %v", name, s, n, err))
					if first == nil {
						first = err
					}
				} else {
					runs = true
				}
			}
		}
		if !runs {
			return nil, fmt.Errorf("%s: %w", name, first)
		}
	}
	return skipped, nil
}

// skipTrial is the Session's Skip: the limits of a limitedSystem.
func skipTrial(system string, s bench.Scenario, servers int) error {
	if l, ok := registry[system].(limitedSystem); ok {
		return l.Supports(s, servers)
	}
	return nil
}

// outputDirs lists the directories --json and --out write into.
func outputDirs(f *benchFlags) []string {
	var dirs []string
	if f.jsonPath != "" {
		dirs = append(dirs, filepath.Dir(f.jsonPath))
	}
	if f.outDir != "" {
		dirs = append(dirs, f.outDir)
	}
	return dirs
}

func writeJSON(path string, rep *bench.Report) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	err = rep.WriteJSON(fh)
	if cerr := fh.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", path, cerr)
	}
	return err
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
