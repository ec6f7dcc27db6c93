// Package rueidissut drives the same Redis as package redissut with the
// client a Go service author picks, github.com/redis/rueidis, so the Redis
// peer can be quoted at the better of a hand-written pipelined client and
// a library's auto-pipelining.
//
// The server side is redissut's: Serve starts the same redis-server with
// the same flags and append-only file policies, and the records are the
// same "SET k:<client>:<n> <payload>" over [redissut.Keys] keys per client.
// Only the client differs.
//
// How the scenarios map onto rueidis. rueidis has no callback per command:
// Do blocks until its reply, and it pipelines the commands that goroutines
// issue concurrently on one connection (auto-pipelining, its default), so
// concurrency is how a Go service gets batching from it. Every Go and Send
// therefore runs one Do in a goroutine of its own, as a server handling
// each request in its goroutine would, and the goroutine creation and
// hand-offs are counted as the client's cost, since a user pays them too:
//
//   - request→reply and fixed rate: Go starts the goroutine; its done runs
//     under a lock, so calls never overlap as bench.Conn promises. The
//     scenario's window (or the rate) sets how many are in flight.
//   - one-way: Send does the same with the reply discarded, an error reply
//     counted for the next Sync. At most [SendDepth] Sends are outstanding,
//     as deep as rueidis's default queues go, and Send blocks beyond that,
//     as a full socket buffer blocks the hand-written client. Sync waits
//     until every Send's SET has been answered, which also means Redis has
//     executed them all (the hand-written client sends a PING for this,
//     since it reads its replies without waiting for them).
//   - unloaded round trip: Call is a plain Do on the caller's goroutine.
//     With a cancellable context rueidis still queues it to its pipeline
//     goroutines; with none it writes and reads in place.
//
// The client uses rueidis's defaults but two: ForceSingleClient, since the
// server is a standalone Redis (it only skips a CLUSTER probe at dial), and
// DisableCache, since nothing is read: client-side caching would turn on
// CLIENT TRACKING, which makes Redis look up every written key. By default
// rueidis pipelines over 2^PipelineMultiplex connections per client,
// log2(GOMAXPROCS) of them capped at 4 (2 on a 2-CPU host), where the
// hand-written client has one.
//
// Values are copied into the command (a string, as rueidis takes them):
// bench.Conn may reuse the payload once Send or Go returns, and the
// command is written later by rueidis's own goroutine.
package rueidissut

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/fero-go/fero/bench"
	"github.com/fero-go/fero/bench/redissut"
)

// SendDepth bounds the Sends outstanding on one Conn: rueidis's default
// ring of 2^DefaultRingScale commands on each of at most four pipelining
// connections. Deeper, goroutines would only queue in front of a full
// ring, costing memory; shallower, the library could batch less than it
// is built to.
const SendDepth = 4 << rueidis.DefaultRingScale

// System is Redis as a system under test, driven by rueidis.
type System struct {
	// AppendFsync is redissut.System's: empty for no persistence, or
	// the append-only file's fsync policy (always, everysec or no).
	AppendFsync string
}

var (
	_ bench.System  = System{}
	_ bench.Durable = System{}
)

// server is the same Redis as the hand-written client's.
func (s System) server() redissut.System { return redissut.System{AppendFsync: s.AppendFsync} }

// Durability names the append-only file's policy; empty without one.
func (s System) Durability() string { return s.server().Durability() }

// Serve runs one redis-server exactly as redissut.System.Serve does.
func (s System) Serve(ctx context.Context, opts bench.ServeOptions, ready func(addr string)) error {
	return s.server().Serve(ctx, opts, ready)
}

// Dial makes a rueidis client of Servers[Index % len(Servers)]: with
// several servers each is an independent Redis, as with redissut.
// rueidis.NewClient takes no context: its dial timeout (5 s) bounds it.
func (System) Dial(_ context.Context, opts bench.DialOptions) (bench.Conn, error) {
	if len(opts.Servers) == 0 {
		return nil, errors.New("rueidissut: no server to dial")
	}
	addr := opts.Servers[opts.Index%len(opts.Servers)]
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{addr},
		ForceSingleClient: true,
		DisableCache:      true,
	})
	if err != nil {
		return nil, fmt.Errorf("rueidissut dial %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Conn{
		client: client,
		ctx:    ctx,
		cancel: cancel,
		prefix: "k:" + strconv.Itoa(opts.Index) + ":",
		sem:    make(chan struct{}, SendDepth),
	}, nil
}

// Conn is one rueidis client. Each Send and Go runs its Do in a goroutine
// of its own, with ctx, which Close cancels: like the hand-written
// client's, requests live as long as the connection, not their caller's
// context.
type Conn struct {
	client rueidis.Client
	ctx    context.Context
	cancel context.CancelFunc
	prefix string        // "k:<index>:"
	n      atomic.Uint64 // records issued, which numbers the next key
	sem    chan struct{} // one token per outstanding Send

	mu     sync.RWMutex // Close holds it to set closed; Send and Go read it
	closed bool
	wg     sync.WaitGroup // every Send and Go goroutine

	dmu   sync.Mutex // serializes done calls
	reply []byte     // the reply handed to done, under dmu

	emu     sync.Mutex
	dropped int   // error replies to Sends since the last Sync
	first   error // the first of them
}

var _ bench.Conn = (*Conn)(nil)

// set builds "SET k:<index>:<n> value" and numbers the next key.
func (c *Conn) set(value []byte) rueidis.Completed {
	key := c.prefix + strconv.FormatUint((c.n.Add(1)-1)%redissut.Keys, 10)
	return c.client.B().Set().Key(key).Value(string(value)).Build()
}

// start counts one more goroutine unless the connection is closed.
func (c *Conn) start() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return bench.ErrClosed
	}
	c.wg.Add(1)
	return nil
}

// do runs cmd on the connection's context; an error after Close is
// bench.ErrClosed.
func (c *Conn) do(cmd rueidis.Completed) (string, error) {
	s, err := c.client.Do(c.ctx, cmd).ToString()
	if err != nil && c.ctx.Err() != nil {
		err = bench.ErrClosed
	}
	return s, err
}

// Send issues one SET whose reply is discarded; an error reply makes the
// next Sync fail. It blocks while SendDepth Sends are outstanding.
func (c *Conn) Send(ctx context.Context, payload []byte) error {
	if err := c.acquire(ctx); err != nil {
		return err
	}
	c.discard(c.set(payload))
	return nil
}

// acquire takes a Send's token and counts its goroutine.
func (c *Conn) acquire(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := c.start(); err != nil {
		<-c.sem
		return err
	}
	return nil
}

// discard runs cmd in a goroutine that counts a failure for the next Sync
// and gives back the token acquire took.
func (c *Conn) discard(cmd rueidis.Completed) {
	go func() {
		defer c.wg.Done()
		if _, err := c.do(cmd); err != nil {
			c.emu.Lock()
			if c.dropped == 0 {
				c.first = err
			}
			c.dropped++
			c.emu.Unlock()
		}
		<-c.sem
	}()
}

// Sync returns once every Send before it has been answered: Redis has
// executed them. It fails if any of them failed since the previous Sync.
func (c *Conn) Sync(ctx context.Context) error {
	c.mu.RLock()
	closed := c.closed
	c.mu.RUnlock()
	if closed {
		return bench.ErrClosed
	}
	// Holding every token means no Send is outstanding.
	held := 0
	defer func() {
		for ; held > 0; held-- {
			<-c.sem
		}
	}()
	for ; held < cap(c.sem); held++ {
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("rueidissut sync: %w", ctx.Err())
		}
	}
	c.emu.Lock()
	n, first := c.dropped, c.first
	c.dropped, c.first = 0, nil
	c.emu.Unlock()
	if n > 0 {
		return fmt.Errorf("rueidissut sync: %d sent records failed, the first with: %w", n, first)
	}
	return nil
}

// Go issues one SET; done runs, never concurrently with another done,
// with the reply ("OK") or the error.
func (c *Conn) Go(_ context.Context, payload []byte, done func(reply []byte, err error)) error {
	if err := c.start(); err != nil {
		return err
	}
	cmd := c.set(payload)
	go func() {
		defer c.wg.Done()
		s, err := c.do(cmd)
		c.dmu.Lock()
		defer c.dmu.Unlock()
		if err != nil {
			done(nil, err)
			return
		}
		c.reply = append(c.reply[:0], s...)
		done(c.reply, nil)
	}()
	return nil
}

// Call issues one SET and waits for its reply, on the caller's goroutine
// and context.
func (c *Conn) Call(ctx context.Context, payload []byte) ([]byte, error) {
	c.mu.RLock()
	closed := c.closed
	c.mu.RUnlock()
	if closed {
		return nil, bench.ErrClosed
	}
	s, err := c.client.Do(ctx, c.set(payload)).ToString()
	if err != nil {
		if c.ctx.Err() != nil {
			return nil, bench.ErrClosed
		}
		return nil, err
	}
	return []byte(s), nil
}

// Close fails the outstanding requests with bench.ErrClosed, closes the
// client and waits until every done has returned. Against a server that
// has stopped answering, rueidis gives its connections a second to close.
func (c *Conn) Close() error {
	c.mu.Lock()
	closed := c.closed
	c.closed = true
	c.mu.Unlock()
	if closed {
		return nil
	}
	c.cancel()
	c.client.Close()
	c.wg.Wait()
	return nil
}
