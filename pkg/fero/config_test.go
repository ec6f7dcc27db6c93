package fero

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/gctune"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/node"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/ring"
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

// TestOptionKinds: an Option is a NodeOption and a DialOption, and
// applies the same to either config; WithOptions and DialOptions bundle
// like Options; a NodeOption-only bundle is not a DialOption, even of
// shared options (what ferotest's status connection relies on).
func TestOptionKinds(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	shared := WithOptions(WithClusterSecret(secret), nil, WithCallTimeout(time.Second))
	n := newNodeConfig([]NodeOption{shared, WithID("a")})
	d := newDialConfig([]DialOption{shared, DialOptions(WithRetry(time.Millisecond, time.Second, 3), nil), nil})
	for _, c := range []*config{n, d} {
		require.Equal(t, [][]byte{secret}, c.secrets)
		require.Equal(t, time.Second, c.callTimeout)
	}
	require.Equal(t, "a", n.id)
	require.Len(t, d.transport, 1, "WithRetry")

	var o NodeOption = WithToken(secret)
	_, ok := o.(DialOption)
	require.True(t, ok, "a shared option given as a NodeOption is still a DialOption")
	_, ok = WithDataDir("x").(DialOption)
	require.False(t, ok)
	_, ok = Options(WithToken(secret)).(DialOption)
	require.False(t, ok, "Options bundles NodeOptions")
	_, ok = DialOptions(WithToken(secret)).(NodeOption)
	require.False(t, ok, "DialOptions bundles DialOptions")
}

// TestPublicTypes: the types pkg/fero owns convert to and from the
// internal ones they stand for without changing a value: the constants
// are the internal ones' (the conversions are plain), and Stats encodes
// as the node's did, in JSON and msgpack.
func TestPublicTypes(t *testing.T) {
	require.Equal(t, membership.PresetLAN, membership.Preset(PresetLAN))
	require.Equal(t, membership.PresetLocal, membership.Preset(PresetLocal))
	require.Equal(t, node.Drop, node.Overflow(DropNewest))
	require.Equal(t, node.Block, node.Overflow(Block))

	ns := protocol.Stats{Committed: 1, Applied: 2, Dropped: 3, Restored: 4, Gained: 5, Lost: 6, Relayed: 7, RelayedFor: 8}
	for _, enc := range []func(any) ([]byte, error){json.Marshal, msgpack.Marshal} {
		want, err := enc(ns)
		require.NoError(t, err)
		got, err := enc(Stats(ns))
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	mc := MulticastConfig{Group: "224.0.0.1:1", TTL: 2, Jitter: 3, Interval: 4}
	require.Equal(t, membership.MulticastConfig{Group: "224.0.0.1:1", TTL: 2, Jitter: 3, Interval: 4}, membership.MulticastConfig(mc))
	var p Partitioner = ring.TopLevel('.')
	require.Equal(t, ring.TopLevel('.').Hash("a.b"), p.Hash("a.b"), "a ring.Partitioner is a Partitioner, and back")
}
