package node

import (
	"context"
	"sync"
)

// maxQueued bounds the proposals waiting for the driver; writers beyond it
// wait for room.
const maxQueued = 1024

// propQueue hands proposals from writers to the driver. A writer appends
// under a mutex and wakes the driver only when the queue was empty; the
// driver takes everything queued at once. Per write that costs a lock, not
// a channel operation on each side.
type propQueue struct {
	mu    sync.Mutex
	q     []proposal
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
// context (closed: ErrClosed) ends.
func (pq *propQueue) push(ctx, node context.Context, p proposal) error {
	for {
		pq.mu.Lock()
		if n := len(pq.q); n < maxQueued {
			pq.q = append(pq.q, p)
			pq.mu.Unlock()
			if n == 0 {
				signal(pq.ready)
			}
			return nil
		}
		pq.mu.Unlock()
		select {
		case <-pq.space:
		case <-ctx.Done():
			return ctx.Err()
		case <-node.Done():
			return ErrClosed
		}
	}
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
