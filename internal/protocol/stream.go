package protocol

import (
	"context"
	"errors"
	"io"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/transport"
)

// DefaultStreamWindow is how many items a stream's handler sends ahead of
// its reader.
const DefaultStreamWindow = 64

// ErrMoved ends a stream whose key's partition moved to another owner
// while it ran: open it again (from where it got to) to resume at the new
// owner. It is Unavailable, a definite failure.
var ErrMoved = errs.New(errs.Unavailable, "fero: the stream's key moved to another owner; open the stream again to resume")

// ErrRetry is how a relayed stream learns that the owner it asked said
// "retry": the relay passes the answer on rather than route again.
var ErrRetry = errs.New(errs.Unavailable, "fero: the owner is elsewhere")

// Stream is the caller's end of a streaming request. Recv is for one
// goroutine; Close may be called from any.
type Stream struct {
	route  Router // nil for a stream through a single connection (OpenStreamVia)
	via    transport.Caller
	ctx    context.Context
	cancel context.CancelFunc
	w      Request
	window int
	// relay: answer a "retry" with ErrRetry instead of routing again.
	relay bool

	deadline    time.Time
	hasDeadline bool
	backoff     time.Duration

	ts      *transport.Stream // the stream to a remote owner, once open
	local   Items             // the handler, when it runs in this process
	got     bool              // an item was delivered: a retry is no longer transparent
	trailer Meta
	err     error
}

// OpenStreamVia sends a streaming request through the node at the other
// end of c, which answers it or relays it from the owner: how a process
// outside the cluster streams. A "retry" is sent again through c.
func OpenStreamVia(ctx context.Context, c transport.Caller, verb, key string, payload []byte) (*Stream, error) {
	meta := MetaFrom(ctx)
	if err := CheckMeta(meta); err != nil {
		return nil, err
	}
	w := Request{Verb: verb, Key: key, Payload: append([]byte(nil), payload...), Meta: meta, Trace: trace.SpanContextFromContext(ctx)}
	s := &Stream{via: c, w: w, window: DefaultStreamWindow, backoff: RetryBackoffMin}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.deadline, s.hasDeadline = ctx.Deadline()
	return s, nil
}

// Recv returns the next item, the msgpack encoding the handler sent. It
// returns io.EOF after the handler returned without error (Trailer then
// holds its reply headers), or the stream's error: the handler's, ctx's,
// ErrMoved, or a lost connection's.
func (s *Stream) Recv() ([]byte, error) {
	for s.err == nil {
		if s.ts == nil && s.local == nil {
			if err := s.open(); err != nil {
				s.fail(err)
				break
			}
			if s.ts == nil && s.local == nil {
				continue // routed again
			}
		}
		var b []byte
		var final []byte
		var err error
		if s.local != nil {
			b, err = s.local.Recv(s.ctx)
			if err == io.EOF {
				s.trailer = s.local.Trailer()
			}
		} else {
			b, err = s.ts.Recv()
			if err == io.EOF {
				final = s.ts.Final()
			}
		}
		switch {
		case err == nil:
			s.got = true
			return b, nil
		case err == io.EOF && s.local != nil:
			s.fail(io.EOF)
		case err == io.EOF:
			retry, terr := s.readFinal(final)
			if terr != nil {
				s.fail(terr)
				break
			}
			if !retry {
				s.fail(io.EOF)
				break
			}
			s.ts = nil
			if s.got {
				// Cannot happen with a well-behaved owner, which says
				// "retry" only before it runs a handler.
				s.fail(ErrMoved)
				break
			}
			if s.relay {
				s.fail(ErrRetry)
				break
			}
			if err := Pause(s.ctx, s.nodeCtx(), &s.backoff); err != nil {
				s.fail(err)
			}
		default:
			switch {
			case s.ctx.Err() != nil:
				err = s.ctx.Err()
			case s.ts != nil && errors.Is(err, transport.ErrConnLost) && !errors.Is(err, transport.ErrClosed):
				// The connection to the owner (or the node relaying it)
				// broke: the owner died or was cut off, and its
				// partitions move to another owner. The reader resumes as
				// it does after a move; this side closing is not one.
				err = ErrMoved
			}
			s.fail(err)
		}
	}
	return nil, s.err
}

// nodeCtx is the context of the node the stream is made through
// (Background through a connection).
func (s *Stream) nodeCtx() context.Context {
	if s.route != nil {
		return s.route.Context()
	}
	return context.Background()
}

// readFinal reads a remote stream's final reply.
func (s *Stream) readFinal(b []byte) (retry bool, err error) {
	switch {
	case len(b) == 0:
		return false, errs.New(errs.Internal, "fero: a stream ended with an empty final reply")
	case b[0] == ReplyRetry:
		return true, nil
	case b[0] == ReplyOK:
		return false, nil
	case b[0] == ReplyOKMeta:
		var sink Meta
		_, err := TakeReplyMeta(WithReplyMeta(context.Background(), &sink), b[1:])
		s.trailer = sink
		return false, err
	}
	return false, errs.Errorf(errs.Internal, "fero: a stream ended with status %d", b[0])
}

// open starts the stream at the owner the map names now; with no owner
// to ask yet it waits (and leaves the stream unopened, for Recv to try
// again).
func (s *Stream) open() error {
	if s.hasDeadline {
		if s.w.Timeout = time.Until(s.deadline); s.w.Timeout <= 0 {
			return context.DeadlineExceeded
		}
	}
	if s.route == nil {
		ts, err := s.via.StreamWindow(s.ctx, OpRequest, s.w.Append(nil), s.window)
		if err != nil {
			return err
		}
		s.opened(ts)
		return nil
	}
	if s.route.Context().Err() != nil {
		return ErrClosed
	}
	ts, items, err := s.route.OpenStream(s.ctx, &s.w, s.window)
	switch {
	case err != nil:
		return err
	case items != nil:
		s.local = items
		return nil
	case ts != nil:
		s.opened(ts)
		return nil
	}
	// Not sent: route again once the map moves on.
	return Pause(s.ctx, s.route.Context(), &s.backoff)
}

// opened takes ts as the stream to the owner. The end of the stream's
// context cancels it at once, not at the next Recv: the owner's handler
// must learn that its reader went away even when nobody reads.
func (s *Stream) opened(ts *transport.Stream) {
	s.ts = ts
	context.AfterFunc(s.ctx, ts.Close)
}

func (s *Stream) fail(err error) {
	s.err = err
	if err == io.EOF && len(s.trailer) > 0 {
		// The trailers go where a call's reply headers would
		// (WithReplyMeta), so a typed client that hides the stream
		// still delivers them.
		if sink, _ := s.ctx.Value(replyMetaKey{}).(*Meta); sink != nil {
			*sink = append(*sink, s.trailer...)
		}
	}
	s.Close()
}

// Trailer returns the reply headers the handler set, once Recv has
// returned io.EOF.
func (s *Stream) Trailer() Meta { return s.trailer }

// Close ends the stream: the handler's context ends (its sends fail) and
// nothing more is read. It is idempotent.
func (s *Stream) Close() {
	// Every remote stream opened closes when s.ctx ends (opened), so
	// Close need not touch s.ts, which Recv's goroutine owns.
	s.cancel()
}

// A Router routes the streams a node opens (NewStream).
type Router interface {
	// OpenStream starts w at the owner of its key by the node's map now:
	// a stream to a remote owner, or the items of a handler that runs in
	// this process. Neither, and no error: it was not sent (no owner to
	// ask yet, or the owner could not be reached), and the stream pauses
	// and routes again.
	OpenStream(ctx context.Context, w *Request, window int) (*transport.Stream, Items, error)
	// Context ends when the node closes.
	Context() context.Context
}

// Items are the items of a stream whose handler runs in this process.
type Items interface {
	// Recv returns the next item, io.EOF once the handler returned
	// without error, or the stream's error.
	Recv(ctx context.Context) ([]byte, error)
	// Trailer is the handler's reply headers, once Recv returned io.EOF.
	Trailer() Meta
}

// NewStream returns a stream of w through route; with relay, an owner's
// "retry" ends it with ErrRetry rather than routing again.
func NewStream(ctx context.Context, route Router, w Request, relay bool) *Stream {
	s := &Stream{route: route, w: w, window: DefaultStreamWindow, relay: relay, backoff: RetryBackoffMin}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.deadline, s.hasDeadline = ctx.Deadline()
	return s
}
