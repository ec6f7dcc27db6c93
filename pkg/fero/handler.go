package fero

import (
	"context"
	"iter"
	"strings"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/node"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/wire"
)

// The built-in verbs. A request with one of these (sent with
// [Resource.Call] or [Resource.Send]) commits the change with the request's
// key and payload as the value, unless the resource's handler decides
// otherwise; GET replies with the owner's value at the key.
const (
	VerbAdd    = protocol.VerbAdd
	VerbUpdate = protocol.VerbUpdate
	VerbRemove = protocol.VerbRemove
	VerbGet    = protocol.VerbGet
	// VerbVersion reads as GET does, through the owner, and replies the
	// msgpack array [version, value].
	VerbVersion = protocol.VerbVersion
)

// Handler answers the requests sent to the partitions this node owns. It
// returns the reply (encoded with msgpack; nil replies nothing, a
// msgpack.RawMessage is sent as it is) or an error, which reaches the
// caller as an *Error with the same code and message; an error without a
// code arrives as CodeUnknown. The original's [status, message] replies
// map to errors made with [Errorf]: a service's own codes, such as 405,
// fit as they are. A panic answers CodeInternal and is logged; the node
// carries on.
//
// One key, one turn. A handler runs on the owner of its request's key,
// and runs alone for that key: before it starts, every earlier write to
// the key (its top-level key: "ada" for "ada.langs") has been applied on
// this node, and until it returns no other request for the key runs, no
// verb and no built-in write, from anywhere in the cluster; they wait in
// the key's queue, in arrival order (at most 1,024 of them,
// [WithTurnQueueMax]; beyond it a request fails with
// CodeResourceExhausted, definite). Requests for other keys run in
// parallel, each in its own goroutine. So a read-modify-write is safe as
// it reads:
//
//	func incr(ctx context.Context, req *fero.Request) (any, error) {
//		var n int
//		_, _ = req.Resource().GetInto(req.Key, &n)
//		return n + 1, req.Resource().Update(ctx, req.Key, n+1)
//	}
//
// What a handler writes to its own partition, with the context it was
// given (or one made from it), is part of its turn: the write returns at
// once, and the writes are committed together when the handler returns,
// as one record, all or none, in the ownership the turn began in. A
// handler that returns an error commits none of them. If the key's
// partition moved to another owner while the handler ran (a restart, a
// join), nothing it wrote is committed and the call is made again, by the
// caller's node, at the new owner, where the handler runs again from the
// value there; if the caller's deadline passes first, the caller gets a
// definite CodeUnavailable (nothing was committed).
// The reply reaches the caller only once the record is committed, as the
// writes asked to wait (the strongest of their waits; Ack by default).
// A write the state refuses as it stands (an Add of a key that exists)
// fails at once; one that depends on an earlier write of the same
// handler is checked when the record commits, and then fails the whole
// request. Writes to other partitions, or with a context not made from
// the handler's, are ordinary writes: proposed at once, outside the turn
// (and a write to the handler's own key made that way waits for the turn
// to end, which is at the handler's return or its caller's deadline).
// Reads (Get) see the state as of the turn's start plus nothing staged.
//
// A turn lasts as long as the handler, bounded by its caller's deadline
// (or the write timeout when the caller set none): a handler that never
// returns holds its key, and only its key, until then. Verbs that only
// read may run without a turn ([Concurrent]); GET never takes one.
type Handler func(ctx context.Context, req *Request) (reply any, err error)

// Request is one request as a handler sees it.
type Request struct {
	// Verb names the action (ADD, UPDATE, REMOVE, GET, or the service's
	// own, such as LOGIN).
	Verb string
	// Key is the key the request is about; its partition chose this node.
	Key string
	// Payload is the msgpack encoding of the caller's payload (empty if it
	// sent none). It is valid until the handler returns.
	Payload msgpack.RawMessage

	r     *Resource
	local bool
	meta  protocol.Meta
	wait  protocol.WaitSpec  // what a remote caller's built-in write waits for
	cond  protocol.IfVersion // a remote caller's compare-and-set (UpdateIf, RemoveIf)
	reply protocol.Meta      // reply headers (SetReplyHeader)
	send  SendFunc           // a stream's items; nil for a call (stream.go)
}

// SetReplyHeader adds the header name: value to the reply, which a caller
// reads with [WithReplyHeader] (rate limits left, the version that
// answered, ...). The rules on names and values are [WithHeader]'s; a
// header that breaks them is refused with CodeInvalidArgument and not
// sent. Reply headers go with a reply, not with an error (an error has
// its details, [ErrorDetail]).
func (q *Request) SetReplyHeader(name, value string) error {
	m := append(q.reply[:len(q.reply):len(q.reply)], strings.ToLower(name), value)
	if err := protocol.CheckMeta(m); err != nil {
		return err
	}
	q.reply = m
	return nil
}

// ReplyHeader receives the headers a handler set on its reply
// (Request.SetReplyHeader); see [WithReplyHeader].
type ReplyHeader struct{ pairs protocol.Meta }

// Get returns the value of the reply header name (case-insensitive), ""
// if the handler set none.
func (h *ReplyHeader) Get(name string) string { return h.pairs.Get(strings.ToLower(name)) }

// All returns the reply headers, name (lower case) and value, in the
// order the handler set them.
func (h *ReplyHeader) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for i := 0; i+1 < len(h.pairs); i += 2 {
			if !yield(h.pairs[i], h.pairs[i+1]) {
				return
			}
		}
	}
}

// WithReplyHeader returns a copy of ctx whose calls (Call and CallAsync
// on a Resource or a Remote, and the typed clients over them) put the
// reply headers their handlers set into h:
//
//	var h fero.ReplyHeader
//	err := c.Call(fero.WithReplyHeader(ctx, &h), "BUY", sku, req, &reply)
//	left := h.Get("x-quota-left")
//
// A call retried (WithCallRetry) keeps only the headers of its successful
// attempt, since failed ones send none. A stream opened with the context
// (and a typed client's streaming method) puts its trailers there at its
// clean end.
func WithReplyHeader(ctx context.Context, h *ReplyHeader) context.Context {
	return protocol.WithReplyMeta(ctx, &h.pairs)
}

// WithHeader returns a copy of ctx that sends the request header name:
// value, besides those ctx already sends, with every Call, Send and
// CallAsync made with it, on a Resource or a Remote; the owner's handler
// reads it with [Request.Header]. Names are case-insensitive (sent lower
// case), of ASCII letters, digits, '-', '_' and '.', at most 64 bytes;
// "traceparent", "tracestate" and names starting "fero-" are fero's.
// Values are at most 1 KiB, and a request carries at most 29 headers. A
// call whose headers break these rules fails with CodeInvalidArgument.
// A Remote's writes carry them too; a node's own writes (Update, Add,
// Remove, Set on a Resource) travel as engine messages and carry none.
func WithHeader(ctx context.Context, name, value string) context.Context {
	return protocol.WithMeta(ctx, name, value)
}

// Header returns the value of the request header name (case-insensitive),
// "" if the caller sent none; see [WithHeader].
func (q *Request) Header(name string) string {
	return q.meta.Get(strings.ToLower(name))
}

// Headers returns the request's headers, name (lower case) and value, in
// the order the caller added them.
func (q *Request) Headers() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for i := 0; i+1 < len(q.meta); i += 2 {
			if !yield(q.meta[i], q.meta[i+1]) {
				return
			}
		}
	}
}

// Decode decodes the payload into v, a pointer.
func (q *Request) Decode(v any) error {
	if len(q.Payload) == 0 {
		return errs.Errorf(errs.InvalidArgument, "fero: %s %q carries no payload", q.Verb, q.Key)
	}
	// Bounded (nesting, declared sizes): the payload is a stranger's bytes,
	// and deep nesting once overflowed the decoder's stack.
	if err := wire.DecodeValue(q.Payload, v); err != nil {
		return errs.Errorf(errs.InvalidArgument, "fero: %s %q: bad payload: %w", q.Verb, q.Key, err)
	}
	return nil
}

// Resource returns the resource the request came to, to read it or write
// to it.
func (q *Request) Resource() *Resource { return q.r }

// Local reports whether the caller runs in this process.
func (q *Request) Local() bool { return q.local }

// Next is the built-in handling of the request (the original's next): ADD,
// UPDATE and REMOVE commit the change, with the payload as the value, and
// reply nil once the owner committed it; GET replies with the value at the
// key (nil if there is none); any other verb fails with CodeUnimplemented
// ("unknown verb").
func (q *Request) Next(ctx context.Context) (any, error) {
	if q.send != nil {
		return nil, errs.Errorf(errs.Unimplemented, "fero: verb %q does not stream", q.Verb)
	}
	b, err := q.r.n.Builtin(ctx, &node.Request{Verb: q.Verb, Key: q.Key, Payload: q.Payload, Wait: q.wait, If: q.cond})
	if err != nil || b == nil {
		return nil, err
	}
	return msgpack.RawMessage(b), nil
}

// serve adapts the resource's handler to the node's.
func (r *Resource) serve(ctx context.Context, nr *node.Request) ([]byte, error) {
	q := &Request{Verb: nr.Verb, Key: nr.Key, Payload: nr.Payload, r: r, local: nr.Local, meta: nr.Meta, wait: nr.Wait, cond: nr.If}
	if nr.Send != nil {
		q.send = sendFunc(q, nr.Send)
	}
	reply, err := r.cfg.handler(context.WithValue(ctx, requestKey{}, q), q)
	if err != nil {
		return nil, err
	}
	nr.ReplyMeta = q.reply
	switch v := reply.(type) {
	case nil:
		return nil, nil
	case msgpack.RawMessage:
		return v, nil
	}
	b, err := msgpack.Marshal(reply)
	if err != nil {
		return nil, errs.Errorf(errs.Internal, "fero: encode the reply to %s %q: %v", q.Verb, q.Key, err)
	}
	return b, nil
}
