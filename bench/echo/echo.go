// Package echo owns the benchmark floor: a minimal length-prefixed TCP echo
// that implements [bench.System]. It is the fastest simple thing a Go
// program can do with a request on loopback, so no framework measured in the
// same run can beat it; figures for other systems are quoted as ratios to it.
//
// The protocol is a 4-byte big-endian header and a payload. The header's low
// 30 bits are the payload length; the top bit marks a one-way frame, which
// the server only counts, and the next bit a sync frame, which the server
// answers with the 8-byte count of one-way frames it has read on the
// connection. Any other frame is echoed back unchanged. Replies come back in
// request order, so the client matches them first in, first out.
//
// Both ends read through a bufio.Reader and write through a bufio.Writer
// that is flushed only when the next read would block: every frame already
// received is answered in one write, and nothing waits in a buffer while its
// writer waits for input.
package echo

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/fero-go/fero/bench"
)

const (
	flagOneWay = 1 << 31
	flagSync   = 1 << 30
	lenMask    = flagSync - 1
	// MaxPayload bounds a frame so a corrupt header cannot make either end
	// allocate without limit.
	MaxPayload = 16 << 20
	// bufSize is each buffered reader and writer: large enough to batch
	// many small frames per system call.
	bufSize = 64 << 10
)

// ErrFrameTooLarge is returned for a header announcing more than MaxPayload.
var ErrFrameTooLarge = errors.New("echo: frame larger than MaxPayload")

// System is the raw echo as a system under test.
type System struct{}

var _ bench.System = System{}

// Serve listens on opts.Addr and echoes until ctx is done.
func (System) Serve(ctx context.Context, opts bench.ServeOptions, ready func(addr string)) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", opts.Addr)
	if err != nil {
		return fmt.Errorf("echo listen: %w", err)
	}
	s := &server{ln: ln, conns: map[net.Conn]struct{}{}}
	ready(ln.Addr().String())
	stop := context.AfterFunc(ctx, s.close)
	defer stop()
	err = s.accept()
	s.close()
	s.wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

type server struct {
	ln     net.Listener
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func (s *server) accept() error {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return fmt.Errorf("echo accept: %w", err)
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			// A broken connection ends only itself; the client reports
			// its own error.
			_ = serveConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

func (s *server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
}

func setNoDelay(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		// Go sets this by default; say it, since the floor depends on it.
		_ = tc.SetNoDelay(true)
	}
}

// wouldBlock reports whether reading the next whole frame from br would
// wait for the network.
func wouldBlock(br *bufio.Reader) bool {
	n := br.Buffered()
	if n < 4 {
		return true
	}
	h, _ := br.Peek(4)
	return n < 4+int(binary.BigEndian.Uint32(h)&lenMask)
}

func readHeader(br *bufio.Reader) (flags, n uint32, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return 0, 0, err
	}
	h := binary.BigEndian.Uint32(hdr[:])
	n = h & lenMask
	if n > MaxPayload {
		return 0, 0, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	return h &^ lenMask, n, nil
}

func writeHeader(bw *bufio.Writer, flags uint32, n int) error {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], flags|uint32(n))
	_, err := bw.Write(hdr[:])
	return err
}

func serveConn(c net.Conn) error {
	setNoDelay(c)
	br := bufio.NewReaderSize(c, bufSize)
	bw := bufio.NewWriterSize(c, bufSize)
	var oneWay uint64
	for {
		if wouldBlock(br) {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
		flags, n, err := readHeader(br)
		if err != nil {
			return err
		}
		switch flags {
		case flagOneWay:
			oneWay++
			if _, err := br.Discard(int(n)); err != nil {
				return err
			}
		case flagSync:
			if _, err := br.Discard(int(n)); err != nil {
				return err
			}
			if err := writeHeader(bw, flagSync, 8); err != nil {
				return err
			}
			if _, err := bw.Write(binary.BigEndian.AppendUint64(nil, oneWay)); err != nil {
				return err
			}
		default:
			if err := writeHeader(bw, 0, int(n)); err != nil {
				return err
			}
			if err := copyFrame(bw, br, int(n)); err != nil {
				return err
			}
		}
	}
}

// copyFrame moves n bytes straight from the read buffer to the write
// buffer. (io.CopyN would let bufio.Writer.ReadFrom bypass the write buffer
// and write each frame on its own.)
func copyFrame(bw *bufio.Writer, br *bufio.Reader, n int) error {
	for n > 0 {
		p, err := br.Peek(min(n, br.Size()))
		if err != nil {
			return err
		}
		if _, err := bw.Write(p); err != nil {
			return err
		}
		_, _ = br.Discard(len(p))
		n -= len(p)
	}
	return nil
}

// Dial connects to Servers[Index % len(Servers)].
func (System) Dial(ctx context.Context, opts bench.DialOptions) (bench.Conn, error) {
	if len(opts.Servers) == 0 {
		return nil, errors.New("echo: no server to dial")
	}
	addr := opts.Servers[opts.Index%len(opts.Servers)]
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("echo dial %s: %w", addr, err)
	}
	return newConn(c), nil
}

// Conn is the client side. Writes go through one buffered writer under wmu;
// the reply queue has its own lock so the reader never waits for a write.
type Conn struct {
	c  net.Conn
	br *bufio.Reader

	wmu    sync.Mutex // guards everything below down to qmu
	bw     *bufio.Writer
	sent   uint64 // one-way frames written
	reader bool   // the reader goroutine runs
	closed atomic.Bool

	qmu     sync.Mutex // guards q and failed
	q       bench.CallbackQueue
	failed  error // set when the reader stopped; later requests fail
	stopped chan struct{}
}

var (
	_ bench.Conn    = (*Conn)(nil)
	_ bench.Flusher = (*Conn)(nil)
)

func newConn(c net.Conn) *Conn {
	setNoDelay(c)
	return &Conn{
		c:       c,
		br:      bufio.NewReaderSize(c, bufSize),
		bw:      bufio.NewWriterSize(c, bufSize),
		stopped: make(chan struct{}),
	}
}

// Send buffers one one-way frame; Flush or a full buffer writes it.
func (c *Conn) Send(_ context.Context, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed.Load() {
		return bench.ErrClosed
	}
	if err := c.writeFrame(flagOneWay, payload); err != nil {
		return err
	}
	c.sent++
	return nil
}

// writeFrame is called with wmu held.
func (c *Conn) writeFrame(flags uint32, payload []byte) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, len(payload))
	}
	if err := writeHeader(c.bw, flags, len(payload)); err != nil {
		return fmt.Errorf("echo write: %w", err)
	}
	if _, err := c.bw.Write(payload); err != nil {
		return fmt.Errorf("echo write: %w", err)
	}
	return nil
}

// Flush writes everything buffered.
func (c *Conn) Flush(context.Context) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.bw.Flush(); err != nil {
		return fmt.Errorf("echo flush: %w", err)
	}
	return nil
}

// Go buffers a request; done runs on the reader goroutine with the echo.
func (c *Conn) Go(_ context.Context, payload []byte, done func([]byte, error)) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.goLocked(0, payload, done)
}

func (c *Conn) goLocked(flags uint32, payload []byte, done func([]byte, error)) error {
	if c.closed.Load() {
		return bench.ErrClosed
	}
	// Queue before writing: the reply can only follow the frame.
	c.qmu.Lock()
	if err := c.failed; err != nil {
		c.qmu.Unlock()
		return err
	}
	c.q.Push(done)
	c.qmu.Unlock()
	if !c.reader {
		c.reader = true
		go c.readLoop()
	}
	if err := c.writeFrame(flags, payload); err != nil {
		// done is queued, so it must still run once: breaking the
		// connection makes the reader fail it.
		c.c.Close()
	}
	return nil
}

// Sync writes a sync frame and waits until the server has counted every
// one-way frame sent before it.
func (c *Conn) Sync(ctx context.Context) error {
	type answer struct {
		count uint64
		err   error
	}
	ch := make(chan answer, 1)
	c.wmu.Lock()
	want := c.sent
	err := c.goLocked(flagSync, nil, func(reply []byte, err error) {
		if err == nil && len(reply) != 8 {
			err = fmt.Errorf("echo: sync reply of %d bytes", len(reply))
		}
		if err != nil {
			ch <- answer{err: err}
			return
		}
		ch <- answer{count: binary.BigEndian.Uint64(reply)}
	})
	if err == nil {
		if ferr := c.bw.Flush(); ferr != nil {
			c.c.Close()
		}
	}
	c.wmu.Unlock()
	if err != nil {
		return err
	}
	select {
	case a := <-ch:
		if a.err != nil {
			return a.err
		}
		if a.count != want {
			return fmt.Errorf("echo: server counted %d one-way frames, client sent %d", a.count, want)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Call sends one request and waits for its echo. While no Go or Sync has
// started the reader goroutine it reads the reply itself, which saves a
// goroutine hand-off per round trip: the floor should be the best case.
func (c *Conn) Call(ctx context.Context, payload []byte) ([]byte, error) {
	c.wmu.Lock()
	c.qmu.Lock()
	failed := c.failed
	c.qmu.Unlock()
	if c.reader || c.closed.Load() || failed != nil {
		c.wmu.Unlock()
		return c.callAsync(ctx, payload)
	}
	err := c.writeFrame(0, payload)
	if err == nil {
		err = c.bw.Flush()
	}
	c.wmu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("echo call: %w", err)
	}
	defer bench.InterruptRead(ctx, c.c)()
	_, n, err := readHeader(c.br)
	if err != nil {
		return nil, c.callErr(ctx, err)
	}
	reply := make([]byte, n)
	if _, err := io.ReadFull(c.br, reply); err != nil {
		return nil, c.callErr(ctx, err)
	}
	return reply, nil
}

// callErr ends a Call whose own read failed. The stream is then at an
// unknown point (a late reply may still come), so the connection is given
// up: later requests fail with the same error.
func (c *Conn) callErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		err = ctx.Err()
	} else {
		err = fmt.Errorf("echo call: %w", err)
	}
	c.qmu.Lock()
	c.failed = err
	c.qmu.Unlock()
	c.c.Close()
	return err
}

func (c *Conn) callAsync(ctx context.Context, payload []byte) ([]byte, error) {
	type answer struct {
		reply []byte
		err   error
	}
	ch := make(chan answer, 1)
	c.wmu.Lock()
	err := c.goLocked(0, payload, func(reply []byte, err error) {
		ch <- answer{append([]byte(nil), reply...), err}
	})
	if err == nil {
		if ferr := c.bw.Flush(); ferr != nil {
			c.c.Close()
		}
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

// readLoop matches replies to queued callbacks in order. It is the only
// caller of done, which gives the serial order bench.Conn promises.
func (c *Conn) readLoop() {
	defer close(c.stopped)
	var buf []byte
	err := func() error {
		for {
			_, n, err := readHeader(c.br)
			if err != nil {
				return err
			}
			var reply []byte
			if int(n) <= c.br.Size() {
				// Hand out the read buffer itself; done may not keep it.
				if reply, err = c.br.Peek(int(n)); err != nil {
					return err
				}
			} else {
				if cap(buf) < int(n) {
					buf = make([]byte, n)
				}
				reply = buf[:n]
				if _, err := io.ReadFull(c.br, reply); err != nil {
					return err
				}
			}
			c.qmu.Lock()
			done, ok := c.q.Pop()
			c.qmu.Unlock()
			if !ok {
				return errors.New("echo: reply without a request")
			}
			done(reply, nil)
			if int(n) <= c.br.Size() {
				_, _ = c.br.Discard(int(n))
			}
		}
	}()
	if c.closed.Load() {
		err = bench.ErrClosed
	} else {
		err = fmt.Errorf("echo read: %w", err)
	}
	c.qmu.Lock()
	if c.failed != nil {
		err = c.failed // the first failure names the cause
	}
	c.failed = err
	pending := c.q.Drain()
	c.qmu.Unlock()
	for _, done := range pending {
		done(nil, err)
	}
}

// Close closes the connection, fails outstanding requests and waits for
// their callbacks.
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
	if err != nil && !errors.Is(err, net.ErrClosed) { // a failed Call closed it
		return fmt.Errorf("echo close: %w", err)
	}
	return nil
}
