// A connection's serving side: the requests the reader reads, handed to
// the Handler, the open ones (answered after their handler call returned)
// and the in-flight limits they count against, and cancellation.

package transport

import (
	"fmt"
	"runtime/debug"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

func (c *Conn) serve(f *wire.Frame) (keep bool, err error) {
	if f.Kind == wire.KindSend {
		// One-way requests cannot be answered, so the reader reuses one
		// Request for them all (see Request).
		req := &c.oneway
		req.op, req.payload, req.kept = f.Op, f.Payload, false
		if c.handler != nil {
			c.callHandler(req)
		}
		return req.kept, nil
	}
	c.omu.Lock()
	dup := c.open.get(f.ID) != nil
	var full error
	if !dup {
		full = c.inflightFull()
	}
	c.omu.Unlock()
	if dup {
		return false, fmt.Errorf("%w: call id %d reused while open", wire.ErrMalformed, f.ID)
	}
	req := &Request{conn: c, kind: f.Kind, id: f.ID, op: f.Op, payload: f.Payload}
	if c.handler == nil {
		_ = req.Fail(errs.New(errs.Unimplemented, "this end serves no requests"))
		return false, nil
	}
	if full != nil {
		// Refused before the handler could keep it: its block is
		// not pinned, and the reader reuses it.
		_ = req.Fail(full)
		return false, nil
	}
	req.eager.Store(!c.more)
	c.callHandler(req)
	req.eager.Store(false)
	if req.done.Load() {
		return false, nil // answered inline: nothing can cancel it any more
	}
	// Still open: cancel frames, read by this goroutine after the handler
	// returned, must find it. finish sets done before it looks here, so
	// either it sees the entry or we see done.
	c.omu.Lock()
	c.open.put(f.ID, req)
	c.hold(req)
	req.open.Store(true)
	c.omu.Unlock()
	if req.done.Load() {
		c.closeRequest(f.ID, req)
	}
	return true, nil
}

// heldBlock is a read block that holds the payloads of open requests
// (the requests in Conn.open). A payload aliases its block, and the block
// stays in memory while any payload in it is in use, so the in-flight
// limit counts each such block whole, once, however many requests share
// it. Counting payload bytes instead would let a peer pin a 64 KiB block
// with each request of a few bytes.
type heldBlock struct {
	id   uint64 // wire.Reader.Block's
	size int
	reqs int // open requests in it; under Conn.omu
}

// inflightFull returns the error that refuses the request the reader has
// just read when the open requests are at a limit (WithMaxInflight,
// WithMaxInflightBytes), or nil. The request would add its block, unless
// open requests already hold that. A connection with nothing open takes
// any request, so that one larger than the byte limit is not refused for
// good. Called with omu held, on the reader goroutine.
func (c *Conn) inflightFull() error {
	if c.open.n == 0 {
		return nil
	}
	if c.open.n >= c.cfg.maxInflight {
		return errs.Errorf(errs.ResourceExhausted, "too many requests in flight on this connection: %d unanswered, limit %d", c.open.n, c.cfg.maxInflight)
	}
	id, size := c.rd.Block()
	if b := c.blk; b != nil && b.id == id && b.reqs > 0 {
		return nil // its block is counted already
	}
	if c.openBytes+size > c.cfg.maxInflightB {
		return errs.Errorf(errs.ResourceExhausted, "too many request bytes in flight on this connection: %d unanswered requests hold %d bytes, this one would add %d, limit %d",
			c.open.n, c.openBytes, size, c.cfg.maxInflightB)
	}
	return nil
}

// hold counts an open request's block against the in-flight limit. Called
// with omu held, on the reader goroutine, which read the request into its
// current block.
func (c *Conn) hold(r *Request) {
	id, size := c.rd.Block()
	b := c.blk
	if b == nil || b.id != id {
		b = &heldBlock{id: id, size: size}
		c.blk = b
	}
	if b.reqs == 0 {
		c.openBytes += b.size
	}
	b.reqs++
	r.blk = b
}

// unhold undoes hold for a request leaving Conn.open. Called with omu
// held.
func (c *Conn) unhold(r *Request) {
	b := r.blk
	r.blk = nil
	if b.reqs--; b.reqs == 0 {
		c.openBytes -= b.size
	}
}

func (c *Conn) callHandler(req *Request) {
	defer func() {
		if p := recover(); p != nil {
			c.cfg.logger.Error("fero: transport: handler panicked", "op", req.op, "panic", p, "stack", string(debug.Stack()))
			_ = req.Fail(errs.Errorf(errs.Internal, "handler panicked: %v", p))
		}
	}()
	c.handler.ServeCall(req)
}

func (c *Conn) closeRequest(id uint64, r *Request) {
	c.omu.Lock()
	if c.open.get(id) == r {
		c.open.take(id)
		c.unhold(r)
	}
	c.omu.Unlock()
}

// cancelRequest tells the handler of an open request that its caller gave
// up. The request stops counting against the in-flight limits at once:
// its handler is expected to drop it when its Context ends.
func (c *Conn) cancelRequest(id uint64) {
	c.omu.Lock()
	r := c.open.take(id)
	if r != nil {
		c.unhold(r)
	}
	c.omu.Unlock()
	if r == nil {
		return // answered already
	}
	r.mu.Lock()
	r.canceled = true
	if r.cancel != nil {
		r.cancel()
	}
	r.wakeFlow()
	r.mu.Unlock()
}
