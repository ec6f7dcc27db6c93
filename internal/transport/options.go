package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
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
)

type config struct {
	maxFrame       int
	outboxLimit    int
	maxBatch       int
	noDirect       bool
	connectTimeout time.Duration
	closeTimeout   time.Duration
	userTimeout    time.Duration
	retryBase      time.Duration
	retryCap       time.Duration
	retryMax       int
	streamBuffer   int
	tls            *tls.Config
	logger         *slog.Logger
	handler        Handler
	onConn         func(*Conn)
}

func defaultConfig() config {
	return config{
		maxFrame:       wire.DefaultMaxFrame,
		outboxLimit:    DefaultOutboxLimit,
		maxBatch:       DefaultMaxBatch,
		connectTimeout: DefaultConnectTimeout,
		closeTimeout:   DefaultCloseTimeout,
		userTimeout:    DefaultUserTimeout,
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
	if c.connectTimeout <= 0 || c.closeTimeout < 0 || c.userTimeout < 0 {
		errs = append(errs, errors.New("timeouts must be positive"))
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
// (default DefaultConnectTimeout, the original's connections.timeout).
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

// WithOnConn calls f with each connection a Server accepts, before its
// first request is handled, so the server can call back over it.
func WithOnConn(f func(*Conn)) Option { return optionFunc(func(c *config) { c.onConn = f }) }

// CallOption changes how one call behaves.
type CallOption uint8

// FailFast makes a call return ErrOutboxFull at once, rather than block,
// when the outbox is full, and return ErrUnavailable at once, rather than
// wait, when a Peer is reconnecting.
const FailFast CallOption = 1

func failFast(opts []CallOption) bool {
	for _, o := range opts {
		if o == FailFast {
			return true
		}
	}
	return false
}
