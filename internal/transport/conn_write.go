// A connection's write side: the writer goroutine, which drains the outbox
// (outbox.go) to the socket, and the frames the other goroutines queue.

package transport

import (
	"context"
	"fmt"
	"time"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

func (c *Conn) writeLoop() {
	graceful := false
	defer func() {
		if graceful {
			c.lingerClose()
		}
		c.nc.Close()
		<-c.readerDone
		if c.onEnd != nil {
			c.onEnd()
		}
		close(c.done)
	}()
	var free []byte
	for {
		batch, last := c.out.take(free) // (end set the deadline of a last batch)
		for rest := batch; len(rest) > 0; {
			n := min(len(rest), c.cfg.maxBatch)
			if _, err := c.nc.Write(rest[:n]); err != nil {
				if !c.ended.Load() {
					c.cfg.logger.Debug("fero: transport: write failed", "remote", c.nc.RemoteAddr(), "err", err)
				}
				c.end(c.lost(err), false)
				return
			}
			rest = rest[n:]
		}
		if last {
			graceful = c.out.flushing()
			return
		}
		// Reuse the buffer for the next swap, so a busy connection stops
		// allocating; take lets large buffers go when the writer idles.
		free = batch[:0]
	}
}

// lingerClose ends a connection whose last frames are written without
// losing them: closing a socket that still holds unread input makes the
// kernel reset the connection, and a reset discards whatever the peer has
// received but not yet read (the queued frames Close promised to
// deliver). So it shuts down the writing side only, which the peer reads
// as the end of the stream and answers by closing its own, and waits for
// the reader to see that, for at most the close timeout.
func (c *Conn) lingerClose() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	t := time.NewTimer(c.cfg.closeTimeout)
	defer t.Stop()
	select {
	case <-c.readerDone:
	case <-t.C:
	}
}

// writeFrame queues one frame, blocking while the outbox is full unless
// failFast.
func (c *Conn) writeFrame(ctx context.Context, kind wire.Kind, id uint64, op uint32, payload []byte, failFast bool) error {
	return c.queueFrame(ctx, kind, id, op, payload, failFast, false, false)
}

// queueFrame is writeFrame; with now, the caller writes the frame itself
// if the connection is idle; corked, it wakes nobody (see outbox).
func (c *Conn) queueFrame(ctx context.Context, kind wire.Kind, id uint64, op uint32, payload []byte, failFast, now, corked bool) error {
	n := wire.FrameSize(id, op, len(payload))
	if n-wire.LengthSize > c.cfg.maxFrame {
		return ErrTooLarge
	}
	if err := c.out.lock(ctx, n, failFast); err != nil {
		return err
	}
	empty := len(c.out.buf) == 0
	c.out.buf = wire.AppendFrame(c.out.buf, kind, id, op, payload)
	c.out.unlock(empty, now, corked)
	return nil
}

// Flush writes the frames of calls sent Corked that still wait in the
// outbox: on the caller's goroutine, as far as the socket takes them
// without blocking, if nobody is writing; else the writer takes them.
func (c *Conn) Flush() { c.out.flushCorked() }

func (c *Conn) writeErrorFrame(id uint64, code errs.Code, msg string, details []errs.Detail) error {
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	// Details past the bounds a receiver takes are dropped, and the
	// message says so.
	size := 0
	for i, d := range details {
		size += len(d.Type) + len(d.Value)
		if i == errs.MaxDetails || len(d.Type) == 0 || len(d.Type) > errs.MaxDetailType || size > errs.MaxDetailsBytes {
			msg += fmt.Sprintf(" (%d error details dropped: past the bounds on details)", len(details)-i)
			details = details[:i]
			break
		}
	}
	var buf [4200]byte
	return c.writeFrame(c.ctx, wire.KindError, id, 0, wire.AppendErrorPayload(buf[:0], uint32(code), msg, details), false)
}
