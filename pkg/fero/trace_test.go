package fero

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// tracedNode is a node's tracer provider and the spans it recorded.
type tracedNode struct {
	exp *tracetest.InMemoryExporter
	tp  *sdktrace.TracerProvider
}

func newTraced(t *testing.T) *tracedNode {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &tracedNode{exp: exp, tp: tp}
}

// span returns the one span named name this node recorded in trace tid,
// waiting for it: a node ends its span as it answers, which may be after
// the caller has its answer.
func (tn *tracedNode) span(t *testing.T, tid trace.TraceID, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	require.Eventually(t, func() bool {
		found = found[:0]
		for _, s := range tn.exp.GetSpans() {
			if s.Name == name && s.SpanContext.TraceID() == tid {
				found = append(found, s)
			}
		}
		return len(found) > 0
	}, 10*time.Second, 5*time.Millisecond, "no span %q in trace %s; the node has %d spans", name, tid, len(tn.exp.GetSpans()))
	require.Len(t, found, 1, "spans %q in trace %s", name, tid)
	return found[0]
}

// attr returns the string value of span attribute k.
func attr(s tracetest.SpanStub, k string) string {
	for _, kv := range s.Attributes {
		if kv.Key == attribute.Key(k) {
			return kv.Value.String()
		}
	}
	return ""
}

// TestTracingAcrossThreeNodes (issue 19): with WithTracerProvider on
// every node and on a Remote, one request's spans on the caller, the node
// that forwards it and the owner form one trace, each the parent of the
// next, with the W3C trace context carried in the request's metadata;
// the owner's handler runs in its span. A server's own calls and writes
// are spans too. Each node has its own SDK provider and in-memory
// exporter, so the test sees which node recorded which span.
func TestTracingAcrossThreeNodes(t *testing.T) {
	c := newTestCluster(t, 3)
	ids := []string{"a", "b", "c"}
	traced := map[string]*tracedNode{}
	var handlerSpans sync.Map // key -> the span context the handler's ctx carried
	handler := func(ctx context.Context, req *Request) (any, error) {
		if req.Verb == "ECHO" {
			handlerSpans.Store(req.Key, trace.SpanContextFromContext(ctx))
			return req.Key, nil
		}
		return req.Next(ctx)
	}
	rs := map[string]*Resource{}
	for _, id := range ids {
		traced[id] = newTraced(t)
		rs[id] = c.open(id, WithTracerProvider(traced[id].tp), WithHandler(handler))
	}
	c.settle(3)
	ctx := ctxT(t)

	// A key c owns, and a Remote that reaches it through b.
	key := keyOwnedBy(rs["a"], "c", "k")
	client := newTraced(t)
	rc, err := Dial(ctx, rs["b"].Addr(), WithTracerProvider(client.tp))
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })

	// A call: the Remote's span, b's forward, c's handling.
	var reply string
	require.NoError(t, retry(ctx, func() error { return rc.Call(ctx, "ECHO", key, nil, &reply) }))
	require.Equal(t, key, reply)
	calls := client.exp.GetSpans()
	require.NotEmpty(t, calls)
	root := calls[len(calls)-1]
	require.Equal(t, "fero.call ECHO", root.Name)
	require.Equal(t, trace.SpanKindClient, root.SpanKind)
	require.False(t, root.Parent.IsValid(), "the Remote's span is the trace's root")
	tid := root.SpanContext.TraceID()
	fwd := traced["b"].span(t, tid, "fero.forward ECHO")
	require.Equal(t, root.SpanContext.SpanID(), fwd.Parent.SpanID(), "b's forward is the Remote's span's child")
	require.True(t, fwd.Parent.IsRemote())
	require.Equal(t, "c", attr(fwd, "fero.owner"))
	own := traced["c"].span(t, tid, "fero.handle ECHO")
	require.Equal(t, fwd.SpanContext.SpanID(), own.Parent.SpanID(), "c's handling is b's forward's child")
	require.Equal(t, trace.SpanKindServer, own.SpanKind)
	require.Equal(t, "c", attr(own, "fero.node"))
	hs, ok := handlerSpans.Load(key)
	require.True(t, ok)
	require.Equal(t, own.SpanContext.SpanID(), hs.(trace.SpanContext).SpanID(), "the handler's context carries the owner's span")
	require.Empty(t, traced["a"].exp.GetSpans(), "a took no part")

	// A built-in write from the Remote takes the same three hops.
	client.exp.Reset()
	require.NoError(t, retry(ctx, func() error { return rc.Update(ctx, key, 1, Majority) }))
	calls = client.exp.GetSpans()
	root = calls[len(calls)-1]
	require.Equal(t, "fero.write UPDATE", root.Name)
	tid = root.SpanContext.TraceID()
	fwd = traced["b"].span(t, tid, "fero.forward UPDATE")
	require.Equal(t, root.SpanContext.SpanID(), fwd.Parent.SpanID())
	own = traced["c"].span(t, tid, "fero.handle UPDATE")
	require.Equal(t, fwd.SpanContext.SpanID(), own.Parent.SpanID())

	// A server's own call goes straight to the owner: two spans.
	parentCtx, parent := traced["a"].tp.Tracer("test").Start(ctx, "service work")
	require.NoError(t, retry(parentCtx, func() error { return rs["a"].Call(parentCtx, "ECHO", key, nil, &reply) }))
	parent.End()
	tid = parent.SpanContext().TraceID()
	call := traced["a"].span(t, tid, "fero.call ECHO")
	require.Equal(t, parent.SpanContext().SpanID(), call.Parent.SpanID(), "the call is a child of the caller's span")
	own = traced["c"].span(t, tid, "fero.handle ECHO")
	require.Equal(t, call.SpanContext.SpanID(), own.Parent.SpanID())

	// A server's own write is a span on it, a child of the caller's, and
	// travels to the owner as an engine message carrying the trace: the
	// owner's span is the write's child.
	parentCtx, parent = traced["a"].tp.Tracer("test").Start(ctx, "service write")
	require.NoError(t, retry(parentCtx, func() error { return rs["a"].Update(parentCtx, key, 2, Majority) }))
	parent.End()
	tid = parent.SpanContext().TraceID()
	w := traced["a"].span(t, tid, "fero.write UPDATE")
	require.Equal(t, parent.SpanContext().SpanID(), w.Parent.SpanID())
	require.Equal(t, "UPDATE", attr(w, "fero.verb"))
	own = traced["c"].span(t, tid, "fero.handle UPDATE")
	require.Equal(t, w.SpanContext.SpanID(), own.Parent.SpanID())
	require.Equal(t, "a", attr(own, "fero.from"))
	require.Equal(t, "Unset", own.Status.Code.String())

	// A failed call's span says so, with its code.
	client.exp.Reset()
	require.Error(t, rc.Call(ctx, "NOPE", key, nil, nil))
	calls = client.exp.GetSpans()
	require.NotEmpty(t, calls)
	root = calls[len(calls)-1]
	require.Equal(t, "Error", root.Status.Code.String())
	require.Equal(t, "unimplemented", attr(root, "fero.code"))
}

// TestUntracedRequestsCarryNoMetadata: without a tracer provider nothing
// is traced and requests carry no metadata, even from a caller whose
// context has a span of its own provider.
func TestUntracedRequestsCarryNoMetadata(t *testing.T) {
	c := newTestCluster(t, 2)
	var got sync.Map
	handler := func(ctx context.Context, req *Request) (any, error) {
		got.Store(req.Key, trace.SpanContextFromContext(ctx).IsValid())
		return nil, nil
	}
	a := c.open("a", WithHandler(handler))
	c.open("b", WithHandler(handler))
	c.settle(2)
	ctx := ctxT(t)
	key := keyOwnedBy(a, "b", "k")
	own := newTraced(t)
	sctx, span := own.tp.Tracer("test").Start(ctx, "service")
	require.NoError(t, retry(sctx, func() error { return a.Call(sctx, "X", key, nil, nil) }))
	span.End()
	v, ok := got.Load(key)
	require.True(t, ok)
	require.False(t, v.(bool), "the owner's handler saw a span from an untraced caller")
	require.Len(t, own.exp.GetSpans(), 1, "only the test's own span")
}
