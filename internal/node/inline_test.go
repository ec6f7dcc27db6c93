package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/partition"
)

// TestLoneBatchesStepOnTheReader: between two servers written one call
// at a time, each commit, forwarded write and reply travels as a lone
// batch, which the receiving connection's reader steps itself instead
// of waking the driver; what it steps is applied like anything else. A
// client node leaves every batch to its driver. A batch must not be
// stepped on the reader while an earlier one is still on its way
// through the inbox: that would overtake it.
func TestLoneBatchesStepOnTheReader(t *testing.T) {
	nw := memnet.New(11)
	a := startNode(t, nw, "a", false)
	seed := a.Membership().Local().Gossip
	b := startNode(t, nw, "b", false, seed)
	cl := startNode(t, nw, "client", true, seed)
	nodes := []*Node{a, b, cl}
	require.Eventually(t, func() bool { return settled(nodes, 2) }, 20*time.Second, 10*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var bld doc.Builder
	const keys = 200
	before := a.stats.steppedInline.Load() + b.stats.steppedInline.Load()
	for i := range keys {
		c, err := bld.Update(fmt.Sprintf("k%d", i), i)
		require.NoError(t, err)
		require.NoError(t, write(ctx, a, c, partition.WaitAck))
	}
	require.Eventually(t, func() bool { return converged(nodes, keys) }, 30*time.Second, 20*time.Millisecond)
	// Each write is at least one lone batch between the servers: a's
	// commit to b's copy, or a's forward to b (and b's reply and
	// commit back). Some meet a busy driver (a tick, a heartbeat) or a
	// frame behind them and queue (143 batches for 200 writes stepped on
	// the readers in a run on a quiet machine).
	inline := a.stats.steppedInline.Load() + b.stats.steppedInline.Load() - before
	t.Logf("%d batches stepped on the servers' readers for %d writes", inline, keys)
	require.Greater(t, inline, int64(keys/4))
	require.Zero(t, cl.stats.steppedInline.Load(), "a client node stepped on its reader")

	// A batch the driver has taken from the inbox but not yet stepped
	// (it takes it before it locks): a lone batch behind it waits too.
	in := inbound{from: a.ID()} // no messages
	b.inboxed.Add(1)
	require.False(t, b.stepInline(in), "a batch overtook one the driver holds")
	b.inboxed.Add(-1)
	// The driver holds the lock for each tick: poll until it is idle.
	require.Eventually(t, func() bool { return b.stepInline(in) }, 10*time.Second, time.Millisecond,
		"an idle engine steps a lone batch")
}
