package transport

import (
	"context"
	"sync"
	"time"
)

// outbox is a connection's queue of encoded frames: senders append under
// mu, the writer goroutine takes everything queued at once.
//
// Three senders write themselves, as far as the socket takes it without
// blocking (see direct), when they find the outbox idle: a synchronous
// call, about to wait anyway; the reader once it has dispatched what it
// read (the answers its handlers gave inline); and a handler answering
// the last request the reader holds, before it returns (see
// Request.eager). An unloaded round
// trip then crosses no thread hand-off to a writer on either side, as in
// the echo floor. Whatever the socket does not take at once, and every
// other sender's frames, go to the writer goroutine, which batches
// pipelined traffic into few system calls; no sender ever blocks in the
// socket.
type outbox struct {
	mu    sync.Mutex
	buf   []byte
	limit int
	stats *Stats // nil: not counted (WithStats)
	// busy is set while a write is under way, by the writer goroutine
	// (writerOwns) or a sender: writes never overlap, so frames leave in
	// the order they were queued.
	busy       bool
	writerOwns bool
	// direct writes b without blocking and returns how much the socket
	// took; nil when the connection cannot (TLS): then only the writer
	// goroutine writes.
	direct func(b []byte) (int, error)
	fail   func(error)   // ends the connection after a failed direct write
	spare  []byte        // the buffer a direct write leaves as the queue
	keep   int           // buffers over this are not kept for reuse
	err    error         // set once closed; returned to senders
	flush  bool          // on close: write what is queued first
	space  chan struct{} // made by a blocked sender, closed when the writer takes the queue
	wake   chan struct{} // capacity 1: tells the writer there is work
	// hold is set by the reader while it dispatches frames it already has
	// in memory: their answers go out in one write when it is done, as
	// the echo floor flushes only when its input runs dry.
	hold bool
	held bool // an append found the outbox empty while held
	// corked: a corked append (Corked) found the outbox empty, and only
	// corked ones followed: nobody is woken for what is queued until a
	// flush, or an append that is not corked.
	corked bool
}

func newOutbox(limit int) *outbox {
	return &outbox{limit: limit, wake: make(chan struct{}, 1)}
}

// lock waits until n more bytes fit, and returns with o.mu held. An empty
// outbox always takes a frame, so one frame over the limit passes alone.
func (o *outbox) lock(ctx context.Context, n int, failFast bool) error {
	o.mu.Lock()
	for {
		if o.err != nil {
			err := o.err
			o.mu.Unlock()
			return err
		}
		if len(o.buf) == 0 || len(o.buf)+n <= o.limit {
			return nil
		}
		if failFast {
			o.mu.Unlock()
			return ErrOutboxFull
		}
		// A full outbox is never held back: the writer must make room.
		o.held, o.corked = false, false
		o.signal()
		if o.space == nil {
			o.space = make(chan struct{})
		}
		space := o.space
		o.mu.Unlock()
		var began time.Time
		if o.stats != nil {
			o.stats.BackpressureWaits.Add(1)
			began = time.Now()
		}
		select {
		case <-space:
		case <-ctx.Done():
			if o.stats != nil {
				o.stats.BackpressureNanos.Add(int64(time.Since(began)))
			}
			return ctx.Err()
		}
		if o.stats != nil {
			o.stats.BackpressureNanos.Add(int64(time.Since(began)))
		}
		o.mu.Lock()
	}
}

// queued returns how many bytes wait in the outbox.
func (o *outbox) queued() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.buf)
}

// unlock releases o.mu after an append; wasEmpty says the append found
// the outbox empty, so the writer may be asleep. With now, the sender
// writes the queue itself if nobody is writing, hold or not. A corked
// append wakes nobody; one that is not takes corked frames along.
func (o *outbox) unlock(wasEmpty, now, corked bool) {
	if corked {
		if wasEmpty {
			o.corked = true
		}
		// Else it goes with what is queued: the writer was woken for it,
		// or the reader's hold or an earlier cork holds it.
		o.mu.Unlock()
		return
	}
	if o.corked {
		o.corked, wasEmpty = false, true // nobody was woken for them
	}
	if wasEmpty && o.hold && !now {
		o.held, wasEmpty = true, false
	}
	if wasEmpty && now && o.canWriteNow() {
		o.writeNow()
		return
	}
	o.mu.Unlock()
	if wasEmpty {
		o.signal()
	}
}

func (o *outbox) canWriteNow() bool {
	return o.direct != nil && !o.busy && o.err == nil && len(o.buf) > 0
}

// writeNow writes the queue on the caller's goroutine, without blocking;
// it is called with o.mu held and releases it. What the socket did not
// take goes back to the front of the queue, for the writer goroutine.
func (o *outbox) writeNow() {
	b := o.buf
	o.buf, o.spare = o.spare[:0], nil
	o.busy = true
	if o.space != nil {
		close(o.space)
		o.space = nil
	}
	o.mu.Unlock()
	n, err := o.direct(b)
	o.mu.Lock()
	o.busy = false
	switch {
	case err != nil:
		o.spare = nil
	case n < len(b):
		// The rest leaves first: it moves to the front of b, and what
		// other senders queued meanwhile goes behind it.
		rest := copy(b, b[n:])
		b = append(b[:rest], o.buf...)
		o.buf, o.spare = b, o.buf[:0]
	case cap(b) <= o.keep:
		o.spare = b[:0]
	}
	// The writer may have found this write under way and gone back to
	// sleep: wake it for what is queued, or to see the outbox closed
	// (perhaps by the reader, before this write failed).
	wake := len(o.buf) > 0 || o.err != nil
	o.mu.Unlock()
	if err != nil {
		o.fail(err) // closes the outbox, which wakes the writer
		o.signal()  // ... unless the connection had already ended
		return
	}
	if wake {
		o.signal()
	}
}

func (o *outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// flushCorked writes what corked senders queued, on the caller's
// goroutine if nobody is writing, else by waking the writer; while the
// reader holds the outbox, its hold's end does.
func (o *outbox) flushCorked() {
	o.mu.Lock()
	if !o.corked {
		o.mu.Unlock()
		return
	}
	o.corked = false
	if o.hold {
		o.held = true
		o.mu.Unlock()
		return
	}
	if o.canWriteNow() {
		o.writeNow()
		return
	}
	o.mu.Unlock()
	o.signal()
}

// setHold starts or ends a hold. Ending it writes what was held back, on
// the caller's goroutine if nobody is writing, else by waking the writer.
func (o *outbox) setHold(on bool) {
	o.mu.Lock()
	if o.hold == on {
		o.mu.Unlock()
		return
	}
	o.hold = on
	wake := !on && o.held
	o.held = false
	if wake && o.canWriteNow() {
		o.writeNow()
		return
	}
	o.mu.Unlock()
	if wake {
		o.signal()
	}
}

// take blocks until there are bytes to write or the outbox is closed. It
// returns the queued bytes, leaving free (emptied) as the new queue, and
// whether this is the last batch. Before it waits, it drops buffers over
// o.keep bytes: an idle connection does not hold on to a burst's memory,
// and a busy one never regrows its buffers.
func (o *outbox) take(free []byte) (batch []byte, last bool) {
	o.mu.Lock()
	if o.writerOwns {
		// The writer's previous batch is written.
		o.busy, o.writerOwns = false, false
	}
	// A direct write under way finishes first, even on close: the frames
	// it holds were queued before anything still here. Frames held back
	// while the reader dispatches wait for the hold to end (setHold) or
	// for the outbox to fill (lock), even if the writer wakes for an
	// earlier signal: a stale wake let a held answer leave alone, one
	// write early (TestBatchedAnswerLeavesWithTheDispatch, a loaded
	// machine).
	for o.busy || (o.err == nil && (len(o.buf) == 0 || o.held || o.corked)) {
		if cap(free) > o.keep {
			free = nil
		}
		if len(o.buf) == 0 && cap(o.buf) > o.keep {
			o.buf = nil // (a direct write may be under way with frames queued behind it)
		}
		if cap(o.spare) > o.keep {
			o.spare = nil
		}
		o.mu.Unlock()
		<-o.wake
		o.mu.Lock()
	}
	batch = o.buf
	o.buf = free[:0]
	o.busy, o.writerOwns = true, true
	if o.space != nil {
		close(o.space)
		o.space = nil
	}
	last = o.err != nil
	if last && !o.flush {
		batch = nil
	}
	o.mu.Unlock()
	return batch, last
}

// flushing reports whether the outbox was closed with its frames to be
// written.
func (o *outbox) flushing() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err != nil && o.flush
}

// close refuses further frames with err. With flush, the writer still
// writes what is queued.
func (o *outbox) close(err error, flush bool) {
	o.mu.Lock()
	if o.err == nil {
		o.err, o.flush = err, flush
	}
	if o.space != nil {
		close(o.space)
		o.space = nil
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}
