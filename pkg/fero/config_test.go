package fero

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGracefulLeavesShrinkTheQuorum: two of three servers that close
// leave the cluster's configuration, and the survivor writes alone. (With
// a quorum counted over the servers seen in the last five minutes, it
// refused every write with "no quorum" for five minutes, and a survivor
// whose peers crashed wrote again after them, whatever the other side did.)
func TestGracefulLeavesShrinkTheQuorum(t *testing.T) {
	c := newTestCluster(t, 21)
	a, b, d := c.open("a"), c.open("b"), c.open("c")
	c.settle(3)
	ctx := ctxT(t)
	require.NoError(t, retry(ctx, func() error { return a.Update(ctx, "k", 1, Majority) }))
	require.NoError(t, b.Close())
	require.NoError(t, d.Close())
	require.Eventually(t, func() bool {
		ss, err := a.Servers(ctx)
		require.NoError(t, err)
		left := 0
		for _, s := range ss {
			if s.Left {
				left++
			}
		}
		return len(ss) == 3 && left == 2
	}, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, retry(ctx, func() error { return a.Update(ctx, "k", 2, Majority) }))
}

// TestCrashedServersNeedForget: servers that vanish without leaving stay in
// the configuration, so the one left refuses writes however long it waits,
// until the operator forgets them.
func TestCrashedServersNeedForget(t *testing.T) {
	c := newTestCluster(t, 22)
	a, b, d := c.open("a"), c.open("b"), c.open("c")
	c.settle(3)
	ctx := ctxT(t)
	require.NoError(t, retry(ctx, func() error { return a.Update(ctx, "k", 1, Majority) }))
	// Cut b and c off, then stop them: their leave never reaches a.
	c.nw.Partition([]string{a.GossipAddr()}, []string{b.GossipAddr(), d.GossipAddr()})
	require.NoError(t, b.Close())
	require.NoError(t, d.Close())
	require.Eventually(t, func() bool { return len(a.node().Map().Members()) == 1 }, 20*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		err := a.Update(ctx, "k", 2, Majority)
		return CodeOf(err) == CodeUnavailable && err.Error() == "fero: unavailable: no quorum"
	}, 20*time.Second, 10*time.Millisecond, "the survivor of two crashes must refuse writes")
	require.Equal(t, CodeFailedPrecondition, CodeOf(a.Forget(ctx, "a")), "forgetting a live server")
	require.NoError(t, a.Forget(ctx, "b"))
	require.NoError(t, a.Forget(ctx, "c"))
	require.Equal(t, CodeNotFound, CodeOf(a.Forget(ctx, "c")))
	require.NoError(t, retry(ctx, func() error { return a.Update(ctx, "k", 2, Majority) }))
}
