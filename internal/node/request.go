package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// Request is one request as the owner's handler sees it. Payload is
// msgpack (empty if the caller sent none); it is valid until the handler
// returns.
type Request struct {
	Verb      string
	Key       string
	Partition int
	Payload   []byte
	// Local is true when the caller runs in this process.
	Local bool
	// Wait is what the caller asked a built-in write to wait for; unset,
	// the owner's commit (Ack).
	Wait protocol.WaitSpec
	// If makes a built-in write a compare-and-set: it commits only if
	// the key's version is If.Version (doc.Change.Cond).
	If protocol.IfVersion
	// protocol.Once names the write or verb call for exactly-once (once.go): a
	// retry of one committed before is answered with its first outcome.
	Once protocol.Once
	// protocol.Meta is the request's metadata (the W3C trace context, ...), nil
	// when it carried none. Read-only.
	Meta protocol.Meta
	// ReplyMeta is what the handler sends back with its reply besides the
	// reply: headers, name then value (protocol.CheckMeta's rules). Set by the
	// handler; nil for none. A stream's go with its end (trailers).
	ReplyMeta protocol.Meta
	// Send is set when the caller opened a stream (OpenStream): it sends
	// one item, the msgpack encoding of a value, waiting while the reader
	// is a window behind. It fails once the caller has gone, the
	// handler's context has ended, or the key moved away (protocol.ErrMoved). The
	// handler's return ends the stream; a reply it returns is sent as a
	// last item.
	Send func(item []byte) error
	// begun is the turn's begin, proposed already where the call
	// arrived, in its order (beginEarly); nil: handle proposes it.
	begun chan partition.Completion
}

// Handler answers requests on the owner of their key. It returns the
// reply's msgpack encoding, or an error that reaches the caller with its
// code (an error without one arrives as Unknown). Handlers run
// concurrently, each in its own goroutine; ctx ends when the caller gives
// up or the node closes.
type Handler func(ctx context.Context, req *Request) ([]byte, error)

// Builtin is the built-in handling of a request: ADD, UPDATE and REMOVE
// commit the change (key, payload as the value) and reply nil once the
// owner committed it; GET replies with the value at the key (nothing if
// there is none); every other verb is refused with Unimplemented.
func (n *Node) Builtin(ctx context.Context, req *Request) ([]byte, error) {
	type result struct {
		reply []byte
		err   error
	}
	done := make(chan result, 1)
	if !n.builtinAsync(ctx, req, inline, false, transport.AnswerFunc(func(reply []byte, err error) { done <- result{reply, err} })) {
		return nil, protocol.ErrClosed
	}
	select {
	case r := <-done:
		return r.reply, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// builtinAsync is Builtin without waiting: done is called exactly once,
// from the driver for a write (done's Complete, if it has one, else its
// Answer). It reports false (and does not call done) when the node is
// closed. owned says that req.Payload stays valid until
// done is called, so a write answered at its commit need not copy it
// (one that waits for nothing is answered before): true for a call that
// arrived on a connection, whose bytes the transport keeps until it is
// answered (the engine's events carry the log's copy, not the payload).
func (n *Node) builtinAsync(ctx context.Context, req *Request, mode proposeMode, owned bool, done transport.Answerer) bool {
	if req.Send != nil {
		done.Answer(nil, errs.Errorf(errs.Unimplemented, "fero: verb %q does not stream", req.Verb))
		return true
	}
	var t wire.RecordType
	switch req.Verb {
	case protocol.VerbAdd:
		t = wire.RecordAdd
	case protocol.VerbUpdate:
		t = wire.RecordUpdate
	case protocol.VerbRemove:
		t = wire.RecordRemove
	case protocol.VerbGet:
		// Through the engine, not from the local state: a node the map
		// names owner may have been deposed while it was paused, and even
		// a current owner holds writes a crash could still lose (rule 13).
		return n.readAsync(ctx, req.Key, false, done.Answer)
	case protocol.VerbVersion:
		return n.readAsync(ctx, req.Key, true, done.Answer)
	default:
		done.Answer(nil, errs.Errorf(errs.Unimplemented, "fero: unknown verb %q", req.Verb))
		return true
	}
	value := req.Payload
	switch {
	case t == wire.RecordRemove:
		value = nil
	case !owned, req.Wait.Set && req.Wait.Kind == partition.WaitNone:
		// The engine keeps the value without copying until it commits the
		// write, and the caller's buffer may change before (a local caller
		// whose context ended, a one-way message's reused buffer). A write
		// that waits for nothing is answered once it is queued, before the
		// commit, and an answered call's bytes are the reader's again
		// (TestNoWaitCallsKeepTheirValues).
		value = append([]byte(nil), value...)
	}
	change := doc.Change{Type: t, Key: req.Key, Value: value, Cond: req.If.Set, IfVersion: req.If.Version}
	var err error
	switch w := req.Wait; {
	case w.Set && w.Kind == partition.WaitNone:
		// Queued is all the caller asked for.
		if err = n.writeAsync(ctx, change, partition.WaitNone, 0, nil, mode, &req.Once); err == nil {
			done.Answer(nil, nil)
		}
	default:
		kind, k := partition.WaitAck, 0
		if w.Set {
			kind, k = w.Kind, int(w.K)
		}
		to, ok := done.(Completer)
		if !ok {
			to = CompleteFunc(func(c partition.Completion) { done.Answer(nil, c.Err) })
		}
		err = n.writeAsync(ctx, change, kind, k, to, mode, &req.Once)
	}
	if errors.Is(err, protocol.ErrClosed) {
		return false
	}
	if err != nil {
		done.Answer(nil, err)
	}
	return true
}

// builtinCall is a built-in request that arrived on a connection, on its
// way through the engine: the write's completion comes to it, and it
// answers the call. One record, where two closures cost two allocations
// a request. (Not pooled: it is taken on a connection's reader and let go
// on the driver, and a sync.Pool's Get and Put across processors took
// 3.2% of a server's CPU; allocated instead, the server used 1.93 s per
// million calls against 1.97, in 6 interleaved pairs.)
type builtinCall struct {
	n    *Node
	r    *transport.Request
	span trace.Span
}

// Complete answers the call with how its write completed.
func (b *builtinCall) Complete(c partition.Completion) { b.Answer(nil, c.Err) }

// Answer answers the call, once. It runs with the engine held (on the
// driver, or on a reader running a burst's round), which must not wait
// for a slow caller: anything that could block goes to a goroutine.
func (b *builtinCall) Answer(reply []byte, err error) {
	n, r, span := b.n, b.r, b.span
	if span != nil {
		endSpan(span, err)
	}
	if err != nil {
		n.spawn(func() { _ = r.Fail(err) })
		return
	}
	out := protocol.OKReply // an UPDATE's reply is empty: nothing to allocate
	if len(reply) > 0 {
		out = append([]byte{protocol.ReplyOK}, reply...)
	}
	// Batched: proposed inline, on the connection's reader, the answer
	// leaves in one write with the commit this round sends the caller's
	// copy on the same connection (a client's), not a write ahead of it;
	// from the driver, as any answer.
	if errors.Is(r.TryReplyBatched(out), transport.ErrOutboxFull) {
		n.spawn(func() { _ = r.Reply(out) })
	}
}

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

// Request sends a request to the owner of key's partition and returns the
// handler's reply. With oneway it returns once the request is queued and
// the reply is discarded. A request that meets a node which is not (or no
// longer) the owner is sent again to the owner the caller's map then names,
// until ctx ends; a request whose connection broke after it was sent is
// not, since the handler may have run: the error says so.
func (n *Node) Request(ctx context.Context, verb, key string, payload []byte, oneway bool) ([]byte, error) {
	if n.cfg.Tracer != nil {
		ctx, span := n.startSpan(ctx, "fero.call", trace.SpanKindClient, verb, n.store.PartitionOf(key))
		reply, err := n.timedRequest(ctx, verb, key, payload, oneway, span.SpanContext())
		endSpan(span, err)
		return reply, err
	}
	return n.timedRequest(ctx, verb, key, payload, oneway, trace.SpanContext{})
}

// timedRequest is Request without the span; sc is the caller's span, if
// it is traced.
func (n *Node) timedRequest(ctx context.Context, verb, key string, payload []byte, oneway bool, sc trace.SpanContext) ([]byte, error) {
	if m := n.hot; m != nil {
		began := n.since()
		reply, err := n.request(ctx, verb, key, payload, oneway, sc)
		m.called(err, time.Duration(n.since()-began))
		return reply, err
	}
	return n.request(ctx, verb, key, payload, oneway, sc)
}

// request is Request without the metrics and the span; sc is the
// caller's span, sent with the request.
func (n *Node) request(ctx context.Context, verb, key string, payload []byte, oneway bool, sc trace.SpanContext) ([]byte, error) {
	if n.ctx.Err() != nil {
		return nil, protocol.ErrClosed
	}
	meta := protocol.MetaFrom(ctx)
	if err := protocol.CheckMeta(meta); err != nil {
		return nil, err
	}
	req := &Request{Verb: verb, Key: key, Partition: n.store.PartitionOf(key), Payload: payload, Local: true, Meta: meta}
	if !oneway && verb != protocol.VerbGet && verb != protocol.VerbVersion {
		// A call that fails indefinite is made again with the same
		// sequence, and its verb runs once (rule 16). The sequence is
		// taken as the first attempt leaves, in the order they leave
		// (takeSeq).
		req.Once = n.newOnce()
	}
	tries := protocol.NewAttempts(ctx, req.Once)
	// The encoding, made on the first send: Call and Send copy it into the
	// connection's outbox, so it goes back to the pool on return.
	var wbuf []byte
	var bp *[]byte
	defer func() {
		if bp != nil {
			putRequestBuf(bp, wbuf)
		}
	}()
	// A deadline goes with the request as what is left of it, counted
	// again at each attempt (a one-way request's caller waits for nothing:
	// its deadline stays here).
	deadline, hasDeadline := ctx.Deadline()
	hasDeadline = hasDeadline && !oneway
	backoff := protocol.RetryBackoffMin
	var wr protocol.Request // the request as sent
	var lastErr error       // the answer that led to another attempt
	for {
		owner, ok := n.ownerOf(req.Partition)
		switch {
		case !ok:
			// No map yet, or no server: wait for one.
		case owner == n.id && !n.cfg.Client:
			if oneway {
				if !n.spawn(func() {
					if _, err := n.handle(n.ctx, req); err != nil {
						n.logger.Debug("fero: node: one-way request failed", "verb", verb, "key", key, "err", err)
					}
				}) {
					return nil, protocol.ErrClosed
				}
				return nil, nil
			}
			sink := protocol.ReplyMetaSink(ctx)
			hctx := ctx
			if meta != nil || sink != nil {
				// The handler has the headers in req, as a remote one
				// does; its own calls must not send them on, nor put
				// their reply headers in this caller's sink.
				hctx = protocol.HandlerContext(ctx)
			}
			if req.Once.Writer != "" && req.Once.Seq == 0 && n.cfg.Handler != nil && n.needsTurn(req) {
				// The turn's begin is proposed holding the node's turn
				// to number its writes; the built-in verbs' writes take
				// their sequence as they are proposed.
				if err := n.takeSeq(ctx, &req.Once); err != nil {
					return nil, err
				}
				n.beginEarly(req, deadline)
				n.releaseSeq()
			}
			reply, err := n.handle(hctx, req)
			tries.Once = req.Once
			if errors.Is(err, errTurnElsewhere) || errors.Is(err, errTurnMoved) {
				lastErr = err
				break // nothing committed: to the owner by a fresher map
			}
			if tries.Again(err) {
				lastErr = err
				break // again, as the same call
			}
			if sink != nil && err == nil {
				*sink = append(*sink, req.ReplyMeta...)
			}
			return reply, tries.Answer(err)
		default:
			if bp == nil || hasDeadline {
				if bp == nil {
					bp = requestBufs.Get().(*[]byte)
				}
				wr = protocol.Request{Verb: verb, Key: key, Payload: payload, Trace: sc, Meta: meta, Once: req.Once}
				if hasDeadline {
					if wr.Timeout = time.Until(deadline); wr.Timeout <= 0 {
						return nil, context.DeadlineExceeded
					}
				}
				wbuf = wr.Append((*bp)[:0])
			}
			op, b := protocol.OpRequest, wbuf
			var c *transport.Conn
			if via := n.relay.via(owner, time.Now()); via != "" {
				// Rule 17: the owner has not been heard from directly for
				// a lease; the relay calls it with the request, as is.
				if c = n.pool.lookup(via); c != nil {
					op, b = protocol.OpRelay, appendRelay(make([]byte, 0, len(wbuf)+len(owner)+2), relayRequest, owner, wbuf)
				}
			}
			if c == nil {
				var err error
				if c, err = n.connTo(ctx, owner); err != nil {
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					break // never sent: retry once the map moves on
				}
			}
			if oneway {
				if err := c.Send(ctx, op, b); err != nil {
					return nil, err
				}
				return nil, nil
			}
			var reply []byte
			var err error
			if req.Once.Writer != "" && req.Once.Seq == 0 {
				reply, err = n.callFirst(ctx, c, op, owner, &req.Once, &wr)
				tries.Once = req.Once
				wbuf = wr.Append(wbuf[:0]) // the later protocol.Attempts', with the sequence
			} else {
				reply, err = c.Call(ctx, op, b)
			}
			reply, retry, err := protocol.ReadAnswer(ctx, reply, err)
			if !retry && !tries.Again(err) {
				return reply, tries.Answer(err)
			}
			if !retry {
				lastErr = err
			}
		}
		if err := protocol.Pause(ctx, n.ctx, &backoff); err != nil {
			if lastErr != nil {
				return nil, tries.Answer(lastErr) // the last attempt's answer: it may have run
			}
			return nil, err
		}
	}
}

// callFirst makes the first attempt of req over c (op protocol.OpRequest to the
// owner, or protocol.OpRelay through a relay for owner), with the node's next
// sequence, taken and sent holding the node's turn to number its writes
// (takeSeq): a node's calls leave in sequence order. w is the request,
// given the sequence here. It returns the answer as Call does.
func (n *Node) callFirst(ctx context.Context, c *transport.Conn, op uint32, owner string, once *protocol.Once, w *protocol.Request) ([]byte, error) {
	if err := n.takeSeq(ctx, once); err != nil {
		return nil, err
	}
	w.Once = *once
	b := w.Append(nil)
	if op == protocol.OpRelay {
		b = appendRelay(make([]byte, 0, len(b)+len(owner)+2), relayRequest, owner, b)
	}
	return protocol.SendThenWait(ctx, c, op, b, n.releaseSeq)
}

// ownerOf returns the owner of partition p by the node's current map.
func (n *Node) ownerOf(p int) (string, bool) {
	m, _, _ := n.view.current()
	if m == nil {
		return "", false
	}
	o, ok := m.Owner(p)
	return o.ID, ok
}

// connTo returns the connection to peer id, dialing it if needed.
func (n *Node) connTo(ctx context.Context, id string) (*transport.Conn, error) {
	if c := n.pool.lookup(id); c != nil {
		return c, nil
	}
	addr, ok := n.view.addr(id)
	if !ok || addr == "" {
		return nil, errs.Errorf(errs.Unavailable, "fero: no address for %s", id)
	}
	return n.pool.get(ctx, id, addr)
}

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
	if via := n.relay.via(owner, time.Now()); via != "" {
		if c := n.pool.lookup(via); c != nil {
			// Rule 17: the owner has not been heard from directly for a
			// lease; the relay calls it with the request, as is.
			b = appendRelay(make([]byte, 0, len(b)+len(owner)+2), relayRequest, owner, b)
			op = protocol.OpRelay
			send(c)
			return
		}
	}
	if c := n.pool.lookup(owner); c != nil {
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
		c, err := n.connTo(ctx, owner)
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

// spawn runs f in a goroutine Close waits for, unless the node is closing.
func (n *Node) spawn(f func()) bool {
	n.spawnMu.RLock()
	defer n.spawnMu.RUnlock()
	if n.spawnClosed {
		return false
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
	return true
}

// String names a request for logs.
func (r *Request) String() string { return fmt.Sprintf("%s %q", r.Verb, r.Key) }

// RequestAsync sends a request like Request but does not wait: done is
// called exactly once with the handler's reply (valid only until done
// returns) or an error. It returns an error, and never calls done, if the
// request could not be sent. done may run on a connection's reader
// goroutine or on a goroutine of its own: it must return promptly. The
// caller may reuse payload once it returns.
func (n *Node) RequestAsync(ctx context.Context, verb, key string, payload []byte, done func([]byte, error)) error {
	return n.RequestAsyncTo(ctx, verb, key, payload, transport.AnswerFunc(done))
}

// RequestAsyncTo is RequestAsync with the answer given to done.
func (n *Node) RequestAsyncTo(ctx context.Context, verb, key string, payload []byte, done transport.Answerer) error {
	return n.timedRequestAsync(ctx, verb, key, payload, done, nil)
}

// timedRequestAsync is requestAsync, timed for the metrics when the node
// keeps them; batch, if set, corks the request.
func (n *Node) timedRequestAsync(ctx context.Context, verb, key string, payload []byte, done transport.Answerer, batch *CallBatch) error {
	var began int64
	if n.hot != nil {
		began = n.since()
	}
	err := n.requestAsync(ctx, verb, key, payload, done, began, batch)
	if err != nil && began != 0 {
		n.hot.called(err, time.Duration(n.since()-began)) // done is not called
	}
	return err
}

// A CallBatch sends async requests whose frames wait, corked, in their
// connections' outboxes until Flush: a caller's burst then leaves in one
// write per connection, on the caller's goroutine, instead of waking each
// connection's writer. A frame sent without corking on the same
// connection meanwhile takes the corked ones along. For one goroutine at
// a time.
type CallBatch struct {
	n     *Node
	conns []*transport.Conn // corked since the last Flush
}

// NewCallBatch returns an empty batch of calls.
func (n *Node) NewCallBatch() *CallBatch { return &CallBatch{n: n} }

// RequestAsyncTo is Node.RequestAsyncTo with the request corked until
// Flush. (A request the node runs itself, or sends before it has a
// connection to the owner, leaves at once.)
func (b *CallBatch) RequestAsyncTo(ctx context.Context, verb, key string, payload []byte, done transport.Answerer) error {
	return b.n.timedRequestAsync(ctx, verb, key, payload, done, b)
}

// Flush writes every request the batch corked since the last Flush.
func (b *CallBatch) Flush() {
	for i, c := range b.conns {
		c.Flush()
		b.conns[i] = nil
	}
	b.conns = b.conns[:0]
}

// corked notes that c holds a request of the batch.
func (b *CallBatch) corked(c *transport.Conn) {
	if !slices.Contains(b.conns, c) {
		b.conns = append(b.conns, c)
	}
}

// requestAsync is RequestAsyncTo; a call timed for the metrics (began, on
// the node's clock, not 0) is counted where its answer arrives, rather
// than in a closure around done, which cost an allocation a call.
func (n *Node) requestAsync(ctx context.Context, verb, key string, payload []byte, done transport.Answerer, began int64, batch *CallBatch) error {
	if n.ctx.Err() != nil {
		return protocol.ErrClosed
	}
	owner, ok := n.ownerOf(n.store.PartitionOf(key))
	var c *transport.Conn
	if ok && owner != n.id {
		c = n.pool.lookup(owner)
	}
	if c == nil {
		// No map yet, this node owns the key (the handler runs here), or
		// no connection to the owner yet. The request runs after this
		// returns, when the caller may have reused its buffer: it gets a
		// copy.
		call := &protocol.AsyncCall{Node: (*asyncNode)(n), Began: began, Done: done}
		payload := bytes.Clone(payload)
		if !n.spawn(func() {
			reply, err := n.Request(ctx, verb, key, payload, false)
			call.Node.FinishCall(call, reply, err)
		}) {
			return protocol.ErrClosed
		}
		return nil
	}
	w := protocol.Request{Verb: verb, Key: key, Payload: payload, Meta: protocol.MetaFrom(ctx)}
	a, err := protocol.EncodeAsync(ctx, &w)
	if err != nil {
		return err
	}
	a.Call = protocol.AsyncCall{Ctx: ctx, Verb: verb, Key: key, Done: done, Node: (*asyncNode)(n), Began: began}
	if batch != nil {
		batch.corked(c)
		return a.Send(ctx, c, protocol.CorkedCall...)
	}
	return a.Send(ctx, c)
}

// asyncNode is the node as its async calls see it (protocol.AsyncNode).
type asyncNode Node

// RetryCall makes call again the blocking way on a goroutine of its own,
// once its owner moved.
func (an *asyncNode) RetryCall(call protocol.AsyncCall, payload []byte) {
	n := (*Node)(an)
	if !n.spawn(func() {
		reply, err := n.Request(call.Ctx, call.Verb, call.Key, payload, false)
		an.FinishCall(&call, reply, err)
	}) {
		an.FinishCall(&call, nil, protocol.ErrClosed)
	}
}

// FinishCall counts and times a timed call, and hands its result to done.
func (an *asyncNode) FinishCall(call *protocol.AsyncCall, reply []byte, err error) {
	if call.Began != 0 {
		n := (*Node)(an)
		n.hot.called(err, time.Duration(n.since()-call.Began))
	}
	call.Done.Answer(reply, err)
}

// requestBufs holds the buffers requests are encoded in, up to
// protocol.MaxPooledRequest bytes each.
var requestBufs = sync.Pool{New: func() any { return new([]byte) }}

// putRequestBuf returns bp to the pool, holding b, its latest contents.
func putRequestBuf(bp *[]byte, b []byte) {
	if cap(b) <= protocol.MaxPooledRequest {
		*bp = b
		requestBufs.Put(bp)
	}
}
