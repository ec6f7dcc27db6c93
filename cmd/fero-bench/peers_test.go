package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/bench"
)

func throughputGroup(sys string, s bench.Scenario, c bench.Config, last string, perSec float64) *bench.Group {
	return &bench.Group{System: sys, Scenario: s, Config: c, Runs: 3, Milestones: []bench.MilestoneSpread{
		{Name: bench.Tacks, RecordsPerSec: bench.Spread{Median: 10 * perSec}},
		{Name: last, RecordsPerSec: bench.Spread{Median: perSec}},
	}}
}

func latencyGroup(sys string, s bench.Scenario, c bench.Config, p50, p99 float64) *bench.Group {
	ls := &bench.LatencySpread{}
	for _, p := range bench.ReportPercentiles {
		v := p99 * p // past p99, anything larger
		switch {
		case p == 50:
			v = p50
		case p == 99:
			v = p99
		}
		ls.Percentiles = append(ls.Percentiles, bench.Spread{Median: v})
	}
	return &bench.Group{System: sys, Scenario: s, Config: c, Runs: 3, Latency: map[string]*bench.LatencySpread{bench.HistLatency: ls}}
}

func TestDriverRacesNameTheFasterRedisDriver(t *testing.T) {
	tp := bench.Config{Size: 100, Records: 200_000, Clients: 1, Servers: 1}
	lat := bench.Config{Size: 100, Clients: 1, Servers: 1}
	rate := bench.Config{Size: 100, Clients: 1, Servers: 1, Rate: 10_000}
	withErrors := throughputGroup("redis-rueidis-always", bench.OneWay, tp, bench.Yacks, 900_000)
	withErrors.Errors = 2
	rep := &bench.Report{Baseline: "echo", Groups: []*bench.Group{
		throughputGroup("echo", bench.OneWay, tp, bench.Yacks, 2_000_000),
		throughputGroup("redis", bench.OneWay, tp, bench.Yacks, 500_000),
		throughputGroup("redis-rueidis", bench.OneWay, tp, bench.Yacks, 1_000_000),
		throughputGroup("redis", bench.RequestReply, tp, bench.Sacks, 400_000),
		throughputGroup("redis-rueidis", bench.RequestReply, tp, bench.Sacks, 100_000),
		latencyGroup("echo", bench.RoundTrip, lat, 20e3, 40e3),
		latencyGroup("redis", bench.RoundTrip, lat, 40e3, 50e3),
		latencyGroup("redis-rueidis", bench.RoundTrip, lat, 50e3, 45e3),
		// At a fixed rate the p99 decides, though rueidis's p50 is lower.
		latencyGroup("redis", bench.FixedRate, rate, 40e3, 300e3),
		latencyGroup("redis-rueidis", bench.FixedRate, rate, 30e3, 600e3),
		// A durable pair: the faster driver had errors, so cannot win.
		throughputGroup("redis-always", bench.OneWay, tp, bench.Yacks, 100_000),
		withErrors,
		// Only one driver ran this configuration: no race.
		throughputGroup("redis", bench.OneWay, bench.Config{Size: 1000, Records: 200_000, Clients: 1, Servers: 1}, bench.Yacks, 1),
		// Not a pair: different Redis configurations.
		throughputGroup("redis-no", bench.RequestReply, tp, bench.Sacks, 1),
		throughputGroup("redis-rueidis-everysec", bench.RequestReply, tp, bench.Sacks, 1),
	}}

	races := driverRaces(rep)
	require.Len(t, races, 5)
	type result struct {
		scenario bench.Scenario
		winner   string
		measure  string
	}
	var got []result
	for _, r := range races {
		w := "-"
		if r.faster >= 0 {
			w = r.groups[r.faster].System
		}
		got = append(got, result{r.groups[0].Scenario, w, r.measure})
	}
	assert.Equal(t, []result{
		{bench.OneWay, "redis-rueidis", "yacks records/s"},
		{bench.RequestReply, "redis", "sacks records/s"},
		{bench.RoundTrip, "redis", "latency p50 µs"},
		{bench.FixedRate, "redis", "latency p99 µs"},
		{bench.OneWay, "redis-always", "yacks records/s"},
	}, got)

	var b bytes.Buffer
	require.NoError(t, writeDriverRaces(&b, rep))
	out := b.String()
	for _, want := range []string{
		"== Redis peer: the faster driver ==",
		"  oneway · 200,000 records × 100 B · 1 client · 1 server · yacks records/s: redis 500,000, redis-rueidis 1,000,000 → faster: redis-rueidis (2.00×) · 0.50× echo\n",
		"  reqreply · 200,000 records × 100 B · 1 client · 1 server · sacks records/s: redis 400,000, redis-rueidis 100,000 → faster: redis (4.00×)\n",
		"  roundtrip · 100 B · 1 client · 1 server · latency p50 µs: redis 40.00, redis-rueidis 50.00 → faster: redis (1.25×) · 2.00× echo\n",
		"latency p99 µs: redis 300.00, redis-rueidis 600.00 → faster: redis (2.00×)\n",
		"redis-always 100,000, redis-rueidis-always 900,000 (2 errors) → faster: redis-always · 0.05× echo\n",
	} {
		assert.Contains(t, out, want)
	}

	// Nothing to say without both drivers of one Redis.
	b.Reset()
	require.NoError(t, writeDriverRaces(&b, &bench.Report{Groups: rep.Groups[:2]}))
	assert.Empty(t, b.String())
	// Every pair names registered systems.
	for _, pair := range redisDrivers {
		for _, name := range pair {
			_, err := registry.Lookup(name)
			assert.NoError(t, err)
		}
	}
	assert.Equal(t, "-1,234", digits(-1234))
	assert.True(t, strings.HasPrefix(digits(100), "100"))
}
