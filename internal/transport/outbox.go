package transport

import (
	"context"
	"sync"
)

// outbox is a connection's queue of encoded frames: senders append under
// mu, the writer goroutine takes everything queued at once.
type outbox struct {
	mu    sync.Mutex
	buf   []byte
	limit int
	err   error         // set once closed; returned to senders
	flush bool          // on close: write what is queued first
	space chan struct{} // made by a blocked sender, closed when the writer takes the queue
	wake  chan struct{} // capacity 1: tells the writer there is work
	// hold is set by the reader while it dispatches frames it already has
	// in memory: their answers go out in one write when it is done, as
	// the echo floor flushes only when its input runs dry.
	hold bool
	held bool // an append found the outbox empty while held
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
		o.held = false
		o.signal()
		if o.space == nil {
			o.space = make(chan struct{})
		}
		space := o.space
		o.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return ctx.Err()
		}
		o.mu.Lock()
	}
}

// unlock releases o.mu after an append; wasEmpty says the append found
// the outbox empty, so the writer may be asleep.
func (o *outbox) unlock(wasEmpty bool) {
	if wasEmpty && o.hold {
		o.held, wasEmpty = true, false
	}
	o.mu.Unlock()
	if wasEmpty {
		o.signal()
	}
}

func (o *outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// setHold starts or ends a hold; ending it wakes the writer if an append
// was held back.
func (o *outbox) setHold(on bool) {
	o.mu.Lock()
	if o.hold == on {
		o.mu.Unlock()
		return
	}
	o.hold = on
	wake := !on && o.held
	o.held = false
	o.mu.Unlock()
	if wake {
		o.signal()
	}
}

// take blocks until there are bytes to write or the outbox is closed. It
// returns the queued bytes, leaving free (emptied) as the new queue, and
// whether this is the last batch. Before it waits, it drops buffers over
// keep bytes: an idle connection does not hold on to a burst's memory,
// and a busy one never regrows its buffers.
func (o *outbox) take(free []byte, keep int) (batch []byte, last bool) {
	o.mu.Lock()
	for len(o.buf) == 0 && o.err == nil {
		if cap(free) > keep {
			free = nil
		}
		if cap(o.buf) > keep {
			o.buf = nil
		}
		o.mu.Unlock()
		<-o.wake
		o.mu.Lock()
	}
	batch = o.buf
	o.buf = free[:0]
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
