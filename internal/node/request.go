package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// OpRequest carries a request (a verb, a key and a payload) to the owner of
// the key's partition, whose handler answers it. A node that is not the
// owner forwards the request once; a request that already took that hop
// and still meets a non-owner is answered with "retry", never forwarded
// again, so a request travels at most two hops and cannot loop while maps
// disagree.
const OpRequest uint32 = 4

// Verbs of the built-in handler.
const (
	VerbAdd    = "ADD"
	VerbUpdate = "UPDATE"
	VerbRemove = "REMOVE"
	VerbGet    = "GET"
	// VerbVersion is GET with the key's version: the reply is the msgpack
	// array [version, value] (value nil when there is none).
	VerbVersion = "VERSION"
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
	Wait WaitSpec
	// If makes a built-in write a compare-and-set: it commits only if
	// the key's version is If.Version (doc.Change.Cond).
	If IfVersion
	// Once names the write or verb call for exactly-once (once.go): a
	// retry of one committed before is answered with its first outcome.
	Once Once
	// Meta is the request's metadata (the W3C trace context, ...), nil
	// when it carried none. Read-only.
	Meta Meta
	// ReplyMeta is what the handler sends back with its reply besides the
	// reply: headers, name then value (CheckMeta's rules). Set by the
	// handler; nil for none. A stream's go with its end (trailers).
	ReplyMeta Meta
	// Send is set when the caller opened a stream (OpenStream): it sends
	// one item, the msgpack encoding of a value, waiting while the reader
	// is a window behind. It fails once the caller has gone, the
	// handler's context has ended, or the key moved away (ErrMoved). The
	// handler's return ends the stream; a reply it returns is sent as a
	// last item.
	Send func(item []byte) error
	// begun is the turn's begin, proposed already where the call
	// arrived, in its order (beginEarly); nil: handle proposes it.
	begun chan partition.Completion
}

// IfVersion is the version a compare-and-set expects, when Set.
type IfVersion struct {
	Set     bool
	Version uint64
}

// WaitSpec is a wait level a request carries to the owner, for the
// built-in writes: a remote caller (fero.Remote, fero put --wait) chooses
// it as a local one does.
type WaitSpec struct {
	Set  bool
	Kind partition.Wait
	K    uint8 // for partition.WaitReplicas
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
		return nil, ErrClosed
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
	case VerbAdd:
		t = wire.RecordAdd
	case VerbUpdate:
		t = wire.RecordUpdate
	case VerbRemove:
		t = wire.RecordRemove
	case VerbGet:
		// Through the engine, not from the local state: a node the map
		// names owner may have been deposed while it was paused, and even
		// a current owner holds writes a crash could still lose (rule 13).
		return n.readAsync(ctx, req.Key, false, done.Answer)
	case VerbVersion:
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
	if errors.Is(err, ErrClosed) {
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
	out := okReply // an UPDATE's reply is empty: nothing to allocate
	if len(reply) > 0 {
		out = append([]byte{replyOK}, reply...)
	}
	// Batched: proposed inline, on the connection's reader, the answer
	// leaves in one write with the commit this round sends the caller's
	// copy on the same connection (a client's), not a write ahead of it;
	// from the driver, as any answer.
	if errors.Is(r.TryReplyBatched(out), transport.ErrOutboxFull) {
		n.spawn(func() { _ = r.Reply(out) })
	}
}

// wireRequest is OpRequest's payload, a msgpack array written and read by
// hand (one per request):
//
//	[verb, key, payload, hops]
//	[verb, key, payload, hops, wait, k]        the caller chose a wait level
//	[verb, key, payload, hops, wait, k, meta]  with metadata
//
// In the seven-element form wait and k are nil when the caller chose no
// wait level. meta is a flat array of strings, name then value
// (docs/operations.md, "The metadata slot"): W3C trace context today
// ("traceparent", "tracestate"), and the slot for deadlines and headers
// a caller sends to a handler.
type wireRequest struct {
	Verb    string
	Key     string
	Payload []byte
	Hops    uint8
	Wait    WaitSpec
	Meta    Meta
	// Trace is the caller's span, carried in the metadata as the W3C
	// "traceparent" (and "tracestate") pairs, written and read without
	// allocating (trace.go); the zero SpanContext carries none.
	Trace trace.SpanContext
	// Timeout is what was left of the caller's deadline when the request
	// left, carried as the pair "fero-timeout" in microseconds (0: no
	// deadline). A duration, not a time, so that the two clocks need not
	// agree: the owner's handler gets a deadline that long from when the
	// request arrived.
	Timeout time.Duration
	// If is a built-in write's expected version, carried as the pair
	// "fero-if-version" (decimal).
	If IfVersion
	// Once names the write or call for exactly-once, carried as the pairs
	// "fero-writer" and "fero-seq" (decimal).
	Once Once
}

// ifVersionName is the metadata name of a compare-and-set's version.
const ifVersionName = "fero-if-version"

// timeoutName is the metadata name of a request's timeout.
const timeoutName = "fero-timeout"

// maxTimeout bounds a request's timeout as read (a year).
const maxTimeout = 365 * 24 * time.Hour

// Meta is a request's metadata: names and values, alternating. Names are
// lower case by convention (W3C and HTTP/2 header names).
type Meta []string

// Bounds on a request's metadata, checked where it is decoded.
const (
	MaxMetaPairs = 32
	MaxMetaName  = 64
	MaxMetaValue = 1024
)

// Get returns the value of the first pair named name, or "".
func (m Meta) Get(name string) string {
	for i := 0; i+1 < len(m); i += 2 {
		if m[i] == name {
			return m[i+1]
		}
	}
	return ""
}

func (w *wireRequest) append(b []byte) []byte {
	if b == nil {
		// Headers take at most 5 bytes each, the hop count 2: one
		// allocation instead of one per field as it grows.
		n := 1 + 5 + len(w.Verb) + 5 + len(w.Key) + 5 + len(w.Payload) + 2
		for _, s := range w.Meta {
			n += 5 + len(s)
		}
		b = make([]byte, 0, n+20)
	}
	metaLen := len(w.Meta)
	if w.Timeout > 0 {
		metaLen += 2
	}
	if w.If.Set {
		metaLen += 2
	}
	if w.Once.Writer != "" {
		metaLen += 4
	}
	var state string
	if w.Trace.IsValid() {
		metaLen += 2
		if state = w.Trace.TraceState().String(); state != "" {
			metaLen += 2
		}
	}
	n := 4
	switch {
	case metaLen > 0:
		n = 7
	case w.Wait.Set:
		n = 6
	}
	b = wire.AppendArrayHeader(b, n)
	b = wire.AppendStr(b, w.Verb)
	b = wire.AppendStr(b, w.Key)
	b = wire.AppendBin(b, w.Payload)
	b = wire.AppendUint(b, uint64(w.Hops))
	if n == 4 {
		return b
	}
	if w.Wait.Set {
		b = wire.AppendUint(b, uint64(w.Wait.Kind))
		b = wire.AppendUint(b, uint64(w.Wait.K))
	} else {
		b = wire.AppendNil(b)
		b = wire.AppendNil(b)
	}
	if n == 7 {
		b = wire.AppendArrayHeader(b, metaLen)
		if w.Timeout > 0 {
			var digits [20]byte
			d := strconv.AppendInt(digits[:0], max(int64(w.Timeout/time.Microsecond), 1), 10)
			b = wire.AppendStr(b, timeoutName)
			b = append(wire.AppendStrHeader(b, len(d)), d...)
		}
		if w.If.Set {
			var digits [20]byte
			d := strconv.AppendUint(digits[:0], w.If.Version, 10)
			b = wire.AppendStr(b, ifVersionName)
			b = append(wire.AppendStrHeader(b, len(d)), d...)
		}
		if w.Once.Writer != "" {
			var digits [20]byte
			d := strconv.AppendUint(digits[:0], w.Once.Seq, 10)
			b = wire.AppendStr(b, writerName)
			b = wire.AppendStr(b, w.Once.Writer)
			b = wire.AppendStr(b, seqName)
			b = append(wire.AppendStrHeader(b, len(d)), d...)
		}
		if w.Trace.IsValid() {
			b = wire.AppendStr(b, traceparentName)
			b = appendTraceparent(wire.AppendStrHeader(b, traceparentLen), w.Trace)
			if state != "" {
				b = wire.AppendStr(b, tracestateName)
				b = wire.AppendStr(b, state)
			}
		}
		for _, s := range w.Meta {
			b = wire.AppendStr(b, s)
		}
	}
	return b
}

// decode reads a request; Payload aliases b.
func (w *wireRequest) decode(b []byte) error {
	c := wire.NewCursor(b)
	n := c.Array("request", -1)
	if n != 4 && n != 6 && n != 7 {
		c.Fail("request: array of %d elements, want 4, 6 or 7", n)
	}
	verb := c.Bytes("verb")
	if w.Verb = builtinVerb(verb); w.Verb == "" { // a built-in verb costs no allocation
		w.Verb = string(verb)
	}
	w.Key = c.Str("key", "")
	w.Payload = c.Bytes("payload")
	w.Hops = c.Uint8("hops")
	w.Wait = WaitSpec{}
	w.Meta = nil
	w.Trace = trace.SpanContext{}
	w.Timeout = 0
	w.If = IfVersion{}
	w.Once = Once{}
	if n >= 6 {
		if c.Nil() { // no wait level: k is nil too
			if !c.Nil() {
				c.Fail("request: a k without a wait")
			}
		} else {
			w.Wait = WaitSpec{Set: true, Kind: partition.Wait(c.Uint8("wait")), K: c.Uint8("k")}
			if w.Wait.Kind > partition.WaitMajority {
				c.Fail("request: unknown wait %d", w.Wait.Kind)
			}
		}
	}
	if n == 7 {
		m := c.Array("meta", -1)
		switch {
		case m%2 != 0:
			c.Fail("request: metadata of %d strings, want name and value pairs", m)
		case m > 2*MaxMetaPairs:
			c.Fail("request: %d metadata pairs, at most %d", m/2, MaxMetaPairs)
		}
		var state []byte
		for i := 0; i+1 < m; i += 2 {
			name, value := c.Bytes("meta"), c.Bytes("meta")
			if len(name) > MaxMetaName || len(value) > MaxMetaValue {
				c.Fail("request: metadata pair of %d and %d bytes, at most %d and %d", len(name), len(value), MaxMetaName, MaxMetaValue)
				break
			}
			// The trace context is read into Trace, without allocating;
			// a traceparent that does not parse is ignored, as W3C asks.
			switch string(name) {
			case traceparentName:
				w.Trace, _ = parseTraceparent(value)
			case tracestateName:
				state = value
			case timeoutName:
				us, ok := parseMicros(value)
				if !ok {
					c.Fail("request: %s %q is not a count of microseconds", timeoutName, value)
				}
				w.Timeout = min(time.Duration(us)*time.Microsecond, maxTimeout)
			case ifVersionName:
				v, err := strconv.ParseUint(string(value), 10, 64)
				if err != nil {
					c.Fail("request: %s %q is not a version", ifVersionName, value)
				}
				w.If = IfVersion{Set: true, Version: v}
			case writerName:
				if len(value) == 0 || len(value) > doc.MaxBatchWriter {
					c.Fail("request: %s of %d bytes, want 1 to %d", writerName, len(value), doc.MaxBatchWriter)
				}
				w.Once.Writer = string(value)
			case seqName:
				v, err := strconv.ParseUint(string(value), 10, 64)
				if err != nil || v == 0 {
					c.Fail("request: %s %q is not a sequence number", seqName, value)
				}
				w.Once.Seq = v
			default:
				w.Meta = append(w.Meta, string(name), string(value))
			}
		}
		if (w.Once.Writer == "") != (w.Once.Seq == 0) {
			c.Fail("request: %s and %s go together", writerName, seqName)
		}
		if len(state) > 0 && w.Trace.IsValid() {
			if ts, err := trace.ParseTraceState(string(state)); err == nil {
				w.Trace = w.Trace.WithTraceState(ts)
			}
		}
	}
	return c.End()
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

// parseMicros reads a positive decimal count of microseconds of at most
// 15 digits (31 years), without allocating.
func parseMicros(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, n > 0
}

// builtinVerb returns the built-in verb spelled by b, or "".
func builtinVerb(b []byte) string {
	for _, v := range [...]string{VerbUpdate, VerbAdd, VerbRemove, VerbGet, VerbVersion} {
		if string(b) == v {
			return v
		}
	}
	return ""
}

// A reply to OpRequest starts with a status byte.
const (
	replyOK byte = 0 // the handler's reply follows
	// replyOKMeta: the handler's reply headers follow, as an array of
	// strings (name, value, ...), then its reply.
	replyOKMeta byte = 2
	replyRetry  byte = 1 // the receiver does not own the key's partition
)

// okReply is an empty reply: shared and read-only (a reply's bytes are
// copied into the connection's outbox).
var okReply = []byte{replyOK}

// retryBackoff bounds the pause before a request that met a non-owner is
// sent again, while the maps converge.
const (
	retryBackoffMin = 5 * time.Millisecond
	retryBackoffMax = 200 * time.Millisecond
)

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
		return nil, ErrClosed
	}
	meta := MetaFrom(ctx)
	if err := CheckMeta(meta); err != nil {
		return nil, err
	}
	req := &Request{Verb: verb, Key: key, Partition: n.store.PartitionOf(key), Payload: payload, Local: true, Meta: meta}
	if !oneway && verb != VerbGet && verb != VerbVersion {
		// A call that fails indefinite is made again with the same
		// sequence, and its verb runs once (rule 16). The sequence is
		// taken as the first attempt leaves, in the order they leave
		// (takeSeq).
		req.Once = n.newOnce()
	}
	tries := newAttempts(ctx, req.Once)
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
	backoff := retryBackoffMin
	var wr wireRequest // the request as sent
	var lastErr error  // the answer that led to another attempt
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
					return nil, ErrClosed
				}
				return nil, nil
			}
			sink, _ := ctx.Value(replyMetaKey{}).(*Meta)
			hctx := ctx
			if meta != nil || sink != nil {
				// The handler has the headers in req, as a remote one
				// does; its own calls must not send them on, nor put
				// their reply headers in this caller's sink.
				hctx = handlerCtx{ctx}
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
			tries.once = req.Once
			if errors.Is(err, errTurnElsewhere) || errors.Is(err, errTurnMoved) {
				lastErr = err
				break // nothing committed: to the owner by a fresher map
			}
			if tries.again(err) {
				lastErr = err
				break // again, as the same call
			}
			if sink != nil && err == nil {
				*sink = append(*sink, req.ReplyMeta...)
			}
			return reply, tries.answer(err)
		default:
			if bp == nil || hasDeadline {
				if bp == nil {
					bp = requestBufs.Get().(*[]byte)
				}
				wr = wireRequest{Verb: verb, Key: key, Payload: payload, Trace: sc, Meta: meta, Once: req.Once}
				if hasDeadline {
					if wr.Timeout = time.Until(deadline); wr.Timeout <= 0 {
						return nil, context.DeadlineExceeded
					}
				}
				wbuf = wr.append((*bp)[:0])
			}
			op, b := OpRequest, wbuf
			var c *transport.Conn
			if via := n.relay.via(owner, time.Now()); via != "" {
				// Rule 17: the owner has not been heard from directly for
				// a lease; the relay calls it with the request, as is.
				if c = n.pool.lookup(via); c != nil {
					op, b = OpRelay, appendRelay(make([]byte, 0, len(wbuf)+len(owner)+2), relayRequest, owner, wbuf)
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
				tries.once = req.Once
				wbuf = wr.append(wbuf[:0]) // the later attempts', with the sequence
			} else {
				reply, err = c.Call(ctx, op, b)
			}
			reply, retry, err := readAnswer(ctx, reply, err)
			if !retry && !tries.again(err) {
				return reply, tries.answer(err)
			}
			if !retry {
				lastErr = err
			}
		}
		if err := pause(ctx, n.ctx, &backoff); err != nil {
			if lastErr != nil {
				return nil, tries.answer(lastErr) // the last attempt's answer: it may have run
			}
			return nil, err
		}
	}
}

// callFirst makes the first attempt of req over c (op OpRequest to the
// owner, or OpRelay through a relay for owner), with the node's next
// sequence, taken and sent holding the node's turn to number its writes
// (takeSeq): a node's calls leave in sequence order. w is the request,
// given the sequence here. It returns the answer as Call does.
func (n *Node) callFirst(ctx context.Context, c *transport.Conn, op uint32, owner string, once *Once, w *wireRequest) ([]byte, error) {
	if err := n.takeSeq(ctx, once); err != nil {
		return nil, err
	}
	w.Once = *once
	b := w.append(nil)
	if op == OpRelay {
		b = appendRelay(make([]byte, 0, len(b)+len(owner)+2), relayRequest, owner, b)
	}
	return sendThenWait(ctx, c, op, b, n.releaseSeq)
}

// sendThenWait queues a call of op with payload b on c, calls sent once
// it is queued (the order it leaves in is fixed then; sent is called
// whatever happens), and waits for the answer, as Call does.
func sendThenWait(ctx context.Context, c transport.Caller, op uint32, b []byte, sent func()) ([]byte, error) {
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
	var wr wireRequest
	if err := wr.decode(r.Payload()); err != nil {
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
				endSpan(span, ErrClosed)
			}
			_ = r.Fail(ErrClosed)
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
				_ = r.Reply([]byte{replyRetry})
				return
			}
			if err != nil {
				if oneway {
					n.logger.Debug("fero: node: one-way request failed", "verb", req.Verb, "key", req.Key, "err", err)
				}
				_ = r.Fail(err)
				return
			}
			_ = r.Reply(appendReply(nil, req.ReplyMeta, reply))
		})
		if !ok {
			n.dropBegun(req)
			_ = r.Fail(ErrClosed)
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
		_ = r.Reply([]byte{replyRetry})
	}
}

// forward sends a request on to the owner and relays its answer. It never
// blocks the connection's reader: without a connection to the owner it
// dials in the background, and a full outbox answers "retry". finish, if
// set, is called once with how the forward ended (nil: the owner's answer
// was relayed).
func (n *Node) forward(r *transport.Request, owner string, wr *wireRequest, finish func(error)) {
	if finish == nil {
		finish = func(error) {}
	}
	wr.Hops++
	b := wr.append(nil)
	op := OpRequest
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
				_ = r.Fail(forwardFailure(err))
				return
			}
			_ = r.Reply(reply)
		}, transport.FailFast)
		if errors.Is(err, transport.ErrOutboxFull) {
			finish(err)
			_ = r.Reply([]byte{replyRetry})
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
			op = OpRelay
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
			_ = r.Reply([]byte{replyRetry})
			return
		}
		send(c)
	}) {
		finish(ErrClosed)
		_ = r.Fail(ErrClosed)
	}
}

// errForwardLost answers a request forwarded (or relayed) to its owner
// whose connection to the owner broke with it in flight: the owner may
// have run it, so it is indefinite, and its caller makes it again with
// the same sequence (rule 16). It is a sentinel so that the caller
// recognises it after it has crossed the wire; the connection's own
// error would reach the caller as a plain Aborted, the handler's answer
// to all it can tell.
var errForwardLost = errs.New(errs.Aborted, "the connection to the owner broke with the request in flight")

// forwardFailure is what the caller of a forwarded request is told when
// the forward failed with err.
func forwardFailure(err error) error {
	if errors.Is(err, transport.ErrConnLost) || errors.Is(err, errForwardLost) {
		return errForwardLost
	}
	return err
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
	w := wireRequest{Verb: verb, Key: key, Payload: payload, Wait: o.Wait, If: o.If, Once: o.Once}
	tries := newAttempts(ctx, o.Once)
	// The caller's span, if any, is the parent of what the nodes trace.
	w.Trace = trace.SpanContextFromContext(ctx)
	if w.Meta = MetaFrom(ctx); len(w.Meta) > 0 {
		if err := CheckMeta(w.Meta); err != nil {
			return nil, err
		}
	}
	deadline, hasDeadline := ctx.Deadline()
	var b []byte
	backoff := retryBackoffMin
	for {
		if b == nil || hasDeadline {
			if hasDeadline {
				if w.Timeout = time.Until(deadline); w.Timeout <= 0 {
					return nil, context.DeadlineExceeded
				}
			}
			b = w.append(b[:0])
		}
		var reply []byte
		var retry bool
		var err error
		if w.Once.Writer == "" && o.Writer != nil {
			reply, retry, err = o.Writer.callFirst(ctx, c, &w)
			b, tries.once = w.append(b[:0]), w.Once
		} else {
			reply, retry, err = callOnce(ctx, c, b)
		}
		if !retry && !tries.again(err) {
			return reply, tries.answer(err)
		}
		if perr := pause(ctx, context.Background(), &backoff); perr != nil {
			if tries.last != nil {
				return nil, tries.answer(tries.last) // the last attempt's answer: it may have applied
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
	return &Writer{id: newWriterID(name), turn: make(chan struct{}, 1)}
}

// callFirst sends w's first attempt over c with the writer's next
// sequence, taken and sent holding the writer's turn, and waits for its
// answer: what callOnce returns. w.Once is set to the sequence taken.
func (wr *Writer) callFirst(ctx context.Context, c transport.Caller, w *wireRequest) (reply []byte, retry bool, err error) {
	select {
	case wr.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	w.Once = wr.Next()
	reply, err = sendThenWait(ctx, c, OpRequest, w.append(nil), func() { <-wr.turn })
	return readAnswer(ctx, reply, err)
}

// Next names a new write or call; a nil Writer names none.
func (w *Writer) Next() Once {
	if w == nil {
		return Once{}
	}
	return Once{Writer: w.id, Seq: w.seq.Add(1)}
}

// CallNodeAsync is CallNodeWait without waiting: done is called exactly
// once, on a connection's goroutine, with the reply (valid only until done
// returns) or the error. It returns an error, and never calls done, if the
// request could not be queued. A "retry" answer is rare (the owner moved):
// the request is made again the blocking way on a goroutine of its own, so
// a reader never waits; that goroutine ends with the request, when ctx
// ends, or when c is closed (its calls then fail at once). The caller may
// reuse payload once it returns: a retry sends the request as encoded.
func CallNodeAsync(ctx context.Context, c transport.Caller, verb, key string, payload []byte, wait WaitSpec, done func([]byte, error)) error {
	return CallNodeAsyncTo(ctx, c, verb, key, payload, wait, transport.AnswerFunc(done))
}

// CallNodeAsyncTo is CallNodeAsync with the answer given to done.
func CallNodeAsyncTo(ctx context.Context, c transport.Caller, verb, key string, payload []byte, wait WaitSpec, done transport.Answerer) error {
	w := wireRequest{Verb: verb, Key: key, Payload: payload, Wait: wait, Meta: MetaFrom(ctx)}
	w.Trace = trace.SpanContextFromContext(ctx)
	a, err := encodeAsync(ctx, &w)
	if err != nil {
		return err
	}
	a.call = asyncCall{ctx: ctx, c: c, verb: verb, key: key, wait: wait, done: done}
	return a.send(ctx, c)
}

// sentPayload returns a copy of the payload of the request encoded in b,
// for a retry: the caller's buffer may hold another request by then. (A
// request sent with Go keeps its encoding until it is answered, which
// costs no copy on the way out, and a retry is rare.)
func sentPayload(b []byte) ([]byte, error) {
	var w wireRequest
	if err := w.decode(b); err != nil {
		return nil, errs.Errorf(errs.Internal, "fero: re-read a request to retry it: %w", err)
	}
	return bytes.Clone(w.Payload), nil
}

// encodeAsync checks w's headers, sets what is left of ctx's deadline,
// and encodes w into a pooled record, for a request sent with GoTo. The
// record holds two references, one for the sender and one for the
// answer (which re-reads the request to retry it); each drops its own
// with release, and the last one gives the record back. GoTo copies the
// request into the connection's outbox before it returns, but the answer
// can come before that (the caller's context ended meanwhile), so neither
// may give it back alone.
func encodeAsync(ctx context.Context, w *wireRequest) (*asyncRequest, error) {
	if err := CheckMeta(w.Meta); err != nil {
		return nil, err
	}
	if deadline, ok := ctx.Deadline(); ok {
		if w.Timeout = time.Until(deadline); w.Timeout <= 0 {
			return nil, context.DeadlineExceeded
		}
	}
	a := asyncRequests.Get().(*asyncRequest)
	if a.b == nil {
		// A new one, of which a pipelining caller may make many: up to
		// its window of requests are in flight at once, each holding
		// its encoding, and the pool empties at every collection. One
		// allocation, rather than one for each doubling.
		a.b = make([]byte, 0, 256)
	}
	a.b = w.append(a.b[:0])
	a.refs.Store(2)
	return a, nil
}

// corkedCall is the option of a request sent in a CallBatch, as a slice
// made once: a variadic argument through an interface escapes.
var corkedCall = []transport.CallOption{transport.Corked}

// asyncRequest is a request sent with GoTo: its encoding, and what its
// answer needs. It takes the answer itself, so that a call allocates no
// closure.
type asyncRequest struct {
	b    []byte
	refs atomic.Int32
	call asyncCall
}

// asyncCall is what an async request's answer needs.
type asyncCall struct {
	ctx       context.Context
	verb, key string
	done      transport.Answerer
	n         *Node            // RequestAsync's node; nil from CallNodeAsync
	began     int64            // RequestAsync: when a timed call began (0: untimed)
	c         transport.Caller // CallNodeAsync's, and its wait level
	wait      WaitSpec
}

var asyncRequests = sync.Pool{New: func() any { return new(asyncRequest) }}

// send sends a on c; on error the answer will not come, and done is not
// called.
func (a *asyncRequest) send(ctx context.Context, c transport.Caller, opts ...transport.CallOption) error {
	err := c.GoTo(ctx, OpRequest, a.b, a, opts...)
	if err != nil {
		a.release() // the answer's: it will not come
	}
	a.release()
	return err
}

// release drops one reference; the last gives the record back.
func (a *asyncRequest) release() {
	if a.refs.Add(-1) == 0 {
		a.call = asyncCall{}
		if cap(a.b) <= maxPooledRequest {
			asyncRequests.Put(a)
		}
	}
}

// Answer takes the request's answer, once. The record may go back to the
// pool as soon as this drops its reference, so it reads what it needs
// first.
func (a *asyncRequest) Answer(reply []byte, err error) {
	call := a.call
	reply, retry, err := readAnswer(call.ctx, reply, err)
	if !retry {
		a.release()
		call.finish(reply, err)
		return
	}
	// The owner moved: retry the blocking way, off the reader, with the
	// payload as sent (the caller may have reused its buffer).
	payload, err := sentPayload(a.b)
	a.release()
	if err != nil {
		call.finish(nil, err)
		return
	}
	call.retry(payload)
}

// retry makes the call again the blocking way on a goroutine of its own.
// (A function of its own: the goroutine's closure would move the caller's
// copy of call to the heap on every answer, not just on a retry.)
func (call asyncCall) retry(payload []byte) {
	if call.n == nil {
		go func() { call.done.Answer(CallNodeWait(call.ctx, call.c, call.verb, call.key, payload, call.wait)) }()
		return
	}
	if !call.n.spawn(func() { call.finish(call.n.Request(call.ctx, call.verb, call.key, payload, false)) }) {
		call.finish(nil, ErrClosed)
	}
}

// finish counts and times a timed call, and hands its result to done.
func (call *asyncCall) finish(reply []byte, err error) {
	if call.began != 0 {
		call.n.hot.called(err, time.Duration(call.n.since()-call.began))
	}
	call.done.Answer(reply, err)
}

// readAnswer reads the status byte of an OpRequest's answer (or takes
// the call's error): the reply, with the reply headers given to ctx's
// sink; or retry, when the receiver said the owner is elsewhere.
func readAnswer(ctx context.Context, reply []byte, err error) (out []byte, retry bool, _ error) {
	switch {
	case err != nil:
		return nil, false, err
	case len(reply) == 0:
		return nil, false, errs.New(errs.Internal, "fero: empty reply")
	case reply[0] == replyOK:
		return reply[1:], false, nil
	case reply[0] == replyOKMeta:
		if reply, err = takeReplyMeta(ctx, reply[1:]); err != nil {
			return nil, false, err
		}
		return reply, false, nil
	}
	return nil, true, nil
}

// callOnce sends an encoded request and reads the status byte of its
// answer: retry is true when the receiver said the owner is elsewhere.
func callOnce(ctx context.Context, c transport.Caller, b []byte) (reply []byte, retry bool, err error) {
	reply, err = c.Call(ctx, OpRequest, b)
	return readAnswer(ctx, reply, err)
}

// appendReply appends an OpRequest answer: the status, the reply headers
// if there are any, and the reply.
func appendReply(b []byte, meta Meta, reply []byte) []byte {
	if len(meta) == 0 {
		return append(append(b, replyOK), reply...)
	}
	b = append(b, replyOKMeta)
	b = wire.AppendArrayHeader(b, len(meta))
	for _, s := range meta {
		b = wire.AppendStr(b, s)
	}
	return append(b, reply...)
}

// takeReplyMeta reads the reply headers at the start of b, gives them to
// the sink ctx carries (WithReplyMeta), if any, and returns the reply
// after them.
func takeReplyMeta(ctx context.Context, b []byte) ([]byte, error) {
	c := wire.NewCursor(b)
	n := c.Array("reply headers", -1)
	if n%2 != 0 || n > 2*MaxMetaPairs {
		c.Fail("reply headers: %d strings, want name and value pairs, at most %d", n, MaxMetaPairs)
	}
	sink, _ := ctx.Value(replyMetaKey{}).(*Meta)
	for i := 0; i < n; i++ {
		s := c.Bytes("reply header")
		if sink != nil {
			*sink = append(*sink, string(s))
		}
	}
	if err := c.Err(); err != nil {
		return nil, errs.Errorf(errs.Internal, "fero: unreadable reply headers: %v", err)
	}
	return b[len(b)-c.Left():], nil
}

// pause waits out *backoff (then doubles it, up to retryBackoffMax) unless
// ctx ends (its error) or the node closes (ErrClosed).
func pause(ctx, node context.Context, backoff *time.Duration) error {
	t := time.NewTimer(*backoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-node.Done():
		return ErrClosed
	case <-t.C:
	}
	*backoff = min(2**backoff, retryBackoffMax)
	return nil
}

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
		return ErrClosed
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
		call := &asyncCall{n: n, began: began, done: done}
		payload := bytes.Clone(payload)
		if !n.spawn(func() { call.finish(n.Request(ctx, verb, key, payload, false)) }) {
			return ErrClosed
		}
		return nil
	}
	w := wireRequest{Verb: verb, Key: key, Payload: payload, Meta: MetaFrom(ctx)}
	a, err := encodeAsync(ctx, &w)
	if err != nil {
		return err
	}
	a.call = asyncCall{ctx: ctx, verb: verb, key: key, done: done, n: n, began: began}
	if batch != nil {
		batch.corked(c)
		return a.send(ctx, c, corkedCall...)
	}
	return a.send(ctx, c)
}

// requestBufs holds the buffers requests are encoded in, up to
// maxPooledRequest bytes each.
var requestBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledRequest = 4 << 10

// putRequestBuf returns bp to the pool, holding b, its latest contents.
func putRequestBuf(bp *[]byte, b []byte) {
	if cap(b) <= maxPooledRequest {
		*bp = b
		requestBufs.Put(bp)
	}
}
