package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

const protocolVersion = 1

var preface = [8]byte{'F', 'E', 'R', 'O', 0, 0, 0, protocolVersion}

// Conn is one established connection. Both ends may call and serve over
// it. Its methods are safe for concurrent use.
type Conn struct {
	nc      net.Conn
	cfg     *config
	handler Handler
	out     *outbox
	more    bool // another complete frame waits behind the one dispatched; reader goroutine only

	nextID  atomic.Uint64
	pmu     sync.Mutex
	pending pendingTable                  // calls of ours awaiting an answer
	pclosed bool                          // set when the connection ends: no new calls
	watches map[context.Context]*ctxWatch // one per context that Go calls wait under
	// The last watch used: pipelined calls share a context, so this saves
	// the map lookups on the hot path.
	lastCtx   context.Context
	lastWatch *ctxWatch
	omu       sync.Mutex
	open      slotTable[Request] // requests we serve that outlived their handler call
	openBytes int                // the size of the read blocks they hold (see heldBlock); under omu
	rd        *wire.Reader       // the reader's; reader goroutine only
	blk       *heldBlock         // the reader's current block, if open requests hold it; reader goroutine only
	// One-way payloads held (Request.Hold; recycle.go): the block the
	// latest were held in, the last block pinned for anything else (its
	// id+1), both reader goroutine only, and the blocks released.
	held        *heldRead
	pinnedOther uint64
	freeBlk     freeBlocks
	accepted    bool        // a Server accepted it: its first frame has a deadline
	trusted     atomic.Bool // TrustLengths was called
	// The pre-auth budget (WithPreAuth): proved is set by Prove (at once
	// on a connection dialed, or accepted without WithPreAuth); limited
	// while the reader reads with the pre-auth limits, reader only; the
	// rest is the accepting Server's: state under its mu.
	proved    atomic.Bool
	limited   bool
	srv       *Server
	ip        netip.Addr
	state     connState
	authTimer *time.Timer

	oneway     Request         // reused for every one-way request; reader only
	ctx        context.Context // cancelled when the connection ends
	cancel     context.CancelCauseFunc
	endOnce    sync.Once
	ended      atomic.Bool
	err        error // why it ended; written once before ended is set
	readerDone chan struct{}
	done       chan struct{}
	onEnd      func()
}

// Caller is what Conn and Peer have in common: the ways to call.
type Caller interface {
	Send(ctx context.Context, op uint32, payload []byte, opts ...CallOption) error
	Call(ctx context.Context, op uint32, payload []byte, opts ...CallOption) ([]byte, error)
	Go(ctx context.Context, op uint32, payload []byte, done func(reply []byte, err error), opts ...CallOption) error
	GoTo(ctx context.Context, op uint32, payload []byte, to Answerer, opts ...CallOption) error
	Stream(ctx context.Context, op uint32, payload []byte, opts ...CallOption) (*Stream, error)
	StreamWindow(ctx context.Context, op uint32, payload []byte, chunks int, opts ...CallOption) (*Stream, error)
}

var (
	_ Caller = (*Conn)(nil)
	_ Caller = (*Peer)(nil)
)

func newConn(nc net.Conn, cfg *config, h Handler, accepted bool) *Conn {
	c := &Conn{
		nc:         nc,
		cfg:        cfg,
		handler:    h,
		out:        newOutbox(cfg.outboxLimit),
		readerDone: make(chan struct{}),
		done:       make(chan struct{}),
		accepted:   accepted,
	}
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	c.oneway = Request{conn: c, kind: wire.KindSend}
	c.out.buf = append(c.out.buf, preface[:]...)
	if !accepted {
		c.proved.Store(true)
		// A server closes a connection whose first frame does not come
		// within the connect timeout, so that a peer cannot hold one by
		// saying nothing. An idle client must not look like that: it
		// sends a first frame at once, a cancel of call id 0, which no
		// call uses (ids start at 1), so every version ignores it.
		c.out.buf = wire.AppendFrame(c.out.buf, wire.KindCancel, 0, 0, nil)
	}
	c.out.stats = cfg.stats
	c.out.keep = 2 * cfg.maxBatch
	if !cfg.noDirect {
		c.out.direct = directWriter(nc)
	}
	c.out.fail = func(err error) {
		if !c.ended.Load() {
			c.cfg.logger.Debug("fero: transport: write failed", "remote", c.nc.RemoteAddr(), "err", err)
		}
		c.end(c.lost(err), false)
	}
	return c
}

// Queued returns how many bytes of frames wait in the connection's
// outbox to be written.
func (c *Conn) Queued() int { return c.out.queued() }

// TrustLengths tells the connection that its other end has proved who it
// is (a cluster peer): from its next frame on, a frame is read into a
// buffer of the size it declares rather than one that doubles as its bytes
// arrive (wire.Reader.SetExact), which saves a copy and half the
// allocation of every large frame (a snapshot reply of megabytes). Until
// then, memory follows the bytes received, so a sender that declares a
// large frame and stalls holds at most twice what it sent.
func (c *Conn) TrustLengths() { c.trusted.Store(true) }

func (c *Conn) start() {
	go c.readLoop()
	go c.writeLoop()
	// The preface is queued. The reader may already have ended the
	// connection, which also wakes the writer, so never block here.
	select {
	case c.out.wake <- struct{}{}:
	default:
	}
}

// DialConn connects to addr and returns the connection. It does not
// reconnect; use Dial for a Peer that does.
func DialConn(ctx context.Context, addr string, opts ...Option) (*Conn, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return dialConn(ctx, addr, &cfg)
}

func dialConn(ctx context.Context, addr string, cfg *config) (*Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.connectTimeout)
	defer cancel()
	dial := cfg.dialer
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, errs.Errorf(errs.Unavailable, "dial %s: %w", addr, err)
	}
	setNoDelay(nc)
	setUserTimeout(nc, cfg.userTimeout)
	if cfg.tls != nil {
		tc := cfg.tls.Clone()
		if tc.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				tc.ServerName = host
			}
		}
		tlsConn := tls.Client(nc, tc)
		if err := tlsConn.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, errs.Errorf(errs.Unavailable, "tls handshake with %s: %w", addr, err)
		}
		nc = tlsConn
	}
	c := newConn(nc, cfg, cfg.handler, false)
	c.start()
	if cfg.onDial != nil {
		if err := cfg.onDial(ctx, c); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

func setNoDelay(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true) // Go's default, made explicit: latency over packet count
	}
}

// LocalAddr returns the address of this end.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// RemoteAddr returns the address of the other end.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Done is closed once the connection has ended and its goroutines exited.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended, or nil while it is open.
func (c *Conn) Err() error {
	if !c.ended.Load() {
		return nil
	}
	return c.err
}

// Close flushes queued frames, ends the connection, fails calls still
// waiting with ErrClosed and waits for the connection's goroutines. The
// flush, a write already under way included, is bounded by the close
// timeout; so is the wait, after it, for the peer to close its side (see
// lingerClose), which keeps a reset from discarding what the peer has not
// read yet. It is idempotent. Do not call it from a
// handler running on this connection's reader goroutine: that would wait
// for itself; use go c.Close() there.
func (c *Conn) Close() error {
	c.end(ErrClosed, true)
	<-c.done
	return nil
}

// end ends the connection once: later causes are ignored.
func (c *Conn) end(cause error, flush bool) {
	c.endOnce.Do(func() {
		c.err = cause
		c.ended.Store(true)
		c.cancel(cause)
		if flush && c.cfg.closeTimeout > 0 {
			// The flush, the write under way included, ends by then
			// even if the peer has stopped reading.
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.closeTimeout))
		}
		c.out.close(cause, flush && c.cfg.closeTimeout > 0)
		if !flush {
			c.nc.Close() // unblocks the reader and writer now
		}
		c.pmu.Lock()
		c.pclosed = true
		ps := c.pending.drain()
		for ctx, w := range c.watches {
			c.dropWatch(ctx, w)
		}
		c.pmu.Unlock()
		// A call waiting for its answer may have been carried out by the
		// peer, however its connection ended: never definite (rule 12).
		inFlight := cause
		if cause == ErrClosed {
			inFlight = ErrClosedInFlight
		}
		for _, p := range ps {
			p.deliver(nil, inFlight)
		}
	})
}

func (c *Conn) lost(cause error) error {
	if errors.Is(cause, io.EOF) {
		cause = errors.New("closed by peer")
	}
	// Aborted, not Unavailable: a call in flight may have been carried
	// out by the peer (docs/engine.md, rule 12).
	return errs.Errorf(errs.Aborted, "%w: %s: %w", ErrConnLost, c.nc.RemoteAddr(), cause)
}

func (c *Conn) readLoop() {
	defer close(c.readerDone)
	if c.cfg.afterBurst != nil {
		// Whatever a handler put off for the rest of a burst the
		// reader will not finish.
		defer c.cfg.afterBurst()
	}
	// On an accepted connection the preface and the first frame share
	// one deadline; see WithConnectTimeout.
	by := time.Now().Add(c.cfg.connectTimeout)
	if err := c.readPreface(by); err != nil {
		if c.ended.Load() {
			return // we closed it: a stranger's place taken, say
		}
		c.warn("fero: transport: closing connection", err)
		c.end(c.lost(err), false)
		return
	}
	r := wire.NewReader(c.nc, c.cfg.maxFrame)
	r.SetAlloc(c.freeBlk.get)
	if !c.proved.Load() {
		// A stranger's frames are a handshake's: a small frame in a
		// small block, until it proves itself.
		c.limited = true
		r.SetLimits(c.cfg.authMaxFrame, max(wire.MinBlockSize, c.cfg.authMaxFrame))
	}
	c.rd = r
	if !c.accepted {
		by = time.Time{}
	}
	if err := r.SetFrameTimeout(c.cfg.frameTimeout, by, c.nc.SetReadDeadline); err != nil {
		c.end(c.lost(err), false)
		return
	}
	holding, exact := false, false
	for {
		if c.limited && c.proved.Load() {
			c.limited = false
			r.SetLimits(c.cfg.maxFrame, 0)
		}
		if !exact && c.trusted.Load() {
			exact = true
			r.SetExact(c.cfg.maxFrame)
		}
		var f wire.Frame
		if err := r.Next(&f); err != nil {
			if c.ended.Load() {
				return // we closed it
			}
			switch {
			case c.limited && errors.Is(err, wire.ErrFrameTooLarge):
				if st := c.cfg.stats; st != nil {
					st.PreAuthFrameTooLarge.Add(1)
				}
				c.warn("fero: transport: closing a connection that proved nothing: frame over the pre-auth limit", err)
			case errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrFrameTooLarge):
				c.warn("fero: transport: closing connection after bad input", err)
			case errors.Is(err, wire.ErrFrameTimeout):
				c.warn("fero: transport: closing connection: a frame did not arrive in time", err)
			default:
				c.cfg.logger.Debug("fero: transport: connection lost", "remote", c.nc.RemoteAddr(), "err", err)
			}
			c.end(c.lost(err), false)
			return
		}
		if c.held != nil {
			if id, _ := r.Block(); id != c.held.id {
				c.leaveHeld() // the reader reads into another block now
			}
		}
		// Answers queue up while the reader dispatches, without waking
		// the writer; they leave together once no complete frame waits
		// in memory, written by the reader itself if nobody is writing.
		more := r.Buffered()
		c.more = more
		if !holding {
			c.out.setHold(true)
			holding = true
		}
		keep, err := c.dispatch(&f)
		if err != nil {
			c.warn("fero: transport: closing connection after protocol error", err)
			c.end(c.lost(err), false)
			return
		}
		if keep {
			// The frame's bytes outlive this dispatch: keep the block.
			r.Pin()
			if f.Kind != wire.KindSend {
				c.pinOther()
			}
		}
		if !more {
			if c.cfg.afterBurst != nil {
				c.cfg.afterBurst()
			}
			if holding {
				c.out.setHold(false)
				holding = false
			}
		}
	}
}

// readPreface reads and checks the peer's preface, which must arrive by
// the given time. It leaves the read deadline set on an accepted
// connection, for the first frame.
// warn logs why the connection closes. On a server's connections a line
// passes at most once per source address, kind of line and kind of error
// per refusalLogEvery (with a count of those held back), so that whoever
// reaches the port cannot flood the log by sending garbage on many
// connections.
func (c *Conn) warn(msg string, err error) {
	if c.cfg.warns == nil {
		c.cfg.logger.Warn(msg, "remote", c.nc.RemoteAddr(), "err", err)
		return
	}
	k := warnKey{msg: msg, kind: errKind(err)}
	if ap, perr := netip.ParseAddrPort(c.nc.RemoteAddr().String()); perr == nil {
		k.ip = ap.Addr().Unmap()
	}
	if log, held := c.cfg.warns.note(k, time.Now()); log {
		c.cfg.logger.Warn(msg, "remote", c.nc.RemoteAddr(), "err", err, "held_back", held)
	}
}

// warnKey is what a connection's warnings are rate-limited by.
type warnKey struct {
	ip   netip.Addr
	msg  string
	kind int
}

// errKind sorts the errors a connection closes on into a few kinds, so
// that each kind is logged from a source even while another floods.
func errKind(err error) int {
	switch {
	case errors.Is(err, wire.ErrFrameTooLarge):
		return 1
	case errors.Is(err, wire.ErrMalformed):
		return 2
	case errors.Is(err, wire.ErrFrameTimeout):
		return 3
	case errors.Is(err, ErrAuthTimeout):
		return 4
	}
	return 0
}

// heldBytes is about what the connection held in memory when it ended
// (the scavenger's measure): its read blocks and connOverhead. Called
// once its reader has ended.
func (c *Conn) heldBytes() int {
	n := connOverhead
	if c.rd != nil {
		n += cap(c.rd.BlockBytes())
	}
	c.freeBlk.mu.Lock()
	n += c.freeBlk.bytes
	c.freeBlk.mu.Unlock()
	return n
}

func (c *Conn) readPreface(by time.Time) error {
	var got [len(preface)]byte
	if err := c.nc.SetReadDeadline(by); err != nil {
		return err
	}
	if _, err := io.ReadFull(c.nc, got[:]); err != nil {
		return fmt.Errorf("reading preface: %w", err)
	}
	if [4]byte(got[:4]) != [4]byte(preface[:4]) {
		return fmt.Errorf("%w: not a fero peer (preface % x)", wire.ErrMalformed, got)
	}
	if got[7] != protocolVersion {
		return fmt.Errorf("%w: peer speaks protocol version %d, we speak %d", wire.ErrMalformed, got[7], protocolVersion)
	}
	if c.accepted {
		return nil
	}
	return c.nc.SetReadDeadline(time.Time{})
}

func (c *Conn) writeLoop() {
	graceful := false
	defer func() {
		if graceful {
			c.lingerClose()
		}
		c.nc.Close()
		<-c.readerDone
		if c.onEnd != nil {
			c.onEnd()
		}
		close(c.done)
	}()
	var free []byte
	for {
		batch, last := c.out.take(free) // (end set the deadline of a last batch)
		for rest := batch; len(rest) > 0; {
			n := min(len(rest), c.cfg.maxBatch)
			if _, err := c.nc.Write(rest[:n]); err != nil {
				if !c.ended.Load() {
					c.cfg.logger.Debug("fero: transport: write failed", "remote", c.nc.RemoteAddr(), "err", err)
				}
				c.end(c.lost(err), false)
				return
			}
			rest = rest[n:]
		}
		if last {
			graceful = c.out.flushing()
			return
		}
		// Reuse the buffer for the next swap, so a busy connection stops
		// allocating; take lets large buffers go when the writer idles.
		free = batch[:0]
	}
}

// lingerClose ends a connection whose last frames are written without
// losing them: closing a socket that still holds unread input makes the
// kernel reset the connection, and a reset discards whatever the peer has
// received but not yet read (the queued frames Close promised to
// deliver). So it shuts down the writing side only, which the peer reads
// as the end of the stream and answers by closing its own, and waits for
// the reader to see that, for at most the close timeout.
func (c *Conn) lingerClose() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	t := time.NewTimer(c.cfg.closeTimeout)
	defer t.Stop()
	select {
	case <-c.readerDone:
	case <-t.C:
	}
}

// writeFrame queues one frame, blocking while the outbox is full unless
// failFast.
func (c *Conn) writeFrame(ctx context.Context, kind wire.Kind, id uint64, op uint32, payload []byte, failFast bool) error {
	return c.queueFrame(ctx, kind, id, op, payload, failFast, false, false)
}

// queueFrame is writeFrame; with now, the caller writes the frame itself
// if the connection is idle; corked, it wakes nobody (see outbox).
func (c *Conn) queueFrame(ctx context.Context, kind wire.Kind, id uint64, op uint32, payload []byte, failFast, now, corked bool) error {
	n := wire.FrameSize(id, op, len(payload))
	if n-wire.LengthSize > c.cfg.maxFrame {
		return ErrTooLarge
	}
	if err := c.out.lock(ctx, n, failFast); err != nil {
		return err
	}
	empty := len(c.out.buf) == 0
	c.out.buf = wire.AppendFrame(c.out.buf, kind, id, op, payload)
	c.out.unlock(empty, now, corked)
	return nil
}

// Flush writes the frames of calls sent Corked that still wait in the
// outbox: on the caller's goroutine, as far as the socket takes them
// without blocking, if nobody is writing; else the writer takes them.
func (c *Conn) Flush() { c.out.flushCorked() }

func (c *Conn) writeErrorFrame(id uint64, code errs.Code, msg string, details []errs.Detail) error {
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	// Details past the bounds a receiver takes are dropped, and the
	// message says so.
	size := 0
	for i, d := range details {
		size += len(d.Type) + len(d.Value)
		if i == errs.MaxDetails || len(d.Type) == 0 || len(d.Type) > errs.MaxDetailType || size > errs.MaxDetailsBytes {
			msg += fmt.Sprintf(" (%d error details dropped: past the bounds on details)", len(details)-i)
			details = details[:i]
			break
		}
	}
	var buf [4200]byte
	return c.writeFrame(c.ctx, wire.KindError, id, 0, wire.AppendErrorPayload(buf[:0], uint32(code), msg, details), false)
}

// dispatch handles one frame and reports whether its bytes must stay valid
// after it returns: a request still unanswered, or a reply handed to a
// goroutine other than the reader's. Everything else lets the reader
// refill the block.
func (c *Conn) dispatch(f *wire.Frame) (keep bool, err error) {
	switch f.Kind {
	case wire.KindSend, wire.KindCall, wire.KindStream:
		return c.serve(f)
	case wire.KindReply, wire.KindChunk, wire.KindError:
		return c.complete(f), nil
	case wire.KindCancel:
		c.cancelRequest(f.ID)
	case wire.KindCredit:
		return false, c.serveCredit(f)
	}
	return false, nil
}

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

// Stream sends a request whose answer is a stream of replies.
func (c *Conn) Stream(ctx context.Context, op uint32, payload []byte, opts ...CallOption) (*Stream, error) {
	return c.stream(ctx, op, payload, 0, opts)
}

// stream opens a stream; window is StreamWindow's chunks (0: none).
func (c *Conn) stream(ctx context.Context, op uint32, payload []byte, window int, opts []CallOption) (*Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := c.nextID.Add(1)
	s := &Stream{c: c, id: id, ctx: ctx, limit: c.cfg.streamBuffer, notify: make(chan struct{}, 1)}
	if window > 0 {
		s.window, s.windowBytes = window, s.limit
	}
	p := &pending{st: s}
	if err := c.register(id, p); err != nil {
		return nil, err
	}
	if err := c.writeFrame(ctx, wire.KindStream, id, op, payload, failFast(opts)); err != nil {
		if c.unregister(id) {
			return nil, err
		}
	}
	return s, nil
}

// Stream is the caller's end of a streaming call.
type Stream struct {
	c      *Conn
	id     uint64
	ctx    context.Context
	limit  int
	notify chan struct{}

	mu     sync.Mutex
	items  [][]byte
	bytes  int
	ended  bool
	err    error // io.EOF after a clean end
	closed bool

	// Flow control (StreamWindow; flow.go): the window granted, in
	// chunks (0: none) and bytes, and what Recv took since the last grant.
	window, windowBytes int
	dueChunks, dueBytes int
	final               []byte // a windowed stream's final reply
}

// Final returns the final reply of a stream opened with StreamWindow,
// once Recv has returned io.EOF (nil before). The replies Recv returns
// are the stream's chunks only.
func (s *Stream) Final() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.final
}

func (s *Stream) push(b []byte) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	// A windowed stream takes a chunk larger than its whole buffer when
	// the buffer is empty, as its callee sends one only then.
	if s.bytes+chunkCost(b) > s.limit && (s.window == 0 || s.bytes > 0) {
		s.ended = true
		s.err = errs.Errorf(errs.ResourceExhausted, "stream consumer fell %d bytes behind (limit %d)", s.bytes+chunkCost(b), s.limit)
		s.mu.Unlock()
		if s.c.unregister(s.id) {
			s.c.sendCancel(s.id)
		}
		s.signal()
		return
	}
	s.items = append(s.items, b)
	s.bytes += chunkCost(b)
	s.mu.Unlock()
	s.signal()
}

// chunkCost is what a queued chunk counts against the stream buffer: its
// bytes plus its slot, so that a peer streaming empty chunks is bounded
// too.
func chunkCost(b []byte) int { return len(b) + 24 }

func (s *Stream) end(b []byte, err error) {
	s.mu.Lock()
	if !s.ended {
		s.ended = true
		if err == nil {
			if s.window > 0 {
				// A windowed stream's final reply is not one of its chunks:
				// Final returns it.
				s.final = b
			} else if len(b) > 0 {
				s.items = append(s.items, b)
				s.bytes += chunkCost(b)
			}
			err = io.EOF
		}
		s.err = err
	}
	s.mu.Unlock()
	s.signal()
}

func (s *Stream) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Recv returns the next reply in order. After the final reply it returns
// io.EOF; after a failure, the error. A non-empty final reply is returned
// before io.EOF.
func (s *Stream) Recv() ([]byte, error) {
	for {
		s.mu.Lock()
		if len(s.items) > 0 {
			b := s.items[0]
			s.items[0] = nil
			s.items = s.items[1:]
			s.bytes -= chunkCost(b)
			grant, chunks, bytes := s.returned(chunkCost(b))
			s.mu.Unlock()
			if grant {
				// Not fail-fast: a credit lost would stall the stream.
				_ = s.c.writeFrame(s.ctx, wire.KindCredit, s.id, 0, appendCredit(nil, chunks, bytes), false)
			}
			return b, nil
		}
		if s.ended {
			err := s.err
			s.mu.Unlock()
			return nil, err
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-s.ctx.Done():
			s.Close()
			return nil, s.ctx.Err()
		}
	}
}

// Close abandons the stream, telling the callee. It is idempotent.
func (s *Stream) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	if !s.ended {
		s.ended, s.err = true, ErrClosed
	}
	s.mu.Unlock()
	if s.c.unregister(s.id) {
		s.c.sendCancel(s.id)
	}
}
