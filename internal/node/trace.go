package node

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/errs"
)

// Tracing (docs/operations.md, "Tracing"). With Config.Tracer, a node
// starts a span for each call and write its callers make, for each
// request it forwards and for each request it handles as the owner, and
// carries the W3C trace context in the request's metadata, so the spans
// of one request on the caller, the forwarding node and the owner form
// one trace. Without a tracer none of this runs: each path tests one nil
// field.

// TracerName is the instrumentation scope fero's spans are made under.
const TracerName = "github.com/fero-go/fero"

// traceContext reads and writes W3C traceparent and tracestate.
var traceContext propagation.TraceContext

// withTrace returns meta with the trace context of ctx's span, if it has
// a valid one. (A function of values, not of a *Meta, so that a caller's
// metadata moves to the heap only when there is a span.)
func withTrace(ctx context.Context, meta Meta) Meta {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return meta
	}
	traceContext.Inject(ctx, &meta)
	return meta
}

// extractTrace returns ctx with the remote span context meta carries, if
// any.
func extractTrace(ctx context.Context, meta Meta) context.Context {
	if len(meta) == 0 {
		return ctx
	}
	return traceContext.Extract(ctx, &meta)
}

// startSpan starts a span named name of kind on this node's tracer, with
// the request's verb, partition and the resource as attributes. The node
// must have a tracer.
func (n *Node) startSpan(ctx context.Context, name string, kind trace.SpanKind, verb string, partition int) (context.Context, trace.Span) {
	return n.cfg.Tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(
		attribute.String("fero.resource", n.cfg.Resource),
		attribute.String("fero.node", n.id),
		attribute.String("fero.verb", verb),
		attribute.Int("fero.partition", partition),
	))
}

// endSpan records err, if any, on span (with its fero error code) and
// ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetAttributes(attribute.String("fero.code", errs.CodeOf(err).String()))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
