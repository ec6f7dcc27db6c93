package node

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	// Once names the write or verb call for exactly-once (once.go): a
	// retry of one committed before is answered with its first outcome.
	Once protocol.Once
	// Meta is the request's metadata (the W3C trace context, ...), nil
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
			if via := n.peers.relay.via(owner, time.Now()); via != "" {
				// Rule 17: the owner has not been heard from directly for
				// a lease; the relay calls it with the request, as is.
				if c = n.peers.conn(via); c != nil {
					op, b = protocol.OpRelay, appendRelay(make([]byte, 0, len(wbuf)+len(owner)+2), relayRequest, owner, wbuf)
				}
			}
			if c == nil {
				var err error
				if c, err = n.peers.connTo(ctx, owner); err != nil {
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
				wbuf = wr.Append(wbuf[:0]) // the later attempts', with the sequence
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

// spawn runs f in a goroutine Close waits for, unless the node is closing.
func (n *Node) spawn(f func()) bool {
	n.spawning.mu.RLock()
	defer n.spawning.mu.RUnlock()
	if n.spawning.closed {
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
