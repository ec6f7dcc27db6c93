// Package transportsut owns the adapter that puts fero's multiplexed RPC
// transport (internal/transport) under the benchmark harness as a
// [bench.System], so it is measured with exactly the scenarios, processes
// and reports the raw echo floor is measured with.
//
// The server registers three ops: one-way records are counted, echo
// requests are answered with their payload, and a sync call is answered
// with the count. The transport runs handlers on each connection's reader
// goroutine in arrival order, so a sync call is answered only after every
// one-way record sent before it on that connection was handled.
package transportsut

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/fero-go/fero/bench"
	"github.com/fero-go/fero/internal/transport"
)

// The benchmark's ops.
const (
	opOneWay uint32 = 1
	opEcho   uint32 = 2
	opSync   uint32 = 3
)

// System is the transport as a system under test: a transport.Server on
// the serving side, a transport.Peer on the client side, default options.
type System struct{}

var _ bench.System = System{}

// Serve runs a transport server until ctx is done.
func (System) Serve(ctx context.Context, opts bench.ServeOptions, ready func(addr string)) error {
	// One count per server: records from other clients only raise it, and
	// ordering per connection is what makes sync exact for its own.
	var count atomic.Uint64
	mux := transport.NewMux()
	mux.HandleFunc(opOneWay, func(*transport.Request) { count.Add(1) })
	mux.HandleFunc(opEcho, func(r *transport.Request) { _ = r.Reply(r.Payload()) })
	mux.HandleFunc(opSync, func(r *transport.Request) {
		_ = r.Reply(binary.BigEndian.AppendUint64(nil, count.Load()))
	})
	srv, err := transport.Listen(opts.Addr, mux)
	if err != nil {
		return fmt.Errorf("transport listen: %w", err)
	}
	ready(srv.Addr().String())
	<-ctx.Done()
	if err := srv.Close(); err != nil {
		return fmt.Errorf("transport close: %w", err)
	}
	return nil
}

// Dial opens a transport.Peer to Servers[Index % len(Servers)].
func (System) Dial(ctx context.Context, opts bench.DialOptions) (bench.Conn, error) {
	if len(opts.Servers) == 0 {
		return nil, errors.New("transportsut: no server to dial")
	}
	addr := opts.Servers[opts.Index%len(opts.Servers)]
	p, err := transport.Dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("transport dial %s: %w", addr, err)
	}
	return &conn{p: p}, nil
}

// conn adapts a Peer to bench.Conn. The transport writes on its own (no
// Flush).
type conn struct {
	p    *transport.Peer
	sent atomic.Uint64
	// done callbacks normally run on the reader goroutine, but the
	// transport may also run one on a goroutine that cancels its context
	// or closes the connection; the lock gives the serial order bench.Conn
	// promises. Uncontended, it costs a few nanoseconds per reply.
	mu sync.Mutex
}

func (c *conn) Send(ctx context.Context, payload []byte) error {
	if err := c.p.Send(ctx, opOneWay, payload); err != nil {
		return err
	}
	c.sent.Add(1)
	return nil
}

func (c *conn) Sync(ctx context.Context) error {
	want := c.sent.Load()
	reply, err := c.p.Call(ctx, opSync, nil)
	if err != nil {
		return err
	}
	if len(reply) != 8 {
		return fmt.Errorf("transportsut: sync reply of %d bytes", len(reply))
	}
	if got := binary.BigEndian.Uint64(reply); got < want {
		return fmt.Errorf("transportsut: server counted %d one-way records, this client sent %d", got, want)
	}
	return nil
}

func (c *conn) Go(ctx context.Context, payload []byte, done func([]byte, error)) error {
	return c.p.Go(ctx, opEcho, payload, func(reply []byte, err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		done(reply, err)
	})
}

func (c *conn) Call(ctx context.Context, payload []byte) ([]byte, error) {
	return c.p.Call(ctx, opEcho, payload)
}

// Close closes the peer; the transport fails calls still waiting and waits
// for its goroutines, so every done has returned.
func (c *conn) Close() error { return c.p.Close() }
