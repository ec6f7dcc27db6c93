package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
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

	jsonPath := filepath.Join(dir, "report.json")
	outDir := filepath.Join(dir, "out")
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
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"echo", "-m", "x"},
		{"echo", "-l", "0"},
		{"echo", "-s", "nope"},
		{"echo", "-s", "rate"}, // no --rate or --sweep
		{"echo", "--host", "10.0.0.1"},
		{"run", "--systems", "nope"},
	} {
		cmd := newRoot()
		cmd.SetArgs(args)
		cmd.SetOut(new(nopWriter))
		cmd.SetErr(new(nopWriter))
		assert.Error(t, cmd.Execute(), "%v", args)
	}
}

type nopWriter struct{}

func (*nopWriter) Write(p []byte) (int, error) { return len(p), nil }
