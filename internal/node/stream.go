package node

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/transport"
)

// Streaming requests (docs/engine.md, "Streams").
//
// A stream is an OpRequest sent as a transport stream with a window
// (transport.Conn.StreamWindow): the owner's handler sends items, each a
// chunk, at most the window ahead of the reader, and its end is the final
// reply, a status byte (replyOK, or replyOKMeta with the handler's reply
// headers, its trailers) and nothing else, or an error. The owner answers
// replyRetry, before running any handler, when it does not own the key;
// the caller then routes the request again, as it does a call. A node
// that is not the owner relays the stream from the owner once (hops), as
// it forwards a call.
//
// A stream's handler runs while its node owns the key's partition: when
// the map names another owner, its context ends and the stream ends with
// ErrMoved, so that the caller opens it again, at the new owner.

// DefaultStreamWindow is how many items a stream's handler sends ahead of
// its reader.
const DefaultStreamWindow = 64

// ErrMoved ends a stream whose key's partition moved to another owner
// while it ran: open it again (from where it got to) to resume at the new
// owner. It is Unavailable, a definite failure.
var ErrMoved = errs.New(errs.Unavailable, "fero: the stream's key moved to another owner; open the stream again to resume")

// errRetry is how a relayed stream learns that the owner it asked said
// "retry": the relay passes the answer on rather than route again.
var errRetry = errs.New(errs.Unavailable, "fero: the owner is elsewhere")

// Stream is the caller's end of a streaming request. Recv is for one
// goroutine; Close may be called from any.
type Stream struct {
	n      *Node // nil for a stream through a single connection (OpenStreamVia)
	via    transport.Caller
	ctx    context.Context
	cancel context.CancelFunc
	w      wireRequest
	p      int
	window int
	// relay: answer a "retry" with errRetry instead of routing again.
	relay bool

	deadline    time.Time
	hasDeadline bool
	backoff     time.Duration

	ts      *transport.Stream // the stream to a remote owner, once open
	local   *localStream      // the handler, when this node owns the key
	got     bool              // an item was delivered: a retry is no longer transparent
	trailer Meta
	err     error
}

// OpenStream sends a streaming request to the owner of key's partition
// and returns its stream; items are read with Recv. The request is routed
// as Request routes a call, and routed again while the owner answers
// "retry" before its first item. ctx bounds the whole stream.
func (n *Node) OpenStream(ctx context.Context, verb, key string, payload []byte) (*Stream, error) {
	if n.ctx.Err() != nil {
		return nil, ErrClosed
	}
	meta := MetaFrom(ctx)
	if err := CheckMeta(meta); err != nil {
		return nil, err
	}
	w := wireRequest{Verb: verb, Key: key, Payload: append([]byte(nil), payload...), Meta: meta, Trace: trace.SpanContextFromContext(ctx)}
	return n.newStream(ctx, w, false), nil
}

// OpenStreamVia sends a streaming request through the node at the other
// end of c, which answers it or relays it from the owner: how a process
// outside the cluster streams. A "retry" is sent again through c.
func OpenStreamVia(ctx context.Context, c transport.Caller, verb, key string, payload []byte) (*Stream, error) {
	meta := MetaFrom(ctx)
	if err := CheckMeta(meta); err != nil {
		return nil, err
	}
	w := wireRequest{Verb: verb, Key: key, Payload: append([]byte(nil), payload...), Meta: meta, Trace: trace.SpanContextFromContext(ctx)}
	s := &Stream{via: c, w: w, window: DefaultStreamWindow, backoff: retryBackoffMin}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.deadline, s.hasDeadline = ctx.Deadline()
	return s, nil
}

func (n *Node) newStream(ctx context.Context, w wireRequest, relay bool) *Stream {
	s := &Stream{n: n, w: w, p: n.store.PartitionOf(w.Key), window: DefaultStreamWindow, relay: relay, backoff: retryBackoffMin}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.deadline, s.hasDeadline = ctx.Deadline()
	return s
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
			b, err = s.local.recv(s.ctx)
			if err == io.EOF {
				s.trailer = s.local.trailer
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
				s.fail(errRetry)
				break
			}
			if err := pause(s.ctx, s.nodeCtx(), &s.backoff); err != nil {
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
	if s.n != nil {
		return s.n.ctx
	}
	return context.Background()
}

// readFinal reads a remote stream's final reply.
func (s *Stream) readFinal(b []byte) (retry bool, err error) {
	switch {
	case len(b) == 0:
		return false, errs.New(errs.Internal, "fero: a stream ended with an empty final reply")
	case b[0] == replyRetry:
		return true, nil
	case b[0] == replyOK:
		return false, nil
	case b[0] == replyOKMeta:
		var sink Meta
		_, err := takeReplyMeta(WithReplyMeta(context.Background(), &sink), b[1:])
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
	if s.n == nil {
		ts, err := s.via.StreamWindow(s.ctx, OpRequest, s.w.append(nil), s.window)
		if err != nil {
			return err
		}
		s.opened(ts)
		return nil
	}
	n := s.n
	if n.ctx.Err() != nil {
		return ErrClosed
	}
	owner, ok := n.ownerOf(s.p)
	switch {
	case !ok:
	case owner == n.id && !n.cfg.Client:
		l, err := n.runLocalStream(s.ctx, &s.w, s.p, s.window)
		if err != nil {
			return err
		}
		s.local = l
		return nil
	default:
		c, err := n.connTo(s.ctx, owner)
		if err == nil {
			ts, err := c.StreamWindow(s.ctx, OpRequest, s.w.append(nil), s.window)
			if err == nil {
				s.opened(ts)
				return nil
			}
		}
		if s.ctx.Err() != nil {
			return s.ctx.Err()
		}
		// Never sent: route again once the map moves on.
	}
	return pause(s.ctx, n.ctx, &s.backoff)
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

// localStream is a stream whose handler runs on the caller's node: its
// items go through a channel of the window's size.
type localStream struct {
	items   chan []byte
	done    chan struct{} // closed when the handler returned; then err
	err     error
	trailer Meta
}

func (l *localStream) recv(ctx context.Context) ([]byte, error) {
	select {
	case b := <-l.items:
		return b, nil
	case <-l.done:
		select {
		case b := <-l.items:
			return b, nil
		default:
		}
		if l.err != nil {
			return nil, l.err
		}
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// runLocalStream runs the handler of a stream this node owns, for a
// caller in this process.
func (n *Node) runLocalStream(ctx context.Context, w *wireRequest, p, window int) (*localStream, error) {
	l := &localStream{items: make(chan []byte, window), done: make(chan struct{})}
	hctx, stop := n.streamContext(ctx, p)
	if stop == nil {
		return nil, ErrMoved
	}
	req := &Request{Verb: w.Verb, Key: w.Key, Partition: p, Payload: w.Payload, Local: true, Meta: w.Meta}
	req.Send = func(b []byte) error {
		select {
		case l.items <- append([]byte(nil), b...):
			return nil
		case <-hctx.Done():
			return streamErr(hctx)
		}
	}
	if !n.spawn(func() {
		defer close(l.done)
		defer stop()
		reply, err := n.handle(handlerCtx{hctx}, req)
		if err == nil && len(reply) > 0 {
			err = req.Send(reply)
		}
		if moved := context.Cause(hctx); errors.Is(moved, ErrMoved) {
			err = ErrMoved
		}
		l.err, l.trailer = err, req.ReplyMeta
	}) {
		stop()
		return nil, ErrClosed
	}
	return l, nil
}

// streamErr is why a stream handler's context ended: ErrMoved when its
// key moved away, ErrClosed when its node closed, else the context's
// error.
func streamErr(ctx context.Context) error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, ErrMoved):
		return ErrMoved
	case errors.Is(cause, ErrClosed):
		return ErrClosed
	}
	return ctx.Err()
}

// streamRuns are the stream handlers a node runs as owner, by partition,
// so that a change of owner ends them.
type streamRuns struct {
	mu   sync.Mutex
	runs map[*streamRun]struct{}
}

type streamRun struct {
	p      int
	cancel context.CancelCauseFunc
}

// streamContext returns the context a stream handler for partition p
// runs in: it ends with ctx, or with ErrMoved as its cause when the map
// names another owner of p. stop releases it. stop is nil, and the
// handler must not run, when this node no longer owns p.
func (n *Node) streamContext(ctx context.Context, p int) (context.Context, func()) {
	sctx, cancel := context.WithCancelCause(ctx)
	run := &streamRun{p: p, cancel: cancel}
	n.streams.mu.Lock()
	if n.streams.runs == nil {
		n.streams.runs = map[*streamRun]struct{}{}
	}
	n.streams.runs[run] = struct{}{}
	n.streams.mu.Unlock()
	// A node closing ends its handlers (Close waits for them), whoever
	// the caller is.
	unhook := context.AfterFunc(n.ctx, func() { cancel(ErrClosed) })
	stop := func() {
		unhook()
		n.streams.mu.Lock()
		delete(n.streams.runs, run)
		n.streams.mu.Unlock()
		cancel(nil)
	}
	// Registered first, checked second: a map installed in between ends
	// the run through endMovedStreams.
	if owner, ok := n.ownerOf(p); !ok || owner != n.id {
		stop()
		return nil, nil
	}
	return sctx, stop
}

// endMovedStreams ends the stream handlers of partitions m gives another
// owner. The driver calls it when it installs a map.
func (n *Node) endMovedStreams(m *ring.Map) {
	n.streams.mu.Lock()
	defer n.streams.mu.Unlock()
	for run := range n.streams.runs {
		if o, ok := m.Owner(run.p); !ok || o.ID != n.id {
			run.cancel(ErrMoved)
		}
	}
}

// serveStream answers OpRequest sent as a stream: the owner runs the
// handler with a Send for items; a node that is not the owner relays the
// stream from the owner once; past that, "retry".
func (n *Node) serveStream(r *transport.Request, wr *wireRequest) {
	p := n.store.PartitionOf(wr.Key)
	owner, ok := n.ownerOf(p)
	var deadline time.Time
	if wr.Timeout > 0 {
		deadline = time.Now().Add(wr.Timeout)
	}
	switch {
	case ok && owner == n.id && !n.cfg.Client:
		req := &Request{Verb: wr.Verb, Key: wr.Key, Partition: p, Payload: wr.Payload, Wait: wr.Wait, Meta: wr.Meta}
		parent := wr.Trace
		if !n.spawn(func() {
			ctx := r.Context()
			if !deadline.IsZero() {
				var stop func()
				ctx, stop = handlerDeadline(ctx, deadline)
				defer stop()
			}
			ctx, stop := n.streamContext(ctx, p)
			if stop == nil {
				_ = r.Reply([]byte{replyRetry})
				return
			}
			defer stop()
			var span trace.Span
			if n.cfg.Tracer != nil {
				ctx, span = n.startSpan(remoteParent(ctx, parent), "fero.stream", trace.SpanKindServer, req.Verb, p)
			}
			req.Send = func(b []byte) error {
				if err := r.ChunkWait(ctx, b); err != nil {
					if ctx.Err() != nil {
						return streamErr(ctx)
					}
					return err
				}
				return nil
			}
			reply, err := n.handle(ctx, req)
			if err == nil && len(reply) > 0 {
				err = req.Send(reply)
			}
			if cause := context.Cause(ctx); errors.Is(cause, ErrMoved) || errors.Is(cause, ErrClosed) {
				// Moved, or this owner closing: its partitions move to
				// other owners, where the reader opens the stream again.
				err = ErrMoved
			}
			if span != nil {
				endSpan(span, err)
			}
			if err != nil {
				_ = r.Fail(err)
				return
			}
			_ = r.Reply(appendReply(nil, req.ReplyMeta, nil))
		}) {
			_ = r.Fail(ErrClosed)
		}
	case ok && wr.Hops == 0 && owner != n.id:
		if !deadline.IsZero() {
			if wr.Timeout = time.Until(deadline); wr.Timeout <= 0 {
				_ = r.Fail(context.DeadlineExceeded)
				return
			}
		}
		w := *wr
		w.Hops++
		w.Payload = append([]byte(nil), wr.Payload...)
		if !n.spawn(func() { n.relayStream(r, w) }) {
			_ = r.Fail(ErrClosed)
		}
	default:
		_ = r.Reply([]byte{replyRetry})
	}
}

// relayStream reads the stream w from its owner and sends it on to the
// caller of r, item by item at the caller's pace, and its end.
func (n *Node) relayStream(r *transport.Request, w wireRequest) {
	ctx := r.Context()
	if w.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.Timeout)
		defer cancel()
	}
	s := n.newStream(ctx, w, true)
	defer s.Close()
	for {
		b, err := s.Recv()
		switch {
		case err == nil:
			if err := r.ChunkWait(ctx, b); err != nil {
				return // the caller went away; Close cancels upstream
			}
			continue
		case err == io.EOF:
			_ = r.Reply(appendReply(nil, s.trailer, nil))
		case errors.Is(err, errRetry):
			_ = r.Reply([]byte{replyRetry})
		default:
			_ = r.Fail(err)
		}
		return
	}
}
