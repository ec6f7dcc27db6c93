package fero

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// getJSON fetches path from h and decodes its JSON answer into v,
// returning the status.
func getJSON(t *testing.T, h http.Handler, path string, v any) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"), "%s: %s", path, rec.Body)
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), v), "%s: %s", path, rec.Body)
	return rec.Code
}

// TestAdminAPI (issue 19): a node's admin API (docs/admin-api.md) shows
// the cluster it is in: every member connected, every partition with an
// owner and its replicas among them, this node's offsets, per-second rates
// and latencies of the writes it took once it has taken some, and the
// membership events it saw, including a member's leaving. Every answer
// carries the API version; unknown paths answer a JSON 404.
func TestAdminAPI(t *testing.T) {
	c := newTestCluster(t, 3)
	var rs []*Resource
	for _, id := range []string{"a", "b", "c"} {
		rs = append(rs, c.open(id, WithMetrics(prometheus.NewRegistry())))
	}
	c.settle(3)
	a := rs[0]
	h := a.AdminHandler()
	ctx := ctxT(t)

	type overview struct {
		API  int `json:"api"`
		Node struct {
			ID         string `json:"id"`
			Partitions int    `json:"partitions"`
			MapVersion string `json:"map_version"`
			Ready      bool   `json:"ready"`
		} `json:"node"`
		Members []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			Owned  int    `json:"owned"`
		} `json:"members"`
	}
	require.Eventually(t, func() bool {
		var o overview
		if getJSON(t, h, "/api/v1/overview", &o) != http.StatusOK || !o.Node.Ready || len(o.Members) != 3 {
			return false
		}
		owned := 0
		for _, m := range o.Members {
			if m.Status != "connected" {
				return false
			}
			owned += m.Owned
		}
		return owned == o.Node.Partitions
	}, time.Minute, 20*time.Millisecond, "the overview never showed three connected members owning every partition")
	var o overview
	require.Equal(t, http.StatusOK, getJSON(t, h, "/api/v1/overview", &o))
	require.Equal(t, 1, o.API)
	require.Equal(t, "a", o.Node.ID)
	require.Positive(t, o.Node.Partitions)
	require.Regexp(t, `^[0-9a-f]{16}$`, o.Node.MapVersion, "16 hex digits, as fero status shows it")
	rep, err := a.n.Report(ctx)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%016x", rep.MapVersion), o.Node.MapVersion, "the version fero status shows")

	for i := range 200 {
		require.NoError(t, retry(ctx, func() error { return a.Update(ctx, fmt.Sprintf("k%d", i), i, Majority) }))
	}

	type partitions struct {
		API        int    `json:"api"`
		MapVersion string `json:"map_version"`
		Partitions []struct {
			P        int      `json:"p"`
			Owner    string   `json:"owner"`
			Replicas []string `json:"replicas"`
			Role     string   `json:"role"`
			Offset   uint64   `json:"offset"`
			Keys     int      `json:"keys"`
		} `json:"partitions"`
	}
	var ps partitions
	require.Equal(t, http.StatusOK, getJSON(t, h, "/api/v1/partitions", &ps))
	require.Equal(t, 1, ps.API)
	require.Len(t, ps.Partitions, o.Node.Partitions)
	ids := []string{"a", "b", "c"}
	keys, offsets := 0, uint64(0)
	for i, p := range ps.Partitions {
		require.Equal(t, i, p.P)
		require.Contains(t, ids, p.Owner, "partition %d", p.P)
		require.Len(t, p.Replicas, 2, "partition %d: replicas", p.P)
		require.NotContains(t, p.Replicas, p.Owner, "partition %d", p.P)
		wantRole := "replica"
		if p.Owner == "a" {
			wantRole = "owner"
		}
		require.Equal(t, wantRole, p.Role, "partition %d", p.P)
		keys += p.Keys
		offsets += p.Offset
	}
	require.Equal(t, 200, keys)
	require.GreaterOrEqual(t, offsets, uint64(200))

	type series struct {
		API     int `json:"api"`
		Samples []struct {
			T          int64    `json:"t"`
			Commits    float64  `json:"commits"`
			Writes     *float64 `json:"writes"`
			WriteP50ms *float64 `json:"write_p50_ms"`
			WriteP99ms *float64 `json:"write_p99_ms"`
		} `json:"samples"`
	}
	// The sampler reads once a second: the writes above show up as one or
	// two samples with a rate and latencies.
	require.Eventually(t, func() bool {
		var s series
		getJSON(t, h, "/api/v1/series", &s)
		total := 0.0
		for _, x := range s.Samples {
			if x.Writes != nil {
				total += *x.Writes
			}
		}
		return total > 0
	}, 10*time.Second, 50*time.Millisecond, "no sample counted the writes")
	var s series
	getJSON(t, h, "/api/v1/series", &s)
	for _, x := range s.Samples {
		require.NotNil(t, x.Writes, "with metrics every sample has a write rate")
		if *x.Writes > 0 {
			require.NotNil(t, x.WriteP50ms)
			require.NotNil(t, x.WriteP99ms)
			require.Greater(t, *x.WriteP50ms, 0.0)
			require.GreaterOrEqual(t, *x.WriteP99ms, *x.WriteP50ms)
		}
	}

	type events struct {
		API    int `json:"api"`
		Events []struct {
			Member string `json:"member"`
			Status string `json:"status"`
		} `json:"events"`
	}
	require.NoError(t, rs[2].Close())
	require.Eventually(t, func() bool {
		var e events
		getJSON(t, h, "/api/v1/events", &e)
		return slices.ContainsFunc(e.Events, func(x struct {
			Member string `json:"member"`
			Status string `json:"status"`
		}) bool {
			return x.Member == "c" && x.Status == "removed"
		})
	}, 30*time.Second, 50*time.Millisecond, "the events never showed c leaving")
	// A member that left is no longer listed (the events said it left).
	var after overview
	require.Equal(t, http.StatusOK, getJSON(t, h, "/api/v1/overview", &after))
	require.Len(t, after.Members, 2, "the overview's members: %+v", after.Members)

	var e struct {
		API   int    `json:"api"`
		Error string `json:"error"`
	}
	require.Equal(t, http.StatusNotFound, getJSON(t, h, "/api/v1/nothing", &e))
	require.Equal(t, 1, e.API)
	require.Contains(t, e.Error, "/api/v1/nothing")

	// After Close, the API answers 503.
	require.NoError(t, a.Close())
	rec := httptest.NewRecorder()
	a.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/overview", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
}
