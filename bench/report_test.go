package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSpreadOf(t *testing.T) {
	assert.Equal(t, Spread{Median: 2, Min: 1, Max: 9}, SpreadOf([]float64{9, 1, 2}))
	assert.Equal(t, Spread{Median: 2.5, Min: 1, Max: 9}, SpreadOf([]float64{9, 1, 2, 3}))
	assert.Equal(t, Spread{}, SpreadOf(nil))
}

func TestWriteTableAligns(t *testing.T) {
	var b bytes.Buffer
	writeTable(&b, "  ", [][]string{{"µs", "p50", "max"}, {"latency", "21.50", "1200"}, {"lag", "1.00*", "3"}})
	assert.Equal(t, ""+
		"  µs         p50   max\n"+
		"  latency  21.50  1200\n"+
		"  lag      1.00*     3\n", b.String())
}

// latencyTrial makes a synthetic result whose histogram holds n values
// spread evenly over [base, 2*base).
func latencyTrial(sys string, run int, n int, base time.Duration) TrialResult {
	h := NewRecorder()
	for i := 0; i < n; i++ {
		h.Record(base + time.Duration(i)*base/time.Duration(n))
	}
	tr := TrialResult{Trial: Trial{Run: run, System: sys, Scenario: RoundTrip, Config: Config{Size: 100, Clients: 1, Servers: 1}},
		Records: int64(n), Sent: int64(n), Window: time.Second, hists: map[string]*Recorder{HistLatency: h},
		Summaries: map[string]Summary{HistLatency: h.Summarize()}}
	return tr
}

func throughputTrial(sys string, run int, tacks, last time.Duration) TrialResult {
	return TrialResult{Trial: Trial{Run: run, System: sys, Scenario: OneWay, Config: Config{Size: 100, Records: 1_000_000, Clients: 1, Servers: 1}},
		Records: 1_000_000, Sent: 1_000_000, Bytes: 100_000_000, Window: last,
		Milestones: []Milestone{{Tacks, tacks}, {Yacks, last}}}
}

func TestReportMediansRatiosAndText(t *testing.T) {
	results := []TrialResult{
		throughputTrial("echo", 1, 100*time.Millisecond, 200*time.Millisecond),
		throughputTrial("fero", 1, 400*time.Millisecond, 800*time.Millisecond),
		latencyTrial("echo", 1, 1000, 20*time.Microsecond),
		latencyTrial("fero", 1, 1000, 40*time.Microsecond),
		throughputTrial("echo", 2, 100*time.Millisecond, 250*time.Millisecond),
		throughputTrial("fero", 2, 400*time.Millisecond, 1000*time.Millisecond),
		latencyTrial("echo", 2, 1000, 20*time.Microsecond),
		latencyTrial("fero", 2, 1000, 40*time.Microsecond),
	}
	rep := BuildReport(Environment{GoVersion: "go1.x", CPU: CPUInfo{Model: "Test CPU", Count: 2}, Topology: "one host"}, Params{Count: 1000, Host: "127.0.0.1"}, []string{"echo", "fero"}, "echo", 2, results)
	require.Len(t, rep.Groups, 4)
	g := rep.Groups[0]
	assert.Equal(t, 2, g.Runs)
	// yacks: 1M records in 200 and 250 ms.
	assert.Equal(t, Spread{Median: 4.5e6, Min: 4e6, Max: 5e6}, g.Milestones[1].RecordsPerSec)
	assert.InDelta(t, 450, g.Milestones[1].MBPerSec.Median, 1e-9)

	var b bytes.Buffer
	require.NoError(t, rep.WriteText(&b))
	out := b.String()
	for _, want := range []string{
		"throughput (closed loop, pipelined): one-way",
		"unloaded round trip (sequential ping-pong)",
		"* tacks:", "* yacks:", "10,000,000 records/s",
		"0.25× echo", // fero's tacks rate against echo's
		"× echo", "2.00×",
		"p99.99", "p99.999", "*", // 1000 samples cannot resolve p99.99
		"Test CPU × 2", "MB = 10^6 bytes", "median [min … max]", "one host",
	} {
		assert.Contains(t, out, want)
	}

	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var back map[string]any
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	assert.Contains(t, back, "environment")
	assert.Len(t, back["groups"], 4)
}

func TestWriteFilesHgrmAndSVG(t *testing.T) {
	results := []TrialResult{latencyTrial("echo", 1, 5000, 20*time.Microsecond), latencyTrial("fero", 1, 5000, 30*time.Microsecond)}
	rep := BuildReport(Environment{}, Params{}, []string{"echo", "fero"}, "echo", 1, results)
	dir := t.TempDir()
	paths, err := rep.WriteFiles(dir)
	require.NoError(t, err)
	require.Len(t, paths, 3)

	hgrm, err := os.ReadFile(filepath.Join(dir, "echo_roundtrip_m100_l1_c1_latency.hgrm"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(hgrm), " Value\tPercentile\tTotalCount\t1/(1-Percentile)"))
	assert.Contains(t, string(hgrm), "Total count    =         5000")
	// Values are in microseconds: the median of [20, 40) µs.
	assert.Contains(t, string(hgrm), "      29.")

	svg, err := os.ReadFile(filepath.Join(dir, "roundtrip.svg"))
	require.NoError(t, err)
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "the chart is well-formed XML")
	}
	for _, want := range []string{"50%", "90%", "99%", "99.9%", "<polyline", "echo · 100 B", "fero · 100 B", "latency (µs, log scale)"} {
		assert.Contains(t, string(svg), want)
	}
	assert.Equal(t, 2, strings.Count(string(svg), "<polyline"))
}

func TestPercentileX(t *testing.T) {
	assert.InDelta(t, 0, percentileX(0), 1e-12)
	assert.InDelta(t, 1, percentileX(90), 1e-12)
	assert.InDelta(t, 3, percentileX(99.9), 1e-9)
}

func TestFixedRateNoteNamesTheTick(t *testing.T) {
	note := func(tick time.Duration) string {
		var b bytes.Buffer
		r := &Report{Params: Params{Tick: tick, Warmup: time.Second, Duration: 2 * time.Second, Timeout: time.Second}}
		r.writeScenarioNote(&b, FixedRate)
		return b.String()
	}
	assert.Contains(t, note(50*time.Microsecond), "the generator sleeps at least 50µs and sends what fell due meanwhile together")
	assert.Contains(t, note(0), "the generator sleeps until each send is due")
	assert.NotContains(t, note(0), "at least 0s")
}

func TestFsyncFigures(t *testing.T) {
	fsyncs := func(n uint64) *uint64 { return &n }
	durable := func(sys, policy string, run int, last time.Duration, n *uint64) TrialResult {
		tr := throughputTrial(sys, run, last/2, last)
		tr.Durability, tr.Fsyncs = policy, n
		return tr
	}
	results := []TrialResult{
		durable("fero-group", "fsync group", 1, time.Second, fsyncs(1000)),
		durable("fero-group", "fsync group", 2, 2*time.Second, fsyncs(4000)),
		durable("fero-never", "fsync never", 1, time.Second, fsyncs(0)),
		durable("fero-never", "fsync never", 2, time.Second, fsyncs(0)),
		durable("redis-always", "appendfsync always", 1, time.Second, nil),
		durable("redis-always", "appendfsync always", 2, time.Second, nil),
		throughputTrial("fero", 1, time.Second/2, time.Second),
		throughputTrial("fero", 2, time.Second/2, time.Second),
	}
	// The replicated milestone is later than yacks: fsyncs count to it.
	results[0].Milestones = append(results[0].Milestones, Milestone{Replicated, 2 * time.Second})
	rep := BuildReport(Environment{}, Params{DataDir: "/data"}, []string{"fero-group", "fero-never", "redis-always", "fero"}, "", 2, results)
	require.Len(t, rep.Groups, 4)

	group, never, redis, memory := rep.Groups[0], rep.Groups[1], rep.Groups[2], rep.Groups[3]
	assert.Equal(t, "fsync group", group.Durability)
	// 1,000 fsyncs over 2 s and 4,000 over 2 s; a million records each.
	assert.Equal(t, &Spread{Median: 1250, Min: 500, Max: 2000}, group.FsyncsPerSec)
	assert.Equal(t, &Spread{Median: 625, Min: 250, Max: 1000}, group.RecordsPerFsync)
	assert.Equal(t, &Spread{}, never.FsyncsPerSec)
	assert.Nil(t, never.RecordsPerFsync, "no fsync, no ratio")
	assert.Equal(t, "appendfsync always", redis.Durability)
	assert.Nil(t, redis.FsyncsPerSec)
	assert.Empty(t, memory.Durability)

	var b bytes.Buffer
	require.NoError(t, rep.WriteText(&b))
	out := b.String()
	for _, want := range []string{
		"disk:     each server of a durable system keeps a fresh data directory under /data",
		"  disk: fsync group · 1250 [500 … 2000] fsyncs/s · 625.0 [250.0 … 1000.0] records per fsync\n",
		"  disk: fsync never · 0 fsyncs/s · records per fsync n/a (no fsync)\n",
		"  disk: appendfsync always · fsyncs/s n/a · records per fsync n/a (the system does not count its fsyncs)\n",
	} {
		assert.Contains(t, out, want)
	}
	assert.Equal(t, 3, strings.Count(out, "  disk: "), "none for the in-memory system")

	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js), "no infinite ratio")
	assert.Contains(t, js.String(), `"fsyncs": 0`)
	assert.Contains(t, js.String(), `"records_per_fsync"`)
}
