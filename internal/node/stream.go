package node

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/transport"
)

// Streaming requests (docs/engine.md, "Streams").
//
// A stream is a protocol.OpRequest sent as a transport stream with a window
// (transport.Conn.StreamWindow): the owner's handler sends items, each a
// chunk, at most the window ahead of the reader, and its end is the final
// reply, a status byte (protocol.ReplyOK, or protocol.ReplyOKMeta with the handler's reply
// headers, its trailers) and nothing else, or an error. The owner answers
// protocol.ReplyRetry, before running any handler, when it does not own the key;
// the caller then routes the request again, as it does a call. A node
// that is not the owner relays the stream from the owner once (hops), as
// it forwards a call.
//
// A stream's handler runs while its node owns the key's partition: when
// the map names another owner, its context ends and the stream ends with
// protocol.ErrMoved, so that the caller opens it again, at the new owner.

// OpenStream sends a streaming request to the owner of key's partition
// and returns its stream; items are read with Recv. The request is routed
// as Request routes a call, and routed again while the owner answers
// "retry" before its first item. ctx bounds the whole stream.
func (n *Node) OpenStream(ctx context.Context, verb, key string, payload []byte) (*protocol.Stream, error) {
	if n.ctx.Err() != nil {
		return nil, protocol.ErrClosed
	}
	meta := protocol.MetaFrom(ctx)
	if err := protocol.CheckMeta(meta); err != nil {
		return nil, err
	}
	w := protocol.Request{Verb: verb, Key: key, Payload: append([]byte(nil), payload...), Meta: meta, Trace: trace.SpanContextFromContext(ctx)}
	return n.newStream(ctx, w, false), nil
}

func (n *Node) newStream(ctx context.Context, w protocol.Request, relay bool) *protocol.Stream {
	return protocol.NewStream(ctx, &streamRoute{n: n, p: n.store.PartitionOf(w.Key)}, w, relay)
}

// streamRoute routes a stream the node opens to its key's owner
// (protocol.Router).
type streamRoute struct {
	n *Node
	p int
}

func (r *streamRoute) Context() context.Context { return r.n.ctx }

func (r *streamRoute) OpenStream(ctx context.Context, w *protocol.Request, window int) (*transport.Stream, protocol.Items, error) {
	n := r.n
	owner, ok := n.ownerOf(r.p)
	switch {
	case !ok:
	case owner == n.id && !n.cfg.Client:
		l, err := n.runLocalStream(ctx, w, r.p, window)
		if err != nil {
			return nil, nil, err
		}
		return nil, l, nil
	default:
		c, err := n.peers.connTo(ctx, owner)
		if err == nil {
			ts, err := c.StreamWindow(ctx, protocol.OpRequest, w.Append(nil), window)
			if err == nil {
				return ts, nil, nil
			}
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
	}
	return nil, nil, nil
}

// localStream is a stream whose handler runs on the caller's node: its
// items go through a channel of the window's size.
type localStream struct {
	items   chan []byte
	done    chan struct{} // closed when the handler returned; then err
	err     error
	trailer protocol.Meta
}

// Trailer is the handler's reply headers, once it returned.
func (l *localStream) Trailer() protocol.Meta { return l.trailer }

// Recv returns the handler's next item (protocol.Items).
func (l *localStream) Recv(ctx context.Context) ([]byte, error) {
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
func (n *Node) runLocalStream(ctx context.Context, w *protocol.Request, p, window int) (*localStream, error) {
	l := &localStream{items: make(chan []byte, window), done: make(chan struct{})}
	hctx, stop := n.streamContext(ctx, p)
	if stop == nil {
		return nil, protocol.ErrMoved
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
		reply, err := n.handle(protocol.HandlerContext(hctx), req)
		if err == nil && len(reply) > 0 {
			err = req.Send(reply)
		}
		if moved := context.Cause(hctx); errors.Is(moved, protocol.ErrMoved) {
			err = protocol.ErrMoved
		}
		l.err, l.trailer = err, req.ReplyMeta
	}) {
		stop()
		return nil, protocol.ErrClosed
	}
	return l, nil
}

// streamErr is why a stream handler's context ended: protocol.ErrMoved when its
// key moved away, protocol.ErrClosed when its node closed, else the context's
// error.
func streamErr(ctx context.Context) error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, protocol.ErrMoved):
		return protocol.ErrMoved
	case errors.Is(cause, protocol.ErrClosed):
		return protocol.ErrClosed
	}
	return ctx.Err()
}

// streamRuns are the stream handlers a node runs as owner, by partition,
// so that a change of owner ends them.
type streamRuns struct {
	mu   sync.Mutex // guards runs
	runs map[*streamRun]struct{}
}

type streamRun struct {
	p      int
	cancel context.CancelCauseFunc
}

// streamContext returns the context a stream handler for partition p
// runs in: it ends with ctx, or with protocol.ErrMoved as its cause when the map
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
	unhook := context.AfterFunc(n.ctx, func() { cancel(protocol.ErrClosed) })
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
			run.cancel(protocol.ErrMoved)
		}
	}
}

// serveStream answers protocol.OpRequest sent as a stream: the owner runs the
// handler with a Send for items; a node that is not the owner relays the
// stream from the owner once; past that, "retry".
func (n *Node) serveStream(r *transport.Request, wr *protocol.Request) {
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
				_ = r.Reply([]byte{protocol.ReplyRetry})
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
			if cause := context.Cause(ctx); errors.Is(cause, protocol.ErrMoved) || errors.Is(cause, protocol.ErrClosed) {
				// Moved, or this owner closing: its partitions move to
				// other owners, where the reader opens the stream again.
				err = protocol.ErrMoved
			}
			if span != nil {
				endSpan(span, err)
			}
			if err != nil {
				_ = r.Fail(err)
				return
			}
			_ = r.Reply(protocol.AppendReply(nil, req.ReplyMeta, nil))
		}) {
			_ = r.Fail(protocol.ErrClosed)
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
			_ = r.Fail(protocol.ErrClosed)
		}
	default:
		_ = r.Reply([]byte{protocol.ReplyRetry})
	}
}

// relayStream reads the stream w from its owner and sends it on to the
// caller of r, item by item at the caller's pace, and its end.
func (n *Node) relayStream(r *transport.Request, w protocol.Request) {
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
			_ = r.Reply(protocol.AppendReply(nil, s.Trailer(), nil))
		case errors.Is(err, protocol.ErrRetry):
			_ = r.Reply([]byte{protocol.ReplyRetry})
		default:
			_ = r.Fail(err)
		}
		return
	}
}
