package protocol

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope fero's spans are made under.
const TracerName = "github.com/fero-go/fero"

// The W3C trace context's names, and the length of a version-00
// traceparent: "00-" 32 hex digits "-" 16 hex digits "-" 2 hex digits.
const (
	TraceparentName = "traceparent"
	TracestateName  = "tracestate"
	TraceparentLen  = 55
)

// AppendTraceparent appends sc as a version-00 traceparent.
func AppendTraceparent(b []byte, sc trace.SpanContext) []byte {
	tid, sid := sc.TraceID(), sc.SpanID()
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, tid[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, sid[:])
	b = append(b, '-')
	return hex.AppendEncode(b, []byte{byte(sc.TraceFlags())})
}

// ParseTraceparent reads a traceparent as W3C Trace Context level 1 says:
// lower-case hex, version ff refused, a version-00 one exactly 55 bytes,
// a later version at least that with what follows ignored, and an
// all-zero trace or span id invalid. It does not allocate. The span
// context it returns is remote.
func ParseTraceparent(b []byte) (trace.SpanContext, bool) {
	if len(b) < TraceparentLen || b[2] != '-' || b[35] != '-' || b[52] != '-' {
		return trace.SpanContext{}, false
	}
	var version, flags [1]byte
	var tid trace.TraceID
	var sid trace.SpanID
	if !lowerHex(b[0:2]) || !lowerHex(b[3:35]) || !lowerHex(b[36:52]) || !lowerHex(b[53:55]) {
		return trace.SpanContext{}, false
	}
	_, _ = hex.Decode(version[:], b[0:2])
	_, _ = hex.Decode(tid[:], b[3:35])
	_, _ = hex.Decode(sid[:], b[36:52])
	_, _ = hex.Decode(flags[:], b[53:55])
	switch {
	case version[0] == 0xff:
		return trace.SpanContext{}, false
	case version[0] == 0 && len(b) != TraceparentLen:
		return trace.SpanContext{}, false
	case version[0] > 0 && len(b) > TraceparentLen && b[TraceparentLen] != '-':
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true,
	})
	if !sc.IsValid() { // an all-zero trace or span id
		return trace.SpanContext{}, false
	}
	return sc, true
}

func lowerHex(b []byte) bool {
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Traceparent returns the W3C Traceparent of ctx's span, "" when it has
// no valid one.
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return string(AppendTraceparent(make([]byte, 0, TraceparentLen), sc))
}
