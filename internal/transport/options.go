package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/fero-go/fero/internal/wire"
)

// Defaults. The names in parentheses are the original library's constants.
const (
	// DefaultOutboxLimit bounds the bytes queued per connection. It is
	// small on purpose: the outbox and the batch being written stay in
	// the CPU's cache. On our 2-core machines (fero-bench transport, 100 B
	// one-way, 5 interleaved runs) 128 KiB gave 0.74× the raw echo, 256
	// KiB 0.97×, 512 KiB 0.40× and 4 MiB 0.38×.
	DefaultOutboxLimit = 256 << 10
	// DefaultMaxBatch bounds the bytes handed to one write (outbox.max).
	DefaultMaxBatch = 256 << 10
	// DefaultConnectTimeout bounds dialing and the TLS handshake
	// (connections.timeout).
	DefaultConnectTimeout = 10 * time.Second
	// DefaultRetryBase is the first reconnect backoff (retries.base).
	DefaultRetryBase = 100 * time.Millisecond
	// DefaultRetryCap is the largest reconnect backoff (retries.cap).
	DefaultRetryCap = 60 * time.Second
	// DefaultRetryMax is the number of failed redials after which a Peer
	// is declared unreachable (retries.max).
	DefaultRetryMax = 5
	// DefaultStreamBuffer bounds the unread bytes of one Stream.
	DefaultStreamBuffer = 1 << 20
	// DefaultCloseTimeout bounds the flush of queued frames on Close, and
	// then the wait for the peer to close its side.
	DefaultCloseTimeout = time.Second
	// DefaultUserTimeout is how long sent data may go unacknowledged
	// before the connection is closed (TCP_USER_TIMEOUT, Linux only; see
	// WithUserTimeout).
	DefaultUserTimeout = 5 * time.Second
	// DefaultFrameTimeout bounds how long a frame may take to arrive once
	// its first byte has (see WithFrameTimeout).
	DefaultFrameTimeout = 30 * time.Second
	// DefaultMaxConns bounds the connections a Server holds at once (see
	// WithMaxConns).
	DefaultMaxConns = 4096
	// DefaultMaxConnsPerIP bounds the connections a Server holds at once
	// from one source address (see WithMaxConnsPerIP).
	DefaultMaxConnsPerIP = 1024
	// DefaultMaxInflight bounds the requests a connection holds unanswered
	// (see WithMaxInflight).
	DefaultMaxInflight = 4096
	// DefaultMaxInflightBytes bounds the memory a connection's unanswered
	// requests hold (see WithMaxInflightBytes).
	DefaultMaxInflightBytes = 64 << 20
	// DefaultAuthMaxFrame bounds a frame of a connection that has not
	// proved a credential yet (see WithPreAuth): the hello and the
	// credential exchanges are a few hundred bytes.
	DefaultAuthMaxFrame = 8 << 10
	// DefaultAuthTimeout is how long an accepted connection has to prove
	// a credential (see WithPreAuth).
	DefaultAuthTimeout = 5 * time.Second
	// DefaultMaxUnprovedConns bounds the connections that have proved
	// nothing yet, in all (see WithMaxUnprovedConns).
	DefaultMaxUnprovedConns = 256
	// DefaultMaxUnprovedConnsPerIP bounds them from one source address.
	DefaultMaxUnprovedConnsPerIP = 64
	// DefaultNewConnRate is how many connections a second a Server with
	// WithPreAuth accepts from one source address, sustained, and
	// DefaultNewConnBurst how many at once (see WithNewConnRate).
	DefaultNewConnRate  = 50
	DefaultNewConnBurst = 100
)

type config struct {
	stats          *Stats
	maxFrame       int
	outboxLimit    int
	maxBatch       int
	noDirect       bool
	connectTimeout time.Duration
	closeTimeout   time.Duration
	userTimeout    time.Duration
	frameTimeout   time.Duration
	maxConns       int
	maxConnsPerIP  int
	maxInflight    int
	maxInflightB   int
	preAuth        bool // accepted connections start unproved (WithPreAuth)
	authMaxFrame   int
	authTimeout    time.Duration
	maxUnproved    int
	maxUnprovedIP  int
	newConnRate    float64
	newConnBurst   int
	retryBase      time.Duration
	retryCap       time.Duration
	retryMax       int
	streamBuffer   int
	tls            *tls.Config
	logger         *slog.Logger
	handler        Handler
	onConn         func(*Conn)
	afterBurst     func()
	onDial         func(context.Context, *Conn) error
	dialer         func(ctx context.Context, network, addr string) (net.Conn, error)
	warns          *rateLog[warnKey] // a Server's: rate-limits its connections' warnings
}

func defaultConfig() config {
	return config{
		maxFrame:       wire.DefaultMaxFrame,
		outboxLimit:    DefaultOutboxLimit,
		maxBatch:       DefaultMaxBatch,
		connectTimeout: DefaultConnectTimeout,
		closeTimeout:   DefaultCloseTimeout,
		userTimeout:    DefaultUserTimeout,
		frameTimeout:   DefaultFrameTimeout,
		maxConns:       DefaultMaxConns,
		maxConnsPerIP:  DefaultMaxConnsPerIP,
		maxInflight:    DefaultMaxInflight,
		maxInflightB:   DefaultMaxInflightBytes,
		authMaxFrame:   DefaultAuthMaxFrame,
		authTimeout:    DefaultAuthTimeout,
		maxUnproved:    DefaultMaxUnprovedConns,
		maxUnprovedIP:  DefaultMaxUnprovedConnsPerIP,
		newConnRate:    DefaultNewConnRate,
		newConnBurst:   DefaultNewConnBurst,
		retryBase:      DefaultRetryBase,
		retryCap:       DefaultRetryCap,
		retryMax:       DefaultRetryMax,
		streamBuffer:   DefaultStreamBuffer,
		logger:         slog.New(slog.DiscardHandler),
	}
}

// Option configures a Server, Conn or Peer.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

func newConfig(opts []Option) (config, error) {
	c := defaultConfig()
	for _, o := range opts {
		o.apply(&c)
	}
	var errs []error
	if c.maxFrame <= 0 {
		errs = append(errs, fmt.Errorf("max frame %d must be positive", c.maxFrame))
	}
	if c.outboxLimit <= 0 {
		errs = append(errs, fmt.Errorf("outbox limit %d must be positive", c.outboxLimit))
	}
	if c.maxBatch <= 0 {
		errs = append(errs, fmt.Errorf("max batch %d must be positive", c.maxBatch))
	}
	if c.connectTimeout <= 0 || c.closeTimeout < 0 || c.userTimeout < 0 || c.frameTimeout < 0 {
		errs = append(errs, errors.New("timeouts must be positive"))
	}
	if c.maxConns <= 0 || c.maxConnsPerIP <= 0 {
		errs = append(errs, fmt.Errorf("max conns %d and per IP %d must be positive", c.maxConns, c.maxConnsPerIP))
	}
	if c.maxInflight <= 0 || c.maxInflightB <= 0 {
		errs = append(errs, fmt.Errorf("max in flight %d requests and %d bytes must be positive", c.maxInflight, c.maxInflightB))
	}
	if c.authMaxFrame <= 0 || c.authTimeout <= 0 || c.maxUnproved <= 0 || c.maxUnprovedIP <= 0 {
		errs = append(errs, fmt.Errorf("pre-auth frame limit %d, auth timeout %v and unproved connection caps %d and %d per IP must be positive",
			c.authMaxFrame, c.authTimeout, c.maxUnproved, c.maxUnprovedIP))
	}
	if c.newConnRate <= 0 || c.newConnBurst <= 0 {
		errs = append(errs, fmt.Errorf("new connection rate %v a second and burst %d per IP must be positive", c.newConnRate, c.newConnBurst))
	}
	if c.retryBase <= 0 || c.retryCap < c.retryBase || c.retryMax < 1 {
		errs = append(errs, fmt.Errorf("retry base %v, cap %v, max %d: need 0 < base <= cap and max >= 1", c.retryBase, c.retryCap, c.retryMax))
	}
	if c.streamBuffer <= 0 {
		errs = append(errs, fmt.Errorf("stream buffer %d must be positive", c.streamBuffer))
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("fero: transport options: %w", err)
	}
	return c, nil
}

// WithMaxFrame sets the largest frame body accepted or sent, in bytes
// (default wire.DefaultMaxFrame). Both ends should agree.
func WithMaxFrame(n int) Option { return optionFunc(func(c *config) { c.maxFrame = n }) }

// WithOutboxLimit sets the bytes a connection may queue before senders
// block or fail fast (default DefaultOutboxLimit).
func WithOutboxLimit(n int) Option { return optionFunc(func(c *config) { c.outboxLimit = n }) }

// Stats counts, across every connection made with WithStats, the sends
// that waited for room in a full outbox (backpressure), and how long they
// waited in all.
type Stats struct {
	BackpressureWaits atomic.Uint64
	BackpressureNanos atomic.Int64

	// Refusals of connections that had proved nothing (WithPreAuth): a
	// frame over the pre-auth limit, the auth timeout passed, the cap per
	// source address reached, and the cap in all reached (the newcomer
	// refused, or an older connection closed to make room).
	PreAuthFrameTooLarge atomic.Uint64
	PreAuthTimeouts      atomic.Uint64
	PreAuthCapPerIP      atomic.Uint64
	PreAuthCapTotal      atomic.Uint64
	// Connections reset because their source address opened more than
	// WithNewConnRate allows.
	PreAuthRate atomic.Uint64
}

// WithStats makes the connections count their backpressure waits in s.
func WithStats(s *Stats) Option { return optionFunc(func(c *config) { c.stats = s }) }

// WithMaxBatch sets the most bytes handed to one write (default
// DefaultMaxBatch, the original's outbox.max).
func WithMaxBatch(n int) Option { return optionFunc(func(c *config) { c.maxBatch = n }) }

// WithDirectWrites sets whether a sender that finds its connection idle
// writes its frame itself (the default) or always leaves it to the
// connection's writer goroutine. Writing directly saves a hand-off between
// threads per message on an unloaded connection; it never blocks the
// sender, since what the socket does not take at once is left to the
// writer. TLS connections always use the writer.
func WithDirectWrites(on bool) Option { return optionFunc(func(c *config) { c.noDirect = !on }) }

// WithConnectTimeout bounds a dial plus the TLS handshake and preface
// (default DefaultConnectTimeout, the original's connections.timeout). On a
// connection a Server accepted it also bounds the wait, from the start, for
// the peer's preface and first frame: a connection that says nothing is
// closed when it passes. (A dialing Conn sends an empty frame after its
// preface, so an idle client is not mistaken for a silent one.)
func WithConnectTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.connectTimeout = d })
}

// WithCloseTimeout bounds how long Close spends flushing queued frames
// (default DefaultCloseTimeout; 0 drops them).
func WithCloseTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.closeTimeout = d })
}

// WithUserTimeout sets how long data sent on a connection may go
// unacknowledged by the peer's kernel before the connection is closed
// (TCP_USER_TIMEOUT; Linux only, default DefaultUserTimeout, 0 leaves the
// system's, which waits out retransmission backoff for many minutes). A
// link cut for longer than d ends the connection, so that once it heals a
// fresh dial carries traffic at once instead of the old connection waiting
// for its next retransmission, which backoff may put a minute away. A slow
// or paused peer still acknowledges and is not affected.
func WithUserTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.userTimeout = d })
}

// WithFrameTimeout bounds how long a frame may take to arrive once its
// first byte has (default DefaultFrameTimeout; 0 turns it off). A peer
// that sends part of a frame and stops holds the buffer of what it sent;
// when d passes, the connection is closed with a logged error. Frames that
// arrive whole cost nothing: the read deadline is set only when the
// connection waits for the rest of a frame. Each frame has its own
// deadline, so a long stream of frames is never cut, but one frame must
// arrive whole within d: at the default, a frame of the largest size
// (wire.DefaultMaxFrame, 16 MiB) needs a link of at least 0.6 MB/s.
func WithFrameTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.frameTimeout = d })
}

// WithMaxConns bounds the connections a Server holds at once (default
// DefaultMaxConns). A connection accepted beyond it is closed at once, and
// a line is logged, at most one per source address every few seconds (see
// WithMaxConnsPerIP). A fresh idle connection costs about 15 KiB (its
// state, the stacks of its two goroutines and a read block of
// wire.MinBlockSize bytes), about 60 MiB at the default; one that has
// carried large frames keeps the buffers it grew for them (a read block of
// up to 512 KiB, outbox buffers of up to 2×MaxBatch), several hundred KiB.
// A cluster uses one connection per pair of nodes, and one per client
// node or Remote and server node, so the default leaves room for
// thousands of clients.
func WithMaxConns(n int) Option { return optionFunc(func(c *config) { c.maxConns = n }) }

// WithMaxConnsPerIP bounds the connections a Server holds at once from one
// source address (default DefaultMaxConnsPerIP): one host cannot take
// every connection the server allows. Each address counts alone (an IPv6
// host with many addresses gets as many shares). Loopback is not exempt:
// every process on the server's host (a load generator, the other nodes
// of a cluster run on one machine) shares 127.0.0.1, which is why the
// default is well above the hundreds of client connections a load
// generator opens from one host. A connection over the limit is closed at
// once; the refusal is logged at most once per source address every 5
// seconds, with the number of refusals held back since the last line.
func WithMaxConnsPerIP(n int) Option { return optionFunc(func(c *config) { c.maxConnsPerIP = n }) }

// WithMaxInflight bounds the requests (calls and streams, not one-way
// messages) that one connection holds unanswered after their handler
// returned (default DefaultMaxInflight). A request beyond it is answered
// at once with a ResourceExhausted error, without reaching its handler.
// A request answered inline never counts; one that is answered, or that
// its caller cancels, stops counting.
func WithMaxInflight(n int) Option { return optionFunc(func(c *config) { c.maxInflight = n }) }

// WithMaxInflightBytes bounds the memory that one connection's unanswered
// requests hold (default DefaultMaxInflightBytes, 64 MiB). A request's
// payload aliases the read block it arrived in and keeps that whole
// block, so what counts is the blocks that hold the payloads of requests
// still open, each once, however many requests share it: at least the
// payloads' bytes, and what they really keep in memory. A request that
// would take the total over n is answered at once with a
// ResourceExhausted error, without reaching its handler, and its bytes
// are released; a connection with no request open takes one of any size
// (up to the frame limit), so no request is refused for good. Requests
// stop counting when answered or cancelled by their caller.
func WithMaxInflightBytes(n int) Option { return optionFunc(func(c *config) { c.maxInflightB = n }) }

// WithPreAuth makes a Server's connections start unproved (default
// off): until the handler calls Conn.Prove, a connection reads frames of
// at most the pre-auth frame limit (WithAuthMaxFrame) into small blocks,
// is closed if it has not proved itself within the auth timeout
// (WithAuthTimeout), and counts against the caps for unproved
// connections (WithMaxUnprovedConns) instead of WithMaxConns and
// WithMaxConnsPerIP, which count proved connections only: strangers can
// never take the slots of the connections that proved a credential. A
// server that takes no credentials leaves it off, as every connection is
// then as trusted as it will ever be. Connections this end dials are
// always proved: it chose whom to dial, and proves itself on them.
func WithPreAuth(on bool) Option { return optionFunc(func(c *config) { c.preAuth = on }) }

// WithAuthMaxFrame sets the largest frame body an unproved connection may
// send (default DefaultAuthMaxFrame, 8 KiB; see WithPreAuth). A larger
// one is refused at its length prefix, before any of its body is read,
// and closes the connection.
func WithAuthMaxFrame(n int) Option { return optionFunc(func(c *config) { c.authMaxFrame = n }) }

// WithAuthTimeout sets how long an accepted connection has to prove
// itself (default DefaultAuthTimeout; see WithPreAuth) before it is
// closed.
func WithAuthTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.authTimeout = d })
}

// WithMaxUnprovedConns bounds the unproved connections a Server holds at
// once, in all and from one source address (defaults
// DefaultMaxUnprovedConns and DefaultMaxUnprovedConnsPerIP; see
// WithPreAuth). One over the per-address cap is reset at once. One over
// the cap in all takes the place of the oldest unproved connection of the
// address that holds the most, if that address holds more than the
// newcomer's does; else it is reset. So strangers from a few addresses
// cannot keep a client from another address from connecting: they would
// need more addresses than the cap in all, each holding one connection.
func WithMaxUnprovedConns(total, perIP int) Option {
	return optionFunc(func(c *config) { c.maxUnproved, c.maxUnprovedIP = total, perIP })
}

// WithNewConnRate paces the connections a Server with WithPreAuth
// accepts from one source address: perSecond sustained, burst at once
// (defaults DefaultNewConnRate and DefaultNewConnBurst), a token bucket
// per address. One over is reset at once, before its TLS handshake and
// before any goroutine or buffer is spent on it. The caps on unproved
// connections bound how many a stranger holds; this bounds how fast it
// can open and close them (a reconnect storm), which otherwise costs the
// node two goroutines, a handshake and a few system calls a connection
// however soon it ends. Peers and clients open a handful of connections
// and keep them; many clients behind one address (a NAT) that all
// reconnect at once are let in at this rate, their refused connections
// retried with backoff.
func WithNewConnRate(perSecond float64, burst int) Option {
	return optionFunc(func(c *config) { c.newConnRate, c.newConnBurst = perSecond, burst })
}

// WithRetry sets a Peer's reconnect backoff: the first delay, the largest,
// and how many failed redials in a row make the peer unreachable (defaults
// DefaultRetryBase, DefaultRetryCap, DefaultRetryMax). Each delay is drawn
// uniformly from [0, min(cap, base·2^attempt)) ("full jitter").
func WithRetry(base, cap time.Duration, max int) Option {
	return optionFunc(func(c *config) { c.retryBase, c.retryCap, c.retryMax = base, cap, max })
}

// WithStreamBuffer bounds the unread bytes of one Stream; a consumer that
// falls further behind has its stream cancelled with ResourceExhausted
// (default DefaultStreamBuffer).
func WithStreamBuffer(n int) Option { return optionFunc(func(c *config) { c.streamBuffer = n }) }

// WithTLS runs connections over TLS. On a Server, set ClientAuth and
// ClientCAs in cfg for mutual TLS; on a Peer, set RootCAs, ServerName and,
// for mutual TLS, Certificates.
func WithTLS(cfg *tls.Config) Option { return optionFunc(func(c *config) { c.tls = cfg }) }

// WithLogger sets where connection errors are logged (default: nowhere).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithHandler serves requests that the remote end sends over a dialed
// connection. A Server takes its handler as an argument instead.
func WithHandler(h Handler) Option { return optionFunc(func(c *config) { c.handler = h }) }

// WithOnDial runs f on every connection dialed (by DialConn, Dial and
// each of a Peer's redials) before it is used, within the connect
// timeout: to authenticate it, say. An error closes the connection and
// fails the dial.
func WithOnDial(f func(ctx context.Context, c *Conn) error) Option {
	return optionFunc(func(c *config) { c.onDial = f })
}

// WithDialer makes DialConn, Dial and a Peer's redials open their
// connections with dial instead of a net.Dialer (nil: a net.Dialer, the
// default): for tests, proxies, custom networks. It is called with
// network "tcp", the address being dialed, and a context that ends with
// the connect timeout. With WithTLS, TLS runs over the connection dial
// returns. Connections it returns that are not a *net.TCPConn get no
// socket options (TCP_NODELAY, the user timeout) and no direct writes.
func WithDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return optionFunc(func(c *config) { c.dialer = dial })
}

// WithOnConn calls f with each connection a Server accepts, before its
// first request is handled, so the server can call back over it.
func WithOnConn(f func(*Conn)) Option { return optionFunc(func(c *config) { c.onConn = f }) }

// WithAfterBurst calls f on a connection's reader each time it has
// dispatched every frame it had read, before the answers queued meanwhile
// leave and before it waits for more; and once more as the reader ends. A
// handler that puts work off while more frames wait behind its request
// (Request.More), to do it once for them all, does it then. f must not
// block.
func WithAfterBurst(f func()) Option { return optionFunc(func(c *config) { c.afterBurst = f }) }

// CallOption changes how one call behaves.
type CallOption uint8

// FailFast makes a call return ErrOutboxFull at once, rather than block,
// when the outbox is full, and return ErrUnavailable at once, rather than
// wait, when a Peer is reconnecting.
const FailFast CallOption = 1

// Corked makes a call's frame wait in the outbox, without waking the
// connection's writer, until Conn.Flush, or until a frame sent without
// Corked leaves and takes it along: for a caller that sends a burst and
// then flushes it, in one write on its own goroutine.
const Corked CallOption = 2

func failFast(opts []CallOption) bool { return hasOption(opts, FailFast) }

func hasOption(opts []CallOption, want CallOption) bool {
	for _, o := range opts {
		if o == want {
			return true
		}
	}
	return false
}
