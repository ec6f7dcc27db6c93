package fero

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// twoNodesAndARemote starts servers a and b and dials a Remote to a,
// closed when the test ends.
func twoNodesAndARemote(t *testing.T) (c *testCluster, a, b *Resource, ctx context.Context, rc *Remote) {
	c = newTestCluster(t, 10)
	a, b = c.open("a"), c.open("b")
	c.settle(2)
	ctx = ctxT(t)
	rc, err := Dial(ctx, a.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })
	return c, a, b, ctx, rc
}

// TestRemote: a process outside the cluster writes, reads and tails
// through one node, which forwards what it does not own.
func TestRemote(t *testing.T) {
	c, a, b, ctx, rc := twoNodesAndARemote(t)

	tailCtx, stopTail := context.WithCancel(ctx)
	defer stopTail()
	tailed := make(chan TailChange, 100)
	tailDone := make(chan error, 1)
	go func() {
		defer close(tailDone)
		for ch, err := range rc.Tail(tailCtx) {
			if err != nil {
				tailDone <- err
				return
			}
			tailed <- ch
		}
	}()

	for i := range 20 {
		require.NoError(t, retry(ctx, func() error { return rc.Update(ctx, fmt.Sprint("k", i), i) }))
	}
	for i := range 20 {
		var v int
		ok, err := rc.Get(ctx, fmt.Sprint("k", i), &v)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, i, v)
	}
	var v int
	ok, err := rc.Get(ctx, "missing", &v)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, CodeFailedPrecondition, CodeOf(rc.Add(ctx, "k1", 5)))
	require.NoError(t, rc.Remove(ctx, "k1"))
	assert.Equal(t, CodeUnimplemented, CodeOf(rc.Call(ctx, "NOPE", "k2", nil, nil)))
	c.converged([]*Resource{a, b}, 19)

	st, err := rc.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, "a", st.ID)
	assert.Equal(t, "test", st.Resource)
	assert.Equal(t, 19, st.Keys)
	assert.Equal(t, a.Digest(), st.Digest)
	require.Len(t, st.Members, 2)
	assert.Equal(t, 32, st.Members[0].Owned+st.Members[1].Owned)
	assert.Equal(t, 32, st.Partitions)

	// The tail started before the writes, but it may have subscribed
	// after the first of them: it sees a suffix of the 21 changes, in
	// order per partition, and certainly the last ones.
	deadline := time.After(10 * time.Second)
	var last TailChange
	for last.Key != "k1" || last.Type != Remove {
		select {
		case last = <-tailed:
		case err := <-tailDone:
			t.Fatalf("tail ended: %v", err)
		case <-deadline:
			t.Fatal("the tail never showed the remove")
		}
	}
	stopTail()
	for range tailDone {
		t.Fatal("a cancelled tail reported an error")
	}
}

// TestRemoteWaits: a remote write waits on the owner for the level its
// caller chose, as a local one does (before, every remote write waited
// for Ack whatever the caller wanted: Replicas(3) in a group of three
// "succeeded").
func TestRemoteWaits(t *testing.T) {
	c := newTestCluster(t, 21)
	a, b, d := c.open("a"), c.open("b"), c.open("d")
	c.settle(3)
	// A server that joined after the first is a learner, outside the
	// configuration, until it has caught up: until then a majority of the
	// configuration (rule 5) may be the first server alone, and a Majority
	// write is acked with one copy (2 runs in 60 under -race failed so).
	c.voting(3)
	ctx := ctxT(t)
	rc, err := Dial(ctx, a.Addr())
	require.NoError(t, err)
	defer rc.Close()
	all := []*Resource{a, b, d}
	for i := range 10 {
		key := fmt.Sprint("m", i)
		require.NoError(t, retry(ctx, func() error { return rc.Update(ctx, key, i, Majority) }))
		have := 0
		for _, r := range all {
			if v, ok := r.Get(key); ok && v == int64(i) {
				have++
			}
		}
		assert.GreaterOrEqual(t, have, 2, "%s: a Majority write returned before a majority applied it", key)
	}
	err = rc.Update(ctx, "r", 1, Replicas(3))
	require.Error(t, err, "three replicas besides the owner in a group of three")
	require.NoError(t, retry(ctx, func() error { return rc.Update(ctx, "r", 1, Replicas(2)) }))
	require.NoError(t, rc.Update(ctx, "n", 1, NoWait))
	require.Eventually(t, func() bool { _, ok := a.Get("n"); return ok }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, rc.Remove(ctx, "n", Majority))
	assert.Equal(t, CodeInvalidArgument, CodeOf(rc.Update(ctx, "x", 1, Replicas(0))))

	for s, want := range map[string]Wait{"none": NoWait, "ack": Ack, "majority": Majority, "replicas=2": Replicas(2)} {
		got, err := ParseWait(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "all", "replicas=0", "replicas=x", "replicas=300"} {
		_, err := ParseWait(s)
		assert.Equal(t, CodeInvalidArgument, CodeOf(err), s)
	}
}

// TestRemoteCallAsync: a Remote keeps many requests in flight on its one
// connection; each done is called once, with the reply or the error, for
// keys the node owns and keys it forwards.
func TestRemoteCallAsync(t *testing.T) {
	c, a, b, ctx, rc := twoNodesAndARemote(t)
	// Until both own their partitions, a write may be refused for now.
	require.NoError(t, retry(ctx, func() error { return rc.Update(ctx, "warm", 0) }))

	const n = 300
	results := make(chan error, n)
	var mu sync.Mutex
	calls := map[int]int{}
	for i := range n {
		i := i
		err := rc.CallAsync(ctx, VerbUpdate, fmt.Sprint("k", i), i, func(_ msgpack.RawMessage, err error) {
			mu.Lock()
			calls[i]++
			mu.Unlock()
			results <- err
		})
		require.NoError(t, err)
	}
	for range n {
		select {
		case err := <-results:
			require.NoError(t, err)
		case <-ctx.Done():
			t.Fatal("not every CallAsync answered")
		}
	}
	mu.Lock()
	for i := range n {
		assert.Equal(t, 1, calls[i], "done of request %d", i)
	}
	mu.Unlock()
	c.converged([]*Resource{a, b}, n+1)
	var v int
	ok, err := rc.Get(ctx, "k123", &v)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, 123, v)

	errc := make(chan error, 1)
	require.NoError(t, rc.CallAsync(ctx, "NOPE", "k2", nil, func(_ msgpack.RawMessage, err error) { errc <- err }))
	assert.Equal(t, CodeUnimplemented, CodeOf(<-errc))
	require.NoError(t, rc.CallAsync(ctx, VerbAdd, "k1", 5, func(_ msgpack.RawMessage, err error) { errc <- err }))
	assert.Equal(t, CodeFailedPrecondition, CodeOf(<-errc))
	// A deadline already passed is refused before anything is sent.
	dead, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	assert.ErrorIs(t, rc.CallAsync(dead, VerbUpdate, "k1", 1, func(msgpack.RawMessage, error) { t.Error("done called for a refused request") }), context.DeadlineExceeded)
}

// TestBatchCallAsync: requests sent through a Batch, from a client node
// and from a server (which owns some of the keys itself), are each
// answered once after the Flush, and their writes committed; a batch is
// used again after its Flush.
func TestBatchCallAsync(t *testing.T) {
	c := newTestCluster(t, 12)
	a, b := c.open("a"), c.open("b")
	client := c.open("client", Client())
	c.settle(2)
	ctx := ctxT(t)
	// Until both own their partitions, a write may be refused for now.
	require.NoError(t, retry(ctx, func() error { return client.Update(ctx, "warm", 0) }))

	const bursts, perBurst = 3, 100
	for _, r := range []*Resource{client, a} {
		batch := r.Batch()
		for burst := range bursts {
			results := make(chan error, perBurst)
			var calls atomic.Int32
			for i := range perBurst {
				key := fmt.Sprint(r.node().ID(), "-", burst, "-", i)
				require.NoError(t, batch.CallAsync(ctx, VerbUpdate, key, i, func(_ msgpack.RawMessage, err error) {
					calls.Add(1)
					results <- err
				}))
			}
			batch.Flush()
			for range perBurst {
				select {
				case err := <-results:
					require.NoError(t, err)
				case <-ctx.Done():
					t.Fatalf("%s, burst %d: not every request answered after the Flush", r.node().ID(), burst)
				}
			}
			assert.EqualValues(t, perBurst, calls.Load())
		}
	}
	c.converged([]*Resource{a, b, client}, 1+2*bursts*perBurst)
	var v int
	ok, err := b.GetInto(fmt.Sprint(client.node().ID(), "-2-57"), &v)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, 57, v)
	assert.Equal(t, CodeInvalidArgument, CodeOf(client.Batch().CallAsync(ctx, VerbUpdate, "k", 1, nil)))
}

// TestRemoteConcurrentWritesAreNotTooOld: 400 goroutines write through
// one Remote to keys of one partition at once, half of it owned by the
// node the Remote dials and half forwarded; none is refused. Before, each
// took its sequence before it was sent, so a first attempt could reach
// the owner more than 64 sequences behind later ones and be refused as
// too old to tell (Aborted), though it had never been applied.
func TestRemoteConcurrentWritesAreNotTooOld(t *testing.T) {
	_, _, _, ctx, rc := twoNodesAndARemote(t)
	var mu sync.Mutex
	failed := map[string]int{}
	var wg sync.WaitGroup
	for g := range 400 {
		wg.Go(func() {
			for i := range 10 {
				// Sub-keys of two keys: two partitions.
				if err := rc.Update(ctx, fmt.Sprintf("k%d.g%d", g%2, g), i); err != nil {
					mu.Lock()
					failed[err.Error()]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, failed, "writes refused")
}
