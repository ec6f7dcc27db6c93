package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// woken reports whether the queue's driver was woken, and takes the wake.
func woken(pq *propQueue) bool {
	select {
	case <-pq.ready:
		return true
	default:
		return false
	}
}

// TestQuietPushes: a writer in a burst queues without waking the driver
// and answers for the wake itself (claimQuiet), unless the queue fills
// half way; a writer that wakes the driver wakes it for what was queued
// quietly too; taking the queue clears the claim.
func TestQuietPushes(t *testing.T) {
	ctx := context.Background()
	pq := newPropQueue()
	require.NoError(t, pq.push(ctx, ctx, proposal{}, false))
	require.NoError(t, pq.push(ctx, ctx, proposal{}, false))
	require.False(t, woken(&pq), "a quiet push woke the driver")
	require.True(t, pq.claimQuiet())
	require.False(t, pq.claimQuiet(), "claimed twice")

	// A writer that wakes: the queue was not empty, but held quiet work.
	require.NoError(t, pq.push(ctx, ctx, proposal{}, false))
	require.NoError(t, pq.push(ctx, ctx, proposal{}, true))
	require.True(t, woken(&pq), "a waking push behind quiet ones did not wake the driver")
	require.Len(t, pq.take(), 4)
	require.False(t, pq.claimQuiet(), "taking the queue leaves the claim")

	// Half full wakes the driver however the writer queues.
	for i := range maxQueued/2 - 1 {
		require.NoError(t, pq.push(ctx, ctx, proposal{}, false))
		require.False(t, woken(&pq), "push %d", i)
	}
	require.NoError(t, pq.push(ctx, ctx, proposal{}, false))
	require.True(t, woken(&pq), "a half-full queue did not wake the driver")
}

// TestFullQueueWakesTheDriver: a writer that finds the queue full wakes
// the driver before it waits for room, whatever woke it before: a quiet
// burst longer than the queue cannot wait for a driver nobody woke.
func TestFullQueueWakesTheDriver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pq := newPropQueue()
	for range maxQueued {
		require.NoError(t, pq.push(ctx, ctx, proposal{}, false))
	}
	woken(&pq) // the half-full wake
	pushed := make(chan error, 1)
	go func() { pushed <- pq.push(ctx, ctx, proposal{}, false) }()
	select {
	case <-pq.ready:
	case <-ctx.Done():
		t.Fatal("a writer waiting on a full queue did not wake the driver")
	}
	require.Len(t, pq.take(), maxQueued)
	require.NoError(t, <-pushed)
}
