package node

import (
	"context"
	"errors"
	"time"

	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
)

// Forwarded writes must not be dropped: a commit a peer misses comes back
// through the engine's probes and fetches, but a Forward (a write on its
// way to the owner) or a ForwardReply (its answer) that is lost leaves the
// writer waiting for the write timeout. The driver never blocks on a
// send, so when a peer's outbox is full its batches spill into a queue per
// peer, which a goroutine drains with blocking sends, in order. protocol.Once a peer
// spills, every later batch for it queues behind, so nothing overtakes
// what waits: a commit that jumped the queue would open a gap the copy
// must fetch to fill, and writes to one key would lose their order.
//
// The queue is bounded twice. Batches that may be dropped (commit traffic)
// take at most spillLooseCap per peer; beyond it they are dropped and the
// engine recovers them. Batches that must be delivered take at most
// spillPeerCap per peer, and writers on this node wait (in WriteAsync)
// while more than spillLimit bytes of them are spilled over all peers:
// backpressure reaches the caller instead of memory growing. A slow copy
// therefore never makes writers wait, only peers slow to take forwarded
// writes do.
const (
	spillLimit    = 4 << 20  // bytes that must be delivered spilled before writers wait
	spillPeerCap  = 16 << 20 // bytes that must be delivered spilled per peer before they are dropped
	spillLooseCap = 8 << 20  // bytes that may be dropped spilled per peer before they are
)

type spillQueue struct {
	q     [][]byte
	must  int // bytes of batches that must be delivered
	loose int // bytes of the others
	since time.Time
}

// mustDeliver reports whether an engine batch holds a message that must
// not be dropped.
func mustDeliver(b []byte) bool { return len(b) > 0 && b[0]&flagMustDeliver != 0 }

// send sends one encoded engine batch to peer id on c without blocking
// the driver: behind the peer's spilled batches if it has any, else at once,
// spilling if its outbox is full. b is not retained.
func (n *Node) send(id string, c *transport.Conn, b []byte) {
	if n.spillTo(id, c, b, false) {
		return
	}
	err := c.Send(n.ctx, protocol.OpEngine, b, transport.FailFast)
	switch {
	case err == nil:
	case errors.Is(err, transport.ErrOutboxFull):
		n.spillTo(id, c, b, true)
	default:
		n.logger.Debug("fero: node: send failed", "to", id, "err", err)
	}
}

// spillTo queues b for id if id is spilling already, or if start is set,
// in which case it starts the drain. It reports whether b was taken
// (queued, or dropped over the caps).
func (n *Node) spillTo(id string, c *transport.Conn, b []byte, start bool) bool {
	n.smu.Lock()
	defer n.smu.Unlock()
	sq, spilling := n.spills[id]
	if !spilling && !start {
		return false
	}
	if !spilling {
		sq = &spillQueue{since: time.Now()}
		n.spills[id] = sq
		if !n.spawn(func() { n.drain(id, c, sq) }) {
			delete(n.spills, id)
			return true // closing: nothing will be sent
		}
	}
	must := mustDeliver(b)
	switch {
	case must && sq.must+len(b) > spillPeerCap:
		n.logger.Warn("fero: node: peer too slow; dropping a forwarded write", "peer", id, "spilled", sq.must)
		return true
	case !must && sq.loose+len(b) > spillLooseCap:
		return true // recovered by the engine's probes and fetches
	}
	// The driver's buffer is reused for the next batch: keep a copy.
	sq.q = append(sq.q, append([]byte(nil), b...))
	if must {
		sq.must += len(b)
		n.spilled.Add(int64(len(b)))
	} else {
		sq.loose += len(b)
	}
	return true
}

// drain sends a peer's spilled batches in order, blocking on its outbox,
// until the queue is empty or the connection fails.
func (n *Node) drain(id string, c *transport.Conn, sq *spillQueue) {
	for {
		n.smu.Lock()
		if len(sq.q) == 0 {
			delete(n.spills, id)
			n.smu.Unlock()
			n.spillWake()
			return
		}
		b := sq.q[0]
		sq.q[0] = nil
		sq.q = sq.q[1:]
		n.unspill(sq, b)
		n.smu.Unlock()
		if err := c.Send(n.ctx, protocol.OpEngine, b); err != nil {
			n.logger.Debug("fero: node: spilled send failed; dropping the queue", "to", id, "err", err)
			n.smu.Lock()
			for _, b := range sq.q {
				n.unspill(sq, b)
			}
			sq.q = nil
			delete(n.spills, id)
			n.smu.Unlock()
			n.spillWake()
			return
		}
	}
}

// unspill takes b off sq's counts; n.smu is held.
func (n *Node) unspill(sq *spillQueue, b []byte) {
	if !mustDeliver(b) {
		sq.loose -= len(b)
		return
	}
	sq.must -= len(b)
	n.spilled.Add(-int64(len(b)))
	n.spillWake()
}

func (n *Node) spillWake() {
	select {
	case n.spillDrained <- struct{}{}:
	default:
	}
}

// awaitSpill waits while more than spillLimit bytes are spilled.
func (n *Node) awaitSpill(ctx context.Context) error {
	for n.spilled.Load() > spillLimit {
		select {
		case <-n.spillDrained:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.ctx.Done():
			return protocol.ErrClosed
		}
	}
	return nil
}
