package transport

import (
	"context"
	"math"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// Flow control of streams.
//
// A caller that opens a stream with StreamWindow reads it at its own
// pace, and the callee sends no faster: the caller grants room with
// KindCredit frames, and the callee's ChunkWait waits for room before it
// sends. Room is counted both in chunks and in bytes (a chunk costs
// chunkCost): the first grant is the whole window, and each later one
// returns what Recv has taken out of the caller's buffer since the last,
// once that is half the window in either count. One chunk larger than
// the byte window goes when nothing is outstanding, so a window never
// stops a stream for good; the caller accepts it then because its
// buffer is empty.
//
// A KindCredit frame's payload is [chunks, bytes], two msgpack uints.
// Chunk, unlike ChunkWait, ignores credit: the streams that use it
// (a node's change stream to `fero tail`) end a caller that falls behind
// instead of waiting for it.

// appendCredit appends a KindCredit frame's payload.
func appendCredit(b []byte, chunks, bytes int) []byte {
	b = wire.AppendArrayHeader(b, 2)
	b = wire.AppendUint(b, uint64(chunks))
	return wire.AppendUint(b, uint64(bytes))
}

// parseCredit reads a KindCredit frame's payload.
func parseCredit(b []byte) (chunks, bytes int64, err error) {
	c := wire.NewCursor(b)
	c.Array("credit", 2)
	ch, by := c.Uint("chunks"), c.Uint("bytes")
	if err := c.End(); err != nil {
		return 0, 0, err
	}
	return int64(min(ch, math.MaxInt32)), int64(min(by, math.MaxInt32)), nil
}

// credit is the callee's side of a stream's flow control; under
// Request.mu.
type credit struct {
	granted bool  // a first grant arrived: window is known
	window  int64 // bytes of the first grant
	chunks  int64 // chunks the caller has room for
	bytes   int64 // bytes the caller has room for
	// wake is signalled when credit arrives or the request is cancelled.
	wake chan struct{}
}

// grant adds room to r's credit, from a KindCredit frame.
func (r *Request) grant(chunks, bytes int64) {
	r.mu.Lock()
	if !r.flow.granted {
		r.flow.granted, r.flow.window = true, bytes
	}
	// Bounded: a caller granting more than it has only hurts itself,
	// but the sums must not wrap.
	r.flow.chunks = min(r.flow.chunks+chunks, math.MaxInt32)
	r.flow.bytes = min(r.flow.bytes+bytes, math.MaxInt32)
	w := r.flow.wake
	r.mu.Unlock()
	if w != nil {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// wakeFlow wakes a ChunkWait, if one waits (the request was cancelled).
// Under r.mu.
func (r *Request) wakeFlow() {
	if r.flow.wake != nil {
		select {
		case r.flow.wake <- struct{}{}:
		default:
		}
	}
}

// ErrNoCredit is ChunkWait's error for a stream whose caller did not open
// it with a window.
var ErrNoCredit = errs.New(errs.FailedPrecondition, "transport: the caller grants no credit on this stream")

// ChunkWait sends one intermediate answer of a stream once the caller has
// room for it (see StreamWindow), waiting until it has, until ctx ends
// (ctx's error), or until the caller cancels (context.Canceled) or the
// connection closes. The caller's first grant arrives right behind the
// request, so ChunkWait waits for it too.
func (r *Request) ChunkWait(ctx context.Context, payload []byte) error {
	switch {
	case r.kind != wire.KindStream:
		return ErrNotStream
	case r.done.Load():
		return ErrReplied
	}
	cost := int64(chunkCost(payload))
	for {
		r.mu.Lock()
		if r.canceled {
			r.mu.Unlock()
			return context.Canceled
		}
		f := &r.flow
		if f.granted && f.chunks >= 1 && (f.bytes >= cost || f.bytes >= f.window) {
			f.chunks--
			f.bytes -= cost
			r.mu.Unlock()
			return r.conn.writeFrame(ctx, wire.KindChunk, r.id, 0, payload, false)
		}
		if f.wake == nil {
			f.wake = make(chan struct{}, 1)
		}
		wake := f.wake
		r.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.conn.done:
			return r.conn.lost(ErrClosed)
		}
	}
}

// serveCredit applies a KindCredit frame to the open stream it names; a
// stream already answered (or unknown) ignores it.
func (c *Conn) serveCredit(f *wire.Frame) error {
	chunks, bytes, err := parseCredit(f.Payload)
	if err != nil {
		return err
	}
	c.omu.Lock()
	r := c.open.get(f.ID)
	c.omu.Unlock()
	if r != nil && r.kind == wire.KindStream {
		r.grant(chunks, bytes)
	}
	return nil
}

// StreamWindow sends a request whose answer is a stream of replies, read
// at the caller's pace: the callee (with ChunkWait) sends at most chunks
// replies, and about the stream buffer's bytes, ahead of what Recv has
// returned. chunks must be positive.
func (c *Conn) StreamWindow(ctx context.Context, op uint32, payload []byte, chunks int, opts ...CallOption) (*Stream, error) {
	if chunks <= 0 {
		return nil, errs.Errorf(errs.InvalidArgument, "transport: a stream window of %d chunks", chunks)
	}
	s, err := c.stream(ctx, op, payload, chunks, opts)
	if err != nil {
		return nil, err
	}
	if err := c.writeFrame(ctx, wire.KindCredit, s.id, 0, appendCredit(nil, chunks, s.limit), failFast(opts)); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// StreamWindow is Conn.StreamWindow on the peer's connection.
func (p *Peer) StreamWindow(ctx context.Context, op uint32, payload []byte, chunks int, opts ...CallOption) (*Stream, error) {
	c, err := p.conn(ctx, failFast(opts))
	if err != nil {
		return nil, err
	}
	return c.StreamWindow(ctx, op, payload, chunks, opts...)
}

// returned counts a chunk Recv took out of a windowed stream's buffer,
// and grants the room back once half the window is due. Under s.mu; the
// frame is written after it is released (grant is what to send).
func (s *Stream) returned(cost int) (grant bool, chunks, bytes int) {
	if s.window == 0 {
		return false, 0, 0
	}
	s.dueChunks++
	s.dueBytes += cost
	if s.dueChunks*2 < s.window && s.dueBytes*2 < s.windowBytes {
		return false, 0, 0
	}
	chunks, bytes = s.dueChunks, s.dueBytes
	s.dueChunks, s.dueBytes = 0, 0
	return !s.ended, chunks, bytes
}
