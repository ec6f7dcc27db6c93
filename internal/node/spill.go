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
// peer, which a goroutine drains with blocking sends, in order. Once a peer
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
func (ps *peers) send(id string, c *transport.Conn, b []byte) {
	if ps.spillTo(id, c, b, false) {
		return
	}
	err := c.Send(ps.ctx, protocol.OpEngine, b, transport.FailFast)
	switch {
	case err == nil:
	case errors.Is(err, transport.ErrOutboxFull):
		ps.spillTo(id, c, b, true)
	default:
		ps.logger.Debug("fero: node: send failed", "to", id, "err", err)
	}
}

// spillTo queues b for id if id is spilling already, or if start is set,
// in which case it starts the drain. It reports whether b was taken
// (queued, or dropped over the caps).
func (ps *peers) spillTo(id string, c *transport.Conn, b []byte, start bool) bool {
	ps.smu.Lock()
	defer ps.smu.Unlock()
	sq, spilling := ps.spills[id]
	if !spilling && !start {
		return false
	}
	if !spilling {
		sq = &spillQueue{since: time.Now()}
		ps.spills[id] = sq
		if !ps.spawn(func() { ps.drain(id, c, sq) }) {
			delete(ps.spills, id)
			return true // closing: nothing will be sent
		}
	}
	must := mustDeliver(b)
	switch {
	case must && sq.must+len(b) > spillPeerCap:
		ps.logger.Warn("fero: node: peer too slow; dropping a forwarded write", "peer", id, "spilled", sq.must)
		return true
	case !must && sq.loose+len(b) > spillLooseCap:
		return true // recovered by the engine's probes and fetches
	}
	// The driver's buffer is reused for the next batch: keep a copy.
	sq.q = append(sq.q, append([]byte(nil), b...))
	if must {
		sq.must += len(b)
		ps.spilled.Add(int64(len(b)))
	} else {
		sq.loose += len(b)
	}
	return true
}

// drain sends a peer's spilled batches in order, blocking on its outbox,
// until the queue is empty or the connection fails.
func (ps *peers) drain(id string, c *transport.Conn, sq *spillQueue) {
	for {
		ps.smu.Lock()
		if len(sq.q) == 0 {
			delete(ps.spills, id)
			ps.smu.Unlock()
			ps.spillWake()
			return
		}
		b := sq.q[0]
		sq.q[0] = nil
		sq.q = sq.q[1:]
		ps.unspill(sq, b)
		ps.smu.Unlock()
		if err := c.Send(ps.ctx, protocol.OpEngine, b); err != nil {
			ps.logger.Debug("fero: node: spilled send failed; dropping the queue", "to", id, "err", err)
			ps.smu.Lock()
			for _, b := range sq.q {
				ps.unspill(sq, b)
			}
			sq.q = nil
			delete(ps.spills, id)
			ps.smu.Unlock()
			ps.spillWake()
			return
		}
	}
}

// unspill takes b off sq's counts; ps.smu is held.
func (ps *peers) unspill(sq *spillQueue, b []byte) {
	if !mustDeliver(b) {
		sq.loose -= len(b)
		return
	}
	sq.must -= len(b)
	ps.spilled.Add(-int64(len(b)))
	ps.spillWake()
}

func (ps *peers) spillWake() {
	select {
	case ps.spillDrained <- struct{}{}:
	default:
	}
}

// awaitSpill waits while more than spillLimit bytes are spilled.
func (ps *peers) awaitSpill(ctx context.Context) error {
	for ps.spilled.Load() > spillLimit {
		select {
		case <-ps.spillDrained:
		case <-ctx.Done():
			return ctx.Err()
		case <-ps.ctx.Done():
			return protocol.ErrClosed
		}
	}
	return nil
}
