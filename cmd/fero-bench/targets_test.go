package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/bench"
)

// TestTargetsFromAReport: each target is the ratio of the right two
// figures, against the faster Redis driver, and says met or short; a
// target the run has no groups for says what it needs.
func TestTargetsFromAReport(t *testing.T) {
	tp := bench.Config{Size: 100, Records: 1_000_000, Clients: 1, Servers: 1}
	tp3 := bench.Config{Size: 100, Records: 1_000_000, Clients: 1, Servers: 3}
	lat := bench.Config{Size: 100, Clients: 1, Servers: 1}
	rate := bench.Config{Size: 100, Clients: 1, Servers: 1, Rate: 100_000}

	feroOW := throughputGroup("fero", bench.OneWay, tp, bench.Yacks, 400_000)
	feroOW.ClientCPU, feroOW.ServerCPU = bench.Spread{Median: 2}, bench.Spread{Median: 2} // 4 µs a write
	feroOW.ServerMaxRSS = bench.Spread{Median: 300e6}
	redisOW := throughputGroup("redis", bench.OneWay, tp, bench.Yacks, 800_000)
	redisOW.ClientCPU, redisOW.ServerCPU = bench.Spread{Median: 0.5}, bench.Spread{Median: 1.5} // 2 µs
	three := throughputGroup("fero", bench.OneWay, tp3, bench.Yacks, 300_000)
	three.Milestones = append(three.Milestones, bench.MilestoneSpread{Name: bench.Replicated, RecordsPerSec: bench.Spread{Median: 250_000}})
	rep := &bench.Report{Baseline: "echo", Groups: []*bench.Group{
		feroOW, three, redisOW,
		throughputGroup("redis-rueidis", bench.OneWay, tp, bench.Yacks, 100_000),
		throughputGroup("fero", bench.RequestReply, tp, bench.Sacks, 600_000),
		throughputGroup("redis", bench.RequestReply, tp, bench.Sacks, 300_000),
		throughputGroup("redis-rueidis", bench.RequestReply, tp, bench.Sacks, 500_000),
		throughputGroup("fero-1.7.1", bench.RequestReply, tp, bench.Sacks, 40_000),
		latencyGroup("fero", bench.RoundTrip, lat, 52e3, 90e3),
		latencyGroup("echo", bench.RoundTrip, lat, 40e3, 60e3),
		latencyGroup("redis", bench.RoundTrip, lat, 50e3, 70e3),
		latencyGroup("fero", bench.FixedRate, rate, 50e3, 100e3),
		latencyGroup("echo", bench.FixedRate, rate, 40e3, 80e3),
	}}
	got := map[string]target{}
	for _, tg := range targets(rep) {
		got[tg.name] = tg
	}
	check := func(name string, ratio float64, met bool) {
		t.Helper()
		require.Contains(t, got, name)
		assert.InDelta(t, ratio, got[name].ratio, 1e-9, name)
		assert.Equal(t, met, got[name].met, name)
	}
	check("yacks ÷ Redis", 0.5, false)           // 400K ÷ redis's 800K (rueidis slower)
	check("sacks ÷ Redis", 600.0/500, true)      // ÷ rueidis's 500K, the faster driver
	check("round trip p50 ÷ echo", 1.3, true)    // 52 ÷ 40, at the bound
	check("round trip p50 ÷ Redis", 1.04, false) // 52 ÷ 50
	// latencyGroup puts p99.9 at 99.9 × p99.
	check("round trip p99.9 ÷ echo", 90.0/60, true)
	check("CPU per write ÷ Redis", 2, false)
	check("replicated to 3 ÷ 1-server yacks", 250.0/400, true)
	check("fixed rate p99.9 ÷ echo", 100.0/80, true)
	check("server peak RSS ÷ payload", 3, false) // 300 MB for 1M × 100 B
	check("sacks ÷ fero 1.7.1", 15, false)
	assert.Zero(t, got["durable yacks ÷ Redis always"].ratio)
	assert.Contains(t, got["durable yacks ÷ Redis always"].missing, "--fsync group")

	var b bytes.Buffer
	require.NoError(t, writeTargets(&b, rep))
	out := b.String()
	assert.Contains(t, out, "Speed targets")
	assert.Contains(t, out, "5 of 10 measured targets met; 1 not measured")
	assert.Contains(t, out, "redis-rueidis 500,000 rec/s")

	// Without fero in the run there is nothing to judge.
	b.Reset()
	require.NoError(t, writeTargets(&b, &bench.Report{Groups: rep.Groups[2:4]}))
	assert.Empty(t, b.String())
}
