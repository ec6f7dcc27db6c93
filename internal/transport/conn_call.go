// A connection's calling side: the calls it makes (Send, Call, Go, GoTo),
// the table of those awaiting an answer, and complete, which delivers the
// answers the reader reads.

package transport

import (
	"bytes"
	"context"
	"sync"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

func (c *Conn) complete(f *wire.Frame) (keep bool) {
	c.pmu.Lock()
	var p *pending
	if f.Kind == wire.KindChunk {
		p = c.pending.get(f.ID)
	} else {
		p = c.takeLocked(f.ID)
	}
	c.pmu.Unlock()
	if p == nil {
		return false // a late answer to a call the caller gave up on
	}
	// A Go callback runs here and must not keep the reply; Call and
	// Stream hand it to another goroutine.
	keep = p.to == nil
	switch f.Kind {
	case wire.KindChunk:
		if p.st != nil {
			p.st.push(f.Payload)
		}
	case wire.KindReply:
		if keep && len(f.Payload) <= smallReply {
			// Copying a small reply beats pinning the read block for it:
			// a pinned block makes the reader start a new one.
			p.deliver(bytes.Clone(f.Payload), nil)
			return false
		}
		p.deliver(f.Payload, nil)
	case wire.KindError:
		code, msg, details, err := wire.ParseErrorPayload(f.Payload)
		if err != nil {
			p.deliver(nil, errs.Errorf(errs.Internal, "unreadable error reply: %w", err))
			return false
		}
		for i := range details {
			details[i].Value = bytes.Clone(details[i].Value)
		}
		p.deliver(nil, errs.FromWire(code, msg, details))
		return false // the message and the details were copied into the error
	}
	return keep
}

// smallReply is the largest reply to a Call that is copied out of the
// read buffer instead of keeping the buffer.
const smallReply = 512

// pending is a call of ours awaiting its answer.
type pending struct {
	to  Answerer        // Go, GoTo
	ctx context.Context // Go, GoTo: the cancellable context it waits under
	ch  chan result     // Call
	st  *Stream         // Stream
}

// ctxWatch cancels the Go calls waiting under one context. Pipelined calls
// usually share a context, so one context.AfterFunc serves them all
// instead of one registration (and its allocations) per call.
type ctxWatch struct {
	n    int // calls waiting under the context
	stop func() bool
}

type result struct {
	b   []byte
	err error
}

// deliver hands over the answer. It runs once per call, after the call
// left the table, so nothing else refers to p: a Go call's record goes
// back to the pool before its callback runs.
func (p *pending) deliver(b []byte, err error) {
	switch {
	case p.to != nil:
		to := p.to
		p.to, p.ctx = nil, nil
		pendingPool.Put(p)
		to.Answer(b, err)
	case p.st != nil:
		p.st.end(b, err)
	default:
		p.ch <- result{b, err}
	}
}

var pendingPool = sync.Pool{New: func() any { return &pending{ch: make(chan result, 1)} }}

func (c *Conn) register(id uint64, p *pending) error {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.pclosed {
		return c.err
	}
	c.pending.put(id, p)
	if p.ctx != nil {
		w := c.lastWatch
		if p.ctx != c.lastCtx {
			w = c.watches[p.ctx]
		}
		if w == nil {
			if c.watches == nil {
				c.watches = make(map[context.Context]*ctxWatch)
			}
			ctx := p.ctx
			w = &ctxWatch{stop: context.AfterFunc(ctx, func() { c.cancelCalls(ctx) })}
			c.watches[ctx] = w
		}
		w.n++
		c.lastCtx, c.lastWatch = p.ctx, w
	}
	return nil
}

// unregister removes a call; false means its answer (or the connection's
// end) got there first and is being delivered.
func (c *Conn) unregister(id uint64) bool {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return c.takeLocked(id) != nil
}

// takeLocked removes a call from the table and from its context's watch.
func (c *Conn) takeLocked(id uint64) *pending {
	p := c.pending.take(id)
	if p != nil && p.ctx != nil {
		w := c.lastWatch
		if p.ctx != c.lastCtx {
			w = c.watches[p.ctx]
		}
		if w != nil {
			if w.n--; w.n == 0 {
				c.dropWatch(p.ctx, w)
			}
		}
	}
	return p
}

func (c *Conn) dropWatch(ctx context.Context, w *ctxWatch) {
	w.stop()
	delete(c.watches, ctx)
	if c.lastWatch == w {
		c.lastCtx, c.lastWatch = nil, nil
	}
}

// cancelCalls fails every Go call waiting under ctx, which just ended,
// and tells the callee about each.
func (c *Conn) cancelCalls(ctx context.Context) {
	c.pmu.Lock()
	gone := c.pending.takeIf(func(p *pending) bool { return p.ctx == ctx })
	if w := c.watches[ctx]; w != nil {
		c.dropWatch(ctx, w)
	}
	c.pmu.Unlock()
	for _, g := range gone {
		c.sendCancel(g.id)
		g.p.deliver(nil, ctx.Err())
	}
}

func (c *Conn) sendCancel(id uint64) {
	// Best effort: never block a caller that is giving up.
	_ = c.writeFrame(context.Background(), wire.KindCancel, id, 0, nil, true)
}

// Send queues a one-way message. Nothing is kept for it once queued.
func (c *Conn) Send(ctx context.Context, op uint32, payload []byte, opts ...CallOption) error {
	return c.writeFrame(ctx, wire.KindSend, 0, op, payload, failFast(opts))
}

// Call sends a request and waits for its reply. The reply may alias the
// connection's read buffer (a small one is copied); it is the caller's to
// keep, and nothing else writes to it.
func (c *Conn) Call(ctx context.Context, op uint32, payload []byte, opts ...CallOption) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := pendingPool.Get().(*pending)
	id := c.nextID.Add(1)
	if err := c.register(id, p); err != nil {
		pendingPool.Put(p)
		return nil, err
	}
	// The caller waits for the reply anyway: it may as well write.
	if err := c.queueFrame(ctx, wire.KindCall, id, op, payload, failFast(opts), true, false); err != nil {
		if !c.unregister(id) {
			<-p.ch // the connection's end delivered to it
		}
		pendingPool.Put(p)
		return nil, err
	}
	select {
	case r := <-p.ch:
		pendingPool.Put(p)
		return r.b, r.err
	case <-ctx.Done():
		if c.unregister(id) {
			c.sendCancel(id)
		} else {
			<-p.ch
		}
		pendingPool.Put(p)
		return nil, ctx.Err()
	}
}

// Go sends a request and calls done with its reply or error, exactly once,
// on the connection's reader goroutine (or on the goroutine that cancels
// ctx). done must not block, and reply is valid only until done returns:
// the reader reuses its buffer. If Go returns an error, done is not
// called.
func (c *Conn) Go(ctx context.Context, op uint32, payload []byte, done func(reply []byte, err error), opts ...CallOption) error {
	if done == nil {
		return errs.New(errs.InvalidArgument, "transport: Go needs a callback")
	}
	return c.GoTo(ctx, op, payload, AnswerFunc(done), opts...)
}

// An Answerer takes the answer to a call sent with GoTo.
type Answerer interface {
	Answer(reply []byte, err error)
}

// AnswerFunc is a function as an Answerer.
type AnswerFunc func(reply []byte, err error)

// Answer calls f.
func (f AnswerFunc) Answer(reply []byte, err error) { f(reply, err) }

// GoTo is Go with the answer given to to: a caller that keeps each call's
// state in a record of its own (pooled, say) can have the record take the
// answer, rather than a closure allocated for every call.
func (c *Conn) GoTo(ctx context.Context, op uint32, payload []byte, to Answerer, opts ...CallOption) error {
	if to == nil {
		return errs.New(errs.InvalidArgument, "transport: GoTo needs an Answerer")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	id := c.nextID.Add(1)
	p := pendingPool.Get().(*pending)
	p.to = to
	if ctx.Done() != nil {
		p.ctx = ctx
	}
	if err := c.register(id, p); err != nil {
		p.release()
		return err
	}
	if err := ctx.Err(); err != nil && c.unregister(id) {
		// ctx ended before the call was registered for its watch to see.
		p.release()
		return err
	}
	if err := c.queueFrame(ctx, wire.KindCall, id, op, payload, failFast(opts), false, hasOption(opts, Corked)); err != nil {
		if c.unregister(id) {
			p.release()
			return err
		}
		return nil // done has the error
	}
	return nil
}

// release returns an undelivered Go call's record to the pool.
func (p *pending) release() {
	p.to, p.ctx = nil, nil
	pendingPool.Put(p)
}
