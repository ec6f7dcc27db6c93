package transport

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// Handler serves requests. See the package comment for the rules a
// handler follows.
type Handler interface {
	ServeCall(*Request)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(*Request)

// ServeCall calls f(r).
func (f HandlerFunc) ServeCall(r *Request) { f(r) }

// Mux routes requests to handlers by op. Register every op before the mux
// serves its first request.
type Mux struct {
	small [muxSmall]Handler // ops below muxSmall: an index, not a map lookup
	large map[uint32]Handler
}

const muxSmall = 64

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{large: make(map[uint32]Handler)} }

// Handle routes op to h.
func (m *Mux) Handle(op uint32, h Handler) {
	if op < muxSmall {
		m.small[op] = h
		return
	}
	m.large[op] = h
}

// HandleFunc routes op to f.
func (m *Mux) HandleFunc(op uint32, f func(*Request)) { m.Handle(op, HandlerFunc(f)) }

// ServeCall dispatches r, answering an unknown op with Unimplemented.
func (m *Mux) ServeCall(r *Request) {
	var h Handler
	if r.op < muxSmall {
		h = m.small[r.op]
	} else {
		h = m.large[r.op]
	}
	if h == nil {
		_ = r.Fail(errs.Errorf(errs.Unimplemented, "no handler for op %d", r.op))
		return
	}
	h.ServeCall(r)
}

// Mode is how a caller asked to be answered.
type Mode uint8

// Call modes.
const (
	ModeSend   Mode = Mode(wire.KindSend)
	ModeCall   Mode = Mode(wire.KindCall)
	ModeStream Mode = Mode(wire.KindStream)
)

// Request is one incoming call. Its methods are safe for concurrent use.
// Answering a one-way request is allowed and costs nothing: the answer is
// dropped before it is encoded.
//
// A Payload is valid until the request is answered; a one-way request is
// never answered, so its Payload is valid only until the handler returns,
// unless the handler calls Keep. The connection then reuses the read
// buffer, so that traffic answered promptly allocates nothing for
// reading. A one-way Request itself is also reused: a handler that works
// on a one-way message later keeps a copy of its payload (or Keeps it),
// not the *Request.
type Request struct {
	conn    *Conn
	kind    wire.Kind
	id      uint64
	op      uint32
	payload []byte
	done    atomic.Bool
	open    atomic.Bool // in conn.open: it outlived its handler call
	hasCtx  atomic.Bool // Context was called
	// kept is set by Keep on a one-way request; reader only.
	kept bool
	// eager is set while the handler runs on the reader with no other
	// frame behind this request: nothing is left to batch the answer
	// with, so the answer is written at once, by whoever gives it, rather
	// than when the handler returns. A handler may still have work to do
	// after it answers (the node sends a write's commit to every copy);
	// the caller need not wait for it.
	eager atomic.Bool
	// blk is the read block its payload holds, while it is in conn.open;
	// under conn.omu.
	blk *heldBlock

	mu       sync.Mutex
	ctx      context.Context
	cancel   context.CancelFunc
	canceled bool
	flow     credit // a stream's room at its caller (flow.go)
}

// Op returns the operation number.
func (r *Request) Op() uint32 { return r.op }

// Payload returns the request bytes. They alias the connection's read
// buffer and are valid until the request is answered (for a one-way
// request: until the handler returns, or for good after Keep). Copy what
// you keep after that.
func (r *Request) Payload() []byte { return r.payload }

// Keep keeps a one-way request's Payload valid after the handler returns,
// for as long as anything refers to it: the connection reads on into a
// new block rather than reuse this one, and leaves the old one to the
// garbage collector. Call it from the handler, before it returns. A call's
// Payload is kept until it is answered anyway, so Keep changes nothing for
// one. A small payload kept long holds its whole block (up to 64 KiB), so
// keep what lasts only in copies of its own.
func (r *Request) Keep() {
	if r.kind == wire.KindSend {
		r.kept = true
		r.conn.pinOther()
	}
}

// Hold is Keep for a payload whose user says when it is done with it:
// the payload stays valid until the returned Hold's Release, after which
// neither it nor anything aliasing it may be used. Once every payload
// held in a read block is released, the connection reads into that block
// again rather than leave it to the garbage collector. Call it from the
// handler of a one-way request, before it returns; for a call it returns
// the zero Hold (a call's Payload is valid until it is answered).
func (r *Request) Hold() Hold {
	if r.kind != wire.KindSend {
		return Hold{}
	}
	r.kept = true
	return r.conn.holdRead()
}

// Mode returns how the caller asked to be answered.
func (r *Request) Mode() Mode { return Mode(r.kind) }

// More reports whether another complete frame already waits behind this
// request on its connection. A handler may use it to batch work while a
// burst is arriving. Only meaningful while the handler runs on the
// connection's reader (before it returns).
func (r *Request) More() bool { return r.conn.more }

// Conn returns the connection the request arrived on.
func (r *Request) Conn() *Conn { return r.conn }

// MaxFrame returns the largest frame body the connection sends or takes
// (WithMaxFrame): a reply larger than it cannot be sent.
func (c *Conn) MaxFrame() int { return c.cfg.maxFrame }

// Context is cancelled when the caller cancels the call, when the request
// has been answered, or when the connection closes.
func (r *Request) Context() context.Context {
	if r.kind == wire.KindSend {
		return r.conn.ctx
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil {
		r.ctx, r.cancel = context.WithCancel(r.conn.ctx)
		r.hasCtx.Store(true)
		if r.canceled || r.done.Load() {
			r.cancel()
		}
	}
	return r.ctx
}

// finish marks the request answered. It reports false if it already was,
// or if the caller cancelled it. A request answered inside its handler
// call, without asking for a context, takes no lock here: only requests
// that outlived the handler can be cancelled or hold a context. (Each
// flag is set before the other side's is read, so one of the two always
// sees the other: see Context and Conn.serve.) TryReply calls it holding
// the outbox's lock, so nothing may take that lock while holding omu or
// r.mu, which finish takes.
func (r *Request) finish() bool {
	if !r.done.CompareAndSwap(false, true) {
		return false
	}
	open, hasCtx := r.open.Load(), r.hasCtx.Load()
	if open {
		r.conn.closeRequest(r.id, r)
	}
	if !open && !hasCtx {
		return true
	}
	r.mu.Lock()
	if r.cancel != nil {
		r.cancel()
	}
	canceled := r.canceled
	r.mu.Unlock()
	return !canceled
}

// Reply sends the final answer. It may block while the outbox is full.
func (r *Request) Reply(payload []byte) error {
	if r.kind == wire.KindSend {
		return nil
	}
	if r.done.Load() {
		return ErrReplied
	}
	if !r.finish() {
		return nil // the caller gave up; nobody wants the answer
	}
	return r.conn.queueFrame(r.conn.ctx, wire.KindReply, r.id, 0, payload, false, r.eager.Load(), false)
}

// TryReply is Reply for a goroutine that must not block: when the outbox
// has no room it returns ErrOutboxFull and leaves the request unanswered,
// so Reply or Fail may follow (from a goroutine that may wait). The room
// is checked, the answer committed and queued under one hold of the
// outbox's lock, so it never waits.
func (r *Request) TryReply(payload []byte) error { return r.tryReply(payload, r.eager.Load()) }

// TryReplyBatched is TryReply for an answer that should leave with what
// the rest of the reader's dispatch queues on this connection, in one
// write, rather than at once: a handler on the reader that answers and
// then sends more to the same peer (the node answers a write, then sends
// the commit to the caller's copy) saves the peer a write and a read.
// Given while the reader is not dispatching (from another goroutine,
// later), it leaves as TryReply's would.
func (r *Request) TryReplyBatched(payload []byte) error { return r.tryReply(payload, false) }

func (r *Request) tryReply(payload []byte, now bool) error {
	if r.kind == wire.KindSend {
		return nil
	}
	if r.done.Load() {
		return ErrReplied
	}
	c := r.conn
	n := wire.FrameSize(r.id, 0, len(payload))
	if n-wire.LengthSize > c.cfg.maxFrame {
		return ErrTooLarge
	}
	if err := c.out.lock(c.ctx, n, true); err != nil {
		return err
	}
	if !r.finish() {
		c.out.mu.Unlock()
		return nil
	}
	empty := len(c.out.buf) == 0
	c.out.buf = wire.AppendFrame(c.out.buf, wire.KindReply, r.id, 0, payload)
	c.out.unlock(empty, now, false)
	return nil
}

// Chunk sends one intermediate answer of a stream.
func (r *Request) Chunk(payload []byte) error {
	switch {
	case r.kind == wire.KindSend:
		return nil
	case r.kind != wire.KindStream:
		return ErrNotStream
	case r.done.Load():
		return ErrReplied
	}
	r.mu.Lock()
	canceled := r.canceled
	r.mu.Unlock()
	if canceled {
		return context.Canceled
	}
	return r.conn.writeFrame(r.conn.ctx, wire.KindChunk, r.id, 0, payload, false)
}

// Fail sends err as the final answer. The caller receives an *errs.Error
// with err's code (Unknown for an uncoded error), message and details.
func (r *Request) Fail(err error) error {
	if r.kind == wire.KindSend {
		return nil
	}
	if r.done.Load() {
		return ErrReplied
	}
	if !r.finish() {
		return nil
	}
	code, msg := errs.CodeOf(err), errs.MessageOf(err)
	return r.conn.writeErrorFrame(r.id, code, msg, errs.DetailsOf(err))
}
