package transport

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fero-go/fero/internal/errs"
)

// Peer is a connection to one address that redials when it breaks. Its
// methods are safe for concurrent use.
type Peer struct {
	addr string
	cfg  config
	cur  atomic.Pointer[Conn]

	mu          sync.Mutex
	ready       chan struct{} // closed when cur is usable, or the peer gave up or closed
	unreachable error         // set after retryMax failed redials in a row
	closed      bool
	kick        chan struct{} // a caller wants a new round of redials

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Dial connects to addr and returns a Peer that keeps the connection up.
// It fails if the first connection cannot be made within ctx and the
// connect timeout.
func Dial(ctx context.Context, addr string, opts ...Option) (*Peer, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	p := &Peer{addr: addr, cfg: cfg, ready: make(chan struct{}), kick: make(chan struct{}, 1)}
	c, err := dialConn(ctx, addr, &p.cfg)
	if err != nil {
		return nil, err
	}
	p.cur.Store(c)
	close(p.ready)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.redialLoop(c)
	return p, nil
}

// Addr returns the address the peer dials.
func (p *Peer) Addr() string { return p.addr }

// conn returns the live connection, waiting for a redial unless failFast.
func (p *Peer) conn(ctx context.Context, failFast bool) (*Conn, error) {
	for {
		if c := p.cur.Load(); c != nil && !c.ended.Load() {
			return c, nil
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		if err := p.unreachable; err != nil {
			p.mu.Unlock()
			select {
			case p.kick <- struct{}{}:
			default:
			}
			return nil, err
		}
		ready := p.ready
		p.mu.Unlock()
		if failFast {
			return nil, ErrUnavailable
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (p *Peer) redialLoop(c *Conn) {
	defer p.wg.Done()
	for {
		select {
		case <-c.Done():
		case <-p.ctx.Done():
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		p.ready = make(chan struct{})
		p.mu.Unlock()
		p.cfg.logger.Info("fero: transport: connection lost, redialing", "addr", p.addr, "err", c.Err())

		next, ok := p.redial()
		if !ok {
			return
		}
		c = next
	}
}

// redial dials until it connects or the peer closes; after retryMax
// failures in a row it marks the peer unreachable and waits for a caller
// to kick it into another round.
func (p *Peer) redial() (*Conn, bool) {
	attempt := 0
	for {
		ceiling := min(p.cfg.retryCap, p.cfg.retryBase<<min(attempt, 30))
		t := time.NewTimer(rand.N(ceiling))
		select {
		case <-t.C:
		case <-p.ctx.Done():
			t.Stop()
			return nil, false
		}
		c, err := dialConn(p.ctx, p.addr, &p.cfg)
		if err == nil {
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				c.Close()
				return nil, false
			}
			p.cur.Store(c)
			close(p.ready)
			p.mu.Unlock()
			return c, true
		}
		attempt++
		p.cfg.logger.Debug("fero: transport: redial failed", "addr", p.addr, "attempt", attempt, "err", err)
		if attempt < p.cfg.retryMax {
			continue
		}
		p.mu.Lock()
		p.unreachable = errs.Errorf(errs.Unavailable, "peer %s unreachable after %d attempts: %w", p.addr, attempt, err)
		close(p.ready)
		p.mu.Unlock()
		p.cfg.logger.Warn("fero: transport: peer unreachable", "addr", p.addr, "err", err)
		select {
		case <-p.kick:
		case <-p.ctx.Done():
			return nil, false
		}
		p.mu.Lock()
		p.unreachable = nil
		p.ready = make(chan struct{})
		p.mu.Unlock()
		attempt = 0
	}
}

// Close closes the connection (flushing what is queued, within the close
// timeout), stops redialing and waits for every goroutine. It is
// idempotent.
func (p *Peer) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.cancel()
		select {
		case <-p.ready:
		default:
			close(p.ready)
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
	if c := p.cur.Load(); c != nil {
		c.Close()
	}
	return nil
}

// Send queues a one-way message on the current connection.
func (p *Peer) Send(ctx context.Context, op uint32, payload []byte, opts ...CallOption) error {
	c, err := p.conn(ctx, failFast(opts))
	if err != nil {
		return err
	}
	return c.Send(ctx, op, payload, opts...)
}

// Call sends a request and waits for its reply.
func (p *Peer) Call(ctx context.Context, op uint32, payload []byte, opts ...CallOption) ([]byte, error) {
	c, err := p.conn(ctx, failFast(opts))
	if err != nil {
		return nil, err
	}
	return c.Call(ctx, op, payload, opts...)
}

// Go sends a request and calls done with the answer; see Conn.Go.
func (p *Peer) Go(ctx context.Context, op uint32, payload []byte, done func([]byte, error), opts ...CallOption) error {
	c, err := p.conn(ctx, failFast(opts))
	if err != nil {
		return err
	}
	return c.Go(ctx, op, payload, done, opts...)
}

// GoTo sends a request and gives the answer to to; see Conn.GoTo.
func (p *Peer) GoTo(ctx context.Context, op uint32, payload []byte, to Answerer, opts ...CallOption) error {
	c, err := p.conn(ctx, failFast(opts))
	if err != nil {
		return err
	}
	return c.GoTo(ctx, op, payload, to, opts...)
}

// Stream sends a request whose answer is a stream of replies.
func (p *Peer) Stream(ctx context.Context, op uint32, payload []byte, opts ...CallOption) (*Stream, error) {
	c, err := p.conn(ctx, failFast(opts))
	if err != nil {
		return nil, err
	}
	return c.Stream(ctx, op, payload, opts...)
}
