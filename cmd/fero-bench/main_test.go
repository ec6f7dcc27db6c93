package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/bench"
	"github.com/fero-go/fero/bench/origsut"
)

// TestCLIEndToEnd builds fero-bench and runs the echo floor through the
// real command line, with tiny counts, checking every output it writes.
func TestCLIEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "fero-bench")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	// Into a directory that does not exist yet, which --out also writes to.
	outDir := filepath.Join(dir, "out")
	jsonPath := filepath.Join(outDir, "report.json")
	run := exec.CommandContext(ctx, bin, "echo", "-m", "16,64", "-r", "2000", "-n", "200", "--warmup-count", "10",
		"--warmup-records", "100", "--rate", "1000", "--duration", "200ms", "--warmup", "50ms",
		"--json", jsonPath, "--out", outDir, "--progress", "never")
	out, err = run.CombinedOutput()
	require.NoError(t, err, string(out))
	for _, want := range []string{"throughput (closed loop, pipelined): one-way", "* yacks:", "* sacks:",
		"unloaded round trip", "latency at a fixed rate (open loop)", "separate OS processes sharing this one host"} {
		assert.Contains(t, string(out), want)
	}

	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rep struct {
		Groups []struct {
			Scenario string `json:"scenario"`
		} `json:"groups"`
	}
	require.NoError(t, json.Unmarshal(b, &rep))
	assert.Len(t, rep.Groups, 8, "2 sizes × 4 scenarios")
	svgs, _ := filepath.Glob(filepath.Join(outDir, "*.svg"))
	hgrms, _ := filepath.Glob(filepath.Join(outDir, "*.hgrm"))
	assert.Len(t, svgs, 2)
	// Per size: the round trip's latency, and the fixed rate's latency,
	// service, lag and wake.
	assert.Len(t, hgrms, 2*(1+4))

	t.Run("attach to running fero servers", func(t *testing.T) { testAttach(ctx, t, bin) })
	t.Run("durable systems", func(t *testing.T) { testDurable(ctx, t, bin) })
	t.Run("both Redis drivers", func(t *testing.T) { testRedisDrivers(ctx, t, bin) })
	t.Run("the original fero", func(t *testing.T) { testOriginal(ctx, t, bin) })
}

// testOriginal runs the original fero (bench/origsut) in each scenario it
// supports, its client being the Node program that fero-bench's client
// process runs in place of a Go connection. It skips where Node is missing
// or the original is not in the cache yet, unless origsut.InstallEnv lets
// it install with npm.
func testOriginal(ctx context.Context, t *testing.T, bin string) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not installed (apt-get install nodejs npm):", err)
	}
	if !origsut.Installed() && os.Getenv(origsut.InstallEnv) == "" {
		t.Skipf("the original fero is not in the cache: set %s=1 to let the test install it with npm", origsut.InstallEnv)
	}
	jsonPath := filepath.Join(t.TempDir(), "original.json")
	out, err := exec.CommandContext(ctx, bin, "run", "--systems", "fero-"+origsut.Version, "-s", "oneway,reqreply,roundtrip",
		"-r", "2000", "--warmup-records", "200", "-n", "50", "--warmup-count", "5",
		"--json", jsonPath, "--progress", "never").CombinedOutput()
	if err != nil && strings.Contains(string(out), origsut.ErrUnavailable.Error()) {
		t.Skip(string(out)) // an install that failed, offline say
	}
	require.NoError(t, err, string(out))
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rep struct {
		Trials []struct {
			Scenario   string            `json:"scenario"`
			Errors     int64             `json:"errors"`
			Records    int64             `json:"records"`
			Milestones []bench.Milestone `json:"milestones"`
			ClientCPU  bench.CPUTimes    `json:"client_cpu"`
			ServerCPU  bench.CPUTimes    `json:"server_cpu"`
		} `json:"trials"`
	}
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Len(t, rep.Trials, 3)
	last := map[string]string{"oneway": bench.Yacks, "reqreply": bench.Sacks}
	for _, tr := range rep.Trials {
		assert.Zero(t, tr.Errors, tr.Scenario)
		assert.Positive(t, tr.Records, tr.Scenario)
		assert.Positive(t, tr.ClientCPU.Total(), tr.Scenario)
		if want, ok := last[tr.Scenario]; ok {
			require.Len(t, tr.Milestones, 2, tr.Scenario)
			assert.Equal(t, bench.Tacks, tr.Milestones[0].Name, tr.Scenario)
			assert.Equal(t, want, tr.Milestones[1].Name, tr.Scenario)
		}
	}
}

// testRedisDrivers runs Redis with the hand-written client and with
// rueidis in every throughput and round-trip scenario: none fails, and the
// report ends naming the faster driver of each.
func testRedisDrivers(ctx context.Context, t *testing.T, bin string) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (apt-get install redis-server):", err)
	}
	jsonPath := filepath.Join(t.TempDir(), "redis.json")
	out, err := exec.CommandContext(ctx, bin, "run", "--systems", "echo,redis,redis-rueidis", "--baseline", "echo",
		"-s", "oneway,reqreply,roundtrip", "-r", "2000", "--warmup-records", "100", "-n", "100", "--warmup-count", "10",
		"--json", jsonPath, "--progress", "never").CombinedOutput()
	require.NoError(t, err, string(out))
	_, races, ok := strings.Cut(string(out), "== Redis peer: the faster driver ==")
	require.True(t, ok, string(out))
	for _, want := range []string{"  oneway · ", "  reqreply · ", "  roundtrip · "} {
		assert.Contains(t, races, want)
	}
	assert.Equal(t, 3, strings.Count(races, "→ faster: redis"), races)
	assert.Equal(t, 3, strings.Count(races, "× echo"), races)

	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rep struct {
		Trials []struct {
			System  string `json:"system"`
			Errors  int64  `json:"errors"`
			Records int64  `json:"records"`
		} `json:"trials"`
	}
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Len(t, rep.Trials, 9, "3 systems × 3 scenarios")
	for _, tr := range rep.Trials {
		assert.Zero(t, tr.Errors, tr.System)
		assert.Positive(t, tr.Records, tr.System)
	}
}

// testDurable runs fero with its data on disk, fsyncing and not, and with
// --fsync the Redis peer where Redis is installed: every system keeps its
// data in --data-dir, which is empty again afterwards, and the report
// gives fero's fsyncs and "n/a" for Redis's. (The systems' own tests cover
// every policy; TestFsyncAddsEachPolicysPair every pair.)
func testDurable(ctx context.Context, t *testing.T, bin string) {
	dataDir := t.TempDir()
	jsonPath := filepath.Join(t.TempDir(), "durable.json")
	args := []string{"run", "-s", "oneway", "-r", "2000", "--warmup-records", "100",
		"--data-dir", dataDir, "--json", jsonPath, "--progress", "never"}
	_, err := exec.LookPath("redis-server")
	redis := err == nil
	if redis {
		args = append(args, "--systems", "fero-never", "--fsync", "group")
	} else {
		t.Log("redis-server not installed (apt-get install redis-server): fero's durable systems only")
		args = append(args, "--systems", "fero-never,fero-group")
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "each server of a durable system keeps a fresh data directory under "+dataDir)
	assert.Contains(t, string(out), "  disk: fsync group · ")
	assert.Contains(t, string(out), "  disk: fsync never · 0 fsyncs/s · records per fsync n/a (no fsync)")
	if redis {
		assert.Contains(t, string(out), "  disk: appendfsync always · fsyncs/s n/a")
	}

	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rep struct {
		Systems []string `json:"systems"`
		Trials  []struct {
			System     string  `json:"system"`
			Errors     int64   `json:"errors"`
			Durability string  `json:"durability"`
			Fsyncs     *uint64 `json:"fsyncs"`
		} `json:"trials"`
	}
	require.NoError(t, json.Unmarshal(b, &rep))
	want := []string{"fero-never", "fero-group"}
	if redis {
		want = append(want, "redis-always")
	}
	assert.Equal(t, want, rep.Systems, "--fsync adds fero-group and its peer")
	require.Len(t, rep.Trials, len(want))
	for _, tr := range rep.Trials {
		assert.Zero(t, tr.Errors, tr.System)
		policy, isFero := strings.CutPrefix(tr.System, "fero-")
		if !isFero {
			assert.Equal(t, "appendfsync "+strings.TrimPrefix(tr.System, "redis-"), tr.Durability, tr.System)
			assert.Nil(t, tr.Fsyncs, "%s: Redis does not count its fsyncs", tr.System)
			continue
		}
		assert.Equal(t, "fsync "+policy, tr.Durability, tr.System)
		require.NotNil(t, tr.Fsyncs, tr.System)
		switch policy {
		case "group":
			// Every ack waits for an fsync made after its write.
			assert.Positive(t, *tr.Fsyncs, tr.System)
		case "never":
			assert.Zero(t, *tr.Fsyncs, tr.System)
		}
	}
	left, err := os.ReadDir(dataDir)
	require.NoError(t, err)
	assert.Empty(t, left, "every server removed its data directory")
}

// testAttach starts two fero servers with `fero-bench server`, as an
// operator would, and runs twice against them with --attach.
func testAttach(ctx context.Context, t *testing.T, bin string) {
	var addrs []string
	for i := range 2 {
		args := []string{"server", "--system", "fero", "--index", strconv.Itoa(i)}
		if i > 0 {
			args = append(args, "--peers", strings.Join(addrs, ","))
		}
		srv := exec.CommandContext(ctx, bin, args...)
		stdout, err := srv.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, srv.Start())
		t.Cleanup(func() {
			_ = srv.Process.Signal(syscall.SIGTERM)
			_ = srv.Wait()
		})
		line, err := bufio.NewReader(stdout).ReadString('\n')
		require.NoError(t, err, "server %d prints its address once ready", i)
		addrs = append(addrs, strings.TrimSpace(line))
	}
	jsonPath := filepath.Join(t.TempDir(), "attach.json")
	run := exec.CommandContext(ctx, bin, "run", "--systems", "fero", "--attach", strings.Join(addrs, ","),
		"-s", "oneway,roundtrip", "-r", "3000", "-n", "100", "--warmup-count", "10", "--warmup-records", "100",
		"--runs", "2", "--json", jsonPath, "--progress", "never")
	out, err := run.CombinedOutput()
	require.NoError(t, err, string(out))
	for _, want := range []string{"attached to 2 server(s) this run did not start", "* replicated:",
		"servers attached: their cpu and RSS not measured", "start-up, before the trial: servers attached"} {
		assert.Contains(t, string(out), want)
	}
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rep struct {
		Trials []struct {
			Attached  bool  `json:"attached"`
			Errors    int64 `json:"errors"`
			Records   int64 `json:"records"`
			Connected int64 `json:"connected_ns"`
			Config    struct {
				Servers int `json:"servers"`
			} `json:"config"`
		} `json:"trials"`
	}
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Len(t, rep.Trials, 4, "2 scenarios × 2 runs, one cluster")
	for i, tr := range rep.Trials {
		assert.True(t, tr.Attached, "trial %d", i)
		assert.Zero(t, tr.Errors, "trial %d", i)
		assert.Positive(t, tr.Records, "trial %d", i)
		assert.Positive(t, tr.Connected, "trial %d", i)
		assert.Equal(t, 2, tr.Config.Servers, "trial %d", i)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"echo", "-m", "x"},
		{"echo", "-l", "0"},
		{"echo", "-s", "nope"},
		{"echo", "-s", "rate"}, // no --rate or --sweep
		{"echo", "--host", "10.0.0.1"},
		{"run", "--systems", "nope"},
		{"run", "--fsync", "sometimes"},
		{"server", "--system", "nope"},
	} {
		cmd := newRoot()
		cmd.SetArgs(args)
		cmd.SetOut(new(nopWriter))
		cmd.SetErr(new(nopWriter))
		assert.Error(t, cmd.Execute(), "%v", args)
	}
}

func TestAttachFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--systems", "echo,fero", "--attach", "127.0.0.1:1"}, "--systems names 2"},
		{[]string{"run", "--systems", "echo", "--attach", "127.0.0.1:1", "-c", "2"}, "-c 2: 1 servers attached"},
		{[]string{"run", "--systems", "echo", "--attach", "127.0.0.1:1", "--sweep", "0.5"}, "give --rate instead"},
		{[]string{"run", "--systems", "fero", "--attach", "127.0.0.1:1 10.0.0.1:2"}, "10.0.0.1:2 is not a loopback address"},
		{[]string{"server", "--system", "echo", "--listen", "0.0.0.0:0"}, "0.0.0.0:0 is not a loopback address"},
		{[]string{"run", "--systems", "echo,fero", "--sweep-base", "fero"}, "--sweep-base: give --sweep too"},
		{[]string{"run", "--systems", "echo,fero", "--sweep", "0.5", "--sweep-base", "redis"}, "--sweep-base redis: not one of --systems"},
		{[]string{"run", "--systems", "fero,fero-1.7.1", "--sweep", "0.5", "--sweep-base", "fero-1.7.1"}, "scenario rate"},
	} {
		cmd := newRoot()
		cmd.SetArgs(c.args)
		cmd.SetOut(new(nopWriter))
		cmd.SetErr(new(nopWriter))
		assert.ErrorContains(t, cmd.Execute(), c.want, "%v", c.args)
	}
}

// TestOriginalsLimits: a run in which the original fero can be measured
// with nothing is refused before anything is installed or started, saying
// why; in a run where it can be measured with some, the rest is left out,
// saying which (the other systems still run it).
func TestOriginalsLimits(t *testing.T) {
	skipped, err := checkLimits([]string{"fero", "fero-1.7.1"}, []bench.Scenario{bench.RequestReply, bench.FixedRate}, []int{1, 3})
	require.NoError(t, err)
	require.Len(t, skipped, 3, "%q", skipped)
	assert.Contains(t, skipped[0], "fero-1.7.1, scenario reqreply, 3 server(s)")
	assert.Contains(t, skipped[1], "scenario rate, 1 server(s)")
	assert.NoError(t, skipTrial("fero-1.7.1", bench.RequestReply, 1))
	assert.ErrorIs(t, skipTrial("fero-1.7.1", bench.RequestReply, 3), origsut.ErrUnsupported)
	assert.NoError(t, skipTrial("fero", bench.FixedRate, 3))

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--systems", "fero-1.7.1", "-c", "2"}, "2 servers"},
		{[]string{"run", "--systems", "fero,fero-1.7.1", "-s", "rate", "--rate", "100"}, "scenario rate"},
		{[]string{"run", "--systems", "fero-1.7.1", "-s", "rate", "--sweep", "0.5"}, "scenario rate"},
	} {
		cmd := newRoot()
		cmd.SetArgs(c.args)
		cmd.SetOut(new(nopWriter))
		cmd.SetErr(new(nopWriter))
		err := cmd.Execute()
		assert.ErrorIs(t, err, origsut.ErrUnsupported, "%v", c.args)
		assert.ErrorContains(t, err, c.want, "%v", c.args)
	}
}

func TestFsyncAddsEachPolicysPair(t *testing.T) {
	got, err := withFsyncPeers([]string{"echo", "redis-always"}, "group, never,group")
	require.NoError(t, err)
	assert.Equal(t, []string{"echo", "redis-always", "fero-group", "fero-never", "redis-no"}, got)
	got, err = withFsyncPeers([]string{"echo"}, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"echo"}, got)
	_, err = withFsyncPeers(nil, "interval=250ms")
	assert.ErrorContains(t, err, "--fsync interval=250ms: want group, interval or never")
	for _, p := range fsyncPeers {
		for _, name := range []string{p.fero, p.redis} {
			sys, err := registry.Lookup(name)
			require.NoError(t, err)
			assert.NotEmpty(t, sys.(bench.Durable).Durability(), name)
		}
	}
}

type nopWriter struct{}

func (*nopWriter) Write(p []byte) (int, error) { return len(p), nil }
