package protocol

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/transport"
)

// ErrClosed is returned by calls on a closed node.
var ErrClosed = errs.New(errs.Unavailable, "node closed")

// retryBackoff bounds the pause before a request that met a non-owner is
// sent again, while the maps converge.
const (
	RetryBackoffMin = 5 * time.Millisecond
	RetryBackoffMax = 200 * time.Millisecond
)

// SendThenWait queues a call of op with payload b on c, calls sent once
// it is queued (the order it leaves in is fixed then; sent is called
// whatever happens), and waits for the answer, as Call does.
func SendThenWait(ctx context.Context, c transport.Caller, op uint32, b []byte, sent func()) ([]byte, error) {
	type answer struct {
		reply []byte
		err   error
	}
	got := make(chan answer, 1)
	err := c.Go(ctx, op, b, func(reply []byte, err error) {
		got <- answer{slices.Clone(reply), err} // the reply is the reader's until done returns
	})
	sent()
	if err != nil {
		return nil, err
	}
	a := <-got // Go calls back exactly once, when ctx ends at the latest
	return a.reply, a.err
}

// CallNode sends a request to the node at the other end of c, which
// answers it or forwards it to the owner, and returns the handler's reply.
// It is how a process outside the cluster (the fero CLI) makes requests. A
// "retry" answer (the node's map and the owner's disagree for now) is
// retried with backoff until ctx ends.
func CallNode(ctx context.Context, c transport.Caller, verb, key string, payload []byte) ([]byte, error) {
	return CallNodeWait(ctx, c, verb, key, payload, WaitSpec{})
}

// CallNodeWait is CallNode with the wait level a built-in write waits for
// on the owner (unset: the owner's commit).
func CallNodeWait(ctx context.Context, c transport.Caller, verb, key string, payload []byte, wait WaitSpec) ([]byte, error) {
	return CallNodeWith(ctx, c, verb, key, payload, CallOpts{Wait: wait})
}

// CallOpts are what a request may carry besides its verb, key and
// payload.
type CallOpts struct {
	// Wait is what a built-in write waits for on the owner.
	Wait WaitSpec
	// If makes a built-in write a compare-and-set.
	If IfVersion
	// Once names the write or call for exactly-once: an attempt that
	// fails indefinite is made again, as the same write, until ctx ends
	// (the write timeout from now, without a deadline).
	Once Once
	// Writer, when Once is zero, names the write or call for exactly-once
	// as Once does, with the Writer's next sequence, taken as the first
	// attempt is sent: one Writer's requests leave in sequence order, so
	// the owner never meets a first attempt so far behind later ones that
	// it must refuse it as too old to tell (takeSeq).
	Writer *Writer
}

// CallNodeWith is CallNode with what o asks.
func CallNodeWith(ctx context.Context, c transport.Caller, verb, key string, payload []byte, o CallOpts) ([]byte, error) {
	w := Request{Verb: verb, Key: key, Payload: payload, Wait: o.Wait, If: o.If, Once: o.Once}
	tries := NewAttempts(ctx, o.Once)
	// The caller's span, if any, is the parent of what the nodes trace.
	w.Trace = trace.SpanContextFromContext(ctx)
	if w.Meta = MetaFrom(ctx); len(w.Meta) > 0 {
		if err := CheckMeta(w.Meta); err != nil {
			return nil, err
		}
	}
	deadline, hasDeadline := ctx.Deadline()
	var b []byte
	backoff := RetryBackoffMin
	for {
		if b == nil || hasDeadline {
			if hasDeadline {
				if w.Timeout = time.Until(deadline); w.Timeout <= 0 {
					return nil, context.DeadlineExceeded
				}
			}
			b = w.Append(b[:0])
		}
		var reply []byte
		var retry bool
		var err error
		if w.Once.Writer == "" && o.Writer != nil {
			reply, retry, err = o.Writer.callFirst(ctx, c, &w)
			b, tries.Once = w.Append(b[:0]), w.Once
		} else {
			reply, retry, err = CallOnce(ctx, c, b)
		}
		if !retry && !tries.Again(err) {
			return reply, tries.Answer(err)
		}
		if perr := Pause(ctx, context.Background(), &backoff); perr != nil {
			if tries.Last != nil {
				return nil, tries.Answer(tries.Last) // the last attempt's answer: it may have applied
			}
			return nil, perr
		}
	}
}

// Writer names the writes and calls of one process that is not a node
// (a Remote) for exactly-once: a life's ID and a count.
type Writer struct {
	id   string
	seq  atomic.Uint64
	turn chan struct{} // held from taking a sequence to sending with it (callFirst)
}

// NewWriter returns a writer named after name and random bytes.
func NewWriter(name string) *Writer {
	return &Writer{id: NewWriterID(name), turn: make(chan struct{}, 1)}
}

// callFirst sends w's first attempt over c with the writer's next
// sequence, taken and sent holding the writer's turn, and waits for its
// answer: what CallOnce returns. w.Once is set to the sequence taken.
func (wr *Writer) callFirst(ctx context.Context, c transport.Caller, w *Request) (reply []byte, retry bool, err error) {
	select {
	case wr.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	w.Once = wr.Next()
	reply, err = SendThenWait(ctx, c, OpRequest, w.Append(nil), func() { <-wr.turn })
	return ReadAnswer(ctx, reply, err)
}

// Next names a new write or call; a nil Writer names none.
func (w *Writer) Next() Once {
	if w == nil {
		return Once{}
	}
	return Once{Writer: w.id, Seq: w.seq.Add(1)}
}

// CallOnce sends an encoded request and reads the status byte of its
// answer: retry is true when the receiver said the owner is elsewhere.
func CallOnce(ctx context.Context, c transport.Caller, b []byte) (reply []byte, retry bool, err error) {
	reply, err = c.Call(ctx, OpRequest, b)
	return ReadAnswer(ctx, reply, err)
}

// Pause waits out *backoff (then doubles it, up to RetryBackoffMax) unless
// ctx ends (its error) or the node closes (ErrClosed).
func Pause(ctx, node context.Context, backoff *time.Duration) error {
	t := time.NewTimer(*backoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-node.Done():
		return ErrClosed
	case <-t.C:
	}
	*backoff = min(2**backoff, RetryBackoffMax)
	return nil
}
