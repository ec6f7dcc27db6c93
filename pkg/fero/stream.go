package fero

import (
	"context"
	"errors"
	"io"
	"iter"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/wire"
)

// Streams: a request whose answer is any number of items (server
// streaming). The caller opens it with [Resource.Stream] or
// [Remote.Stream] and reads items with [Stream.Recv] (or ranges over
// [Items]); the owner's handler, the same [Handler] that answers calls,
// sees [Request.Streaming] and sends items with [Request.Send]. Its
// return ends the stream: a nil error is a clean end ([io.EOF] at the
// reader, after every item), an error reaches the reader as a call's
// would.
//
//   - Backpressure: the handler's Send waits while the reader is 64
//     items (or about 1 MiB) behind; nothing piles up on either side.
//   - Cancellation: Stream.Close, or the end of the caller's context,
//     ends the handler's context (its Send fails); a handler that
//     returns ends the stream for the reader.
//   - Deadlines and headers travel as with a call; the reply headers the
//     handler sets (Request.SetReplyHeader) arrive with the stream's end:
//     [Stream.Trailer].
//   - Ownership: a stream runs on the owner of its key. When the
//     partition moves to another node (a member joined or left), the
//     handler's context ends and the reader gets [ErrStreamMoved]: open
//     the stream again, from where it got to, and it runs at the new
//     owner. The reader gets [ErrStreamMoved] too when the owner closes,
//     dies, or its connection to the reader (or to the node relaying
//     the stream) breaks: the same resume finds the new owner, or the
//     same one once it is reachable. Before the first item a stream is
//     routed again without the reader seeing anything, as a call is.

// ErrStreamMoved ends a stream whose key's partition moved to another
// owner while it ran, or whose owner closed, died or became unreachable.
// It has CodeUnavailable; errors.Is matches it on either side of the
// wire. Open the stream again to resume.
var ErrStreamMoved error = protocol.ErrMoved

// SendFunc sends one item of a stream; see [Request.Send].
type SendFunc func(item any) error

// RecvFunc receives one item of a stream into item; see [Stream.Recv].
type RecvFunc func(item any) error

// Streaming reports whether the caller opened a stream, which the
// handler answers with Send (and its return), not with a reply.
func (q *Request) Streaming() bool { return q.send != nil }

// Send sends one item of the stream the caller opened: item is encoded
// with msgpack (a msgpack.RawMessage is sent as it is). It waits while
// the reader is a window behind, and fails once the caller has gone, the
// handler's context has ended, or the key's partition moved to another
// owner ([ErrStreamMoved]): a handler returns when Send fails. A request
// that is not a stream has no Send: it fails with
// CodeFailedPrecondition.
func (q *Request) Send(item any) error {
	if q.send == nil {
		return errs.Errorf(errs.FailedPrecondition, "fero: %s %q: the caller opened no stream; return a reply instead", q.Verb, q.Key)
	}
	return q.send(item)
}

// WrapSend puts w around the stream's Send, for a handler-side
// interceptor that sees or changes the items a handler sends (count them,
// log them, refuse one): the last one wrapped is outermost. It does
// nothing on a request that is not a stream.
func (q *Request) WrapSend(w func(next SendFunc) SendFunc) {
	if q.send != nil {
		q.send = w(q.send)
	}
}

// sendFunc is a stream's Send before any WrapSend: it encodes items for
// the node's.
func sendFunc(q *Request, send func([]byte) error) SendFunc {
	return func(item any) error {
		b, err := encodePayload(item)
		if err != nil {
			return errs.Errorf(errs.Internal, "fero: encode an item of %s %q: %v", q.Verb, q.Key, err)
		}
		if b == nil {
			b = []byte{0xc0} // a nil item is msgpack nil
		}
		return send(b)
	}
}

// Stream is the reader's end of a stream: see [Resource.Stream]. Recv
// is for one goroutine at a time; Close may be called from any.
type Stream struct {
	ns      *protocol.Stream
	verb    string
	key     string
	recv    RecvFunc
	trailer ReplyHeader
}

func newStream(ns *protocol.Stream, verb, key string) *Stream {
	s := &Stream{ns: ns, verb: verb, key: key}
	s.recv = s.recvDirect
	return s
}

// Recv receives the next item into item, a pointer (nil skips it). It
// returns io.EOF after the last item of a stream the handler ended
// cleanly, or the stream's error: the handler's (with its code), the
// context's, [ErrStreamMoved], or a lost connection's (CodeUnavailable).
// A stream that ended stays ended.
func (s *Stream) Recv(item any) error { return s.recv(item) }

func (s *Stream) recvDirect(item any) error {
	b, err := s.ns.Recv()
	if err != nil {
		if err == io.EOF {
			s.trailer.pairs = s.ns.Trailer()
		}
		return err
	}
	if item == nil {
		return nil
	}
	if err := wire.DecodeValue(b, item); err != nil {
		s.ns.Close()
		return errs.Errorf(errs.Internal, "fero: decode an item of %s %q: %w", s.verb, s.key, err)
	}
	return nil
}

// WrapRecv puts w around Recv, for a client-side stream interceptor that
// sees or changes the items read (the last one wrapped is outermost).
func (s *Stream) WrapRecv(w func(next RecvFunc) RecvFunc) { s.recv = w(s.recv) }

// Trailer returns the reply headers the handler set, once Recv has
// returned io.EOF. They also go to the ReplyHeader the stream's context
// carries ([WithReplyHeader]), which is how a generated client's
// streaming method delivers them.
func (s *Stream) Trailer() *ReplyHeader { return &s.trailer }

// Close ends the stream: the handler's context ends and nothing more is
// read. Call it when done with a stream that has not ended (defer it);
// it is idempotent.
func (s *Stream) Close() { s.ns.Close() }

// Items ranges over the items of s, decoded as T, and closes s when the
// loop ends: a clean end stops the loop, an error is yielded once, last.
//
//	s, err := r.Stream(ctx, "WATCH", key, req)
//	...
//	for ev, err := range fero.Items[Event](s) {
//		if err != nil { ... }
//	}
func Items[T any](s *Stream) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		defer s.Close()
		for {
			var v T
			err := s.Recv(&v)
			if errors.Is(err, io.EOF) {
				return
			}
			if !yield(v, err) || err != nil {
				return
			}
		}
	}
}

// StreamFunc opens a stream as a client-side stream interceptor sees it:
// Resource.Stream and Remote.Stream without their interceptors.
type StreamFunc func(ctx context.Context, verb, key string, payload any) (*Stream, error)

// StreamInterceptor wraps the streams a Resource or Remote opens: it may
// change the context (headers, a deadline), the verb, key and payload,
// refuse, and wrap the Stream it returns (Stream.WrapRecv). Interceptors
// given to WithStreamInterceptors run in order, the first outermost.
type StreamInterceptor func(next StreamFunc) StreamFunc

// WithStreamInterceptors makes every Stream the Resource or Remote being
// opened starts go through is, composed once when it opens.
func WithStreamInterceptors(is ...StreamInterceptor) Option {
	return option(func(c *config) { c.streamInterceptors = append(c.streamInterceptors, is...) })
}

// chainStreams composes is around open, the first outermost.
func chainStreams(open StreamFunc, is []StreamInterceptor) StreamFunc {
	for i := len(is) - 1; i >= 0; i-- {
		open = is[i](open)
	}
	return open
}

// StreamCaller is a Caller that opens streams too: *Resource and *Remote
// are. The typed clients ferogen generates for resources with streaming
// verbs need one.
type StreamCaller interface {
	Caller
	Stream(ctx context.Context, verb, key string, payload any) (*Stream, error)
}

var (
	_ StreamCaller = (*Resource)(nil)
	_ StreamCaller = (*Remote)(nil)
)

// Stream opens a stream: it sends the request (verb, key, payload as
// Call does) to the owner of key's partition, whose handler answers with
// items, read with Recv (or [Items]). The request goes out at the first
// Recv, which routes it; ctx bounds the whole stream, and its end or
// Close ends the handler's context. Close a stream that has not ended.
func (r *Resource) Stream(ctx context.Context, verb, key string, payload any) (*Stream, error) {
	return r.stream(ctx, verb, key, payload)
}

func (r *Resource) streamDirect(ctx context.Context, verb, key string, payload any) (*Stream, error) {
	b, err := encodePayload(payload)
	if err != nil {
		return nil, err
	}
	ns, err := r.n.OpenStream(ctx, verb, key, b)
	if err != nil {
		return nil, err
	}
	return newStream(ns, verb, key), nil
}

// Stream opens a stream through the node c is connected to, which runs
// it as the owner or relays it from the owner; see [Resource.Stream].
func (c *Remote) Stream(ctx context.Context, verb, key string, payload any) (*Stream, error) {
	return c.stream(ctx, verb, key, payload)
}

func (c *Remote) streamDirect(ctx context.Context, verb, key string, payload any) (*Stream, error) {
	b, err := encodePayload(payload)
	if err != nil {
		return nil, err
	}
	ns, err := protocol.OpenStreamVia(ctx, c.peer, verb, key, b)
	if err != nil {
		return nil, err
	}
	return newStream(ns, verb, key), nil
}

// OpenStream opens a stream through c, which must be a [StreamCaller]
// (a *Resource or a *Remote are): a Caller that cannot stream fails with
// CodeUnimplemented. Generated clients open their streaming verbs with
// it.
func OpenStream(ctx context.Context, c Caller, verb, key string, payload any) (*Stream, error) {
	sc, ok := c.(StreamCaller)
	if !ok {
		return nil, errs.Errorf(errs.Unimplemented, "fero: %s %q: %T opens no streams", verb, key, c)
	}
	return sc.Stream(ctx, verb, key, payload)
}

// ForEach receives every item of s, each into a new T, and calls f with
// it, in order, until the stream ends: it returns nil after a clean end,
// the stream's error, or f's first error (a handler's send then fails: a
// reader that stops ends the stream). It closes s. Generated clients
// deliver their streaming verbs' items with it, so a method such as
// Watch(ctx, req, send func(*Event) error) error reads the same on
// either side.
func ForEach[T any](s *Stream, f func(*T) error) error {
	defer s.Close()
	for {
		v := new(T)
		if err := s.Recv(v); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := f(v); err != nil {
			return err
		}
	}
}
