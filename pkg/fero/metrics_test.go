package fero

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// counterOf returns the value of the counter (or a histogram's count) of
// name in reg whose labels include every pair of want.
func counterOf(t *testing.T, reg *prometheus.Registry, name string, want ...string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, mf := range fams {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(want); i += 2 {
				if labels[want[i]] != want[i+1] {
					continue next
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				total += m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				total += float64(m.GetHistogram().GetSampleCount())
			case dto.MetricType_GAUGE:
				total += m.GetGauge().GetValue()
			}
		}
	}
	return total
}

// TestMetrics (issue 19): WithMetrics registers a node's metrics, counts
// and times its callers' writes by wait and result and its calls, reads
// the node's own counters at scrape time, and unregisters them on Close.
// Ready says when a server serves its share.
func TestMetrics(t *testing.T) {
	c := newTestCluster(t, 3)
	regs := make([]*prometheus.Registry, 3)
	var rs []*Resource
	handler := func(ctx context.Context, req *Request) (any, error) {
		if req.Verb == "ECHO" {
			return req.Key, nil
		}
		return req.Next(ctx)
	}
	for i, id := range []string{"a", "b", "c"} {
		regs[i] = prometheus.NewRegistry()
		rs = append(rs, c.open(id, WithMetrics(regs[i]), WithHandler(handler)))
	}
	c.settle(3)
	ctx := ctxT(t)
	require.Eventually(t, func() bool {
		for _, r := range rs {
			if r.Ready(ctx) != nil {
				return false
			}
		}
		return true
	}, time.Minute, 20*time.Millisecond, "servers never ready")

	a := rs[0]
	for i := range 10 {
		require.NoError(t, retry(ctx, func() error { return a.Update(ctx, fmt.Sprintf("k%d", i), i, Majority) }))
	}
	for i := range 5 {
		require.NoError(t, retry(ctx, func() error { return a.Update(ctx, fmt.Sprintf("a%d", i), i, Ack) }))
	}
	require.NoError(t, a.Update(ctx, "n", 1, NoWait))
	require.Error(t, a.Add(ctx, "k0", 1, Majority)) // exists
	for i := range 4 {
		var got string
		require.NoError(t, retry(ctx, func() error { return a.Call(ctx, "ECHO", fmt.Sprintf("e%d", i), nil, &got) }))
	}

	reg := regs[0]
	require.Equal(t, 10.0, counterOf(t, reg, "fero_writes_total", "resource", "test", "wait", "majority", "result", "ok"))
	require.Equal(t, 5.0, counterOf(t, reg, "fero_writes_total", "wait", "ack", "result", "ok"))
	require.Equal(t, 1.0, counterOf(t, reg, "fero_writes_total", "wait", "none", "result", "queued"))
	require.Equal(t, 1.0, counterOf(t, reg, "fero_writes_total", "wait", "majority", "result", "failed_precondition"))
	// Only the successful writes are timed: the refused ADD is counted by
	// its code above, not in the latency (issue 43).
	require.Equal(t, 10.0, counterOf(t, reg, "fero_write_duration_seconds", "wait", "majority"))
	require.Equal(t, 5.0, counterOf(t, reg, "fero_write_duration_seconds", "wait", "ack"))
	require.Equal(t, 4.0, counterOf(t, reg, "fero_calls_total", "result", "ok"))
	require.Equal(t, 4.0, counterOf(t, reg, "fero_call_duration_seconds"))
	require.Equal(t, float64(a.node().Store().Partitions()), counterOf(t, reg, "fero_partitions"))
	require.Equal(t, 1.0, counterOf(t, reg, "fero_voting"))
	gained := counterOf(t, reg, "fero_ownership_gained_total")
	require.Positive(t, gained)
	require.Equal(t, gained, counterOf(t, reg, "fero_sync_duration_seconds"), "a sync timed for every ownership gained")
	// The owners committed every write that succeeded (16), and every
	// server applied or committed each.
	commits := 0.0
	for _, r := range regs {
		commits += counterOf(t, r, "fero_commits_total")
	}
	require.Equal(t, 16.0, commits)

	require.NoError(t, a.Close())
	require.Zero(t, counterOf(t, reg, "fero_partitions"), "unregistered on Close")
	require.Error(t, a.Ready(ctx), "a closed resource is not ready")
}

// TestCatchUpMetrics: a server that joins a formed cluster is a learner
// until it has caught up; the catch-up is counted and timed once its vote
// counts.
func TestCatchUpMetrics(t *testing.T) {
	c := newTestCluster(t, 4)
	a := c.open("a")
	c.settle(1)
	c.voting(1)
	ctx := ctxT(t)
	for i := range 50 {
		require.NoError(t, retry(ctx, func() error { return a.Update(ctx, fmt.Sprintf("k%d", i), i) }))
	}
	reg := prometheus.NewRegistry()
	c.open("b", WithMetrics(reg))
	c.settle(2)
	c.voting(2)
	require.Eventually(t, func() bool { return counterOf(t, reg, "fero_catchups_total") == 1 }, 30*time.Second, 10*time.Millisecond,
		"b's catch-up was not counted")
	require.Positive(t, counterOf(t, reg, "fero_catchup_seconds_total"))
	require.Equal(t, counterOf(t, reg, "fero_catchup_seconds_total"), counterOf(t, reg, "fero_catchup_last_seconds"))
}
