// Conn: a connection's state, dialing one, and its end. Its read side is
// in conn_read.go, its write side in conn_write.go, the requests it serves
// in conn_serve.go, the calls it makes in conn_call.go and its streams in
// conn_stream.go.

package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
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
