// Streams: a call answered by a sequence of chunks (Conn.Stream), and the
// Stream its caller reads them from.

package transport

import (
	"context"
	"io"
	"sync"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

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
