// Serving requests as the owner (serveRequest, handle) or forwarding
// them to the owner (forward), with the caller's deadline.
package node

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
)

// deadlineCtx is a context with a deadline and no timer: its Done does
// not close at the deadline. The built-in writes a remote caller makes
// run in one, since all they need of the caller's deadline is to pass it
// to the engine, which holds the write to it (rule 1); a timer per write
// (context.WithDeadline) cost three allocations.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// deadlineSlack is how close to its deadline a request whose caller went
// away is left to reach the deadline rather than be cancelled: the
// caller's cancel, sent as its own deadline passed, arrives about when
// the owner's copy of the deadline does.
const deadlineSlack = 50 * time.Millisecond

// handlerDeadline returns the context a handler runs in for a request
// that carried its caller's deadline: it ends at deadline, as a local
// caller's context would, with DeadlineExceeded. It also ends when the
// request's context rc does (the caller cancelled, or its connection
// closed), with Canceled, unless that happens within deadlineSlack of the
// deadline: then the caller gave up because of its deadline, and the
// handler sees the deadline. stop releases it.
func handlerDeadline(rc context.Context, deadline time.Time) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(rc), deadline)
	unhook := context.AfterFunc(rc, func() {
		if time.Until(deadline) > deadlineSlack {
			cancel()
		}
	})
	return ctx, func() { unhook(); cancel() }
}

// ErrTooManyRequests is the answer when a node already runs its
// configured maximum of handlers.
var ErrTooManyRequests = errs.New(errs.ResourceExhausted, "fero: too many requests in flight on the owner")

// handle runs the node's handler (or the built-in one) for a request this
// node owns, bounded by the node's request limit, and turns a panic into
// an Internal error.
func (n *Node) handle(ctx context.Context, req *Request) (reply []byte, err error) {
	select {
	case n.handlers <- struct{}{}:
		defer func() { <-n.handlers }()
	default:
		n.dropBegun(req)
		return nil, ErrTooManyRequests
	}
	defer func() {
		if v := recover(); v != nil {
			n.logger.Error("fero: node: request handler panicked", "verb", req.Verb, "key", req.Key, "panic", v, "stack", string(debug.Stack()))
			reply, err = nil, errs.Errorf(errs.Internal, "fero: handler for %q panicked: %v", req.Verb, v)
		}
	}()
	if n.cfg.Handler == nil {
		return n.Builtin(ctx, req)
	}
	if !n.needsTurn(req) {
		return n.cfg.Handler(ctx, req)
	}
	t, dup, err := n.beginTurn(ctx, req)
	if err != nil || t == nil {
		return dup, err // a retry of a call whose record was committed: its first reply
	}
	returned := false
	defer func() {
		if !returned { // it panicked: the turn goes back with nothing
			_, _ = t.end(ctx, nil, errHandlerPanicked)
		}
	}()
	reply, err = n.cfg.Handler(context.WithValue(ctx, turnCtxKey{}, t), req)
	returned = true
	if reply, err = t.end(ctx, reply, err); err != nil {
		return nil, err
	}
	return reply, nil
}

// errHandlerPanicked ends the turn of a handler that panicked.
var errHandlerPanicked = errs.New(errs.Internal, "fero: the handler panicked")

// serveRequest answers OpRequest: the owner runs the handler in its own
// goroutine; a non-owner forwards the request to the owner once.
func (n *Node) serveRequest(r *transport.Request) {
	var wr protocol.Request
	if err := wr.Decode(r.Payload()); err != nil {
		_ = r.Fail(errs.Errorf(errs.InvalidArgument, "fero: bad request: %v", err))
		return
	}
	if r.Mode() == transport.ModeStream {
		n.serveStream(r, &wr)
		return
	}
	p := n.store.PartitionOf(wr.Key)
	owner, ok := n.ownerOf(p)
	oneway := r.Mode() == transport.ModeSend
	// The caller's deadline, as what was left of it when it sent the
	// request, from now.
	var deadline time.Time
	if wr.Timeout > 0 {
		deadline = time.Now().Add(wr.Timeout)
	}
	// With a tracer, the owner's handling and a forward are spans, children
	// of the caller's span when the request carries its context. (Each
	// case has its own span variable, assigned before any closure takes
	// it, so that it is captured by value: nothing to allocate untraced.)
	traced := n.cfg.Tracer != nil
	switch {
	case ok && owner == n.id && !n.cfg.Client && n.cfg.Handler == nil:
		// The built-in handling needs no goroutine: the driver answers.
		// Queuing the write waits only on the driver (and on spilled
		// writes), never on the caller, so the node's context will do: a
		// request's own context costs an allocation per request.
		ctx := n.ctx
		var span trace.Span
		if traced {
			ctx, span = n.startSpan(remoteParent(ctx, wr.Trace), "fero.handle", trace.SpanKindServer, wr.Verb, p)
		}
		if !deadline.IsZero() {
			// The write commits before the caller's deadline or not at all
			// (rule 1): the engine holds it to the deadline the context
			// names.
			ctx = &deadlineCtx{ctx, deadline}
		}
		req := &Request{Verb: wr.Verb, Key: wr.Key, Partition: p, Payload: wr.Payload, Wait: wr.Wait, If: wr.If, Once: wr.Once, Meta: wr.Meta}
		// The write queues without waking the driver; once the reader
		// has dispatched its burst (this request alone, or all that
		// arrived with it), it proposes the burst itself as one round if
		// the engine is idle, or wakes the driver (Node.afterBurst). An
		// unloaded write thus needs no hand-over to another goroutine
		// (latency), and a burst is one round (throughput).
		call := &builtinCall{n: n, r: r, span: span}
		if !n.builtinAsync(ctx, req, burst, !oneway, call) {
			if span != nil {
				endSpan(span, protocol.ErrClosed)
			}
			_ = r.Fail(protocol.ErrClosed)
		}
	case ok && owner == n.id && !n.cfg.Client:
		payload := wr.Payload
		if oneway {
			payload = append([]byte(nil), payload...) // the read buffer is reused once we return
		}
		req := &Request{Verb: wr.Verb, Key: wr.Key, Partition: p, Payload: payload, Wait: wr.Wait, If: wr.If, Once: wr.Once, Meta: wr.Meta}
		// The turn's begin is proposed here, on the reader, in the order
		// the calls came: the goroutines below may run in any order.
		n.beginEarly(req, deadline)
		parent := wr.Trace
		ok := n.spawn(func() {
			ctx := r.Context()
			if !deadline.IsZero() {
				var stop func()
				ctx, stop = handlerDeadline(ctx, deadline)
				defer stop()
			}
			var span trace.Span
			if traced {
				ctx, span = n.startSpan(remoteParent(ctx, parent), "fero.handle", trace.SpanKindServer, req.Verb, p)
			}
			reply, err := n.handle(ctx, req)
			if span != nil {
				endSpan(span, err)
			}
			if errors.Is(err, errTurnElsewhere) || errors.Is(err, errTurnMoved) {
				// Nothing committed: the caller goes to the owner by then.
				_ = r.Reply([]byte{protocol.ReplyRetry})
				return
			}
			if err != nil {
				if oneway {
					n.logger.Debug("fero: node: one-way request failed", "verb", req.Verb, "key", req.Key, "err", err)
				}
				_ = r.Fail(err)
				return
			}
			_ = r.Reply(protocol.AppendReply(nil, req.ReplyMeta, reply))
		})
		if !ok {
			n.dropBegun(req)
			_ = r.Fail(protocol.ErrClosed)
		}
	case ok && wr.Hops == 0 && owner != n.id:
		if !deadline.IsZero() {
			if wr.Timeout = time.Until(deadline); wr.Timeout <= 0 {
				_ = r.Fail(context.DeadlineExceeded)
				return
			}
		}
		var finish func(error)
		if traced {
			_, span := n.startSpan(remoteParent(n.ctx, wr.Trace), "fero.forward", trace.SpanKindServer, wr.Verb, p)
			if span.IsRecording() {
				span.SetAttributes(attribute.String("fero.owner", owner))
			}
			wr.Trace = span.SpanContext() // the owner's span is the forward's child
			finish = func(err error) { endSpan(span, err) }
		}
		n.forward(r, owner, &wr, finish)
	default:
		_ = r.Reply([]byte{protocol.ReplyRetry})
	}
}

// forward sends a request on to the owner and relays its answer. It never
// blocks the connection's reader: without a connection to the owner it
// dials in the background, and a full outbox answers "retry". finish, if
// set, is called once with how the forward ended (nil: the owner's answer
// was relayed).
func (n *Node) forward(r *transport.Request, owner string, wr *protocol.Request, finish func(error)) {
	if finish == nil {
		finish = func(error) {}
	}
	wr.Hops++
	b := wr.Append(nil)
	op := protocol.OpRequest
	send := func(c *transport.Conn) {
		if r.Mode() == transport.ModeSend {
			err := c.Send(n.ctx, op, b, transport.FailFast)
			if err != nil {
				n.logger.Debug("fero: node: forwarding a one-way request failed", "to", owner, "err", err)
			}
			finish(err)
			return
		}
		err := c.Go(r.Context(), op, b, func(reply []byte, err error) {
			finish(err)
			if err != nil {
				_ = r.Fail(protocol.ForwardFailure(err))
				return
			}
			_ = r.Reply(reply)
		}, transport.FailFast)
		if errors.Is(err, transport.ErrOutboxFull) {
			finish(err)
			_ = r.Reply([]byte{protocol.ReplyRetry})
		} else if err != nil {
			finish(err)
			_ = r.Fail(err)
		}
	}
	if via := n.peers.relay.via(owner, time.Now()); via != "" {
		if c := n.peers.conn(via); c != nil {
			// Rule 17: the owner has not been heard from directly for a
			// lease; the relay calls it with the request, as is.
			b = appendRelay(make([]byte, 0, len(b)+len(owner)+2), relayRequest, owner, b)
			op = protocol.OpRelay
			send(c)
			return
		}
	}
	if c := n.peers.conn(owner); c != nil {
		send(c)
		return
	}
	if r.Mode() == transport.ModeSend {
		// The payload dies with this call; take a copy for the dial.
		b = append([]byte(nil), b...)
	}
	if !n.spawn(func() {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		c, err := n.peers.connTo(ctx, owner)
		if err != nil {
			finish(err)
			_ = r.Reply([]byte{protocol.ReplyRetry})
			return
		}
		send(c)
	}) {
		finish(protocol.ErrClosed)
		_ = r.Fail(protocol.ErrClosed)
	}
}
