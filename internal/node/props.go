package node

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/fero-go/fero/internal/protocol"
)

// maxQueued bounds the proposals waiting for the driver; writers beyond it
// wait for room.
const maxQueued = 1024

// propQueue hands proposals from writers to the driver. A writer appends
// under a mutex and wakes the driver only when the queue was empty; the
// driver takes everything queued at once. Per write that costs a lock, not
// a channel operation on each side.
//
// A connection's reader with more requests behind the one it queues puts
// the wake off (quiet): at the end of its burst it proposes what is
// queued itself, or wakes the driver if the engine is busy
// (Node.afterBurst), which spares the driver's goroutine a wake-up per
// burst. quiet says that something was queued without a wake.
type propQueue struct {
	mu    sync.Mutex
	q     []proposal
	quiet atomic.Bool   // set by quiet pushes; cleared by take and claimQuiet
	spare []proposal    // the driver's last batch, to reuse
	ready chan struct{} // capacity 1: the queue became non-empty
	space chan struct{} // capacity 1: the driver took the queue
}

func newPropQueue() propQueue {
	return propQueue{ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// push queues p, waiting while the queue is full until ctx or the node's
// context (closed: protocol.ErrClosed) ends. With wake unset it wakes the driver
// only when the queue is half full: the caller then answers for the
// wake (claimQuiet).
func (pq *propQueue) push(ctx, node context.Context, p proposal, wake bool) error {
	for {
		pq.mu.Lock()
		if n := len(pq.q); n < maxQueued {
			pq.q = append(pq.q, p)
			// A writer that wakes the driver wakes it for what was
			// queued quietly before too.
			rouse := (wake && (n == 0 || pq.quiet.Load())) || n+1 >= maxQueued/2
			if !wake {
				pq.quiet.Store(true)
			}
			pq.mu.Unlock()
			if rouse {
				signal(pq.ready)
			}
			return nil
		}
		pq.mu.Unlock()
		signal(pq.ready) // a full queue always wakes the driver
		select {
		case <-pq.space:
		case <-ctx.Done():
			return ctx.Err()
		case <-node.Done():
			return protocol.ErrClosed
		}
	}
}

// tryPush queues p and wakes the driver, as push does, unless the queue
// is full: then it returns false at once.
func (pq *propQueue) tryPush(p proposal) bool {
	pq.mu.Lock()
	n := len(pq.q)
	if n >= maxQueued {
		pq.mu.Unlock()
		return false
	}
	pq.q = append(pq.q, p)
	pq.mu.Unlock()
	signal(pq.ready)
	return true
}

// claimQuiet reports whether something was queued quietly since the
// queue was last taken or claimed; the caller then proposes it or wakes
// the driver.
func (pq *propQueue) claimQuiet() bool {
	// Every reader asks at the end of every burst: the common answer,
	// no, costs no lock.
	return pq.quiet.Load() && pq.quiet.Swap(false)
}

// empty reports whether nothing is queued.
func (pq *propQueue) empty() bool {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	return len(pq.q) == 0
}

// take returns everything queued, which the driver owns until it hands the
// slice back with recycle.
func (pq *propQueue) take() []proposal {
	pq.mu.Lock()
	q := pq.q
	pq.quiet.Store(false)
	if len(q) > 0 {
		pq.q, pq.spare = pq.spare[:0], nil
	}
	pq.mu.Unlock()
	if len(q) > 0 {
		signal(pq.space)
	}
	return q
}

// recycle gives back a slice take returned, once its proposals are handled.
func (pq *propQueue) recycle(q []proposal) {
	clear(q)
	pq.mu.Lock()
	if pq.spare == nil && cap(q) <= 2*maxQueued {
		pq.spare = q[:0]
	}
	pq.mu.Unlock()
}
