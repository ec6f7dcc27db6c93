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
	} {
		cmd := newRoot()
		cmd.SetArgs(c.args)
		cmd.SetOut(new(nopWriter))
		cmd.SetErr(new(nopWriter))
		assert.ErrorContains(t, cmd.Execute(), c.want, "%v", c.args)
	}
}

type nopWriter struct{}

func (*nopWriter) Write(p []byte) (int, error) { return len(p), nil }
