package fero

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStalledClientCatchesUp: a client whose node stops taking commits (a
// Block change stream nobody reads holds its driver) does not slow the
// servers: they keep committing, their sends to it fail fast once its
// connection's outbox is full instead of queueing without bound, and once
// the client reads again it catches up from the log or a snapshot.
func TestStalledClientCatchesUp(t *testing.T) {
	c := newTestCluster(t, 15)
	a, b := c.open("a", WithHistoryMax(50)), c.open("b", WithHistoryMax(50))
	client := c.open("client", Client(), WithHistoryMax(50))
	c.settle(2)
	ctx := ctxT(t)

	stall := client.Subscribe(Buffer(1), OnOverflow(Block))
	// 10,000 writes of 4 KB (40 MB) overflow whatever the socket buffers,
	// the client's inbox (256 batches), the owners' outboxes and their
	// spill queues (8 MiB of commit traffic each) can hold for it.
	const keys = 10000
	start := time.Now()
	for i := range keys {
		require.NoError(t, retry(ctx, func() error {
			return a.Update(ctx, fmt.Sprint("k", i%500), fmt.Sprintf("v%d-%04000d", i, 0), Majority)
		}))
	}
	took := time.Since(start)
	c.converged([]*Resource{a, b}, 500)
	assert.Less(t, client.Len(), 500, "the stalled client kept up; the test did not stall it")
	t.Logf("%d majority writes with a stalled client took %v; the client held %d keys", keys, took, client.Len())

	stall.Close() // the driver moves again
	c.converged([]*Resource{a, b, client}, 500)
	v, _ := client.Get("k499")
	assert.Contains(t, v, fmt.Sprintf("v%d-", keys-1))
	// Against a history of 50 per partition, at least one partition had
	// moved past what its owner still kept.
	assert.NotZero(t, client.Stats().Restored, "%+v", client.Stats())
}
