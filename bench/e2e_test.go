package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fero-go/fero/bench"
	"github.com/fero-go/fero/bench/echo"
)

const childEnv = "FERO_BENCH_TEST_CHILD"

var registry = bench.Registry{
	"echo": echo.System{},
	"burn": burnSystem{},
	"disk": diskSystem{asked: &fsyncCounts{n: map[string]uint64{}}},
	"aof":  aofSystem{},
	"prog": programSystem{},
}

// TestMain turns the test binary into a benchmark child when the runner
// re-executes it, so the end-to-end test uses real separate processes.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "" {
		os.Exit(m.Run())
	}
	if err := runChild(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runChild(args []string) error {
	if len(args) != 3 || args[1] != "--spec" {
		return fmt.Errorf("want <serve|client> --spec JSON, got %q", args)
	}
	ctx := context.Background()
	switch args[0] {
	case bench.ServeCommand:
		var s bench.ServeSpec
		if err := json.Unmarshal([]byte(args[2]), &s); err != nil {
			return err
		}
		return bench.ServeChild(ctx, registry, s, os.Stdin, os.Stdout)
	case bench.ClientCommand:
		var s bench.ClientSpec
		if err := json.Unmarshal([]byte(args[2]), &s); err != nil {
			return err
		}
		return bench.ClientChild(ctx, registry, s, os.Stdin, os.Stdout)
	}
	return fmt.Errorf("unknown child command %q", args[0])
}

func TestEndToEndEchoInSeparateProcesses(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var progressed int
	s := &bench.Session{
		Runner: &bench.Runner{
			Exe:           os.Args[0],
			Env:           append(os.Environ(), childEnv+"=1"),
			ProgressEvery: 10 * time.Millisecond,
			OnProgress:    func(bench.Trial, int64, int64, time.Duration) { progressed++ },
		},
		Systems:   []string{"echo"},
		Scenarios: []bench.Scenario{bench.OneWay, bench.RequestReply, bench.RoundTrip, bench.FixedRate},
		Matrix: bench.Matrix{
			Sizes: []int{64}, Records: []int64{3000}, Clients: []int{1}, Servers: []int{1}, Rates: []float64{2000},
		},
		Params: bench.Params{
			Window: 64, WarmupRecords: 100, Count: 300, WarmupCount: 20,
			Warmup: 50 * time.Millisecond, Duration: 200 * time.Millisecond, Timeout: 2 * time.Second,
			Tick: bench.DefaultTick, TrialTimeout: 30 * time.Second, Host: "127.0.0.1",
		},
		Runs: 1,
	}
	rep, err := s.Run(ctx, bench.CollectEnvironment())
	require.NoError(t, err)
	require.Len(t, rep.Groups, 4)

	for _, g := range rep.Groups {
		name := fmt.Sprintf("%s %s", g.Scenario, g.Config)
		assert.Zero(t, g.Errors, name)
		assert.Greater(t, g.ServerCPU.Median+g.ClientCPU.Median, 0.0, name)
		assert.Greater(t, g.ClientMaxRSS.Median, 0.0, name)
		assert.Greater(t, g.ServerMaxRSS.Median, 0.0, name)
		// Start-up: a process spawned, ready, connected; not instant.
		assert.Positive(t, g.Stable.Median, name)
		assert.Positive(t, g.Connected.Median, name)
		switch g.Scenario {
		case bench.OneWay, bench.RequestReply:
			require.Len(t, g.Milestones, 2, name)
			assert.Equal(t, bench.Tacks, g.Milestones[0].Name)
			assert.LessOrEqual(t, g.Milestones[0].Seconds.Median, g.Milestones[1].Seconds.Median, name)
			assert.Greater(t, g.Milestones[1].RecordsPerSec.Median, 0.0, name)
		case bench.RoundTrip:
			assert.EqualValues(t, 300*g.Config.Clients, g.Latency[bench.HistLatency].Count, name)
		case bench.FixedRate:
			lat := g.Latency[bench.HistLatency]
			require.NotNil(t, lat, name)
			assert.Positive(t, g.RequestedRate, name)
			// Every measured send is accounted for: completed or an error.
			assert.EqualValues(t, lat.Count, g.Latency[bench.HistService].Count, name)
			assert.EqualValues(t, lat.Count, g.Latency[bench.HistLag].Count, name)
			// At 2,000/s the generator sleeps between sends.
			require.NotNil(t, g.Latency[bench.HistWake], name)
			assert.Positive(t, g.Latency[bench.HistWake].Count, name)
			assert.Positive(t, lat.Count, name)
		}
	}
	// Several clients and servers: the records split and the results merge.
	s.Scenarios = []bench.Scenario{bench.RequestReply}
	s.Matrix.Clients, s.Matrix.Servers = []int{2}, []int{2}
	multi, err := s.Run(ctx, bench.CollectEnvironment())
	require.NoError(t, err)
	require.Len(t, multi.Groups, 1)
	require.Len(t, multi.Trials, 1)
	assert.EqualValues(t, 3000, multi.Trials[0].Records)
	assert.Zero(t, multi.Trials[0].Errors)
	// Each process's own costs, which the totals sum.
	tr := multi.Trials[0]
	var names []string
	var serverCPU, clientCPU time.Duration
	for _, pu := range tr.Processes {
		names = append(names, pu.Name)
		assert.Positive(t, pu.MaxRSS, pu.Name)
		if pu.Name[0] == 's' {
			serverCPU += pu.CPU.Total()
		} else {
			clientCPU += pu.CPU.Total()
		}
	}
	assert.Equal(t, []string{"server 0", "server 1", "client 0", "client 1"}, names)
	assert.Equal(t, tr.ServerCPU.Total(), serverCPU)
	assert.Equal(t, tr.ClientCPU.Total(), clientCPU)
	var mb bytes.Buffer
	require.NoError(t, multi.WriteText(&mb))
	assert.Contains(t, mb.String(), "per process, cpu and peak RSS: server 0 ")

	var b bytes.Buffer
	require.NoError(t, rep.WriteText(&b))
	assert.Contains(t, b.String(), "latency at a fixed rate (open loop)")
	assert.Contains(t, b.String(), "start-up, before the trial: servers stable")
	paths, err := rep.WriteFiles(t.TempDir())
	require.NoError(t, err)
	assert.NotEmpty(t, paths)
	assert.Positive(t, progressed)
}

// burnSystem is the echo system with a CPU burn at the start of a run's
// warm-up, in the client and the server: a fixed-rate trial must not count
// it. The client burns at its first request and then creates a file in
// burnDirEnv's directory, which the server polls for before burning.
type burnSystem struct{ echo.System }

const (
	burnDirEnv = "FERO_BENCH_TEST_BURN_DIR"
	burnCPU    = 400 * time.Millisecond
)

// burn spins until this process has used d more CPU.
func burn(d time.Duration) {
	u, err := bench.SelfUsage()
	if err != nil {
		panic(err)
	}
	for {
		v, err := bench.SelfUsage()
		if err != nil {
			panic(err)
		}
		if v.CPU.Sub(u.CPU).Total() >= d {
			return
		}
	}
}

func (s burnSystem) Serve(ctx context.Context, opts bench.ServeOptions, ready func(string)) error {
	mark := filepath.Join(os.Getenv(burnDirEnv), "warm-up")
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := os.Stat(mark); err == nil {
				burn(burnCPU)
				return
			}
		}
	}()
	return s.System.Serve(ctx, opts, ready)
}

func (s burnSystem) Dial(ctx context.Context, opts bench.DialOptions) (bench.Conn, error) {
	c, err := s.System.Dial(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &burnConn{Conn: c}, nil
}

type burnConn struct {
	bench.Conn
	burnt bool
}

func (c *burnConn) Go(ctx context.Context, payload []byte, done func([]byte, error)) error {
	if !c.burnt {
		c.burnt = true
		if err := os.WriteFile(filepath.Join(os.Getenv(burnDirEnv), "warm-up"), nil, 0o600); err != nil {
			return err
		}
		burn(burnCPU)
	}
	return c.Conn.Go(ctx, payload, done)
}

// Flush passes on to echo's connection, which buffers requests.
func (c *burnConn) Flush(ctx context.Context) error { return c.Conn.(bench.Flusher).Flush(ctx) }

func TestFixedRateCountsCPUFromTheMeasuredWindow(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	s := &bench.Session{
		Runner:    &bench.Runner{Exe: os.Args[0], Env: append(os.Environ(), childEnv+"=1", burnDirEnv+"="+dir)},
		Systems:   []string{"burn"},
		Scenarios: []bench.Scenario{bench.FixedRate},
		Matrix:    bench.Matrix{Sizes: []int{64}, Records: []int64{1}, Clients: []int{1}, Servers: []int{1}, Rates: []float64{1000}},
		Params: bench.Params{
			// The warm-up is long enough for both burns on a loaded machine.
			Warmup: 3 * time.Second, Duration: 200 * time.Millisecond, Timeout: 2 * time.Second,
			Tick: bench.DefaultTick, TrialTimeout: 30 * time.Second, Host: "127.0.0.1",
		},
		Runs: 1,
	}
	rep, err := s.Run(ctx, bench.CollectEnvironment())
	require.NoError(t, err)
	require.Len(t, rep.Trials, 1)
	tr := rep.Trials[0]
	assert.Zero(t, tr.Errors)
	_, err = os.Stat(filepath.Join(dir, "warm-up"))
	require.NoError(t, err, "the client reached its warm-up")
	// 200 requests cost the echo milliseconds; the burns cost 400 ms each.
	assert.Less(t, tr.ClientCPU.Total(), burnCPU/2, "client CPU counts from the measured window")
	assert.Less(t, tr.ServerCPU.Total(), burnCPU/2, "server CPU counts from the measured window")
}

func TestAttachedServersAreNotStartedOrMeasured(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A server this run does not start: in this process, not a child.
	sctx, stop := context.WithCancel(ctx)
	addr := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- echo.System{}.Serve(sctx, bench.ServeOptions{Addr: "127.0.0.1:0"}, func(a string) { addr <- a })
	}()
	defer func() { stop(); require.NoError(t, <-served) }()
	s := &bench.Session{
		Runner:    &bench.Runner{Exe: os.Args[0], Env: append(os.Environ(), childEnv+"=1")},
		Systems:   []string{"echo"},
		Scenarios: []bench.Scenario{bench.OneWay},
		Matrix:    bench.Matrix{Sizes: []int{64}, Records: []int64{2000}, Clients: []int{1}, Servers: []int{1}},
		Params: bench.Params{
			WarmupRecords: 100, TrialTimeout: 30 * time.Second, Host: "127.0.0.1", Attach: []string{<-addr},
		},
		Runs: 2,
	}
	rep, err := s.Run(ctx, bench.CollectEnvironment())
	require.NoError(t, err)
	require.Len(t, rep.Trials, 2)
	for _, tr := range rep.Trials {
		assert.True(t, tr.Attached)
		assert.Zero(t, tr.Errors)
		assert.EqualValues(t, 2000, tr.Records)
		assert.Zero(t, tr.ServerMaxRSS, "no server process of ours")
		assert.Zero(t, tr.ServerCPU.Total())
		assert.Zero(t, tr.Stable)
		assert.Positive(t, tr.Connected)
	}
	var b bytes.Buffer
	require.NoError(t, rep.WriteText(&b))
	assert.Contains(t, b.String(), "attached to 1 server(s) this run did not start")

	// The trial's servers are the attached ones, however many it asks for.
	s.Matrix.Servers = []int{2}
	_, err = s.Run(ctx, bench.CollectEnvironment())
	assert.ErrorContains(t, err, "1 servers attached, the trial wants 2")
}

// TestPeakRSSIsTheProcesssOwn: a child's peak RSS is its own, not the
// harness's. Linux's ru_maxrss of a process started by a Go program
// includes its parent's resident set at the exec, so with a harness of
// 256 MiB every small child reported 256 MiB.
func TestPeakRSSIsTheProcesssOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ballast := make([]byte, 256<<20)
	for i := 0; i < len(ballast); i += 4096 {
		ballast[i] = 1 // resident, not just reserved
	}
	s := &bench.Session{
		Runner:    &bench.Runner{Exe: os.Args[0], Env: append(os.Environ(), childEnv+"=1")},
		Systems:   []string{"echo"},
		Scenarios: []bench.Scenario{bench.OneWay},
		Matrix:    bench.Matrix{Sizes: []int{64}, Records: []int64{2000}, Clients: []int{1}, Servers: []int{1}},
		Params:    bench.Params{WarmupRecords: 100, TrialTimeout: 30 * time.Second, Host: "127.0.0.1"},
		Runs:      1,
	}
	rep, err := s.Run(ctx, bench.CollectEnvironment())
	require.NoError(t, err)
	require.Len(t, rep.Trials, 1)
	tr := rep.Trials[0]
	t.Logf("server %d MiB, client %d MiB, harness above 256 MiB", tr.ServerMaxRSS>>20, tr.ClientMaxRSS>>20)
	assert.Positive(t, tr.ServerMaxRSS)
	assert.Positive(t, tr.ClientMaxRSS)
	assert.Less(t, tr.ServerMaxRSS, int64(128<<20), "an echo server's own peak")
	assert.Less(t, tr.ClientMaxRSS, int64(128<<20), "an echo client's own peak")
	for _, p := range tr.Processes {
		assert.Less(t, p.MaxRSS, int64(128<<20), p.Name)
	}
	runtime.KeepAlive(ballast)
}

// diskSystem is the echo as a durable system whose servers count one fsync
// each time the runner asks for their count, so that a trial's fsyncs are
// exactly its servers, however fast the machine.
type diskSystem struct {
	echo.System
	asked *fsyncCounts
}

type fsyncCounts struct {
	mu sync.Mutex
	n  map[string]uint64
}

func (diskSystem) Durability() string { return "fsync test" }

func (s diskSystem) Fsyncs(_ context.Context, addr string) (uint64, error) {
	s.asked.mu.Lock()
	defer s.asked.mu.Unlock()
	s.asked.n[addr]++
	return s.asked.n[addr], nil
}

// aofSystem is the echo as a durable system that does not count its
// fsyncs, as Redis does not.
type aofSystem struct{ echo.System }

func (aofSystem) Durability() string { return "appendfsync test" }

func TestDurableSystemsReportTheirFsyncs(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &bench.Session{
		Runner:    &bench.Runner{Exe: os.Args[0], Env: append(os.Environ(), childEnv+"=1"), Systems: registry},
		Systems:   []string{"disk"},
		Scenarios: []bench.Scenario{bench.OneWay, bench.FixedRate},
		Matrix: bench.Matrix{
			Sizes: []int{64}, Records: []int64{2000}, Clients: []int{1}, Servers: []int{2}, Rates: []float64{1000},
		},
		Params: bench.Params{
			WarmupRecords: 100, Warmup: 50 * time.Millisecond, Duration: 100 * time.Millisecond, Timeout: 2 * time.Second,
			Tick: bench.DefaultTick, TrialTimeout: 30 * time.Second, Host: "127.0.0.1",
		},
		Runs: 1,
	}
	rep, err := s.Run(ctx, bench.CollectEnvironment())
	require.NoError(t, err)
	require.Len(t, rep.Trials, 2)
	for _, tr := range rep.Trials {
		assert.Zero(t, tr.Errors, tr.Scenario)
		assert.Equal(t, "fsync test", tr.Durability, tr.Scenario)
		// Each server is asked once where the measured window starts (for
		// the fixed rate, again where its warm-up ends) and once after it.
		require.NotNil(t, tr.Fsyncs, tr.Scenario)
		assert.EqualValues(t, 2, *tr.Fsyncs, tr.Scenario)
	}
	for _, g := range rep.Groups {
		require.NotNil(t, g.FsyncsPerSec, g.Scenario)
		require.NotNil(t, g.RecordsPerFsync, g.Scenario)
		assert.Positive(t, g.FsyncsPerSec.Median, g.Scenario)
	}
	assert.Equal(t, 1000.0, rep.Groups[0].RecordsPerFsync.Median, "2,000 records over 2 fsyncs")
	var b bytes.Buffer
	require.NoError(t, rep.WriteText(&b))
	assert.Contains(t, b.String(), "disk:     each server of a durable system keeps a fresh data directory under "+os.TempDir())
	assert.Contains(t, b.String(), "  disk: fsync test · ")
	assert.Contains(t, b.String(), " fsyncs/s · 1000.0 records per fsync")

	// A durable system that does not count its fsyncs.
	s.Systems, s.Scenarios, s.Matrix.Servers = []string{"aof"}, []bench.Scenario{bench.OneWay}, []int{1}
	rep, err = s.Run(ctx, bench.CollectEnvironment())
	require.NoError(t, err)
	require.Len(t, rep.Trials, 1)
	assert.Equal(t, "appendfsync test", rep.Trials[0].Durability)
	assert.Nil(t, rep.Trials[0].Fsyncs)
	assert.Nil(t, rep.Groups[0].FsyncsPerSec)
	b.Reset()
	require.NoError(t, rep.WriteText(&b))
	assert.Contains(t, b.String(), "  disk: appendfsync test · fsyncs/s n/a · records per fsync n/a")
}

// programSystem is the echo whose server also runs another program, as
// bench/redissut runs a redis-server: a sleep, whose peak RSS (under 4 MB)
// is far below a Go process's.
type programSystem struct{ echo.System }

func (s programSystem) Serve(ctx context.Context, opts bench.ServeOptions, ready func(string)) error {
	cmd := exec.CommandContext(ctx, "sleep", "60")
	if err := cmd.Start(); err != nil {
		return err
	}
	err := s.System.Serve(ctx, opts, ready)
	_ = cmd.Wait() // killed when ctx ends
	return err
}

// TestServerThatRunsAProgramReportsItsRSS: the peak RSS of a server that
// runs another program is that program's, not its Go wrapper's, and its
// CPU counts them both.
func TestServerThatRunsAProgramReportsItsRSS(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep command:", err)
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc")
	}
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &bench.Session{
		Runner:    &bench.Runner{Exe: os.Args[0], Env: append(os.Environ(), childEnv+"=1"), Systems: registry},
		Systems:   []string{"prog", "echo"},
		Scenarios: []bench.Scenario{bench.OneWay},
		Matrix:    bench.Matrix{Sizes: []int{64}, Records: []int64{2000}, Clients: []int{1}, Servers: []int{1}},
		Params: bench.Params{
			WarmupRecords: 100, Timeout: 2 * time.Second, TrialTimeout: 30 * time.Second, Host: "127.0.0.1",
		},
		Runs: 1,
	}
	rep, err := s.Run(ctx, bench.CollectEnvironment())
	require.NoError(t, err)
	require.Len(t, rep.Trials, 2)
	rss := map[string]int64{}
	for _, tr := range rep.Trials {
		assert.Zero(t, tr.Errors, tr.System)
		rss[tr.System] = tr.ServerMaxRSS
		require.NotEmpty(t, tr.Processes, tr.System)
		assert.Equal(t, tr.ServerMaxRSS, tr.Processes[0].MaxRSS, tr.System)
	}
	t.Logf("server peak RSS: prog %d bytes, echo %d bytes", rss["prog"], rss["echo"])
	assert.Positive(t, rss["prog"])
	assert.Less(t, rss["prog"], int64(4<<20), "sleep's peak RSS, not the wrapper's")
	assert.Greater(t, rss["echo"], rss["prog"], "the echo server's is its own, a Go process's")
}
