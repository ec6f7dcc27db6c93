// A node's async calls (RequestAsync, CallBatch): sent on the owner's
// connection, answered through protocol.AsyncCall.
package node

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
)

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
		c = n.peers.conn(owner)
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
			call.Node.FinishCall(*call, reply, err)
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
		an.FinishCall(call, reply, err)
	}) {
		an.FinishCall(call, nil, protocol.ErrClosed)
	}
}

// FinishCall counts and times a timed call, and hands its result to done.
func (an *asyncNode) FinishCall(call protocol.AsyncCall, reply []byte, err error) {
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
