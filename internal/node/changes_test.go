package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/partition"
)

// TestChangeStreams: a blocking subscriber on one node sees every write,
// in commit order per partition; a dropping subscriber that never reads
// counts what it missed and slows nothing.
func TestChangeStreams(t *testing.T) {
	nw := memnet.New(17)
	a := startNode(t, nw, "a", false)
	seed := a.Membership().Local().Gossip
	b := startNode(t, nw, "b", false, seed)
	nodes := []*Node{a, b}
	require.Eventually(t, func() bool { return settled(nodes, 2) }, 20*time.Second, 10*time.Millisecond)

	all := b.Subscribe(0, Block)
	defer all.Close()
	lossy := b.Subscribe(1, Drop)
	defer lossy.Close()

	const writes = 300
	got := make(chan []Change, 1)
	go func() {
		var cs []Change
		for c := range all.C() {
			cs = append(cs, c)
			if len(cs) == writes {
				break
			}
		}
		got <- cs
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var bld doc.Builder
	for i := 0; i < writes; i++ {
		c, err := bld.Update(fmt.Sprintf("k%d", i), i)
		require.NoError(t, err)
		require.NoError(t, write(ctx, a, c, partition.WaitMajority))
	}
	var cs []Change
	select {
	case cs = <-got:
	case <-ctx.Done():
		t.Fatal("the blocking subscriber did not see every write")
	}
	last := map[int]uint64{}
	keys := map[string]bool{}
	for _, c := range cs {
		require.Contains(t, []partition.EventKind{partition.EventApplied, partition.EventCommitted}, c.Kind)
		require.Greater(t, c.Entry.Offset, last[c.Partition], "partition %d out of order", c.Partition)
		last[c.Partition] = c.Entry.Offset
		keys[c.Entry.Key] = true
	}
	assert.Len(t, keys, writes)
	assert.Greater(t, lossy.Dropped(), uint64(0), "the subscriber that never read dropped changes")
	assert.LessOrEqual(t, lossy.Dropped(), uint64(writes))
}
