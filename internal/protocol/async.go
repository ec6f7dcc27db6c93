package protocol

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/transport"
)

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
	w := Request{Verb: verb, Key: key, Payload: payload, Wait: wait, Meta: MetaFrom(ctx)}
	w.Trace = trace.SpanContextFromContext(ctx)
	a, err := EncodeAsync(ctx, &w)
	if err != nil {
		return err
	}
	a.Call = AsyncCall{Ctx: ctx, C: c, Verb: verb, Key: key, Wait: wait, Done: done}
	return a.Send(ctx, c)
}

// sentPayload returns a copy of the payload of the request encoded in b,
// for a retry: the caller's buffer may hold another request by then. (A
// request sent with Go keeps its encoding until it is answered, which
// costs no copy on the way out, and a retry is rare.)
func sentPayload(b []byte) ([]byte, error) {
	var w Request
	if err := w.Decode(b); err != nil {
		return nil, errs.Errorf(errs.Internal, "fero: re-read a request to retry it: %w", err)
	}
	return bytes.Clone(w.Payload), nil
}

// EncodeAsync checks w's headers, sets what is left of ctx's deadline,
// and encodes w into a pooled record, for a request sent with GoTo. The
// record holds two references, one for the sender and one for the
// answer (which re-reads the request to retry it); each drops its own
// with release, and the last one gives the record back. GoTo copies the
// request into the connection's outbox before it returns, but the answer
// can come before that (the caller's context ended meanwhile), so neither
// may give it back alone.
func EncodeAsync(ctx context.Context, w *Request) (*AsyncRequest, error) {
	if err := CheckMeta(w.Meta); err != nil {
		return nil, err
	}
	if deadline, ok := ctx.Deadline(); ok {
		if w.Timeout = time.Until(deadline); w.Timeout <= 0 {
			return nil, context.DeadlineExceeded
		}
	}
	a := asyncRequests.Get().(*AsyncRequest)
	if a.b == nil {
		// A new one, of which a pipelining caller may make many: up to
		// its window of requests are in flight at once, each holding
		// its encoding, and the pool empties at every collection. One
		// allocation, rather than one for each doubling.
		a.b = make([]byte, 0, 256)
	}
	a.b = w.Append(a.b[:0])
	a.refs.Store(2)
	return a, nil
}

// CorkedCall is the option of a request sent in a CallBatch, as a slice
// made once: a variadic argument through an interface escapes.
var CorkedCall = []transport.CallOption{transport.Corked}

// AsyncRequest is a request sent with GoTo: its encoding, and what its
// answer needs. It takes the answer itself, so that a call allocates no
// closure.
type AsyncRequest struct {
	b    []byte
	refs atomic.Int32
	Call AsyncCall
}

// AsyncCall is what an async request's answer needs.
type AsyncCall struct {
	Ctx       context.Context
	Verb, Key string
	Done      transport.Answerer
	Node      AsyncNode        // the node a node's call was made through; nil from CallNodeAsync
	Began     int64            // a node's call: when a timed call began, on the node's clock (0: untimed)
	C         transport.Caller // CallNodeAsync's, and its wait level
	Wait      WaitSpec
}

// AsyncNode is the node an async call was made through (a node's own
// calls): it makes the call again when the owner moved, and hands the
// answer to the call's Done, counting it for the node's metrics.
type AsyncNode interface {
	RetryCall(call AsyncCall, payload []byte)
	FinishCall(call AsyncCall, reply []byte, err error)
}

var asyncRequests = sync.Pool{New: func() any { return new(AsyncRequest) }}

// Send sends a on c; on error the answer will not come, and done is not
// called.
func (a *AsyncRequest) Send(ctx context.Context, c transport.Caller, opts ...transport.CallOption) error {
	err := c.GoTo(ctx, OpRequest, a.b, a, opts...)
	if err != nil {
		a.release() // the answer's: it will not come
	}
	a.release()
	return err
}

// release drops one reference; the last gives the record back.
func (a *AsyncRequest) release() {
	if a.refs.Add(-1) == 0 {
		a.Call = AsyncCall{}
		if cap(a.b) <= MaxPooledRequest {
			asyncRequests.Put(a)
		}
	}
}

// Answer takes the request's answer, once. The record may go back to the
// pool as soon as this drops its reference, so it reads what it needs
// first.
func (a *AsyncRequest) Answer(reply []byte, err error) {
	call := a.Call
	reply, retry, err := ReadAnswer(call.Ctx, reply, err)
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
func (call AsyncCall) retry(payload []byte) {
	if call.Node != nil {
		call.Node.RetryCall(call, payload)
		return
	}
	go func() { call.Done.Answer(CallNodeWait(call.Ctx, call.C, call.Verb, call.Key, payload, call.Wait)) }()
}

// finish hands the call's result to its node, or to done.
func (call *AsyncCall) finish(reply []byte, err error) {
	if call.Node != nil {
		call.Node.FinishCall(*call, reply, err)
		return
	}
	call.Done.Answer(reply, err)
}

// MaxPooledRequest bounds the requests whose buffers go back to a pool
// for the next request.
const MaxPooledRequest = 4 << 10
