package node

import (
	"context"
	"errors"

	"github.com/fero-go/fero/internal/transport"
)

// Forwarded writes must not be dropped: a commit a peer misses comes back
// through the engine's probes and fetches, but a Forward (a write on its
// way to the owner) or a ForwardReply (its answer) that is lost leaves the
// writer waiting for the write timeout. The driver never blocks on a
// send, so when a peer's outbox is full these messages spill into a queue
// per peer, which a goroutine drains with blocking sends, in order; once a
// peer spills, its later Forward and ForwardReply messages queue behind,
// so writes to one key keep their order. Writers on this node wait (in
// WriteAsync) while more than spillLimit bytes are spilled: backpressure
// reaches the caller instead of memory growing.
const (
	spillLimit   = 4 << 20  // bytes spilled before writers wait
	spillPeerCap = 16 << 20 // bytes spilled per peer before messages are dropped
)

type spillQueue struct {
	q     [][]byte
	bytes int
}

// mustDeliver reports whether an engine batch holds a message that must
// not be dropped.
func mustDeliver(b []byte) bool { return len(b) > 0 && b[0]&flagMustDeliver != 0 }

// send sends one encoded engine message to peer id on c without blocking
// the driver: a full outbox drops it, or spills it if it must be
// delivered.
func (n *Node) send(id string, c *transport.Conn, b []byte) {
	critical := mustDeliver(b)
	if critical && n.spillTo(id, c, b, false) {
		return
	}
	err := c.Send(n.ctx, OpEngine, b, transport.FailFast)
	switch {
	case err == nil:
	case errors.Is(err, transport.ErrOutboxFull) && critical:
		n.spillTo(id, c, b, true)
	case errors.Is(err, transport.ErrOutboxFull):
		// Recovered by the engine's probes and fetches.
	default:
		n.logger.Debug("fero: node: send failed", "to", id, "err", err)
	}
}

// spillTo queues b for id if id is spilling already, or if start is set,
// in which case it starts the drain. It reports whether b was taken.
func (n *Node) spillTo(id string, c *transport.Conn, b []byte, start bool) bool {
	n.smu.Lock()
	defer n.smu.Unlock()
	sq, spilling := n.spills[id]
	if !spilling && !start {
		return false
	}
	if !spilling {
		sq = &spillQueue{}
		n.spills[id] = sq
		if !n.spawn(func() { n.drain(id, c, sq) }) {
			delete(n.spills, id)
			return true // closing: nothing will be sent
		}
	}
	if sq.bytes+len(b) > spillPeerCap {
		n.logger.Warn("fero: node: peer too slow; dropping a forwarded write", "peer", id, "spilled", sq.bytes)
		return true
	}
	// The driver's buffer is reused for the next message: keep a copy.
	sq.q = append(sq.q, append([]byte(nil), b...))
	sq.bytes += len(b)
	n.spilled.Add(int64(len(b)))
	return true
}

// drain sends a peer's spilled messages in order, blocking on its outbox,
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
		sq.bytes -= len(b)
		n.smu.Unlock()
		n.spilled.Add(-int64(len(b)))
		n.spillWake()
		if err := c.Send(n.ctx, OpEngine, b); err != nil {
			n.logger.Debug("fero: node: spilled send failed; dropping the queue", "to", id, "err", err)
			n.smu.Lock()
			for _, b := range sq.q {
				n.spilled.Add(-int64(len(b)))
			}
			delete(n.spills, id)
			n.smu.Unlock()
			n.spillWake()
			return
		}
	}
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
			return ErrClosed
		}
	}
	return nil
}
