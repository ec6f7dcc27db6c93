package fero

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/node"
	"github.com/fero-go/fero/internal/testkit"
)

// testCluster runs resources in this process: gossip over an in-memory
// network, data over real loopback TCP.
type testCluster struct {
	t    *testing.T
	nw   *memnet.Network
	seed string
	all  []*Resource
}

func newTestCluster(t *testing.T, seed uint64) *testCluster {
	return &testCluster{t: t, nw: memnet.New(seed)}
}

func (c *testCluster) options(id string) []NodeOption {
	opts := []NodeOption{
		WithID(id), WithLogger(testLogger(c.t)),
		WithPreset(PresetLocal), WithoutMulticast(), WithGossipTransport(c.nw.NewTransport()),
		WithGossipTuning(testkit.ClusterTimers), WithLeaveTimeout(time.Second),
		WithPartitions(32), WithSyncTimeout(500 * time.Millisecond), WithTick(20 * time.Millisecond),
	}
	if c.seed != "" {
		opts = append(opts, WithSeeds(c.seed))
	}
	return opts
}

// open opens a node of the resource "test" with the cluster's options and
// then opts.
func (c *testCluster) open(id string, opts ...NodeOption) *Resource {
	c.t.Helper()
	r, err := Open(ctxT(c.t), "test", append(c.options(id), opts...)...)
	require.NoError(c.t, err)
	c.t.Cleanup(func() { _ = r.Close() })
	if c.seed == "" {
		c.seed = r.node().Membership().Local().Gossip
	}
	c.all = append(c.all, r)
	return r
}

// settle waits until every open node routes by one map of servers
// servers, every server has taken its vote, and every partition has an
// owner that every node follows: the epochs that forming the cluster
// starts are over, so a NoWait write is not lost to one (NoWait promises
// nothing but its deadline).
func (c *testCluster) settle(servers int) {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		v := c.all[0].node().Map()
		for _, r := range c.all {
			m := r.node().Map()
			if m == nil || v == nil || m.Version() != v.Version() || len(m.Members()) != servers {
				return false
			}
		}
		nodes := make([]*node.Node, len(c.all))
		for i, r := range c.all {
			nodes[i] = r.node()
		}
		return node.Synced(context.Background(), nodes...)
	}, 20*time.Second, 10*time.Millisecond)
}

// voting waits until every server holds servers confirmed voters in its
// configuration: a server that joined after the first formed the cluster
// is a learner until it has caught up and announced itself, and a test
// that counts on a quorum of all of them must wait for that (settle waits
// for the maps and the owners only).
func (c *testCluster) voting(servers int) {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		for _, r := range c.all {
			vs, err := r.node().Voters(context.Background())
			if err != nil {
				return false
			}
			n := 0
			for _, v := range vs {
				if !v.Guess && !v.Left {
					n++
				}
			}
			if n != servers {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond)
}

// converged waits until every node holds keys keys and one digest.
func (c *testCluster) converged(nodes []*Resource, keys int) {
	c.t.Helper()
	ok := assert.Eventually(c.t, func() bool {
		d := nodes[0].Digest()
		for _, r := range nodes {
			if r.Len() != keys || r.Digest() != d {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond)
	if !ok {
		// Which copies differ, and how: keys, digest, and each
		// partition's offsets.
		for _, r := range nodes {
			c.t.Logf("%s: %d keys, digest %x, stats %+v", r.ID(), r.Len(), r.Digest(), r.Stats())
		}
		want := nodes[0].Snapshot()
		for _, r := range nodes[1:] {
			got := r.Snapshot()
			for k, v := range want {
				if g, ok := got[k]; !ok || fmt.Sprint(g) != fmt.Sprint(v) {
					c.t.Logf("%s holds %q = %v (present %v), %s holds %v", r.ID(), k, g, ok, nodes[0].ID(), v)
				}
			}
			for k, g := range got {
				if _, ok := want[k]; !ok {
					c.t.Logf("%s holds %q = %v, %s has none", r.ID(), k, g, nodes[0].ID())
				}
			}
		}
		c.t.FailNow()
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// retry repeats a write while the cluster settles (owners syncing, maps
// moving), as a service does with CodeUnavailable.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil || CodeOf(err) != CodeUnavailable || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return testkit.Logger(t, testkit.LevelFromEnv("FERO_TEST_LOG", slog.LevelWarn))
}

// keyOwnedBy returns the first of prefix0, prefix1, ... that r's map
// gives to the server id.
func keyOwnedBy(r *Resource, id, prefix string) string {
	for i := 0; ; i++ {
		k := fmt.Sprint(prefix, i)
		if o, ok := r.node().Map().OwnerOfKey(k); ok && o.ID == id {
			return k
		}
	}
}
