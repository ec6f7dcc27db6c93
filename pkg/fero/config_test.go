package fero

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/gctune"
)

// TestGracefulLeavesKeepTheConfiguration: two of three servers that close
// stay in the cluster's configuration (removing two in a row is not safe
// without proof that the survivors hold every Majority write), so the
// survivor refuses writes until the operator forgets them.
func TestGracefulLeavesKeepTheConfiguration(t *testing.T) {
	c := newTestCluster(t, 21)
	a, b, d := c.open("a"), c.open("b"), c.open("c")
	c.settle(3)
	c.voting(3)
	ctx := ctxT(t)
	require.NoError(t, retry(ctx, func() error { return a.Update(ctx, "k", 1, Majority) }))
	require.NoError(t, b.Close())
	require.NoError(t, d.Close())
	require.Eventually(t, func() bool { m := a.node().EngineMap(); return m != nil && len(m.Members()) == 1 }, 20*time.Second, 10*time.Millisecond,
		"the engine routes by a map of a alone, so a owns the write and refuses it itself")
	err := a.Update(ctx, "k", 2, Majority)
	require.Equal(t, CodeUnavailable, CodeOf(err), "%v", err)
	require.EqualError(t, err, `fero: unavailable: no quorum: server a sees 1 of the 3 servers of its configuration alive, and writes need 2 (a majority); b, c are not: if gone for good, remove them from the configuration with "fero forget b c" (Resource.Forget); if only stopped or cut off, bring them back instead`,
		"the refusal says what the survivor sees and what to do")
	ss, err := a.Servers(ctx)
	require.NoError(t, err)
	require.Equal(t, []ServerEntry{{ID: "a"}, {ID: "b"}, {ID: "c"}}, ss)
	require.NoError(t, a.Forget(ctx, "b", "c"), "two of three gone: the survivor forgets both in one call")
	require.NoError(t, retry(ctx, func() error { return a.Update(ctx, "k", 2, Majority) }))
}

// TestCrashedServersNeedForget: servers that vanish without leaving stay in
// the configuration, so the one left refuses writes however long it waits,
// until the operator forgets them.
func TestCrashedServersNeedForget(t *testing.T) {
	c := newTestCluster(t, 22)
	a, b, d := c.open("a"), c.open("b"), c.open("c")
	c.settle(3)
	c.voting(3)
	ctx := ctxT(t)
	require.NoError(t, retry(ctx, func() error { return a.Update(ctx, "k", 1, Majority) }))
	// Cut b and c off, then stop them: their leave never reaches a.
	c.nw.Partition([]string{a.GossipAddr()}, []string{b.GossipAddr(), d.GossipAddr()})
	require.NoError(t, b.Close())
	require.NoError(t, d.Close())
	require.Eventually(t, func() bool { return len(a.node().Map().Members()) == 1 }, 20*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		err := a.Update(ctx, "k", 2, Majority)
		return CodeOf(err) == CodeUnavailable && strings.HasPrefix(err.Error(), "fero: unavailable: no quorum: server a sees 1 of the 3 servers")
	}, 20*time.Second, 10*time.Millisecond, "the survivor of two crashes must refuse writes")
	require.Equal(t, CodeFailedPrecondition, CodeOf(a.Forget(ctx, "a")), "forgetting a live server")
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	require.Equal(t, CodeDeadlineExceeded, CodeOf(a.Forget(short, "b")),
		"one removal of two: the survivor alone is no majority of a, c")
	require.NoError(t, a.Forget(ctx, "b", "c"))
	require.NoError(t, a.Forget(ctx, "c"), "forgetting twice spreads the removal again")
	require.NoError(t, a.Forget(ctx, "zz"), "an ID this node never heard of is forgotten too: a peer may list it")
	require.NoError(t, retry(ctx, func() error { return a.Update(ctx, "k", 2, Majority) }))
}

// TestNodesTuneTheCollector: a node tunes the collector while it is open
// (internal/gctune) unless WithoutGCTuning; a node opened with it leaves
// the tuning to the others in the process.
func TestNodesTuneTheCollector(t *testing.T) {
	c := newTestCluster(t, 23)
	a := c.open("a")
	require.True(t, a.gcTuned, "GOGC set in the test's environment, or a test set a GC percent")
	require.NotNil(t, a.gcStop)
	require.True(t, gctune.Running())
	b := c.open("b", WithoutGCTuning())
	require.False(t, b.gcTuned)
	require.Nil(t, b.gcStop)
	require.NoError(t, b.Close())
	require.True(t, gctune.Running(), "a still holds it")
}

// TestOptions: Options applies its options in order, as if each were
// passed itself, skips nil ones, and nests.
func TestOptions(t *testing.T) {
	c := newNodeConfig([]NodeOption{
		WithID("first"),
		Options(WithID("second"), nil, Concurrent("A"), Options(Concurrent("B"), WithoutRetry())),
		Options(),
		Concurrent("C"),
	})
	require.Equal(t, "second", c.id, "a later option wins, inside Options or not")
	require.Equal(t, map[string]bool{"A": true, "B": true, "C": true}, c.concurrent)
	require.True(t, c.noRetry)
	c = newNodeConfig([]NodeOption{Options(WithID("inner")), WithID("outer")})
	require.Equal(t, "outer", c.id, "in order")
}
