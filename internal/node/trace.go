package node

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/wire"
)

// Tracing (docs/operations.md, "Tracing"). With Config.Tracer, a node
// starts a span for each call and write its callers make, for each
// request it forwards and for each request it handles as the owner, and
// carries the W3C trace context in the request's metadata, so the spans
// of one request on the caller, the forwarding node and the owner form
// one trace. Without a tracer none of this runs: each path tests one nil
// field.

// remoteParent returns ctx with sc as its remote parent span, when valid.
func remoteParent(ctx context.Context, sc trace.SpanContext) context.Context {
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// spanKinds are the start options of each span kind, made once: an
// option built per span, and the slice of options, cost two allocations
// a span.
var spanKinds = func() (k [trace.SpanKindConsumer + 1][]trace.SpanStartOption) {
	for i := range k {
		k[i] = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKind(i))}
	}
	return k
}()

// startSpan starts a span named name (with " " and the verb appended
// when it is recorded) of kind on this node's tracer, with the request's
// verb, partition and the resource as attributes when it is recorded: a
// span the sampler drops costs no name and no attributes. The node must
// have a tracer.
func (n *Node) startSpan(ctx context.Context, name string, kind trace.SpanKind, verb string, partition int) (context.Context, trace.Span) {
	ctx, span := n.cfg.Tracer.Start(ctx, name, spanKinds[kind]...)
	if span.IsRecording() {
		span.SetName(name + " " + verb)
		span.SetAttributes(
			attribute.String("fero.resource", n.cfg.Resource),
			attribute.String("fero.node", n.id),
			attribute.String("fero.verb", verb),
			attribute.Int("fero.partition", partition),
		)
	}
	return ctx, span
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

// Forwarded writes. A server's write to a partition another server owns
// travels as an engine message (partition.Forward), not as a request: the
// owner's span for it starts when its driver steps the Forward and ends
// when the driver sends the ForwardReply, or at once for a write whose
// sender waits for nothing. The state is the driver's (under engMu).

// fwdKey names a forwarded write: its sender and the sender's id for it.
type fwdKey struct {
	from string
	id   uint64
}

type fwdSpan struct {
	span  trace.Span
	since time.Time
}

// maxFwdSpans bounds the forwarded writes traced at once; past it, spans
// whose reply never left (the owner lost the partition, the write was
// dropped) are ended as unanswered.
const maxFwdSpans = 4096

// recordVerb names a record for a span: a batch of one change (a write
// that names its writer, or carries a condition) by that change, as the
// caller's span names it.
func recordVerb(t wire.RecordType, value []byte) string {
	if t == wire.RecordBatch {
		if bt, err := doc.DecodeBatch(value); err == nil && len(bt.Changes) == 1 {
			return bt.Changes[0].Type.String()
		}
	}
	return t.String()
}

// traceForward starts the owner's span for a Forward from from.
func (n *Node) traceForward(from string, f *partition.Forward) {
	sc, _ := protocol.ParseTraceparent([]byte(f.Trace))
	verb := recordVerb(f.Type, f.Value)
	_, span := n.startSpan(remoteParent(n.ctx, sc), "fero.handle", trace.SpanKindServer, verb, int(f.Partition))
	span.SetAttributes(attribute.String("fero.from", from))
	if f.ID == 0 { // nobody waits: no reply will end it
		span.End()
		return
	}
	if n.fwdSpans == nil {
		n.fwdSpans = map[fwdKey]fwdSpan{}
	}
	k := fwdKey{from, f.ID}
	if old, ok := n.fwdSpans[k]; ok { // the sender restarted and reuses ids
		old.span.SetStatus(codes.Error, "no reply")
		old.span.End()
	}
	if len(n.fwdSpans) >= maxFwdSpans {
		cutoff := time.Now().Add(-time.Minute)
		for k, s := range n.fwdSpans {
			if s.since.Before(cutoff) {
				s.span.SetStatus(codes.Error, "no reply")
				s.span.End()
				delete(n.fwdSpans, k)
			}
		}
		if len(n.fwdSpans) >= maxFwdSpans {
			span.End()
			return
		}
	}
	n.fwdSpans[k] = fwdSpan{span: span, since: time.Now()}
}

// tracedReply ends the owner's span of the forwarded write r answers.
func (n *Node) tracedReply(to string, r *partition.ForwardReply) {
	k := fwdKey{to, r.ID}
	s, ok := n.fwdSpans[k]
	if !ok {
		return
	}
	delete(n.fwdSpans, k)
	if r.Code != 0 {
		s.span.SetAttributes(attribute.String("fero.code", errs.Code(r.Code).String()))
		s.span.SetStatus(codes.Error, r.Msg)
	}
	s.span.End()
}
