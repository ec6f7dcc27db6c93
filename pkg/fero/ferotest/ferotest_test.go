package ferotest_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/testkit"
	"github.com/fero-go/fero/pkg/fero"
	"github.com/fero-go/fero/pkg/fero/ferotest"
)

// TestMain checks that the clusters' cleanups released every goroutine
// their nodes started.
func TestMain(m *testing.M) { os.Exit(testkit.RunWithoutLeaks(m)) }

// TestConverges: three servers and a client settle; writes made on every
// node, at every wait, end up on every node.
func TestConverges(t *testing.T) {
	c := ferotest.NewCluster(t, "kit")
	require.Len(t, c.Servers(), 3)
	client := c.Add(fero.Client())
	c.WaitSettled()
	require.Len(t, c.Nodes(), 4)
	assert.Equal(t, client, c.Node(3))
	assert.Equal(t, []string{"node-1", "node-2", "node-3", "node-4"}, ids(c.Nodes()))

	ctx := ctxT(t)
	waits := []fero.Wait{fero.NoWait, fero.Ack, fero.Replicas(1), fero.Majority}
	for i := range 20 {
		r := c.Node(i % 4)
		// Settled: no write is refused for an owner still syncing.
		require.NoError(t, r.Update(ctx, fmt.Sprint("k", i), i, waits[i%4]), "k%d from %s", i, r.ID())
	}
	c.WaitConverged()
	for _, r := range c.Nodes() {
		assert.Equal(t, 20, r.Len(), r.ID())
		v, ok := r.Get("k7")
		assert.True(t, ok, r.ID())
		assert.EqualValues(t, 7, v, r.ID())
	}
}

// TestPartition: one server cut off from the two others by gossip. The
// minority side refuses writes, through its server, a client on its side
// and a Remote dialed to it; the majority side takes them. After the heal
// the minority's writes go through and every node holds the majority's.
func TestPartition(t *testing.T) {
	c := ferotest.NewCluster(t, "kit")
	s := c.Servers()
	minorClient := c.Add(fero.Client())
	c.WaitSettled()
	ctx := ctxT(t)
	require.NoError(t, s[0].Update(ctx, "before", "yes", fero.Majority))
	// A Majority ack needs two of the three servers: the third, and the
	// client, may still be applying it (under load, s[2] was cut off
	// without it).
	c.WaitConverged()

	c.Partition(s[:2], []*fero.Resource{s[2], minorClient})
	for _, r := range c.Nodes() {
		assert.Len(t, r.Members(), 2, "%s sees its own side only", r.ID())
	}
	for i := range 5 {
		k := fmt.Sprint("k", i)
		require.NoError(t, s[i%2].Update(ctx, k, "majority", fero.Majority), "%s on the majority side", k)
	}
	remote, err := fero.Dial(ctx, s[2].Addr())
	require.NoError(t, err)
	defer func() { assert.NoError(t, remote.Close()) }()
	type writer interface {
		Update(ctx context.Context, key string, value any, wait ...fero.Wait) error
	}
	writers := map[string]writer{"minority server": s[2], "minority client": minorClient, "remote": remote}
	for name, w := range writers {
		for i := range 5 {
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := w.Update(wctx, fmt.Sprint("k", i), "minority", fero.Majority)
			cancel()
			assert.Equal(t, fero.CodeUnavailable, fero.CodeOf(err), "%s, k%d: %v", name, i, err)
		}
	}
	v, ok := s[2].Get("before")
	assert.True(t, ok && v == "yes", "reads stay local on the minority side")

	c.Heal()
	c.WaitConverged()
	for _, r := range c.Nodes() {
		v, _ := r.Get("k3")
		assert.Equal(t, "majority", v, "%s holds the majority's write", r.ID())
	}
	require.NoError(t, s[2].Update(ctx, "after", "healed", fero.Majority), "healed: the old minority writes")
	require.NoError(t, minorClient.Update(ctx, "after", "healed again", fero.Majority))
	c.WaitConverged()
	v, _ = s[0].Get("after")
	assert.Equal(t, "healed again", v)
}

// TestAddRemove: a fourth server joins a settled cluster and takes
// partitions; then a server leaves, and the three left still take
// Majority writes (three of the four in the configuration) and agree.
func TestAddRemove(t *testing.T) {
	c := ferotest.NewCluster(t, "kit", ferotest.WithNodeOptions(fero.WithPartitions(64)))
	ctx := ctxT(t)
	require.NoError(t, c.Node(0).Update(ctx, "a", 1, fero.Majority))

	joined := c.Add(fero.WithID("late"))
	c.WaitSettled()
	assert.Len(t, c.Servers(), 4)
	owned := map[string]int{}
	for _, m := range c.Node(0).Members() {
		owned[m.ID] = m.Owned
	}
	assert.Positive(t, owned["late"], "the new server owns partitions: %v", owned)
	require.NoError(t, joined.Update(ctx, "b", 2, fero.Majority))
	c.WaitConverged()
	v, ok := joined.Get("a")
	assert.True(t, ok && v != nil, "the new server caught up: a = %v", v)

	gone := c.Node(1)
	require.NoError(t, c.Remove(gone))
	assert.NotContains(t, c.Nodes(), gone)
	c.WaitSettled()
	for i := range 8 {
		require.NoError(t, c.Node(i%3).Update(ctx, fmt.Sprint("k", i), i, fero.Majority))
	}
	c.WaitConverged()
	assert.Equal(t, 10, joined.Len())
	servers, err := joined.Servers(ctx)
	require.NoError(t, err)
	assert.Len(t, servers, 4, "a removed server stays in the configuration: %v", servers)
}

func ids(rs []*fero.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID())
	}
	return out
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// who answers with the ID of the node its request reached: the owner of
// the key.
func who(_ context.Context, req *fero.Request) (any, error) { return req.Resource().ID(), nil }

// ownedBy returns a key whose owner is r, asking from r.
func ownedBy(t *testing.T, r *fero.Resource) string {
	t.Helper()
	for i := range 1000 {
		k := fmt.Sprint("key", i)
		var owner string
		require.NoError(t, r.Call(ctxT(t), "WHO", k, nil, &owner))
		if owner == r.ID() {
			return k
		}
	}
	t.Fatalf("no key of 1000 is owned by %s", r.ID())
	return ""
}

// TestPartitionCutsData: a partition cuts the data plane too. Cut
// between {a, b} and {c}: before gossip notices, every node still routes
// by the old map, and yet a Majority write on a (the owner) is committed
// by a and b without reaching c, and a request from c for a's key does
// not reach a. Once the split is seen (Partition), a write on the
// majority side still stays there. Heal brings both to c.
func TestPartitionCutsData(t *testing.T) {
	c := ferotest.NewCluster(t, "kit", ferotest.WithNodeOptions(fero.WithHandler(who)))
	s := c.Servers()
	a, b, lone := s[0], s[1], s[2]
	key := ownedBy(t, a)
	ctx := ctxT(t)

	c.Cut([]*fero.Resource{a, b}, []*fero.Resource{lone})
	// Made at once, long before gossip notices the cut; should a loaded
	// machine delay it until a and b resync, it is refused and made again.
	err := a.Update(ctx, key, "cut", fero.Majority)
	for retry := time.Tick(20 * time.Millisecond); fero.CodeOf(err) == fero.CodeUnavailable && ctx.Err() == nil; <-retry {
		err = a.Update(ctx, key, "cut", fero.Majority)
	}
	require.NoError(t, err, "a and b are a majority")
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	var owner string
	err = lone.Call(cctx, "WHO", key, nil, &owner)
	cancel()
	assert.True(t, err != nil || owner != a.ID(), "a request from %s for %s reached %s: %v", lone.ID(), key, owner, err)

	c.Partition([]*fero.Resource{a, b}, []*fero.Resource{lone})
	require.NoError(t, b.Update(ctx, "split", "yes", fero.Majority))
	for _, r := range []*fero.Resource{a, b} {
		v, _ := r.Get(key)
		assert.Equal(t, "cut", v, r.ID())
		require.Eventually(t, func() bool { v, _ := r.Get("split"); return v == "yes" }, 10*time.Second, 10*time.Millisecond, r.ID())
	}
	// Absence is shown by watching for a second, long enough for a
	// commit to cross a link many times over.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); <-tick.C {
		_, cut := lone.Get(key)
		_, split := lone.Get("split")
		require.False(t, cut || split, "a write on the majority side reached %s across the cut", lone.ID())
	}

	c.Heal()
	c.WaitConverged()
	v, _ := lone.Get(key)
	assert.Equal(t, "cut", v)
	v, _ = lone.Get("split")
	assert.Equal(t, "yes", v)
	require.NoError(t, lone.Call(ctx, "WHO", key, nil, &owner), "healed: c reaches the owner again")
}

// TestSlow: a request's round trip over a slowed link takes at least
// twice the delay (the request, then the reply, each delayed once),
// whichever end is slowed, and no longer once the delay is lifted.
func TestSlow(t *testing.T) {
	c := ferotest.NewCluster(t, "kit", ferotest.WithNodeOptions(fero.WithHandler(who)))
	client := c.Add(fero.Client())
	c.WaitSettled()
	a, b := c.Node(0), c.Node(1)
	key := ownedBy(t, a)
	ctx := ctxT(t)
	roundTrip := func(from *fero.Resource) time.Duration {
		t.Helper()
		start := time.Now()
		var owner string
		require.NoError(t, from.Call(ctx, "WHO", key, nil, &owner))
		require.Equal(t, a.ID(), owner, "the request crossed to the owner")
		return time.Since(start)
	}
	const d = 250 * time.Millisecond

	c.Slow(d, client) // its end of the link
	assert.GreaterOrEqual(t, roundTrip(client), 2*d, "client to a, client slowed")
	c.Slow(d, a) // both ends: the delays add up
	assert.GreaterOrEqual(t, roundTrip(client), 4*d, "client to a, both slowed")
	c.Slow(0, client)
	assert.GreaterOrEqual(t, roundTrip(b), 2*d, "b to a, a slowed")

	c.Slow(0, a)
	// Restored: the fastest of a few round trips (one may still wait
	// behind bytes sent while slowed) is well under the delay.
	fastest := time.Hour
	for range 5 {
		fastest = min(fastest, roundTrip(client), roundTrip(b))
	}
	assert.Less(t, fastest, d, "round trips after Slow(0)")
	require.NoError(t, b.Update(ctx, "after", "slow", fero.Majority))
	c.WaitConverged()
}

// TestWatchCommits: each key's writes, made from every node, are
// committed by one server, its owner; the keys spread over the servers.
func TestWatchCommits(t *testing.T) {
	c := ferotest.NewCluster(t, "kit")
	client := c.Add(fero.Client())
	c.WaitSettled()
	committed := ferotest.WatchCommits(t, c.Servers()...)
	ctx := ctxT(t)
	for i := range 40 {
		for _, r := range []*fero.Resource{client, c.Node(i % 3)} {
			require.NoError(t, r.Update(ctx, fmt.Sprint("k", i, ".n"), i, fero.Majority))
		}
	}
	assert.Empty(t, committed.Of("never written"))
	by := map[string]int{}
	require.Eventually(t, func() bool {
		clear(by)
		for i := range 40 {
			ids := committed.Of(fmt.Sprint("k", i))
			if len(ids) != 1 {
				return false
			}
			by[ids[0]]++
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "one committer per key")
	assert.Len(t, by, 3, "40 keys spread over the three servers: %v", by)
}
