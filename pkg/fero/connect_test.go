package fero

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memStore is a Store and Replayer in memory, as a database would be.
type memStore struct {
	mu       sync.Mutex
	data     map[string]any
	restored int
	replayed []Change
}

func (s *memStore) Restore(ctx context.Context, put func(string, any) error) error {
	s.mu.Lock()
	s.restored++
	data := make(map[string]any, len(s.data))
	for k, v := range s.data {
		data[k] = v
	}
	s.mu.Unlock()
	for k, v := range data {
		if err := put(k, v); err != nil {
			return err
		}
	}
	return nil
}

func (s *memStore) Replay(ctx context.Context, c Change) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replayed = append(s.replayed, c)
	switch c.Type {
	case Remove:
		delete(s.data, c.Key)
	default:
		var v any
		if err := c.Decode(&v); err != nil {
			return err
		}
		s.data[c.Key] = v
	}
	return nil
}

func (s *memStore) snapshot() (map[string]any, int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]any, len(s.data))
	for k, v := range s.data {
		out[k] = v
	}
	return out, s.restored, len(s.replayed)
}

// TestConnect: the first server restores the store's state after the
// connect wait; a server that finds the cluster does not; changes are
// replayed into the store once each, by the owner that committed them.
func TestConnect(t *testing.T) {
	db := &memStore{data: map[string]any{}}
	for i := range 50 {
		db.data[fmt.Sprint("row", i)] = int64(i)
	}
	c := newTestCluster(t, 7)
	start := time.Now()
	a := c.open("a", WithConnect(db), WithConnectWait(300*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "Open waited for a cluster")
	assert.Equal(t, 50, a.Len(), "restored before Open returned")
	_, restored, _ := db.snapshot()
	assert.Equal(t, 1, restored)

	b := c.open("b", WithConnect(db), WithConnectWait(5*time.Second))
	c.settle(2)
	_, restored, _ = db.snapshot()
	assert.Equal(t, 1, restored, "a node that found the cluster restored again")
	c.converged([]*Resource{a, b}, 50)

	// Replay: each change once, into the shared store. The restore's own
	// writes are changes too, and come back first.
	require.Eventually(t, func() bool { _, _, n := db.snapshot(); return n == 50 }, 10*time.Second, 10*time.Millisecond)
	ctx := ctxT(t)
	_, _, before := db.snapshot()
	for i := range 20 {
		require.NoError(t, retry(ctx, func() error { return b.Update(ctx, fmt.Sprint("row", i), "changed", Majority) }))
	}
	require.NoError(t, retry(ctx, func() error { return a.Remove(ctx, "row49", Majority) }))
	require.Eventually(t, func() bool {
		_, _, n := db.snapshot()
		return n-before == 21
	}, 10*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // room for a duplicate to show up
	data, _, n := db.snapshot()
	assert.Equal(t, 21, n-before, "each change replayed exactly once across the cluster")
	assert.Len(t, data, 49)
	assert.Equal(t, "changed", data["row3"])
	assert.EqualValues(t, 30, data["row30"])
}

// TestConnectReplayAll: with WithReplayAll every node replays what it
// applies, into a store of its own.
func TestConnectReplayAll(t *testing.T) {
	c := newTestCluster(t, 8)
	dbs := []*memStore{{data: map[string]any{"seed": "x"}}, {data: map[string]any{}}}
	a := c.open("a", WithConnect(dbs[0]), WithReplayAll(), WithConnectWait(200*time.Millisecond))
	b := c.open("b", WithConnect(dbs[1]), WithReplayAll())
	c.settle(2)
	c.converged([]*Resource{a, b}, 1)
	ctx := ctxT(t)
	for i := range 10 {
		require.NoError(t, retry(ctx, func() error { return a.Update(ctx, fmt.Sprint("k", i), i, Majority) }))
	}
	for _, db := range dbs {
		require.Eventually(t, func() bool {
			data, _, _ := db.snapshot()
			return len(data) == 11
		}, 10*time.Second, 10*time.Millisecond)
	}
	_, restoredB, _ := dbs[1].snapshot()
	assert.Zero(t, restoredB)
}

// TestHistoryCapSnapshotSync: with a history of 5 commits per partition,
// a node that joins after 300 writes cannot replay the log from the start;
// it syncs from snapshots plus the tail and ends identical.
func TestHistoryCapSnapshotSync(t *testing.T) {
	c := newTestCluster(t, 9)
	a, b := c.open("a", WithHistoryMax(5)), c.open("b", WithHistoryMax(5))
	c.settle(2)
	ctx := ctxT(t)
	for i := range 300 {
		require.NoError(t, retry(ctx, func() error { return a.Update(ctx, fmt.Sprint("k", i%100), i, Majority) }))
	}
	late := c.open("late", Client(), WithHistoryMax(5))
	c.settle(2)
	c.converged([]*Resource{a, b, late}, 100)
	assert.NotZero(t, late.Stats().Restored, "the late node synced without a snapshot: %+v", late.Stats())
	st, err := late.node().Status(ctx)
	require.NoError(t, err)
	for _, p := range st {
		assert.LessOrEqual(t, int(p.Position.Offset-(p.Oldest-1)), 5, "partition %d keeps more than the cap", p.Partition)
	}
	v, ok := late.Get("k42")
	require.True(t, ok)
	assert.EqualValues(t, 242, v)
}

// TestRequireSeeds: with WithRequireSeeds, Open fails (CodeUnavailable)
// when no node answers at a seed within the wait, naming each seed and why
// it failed, and returns once a seed answers; without seeds it is refused.
func TestRequireSeeds(t *testing.T) {
	c := newTestCluster(t, 43)
	nobody := "127.0.0.9:1"
	start := time.Now()
	_, err := Open(ctxT(t), "test", append(c.options("alone"), WithSeeds(nobody), WithRequireSeeds(300*time.Millisecond))...)
	require.Equal(t, CodeUnavailable, CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "no seed answered within 300ms: "+nobody+" (fero: memnet: unreachable: "+nobody+"); this node must join its cluster through a seed")
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "Open waited for a seed")

	_, err = Open(ctxT(t), "test", append(c.options("noseeds"), WithRequireSeeds(time.Second))...)
	require.Equal(t, CodeInvalidArgument, CodeOf(err), "%v", err)

	c.open("a")
	b := c.open("b", WithRequireSeeds(10*time.Second))
	require.True(t, slices.ContainsFunc(b.Members(), func(m Member) bool { return m.ID == "a" }), "b opened joined to a")
}
