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

// TestLoneBatchesStepOnTheReader: a client writing one call at a time
// gets each commit back as a lone batch, which its connection's reader
// steps itself instead of waking the driver; what it steps is applied
// like anything else. A batch must not be stepped there while an earlier
// one is still on its way through the inbox: that would overtake it.
func TestLoneBatchesStepOnTheReader(t *testing.T) {
	nw := memnet.New(11)
	srv := startNode(t, nw, "a", false)
	cl := startNode(t, nw, "client", true, srv.Membership().Local().Gossip)
	nodes := []*Node{srv, cl}
	require.Eventually(t, func() bool { return settled(nodes, 1) }, 20*time.Second, 10*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var b doc.Builder
	const keys = 200
	before := cl.steppedInline.Load()
	for i := range keys {
		c, err := b.Update(fmt.Sprintf("k%d", i), i)
		require.NoError(t, err)
		require.NoError(t, write(ctx, cl, c, partition.WaitAck))
	}
	require.Eventually(t, func() bool { return converged(nodes, keys) }, 30*time.Second, 20*time.Millisecond)
	// Some commits meet a busy driver (a tick, a heartbeat) and queue;
	// most find it idle.
	inline := cl.steppedInline.Load() - before
	t.Logf("%d of %d commits stepped on the reader", inline, keys)
	require.Greater(t, inline, int64(keys/2))

	// A batch the driver has taken from the inbox but not yet stepped
	// (it takes it before it locks): a lone batch behind it waits too.
	in := inbound{from: srv.ID()} // no messages
	cl.inboxed.Add(1)
	require.False(t, cl.stepInline(in), "a batch overtook one the driver holds")
	cl.inboxed.Add(-1)
	require.True(t, cl.stepInline(in), "an idle engine steps a lone batch")
}
