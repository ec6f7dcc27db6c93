package fero

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMinoritySideRefusesWrites: five servers split 3 | 2 (gossip cut, the
// data plane still open: the harder case, since a cut-off node can still
// reach the other side). Once each side has declared the other dead, the
// majority side accepts writes for every key, and the minority side refuses
// every write with
// CodeUnavailable, however its ring now assigns the partitions. After the
// split heals, all five converge, and no majority-acked write is lost.
func TestMinoritySideRefusesWrites(t *testing.T) {
	c := newTestCluster(t, 12)
	var nodes []*Resource
	for i := range 5 {
		nodes = append(nodes, c.open(fmt.Sprint("s", i)))
	}
	c.settle(5)
	ctx := ctxT(t)
	for i := range 20 {
		require.NoError(t, retry(ctx, func() error { return nodes[i%5].Update(ctx, fmt.Sprint("k", i), "before", Majority) }))
	}
	c.converged(nodes, 20)

	gossip := func(rs []*Resource) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.GossipAddr())
		}
		return out
	}
	major, minor := nodes[:3], nodes[3:]
	c.nw.Partition(gossip(major), gossip(minor))
	// Each side's map shrinks to its own members.
	require.Eventually(t, func() bool {
		for _, r := range major {
			if m := r.node().Map(); m == nil || len(m.Members()) != 3 {
				return false
			}
		}
		for _, r := range minor {
			if m := r.node().Map(); m == nil || len(m.Members()) != 2 {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond)

	// The majority side accepts writes for every key: it holds a majority
	// of the configuration, which meets every Majority write made before
	// the split (rules 4, 5 and 9).
	want := map[string][]string{} // the values a key may hold after the heal
	for i := range 20 {
		k := fmt.Sprint("k", i)
		require.NoError(t, retry(ctx, func() error { return major[i%3].Update(ctx, k, "during", Majority) }), k)
		want[k] = []string{"during"}
	}
	// The minority side owns every partition by its own map, and refuses
	// every write: it sees 2 of the 5 servers it knew.
	for i := range 20 {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := minor[i%2].Update(wctx, fmt.Sprint("k", i), "minority", Ack)
		cancel()
		assert.Equal(t, CodeUnavailable, CodeOf(err), "k%d on the minority side: %v", i, err)
	}

	c.nw.Heal()
	c.settle(5)
	if !assert.Eventually(t, func() bool {
		for _, r := range nodes {
			for k, w := range want {
				if v, _ := r.Get(k); !slices.Contains(w, fmt.Sprint(v)) {
					return false
				}
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond) {
		for _, r := range nodes {
			st, _ := r.node().Status(ctx)
			for k, w := range want {
				if v, _ := r.Get(k); !slices.Contains(w, fmt.Sprint(v)) {
					p := r.node().Store().PartitionOf(k)
					o, _ := r.node().Map().Owner(p)
					t.Logf("%s: %s = %v; partition %d owner by map %s; %+v", r.ID(), k, v, p, o.ID, st[p])
				}
			}
		}
		t.FailNow()
	}
	c.converged(nodes, 20)
}
