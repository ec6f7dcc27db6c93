package redissut

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/fero-go/fero/bench"
)

const (
	// bufSize is the client's read and write buffer, the same as the echo
	// floor's, so both batch the same number of small records per system
	// call.
	bufSize = 64 << 10
	// Keys is how many distinct keys each connection's records cycle
	// through, as fero's own adapter does (bench/ferosut): a long run
	// overwrites keys rather than growing Redis's memory without bound.
	Keys = 10000
)

// pingCmd is the RESP encoding of PING, which Sync and Serve's readiness
// check send.
var pingCmd = []byte("*1\r\n$4\r\nPING\r\n")

// Dial connects to Servers[Index % len(Servers)]: with several servers each
// is an independent Redis, and nothing is replicated between them.
func (System) Dial(ctx context.Context, opts bench.DialOptions) (bench.Conn, error) {
	if len(opts.Servers) == 0 {
		return nil, errors.New("redissut: no server to dial")
	}
	addr := opts.Servers[opts.Index%len(opts.Servers)]
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("redissut dial %s: %w", addr, err)
	}
	return newConn(c, opts.Index), nil
}

// Conn is one RESP2 connection to Redis. Commands are written through one
// buffered writer under wmu and pipelined; Redis answers in order, so a
// single reader goroutine matches each reply to the oldest queued callback.
// The queue has its own lock so the reader never waits for a writer.
type Conn struct {
	c  net.Conn
	rr replyReader // used by the reader goroutine, or by Call before it runs

	wmu    sync.Mutex // guards everything below down to qmu
	bw     *bufio.Writer
	key    []byte // "k:<index>:" followed by the current record's number
	prefix int    // length of the key's fixed part
	n      uint64 // records written, which numbers the next key
	hdr    []byte // scratch for a command's header
	reader bool   // the reader goroutine runs
	closed atomic.Bool

	qmu sync.Mutex // guards the fields below
	// q holds one entry per command written and not yet answered. A nil
	// entry is a Send, whose reply is discarded.
	q       bench.CallbackQueue
	failed  error  // set when reading stopped; later requests fail with it
	dropped int    // error replies to Sends since the last Sync
	first   string // the first of them
	stopped chan struct{}
}

var (
	_ bench.Conn    = (*Conn)(nil)
	_ bench.Flusher = (*Conn)(nil)
)

func newConn(c net.Conn, index int) *Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		// Go's default; said here because the figures depend on it.
		_ = tc.SetNoDelay(true)
	}
	key := strconv.AppendInt([]byte("k:"), int64(index), 10)
	key = append(key, ':')
	return &Conn{
		c:       c,
		rr:      replyReader{br: bufio.NewReaderSize(c, bufSize)},
		bw:      bufio.NewWriterSize(c, bufSize),
		key:     key,
		prefix:  len(key),
		stopped: make(chan struct{}),
	}
}

// Send buffers one SET whose reply is read and discarded; Flush or a full
// buffer writes it. An error reply makes the next Sync fail.
func (c *Conn) Send(_ context.Context, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.enqueue(nil); err != nil {
		return err
	}
	return c.writeSet(payload)
}

// Go buffers one SET; done runs on the reader goroutine with the reply
// ("OK"), or with a ReplyError if Redis refused the command.
func (c *Conn) Go(_ context.Context, payload []byte, done func(reply []byte, err error)) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.enqueue(done); err != nil {
		return err
	}
	// done is queued, so it runs even if the write fails.
	_ = c.writeSet(payload)
	return nil
}

// Flush writes everything buffered.
func (c *Conn) Flush(context.Context) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.bw.Flush(); err != nil {
		return fmt.Errorf("redissut flush: %w", err)
	}
	return nil
}

// Sync writes a PING after everything buffered and waits for its PONG:
// Redis answers in order, so every command sent before it has been
// executed by then. It fails if any Send since the previous Sync got an
// error reply.
func (c *Conn) Sync(ctx context.Context) error {
	reply, err := c.roundTrip(ctx, func() error {
		_, err := c.bw.Write(pingCmd)
		return err
	})
	if err != nil {
		return fmt.Errorf("redissut sync: %w", err)
	}
	if string(reply) != "PONG" {
		return fmt.Errorf("%w: PING answered with %q", ErrProtocol, reply)
	}
	c.qmu.Lock()
	n, first := c.dropped, c.first
	c.dropped, c.first = 0, ""
	c.qmu.Unlock()
	if n > 0 {
		return fmt.Errorf("redissut sync: %d sent records failed, the first with: %w", n, ReplyError(first))
	}
	return nil
}

// Call sends one SET and waits for its reply. While no Send, Go or Sync
// has started the reader goroutine it reads the reply itself, saving a
// goroutine hand-off per round trip, as the echo floor does.
func (c *Conn) Call(ctx context.Context, payload []byte) ([]byte, error) {
	c.wmu.Lock()
	c.qmu.Lock()
	failed := c.failed
	c.qmu.Unlock()
	if c.reader || c.closed.Load() || failed != nil {
		c.wmu.Unlock()
		return c.roundTrip(ctx, func() error { return c.writeSet(payload) })
	}
	err := c.writeSet(payload)
	if err == nil {
		err = c.flushLocked()
	}
	c.wmu.Unlock()
	if err != nil {
		return nil, err
	}
	defer bench.InterruptRead(ctx, c.c)()
	r, err := c.rr.next()
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		} else {
			err = fmt.Errorf("redissut read: %w", err)
		}
		// The stream is at an unknown point: nothing more can be read.
		c.qmu.Lock()
		c.failed = err
		c.qmu.Unlock()
		c.c.Close()
		return nil, err
	}
	if err := r.err(); err != nil {
		return nil, err
	}
	return bytes.Clone(r.data), nil
}

// roundTrip queues a callback, lets write put its command in the buffer,
// flushes and waits for the reply.
func (c *Conn) roundTrip(ctx context.Context, write func() error) ([]byte, error) {
	type answer struct {
		reply []byte
		err   error
	}
	ch := make(chan answer, 1)
	c.wmu.Lock()
	err := c.enqueue(func(reply []byte, err error) { ch <- answer{bytes.Clone(reply), err} })
	if err == nil && write() == nil {
		// A failed write closed the connection, which fails the callback.
		_ = c.flushLocked()
	}
	c.wmu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case a := <-ch:
		return a.reply, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// enqueue queues done (nil for a Send) for the next command written,
// starting the reader if need be. It is called with wmu held, before the
// command is written: its reply can only come after.
func (c *Conn) enqueue(done func([]byte, error)) error {
	if c.closed.Load() {
		return bench.ErrClosed
	}
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.failed != nil {
		return c.failed
	}
	if !c.reader {
		c.reader = true
		go c.readLoop()
	}
	c.q.Push(done)
	return nil
}

// writeSet buffers "SET k:<index>:<n> payload" and numbers the next key. It
// is called with wmu held, after enqueue. A failed write closes the
// connection so the reader fails everything queued, this command's entry
// included.
func (c *Conn) writeSet(value []byte) error {
	c.key = strconv.AppendUint(c.key[:c.prefix], c.n%Keys, 10)
	c.n++
	h := append(c.hdr[:0], "*3\r\n$3\r\nSET\r\n$"...)
	h = strconv.AppendInt(h, int64(len(c.key)), 10)
	h = append(h, "\r\n"...)
	h = append(h, c.key...)
	h = append(h, "\r\n$"...)
	h = strconv.AppendInt(h, int64(len(value)), 10)
	h = append(h, "\r\n"...)
	c.hdr = h
	// bufio.Writer keeps its first error, so checking the last write is
	// enough.
	_, _ = c.bw.Write(h)
	_, _ = c.bw.Write(value)
	if _, err := c.bw.WriteString("\r\n"); err != nil {
		c.c.Close()
		return fmt.Errorf("redissut write: %w", err)
	}
	return nil
}

// flushLocked flushes with wmu held; a failure closes the connection.
func (c *Conn) flushLocked() error {
	if err := c.bw.Flush(); err != nil {
		c.c.Close()
		return fmt.Errorf("redissut flush: %w", err)
	}
	return nil
}

// readLoop matches replies to queued callbacks in order. It is the only
// caller of done, which gives the serial order bench.Conn promises.
func (c *Conn) readLoop() {
	defer close(c.stopped)
	err := c.dispatch()
	if c.closed.Load() {
		err = bench.ErrClosed
	} else {
		err = fmt.Errorf("redissut read: %w", err)
	}
	c.qmu.Lock()
	c.failed = err
	pending := c.q.Drain()
	c.qmu.Unlock()
	for _, done := range pending {
		if done != nil {
			done(nil, err)
		}
	}
}

// dispatch reads replies until the stream fails.
func (c *Conn) dispatch() error {
	for {
		r, err := c.rr.next()
		if err != nil {
			return err
		}
		c.qmu.Lock()
		done, ok := c.q.Pop()
		if ok && done == nil && r.kind == '-' {
			if c.dropped == 0 {
				c.first = string(r.data)
			}
			c.dropped++
		}
		c.qmu.Unlock()
		switch {
		case !ok:
			return fmt.Errorf("%w: reply without a request", ErrProtocol)
		case done == nil:
		case r.kind == '-':
			done(nil, r.err())
		default:
			done(r.data, nil)
		}
	}
}

// Close closes the connection, fails outstanding requests with
// bench.ErrClosed and waits until their callbacks have returned.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	// Closing the socket first unblocks a writer stuck holding wmu.
	err := c.c.Close()
	c.wmu.Lock()
	reader := c.reader
	c.wmu.Unlock()
	if reader {
		<-c.stopped
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("redissut close: %w", err)
	}
	return nil
}
