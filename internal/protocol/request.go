package protocol

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/wire"
)

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

// Request is OpRequest's payload, a msgpack array written and read by
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
type Request struct {
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

func (w *Request) Append(b []byte) []byte {
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
			b = wire.AppendStr(b, WriterName)
			b = wire.AppendStr(b, w.Once.Writer)
			b = wire.AppendStr(b, SeqName)
			b = append(wire.AppendStrHeader(b, len(d)), d...)
		}
		if w.Trace.IsValid() {
			b = wire.AppendStr(b, TraceparentName)
			b = AppendTraceparent(wire.AppendStrHeader(b, TraceparentLen), w.Trace)
			if state != "" {
				b = wire.AppendStr(b, TracestateName)
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
func (w *Request) Decode(b []byte) error {
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
			case TraceparentName:
				w.Trace, _ = ParseTraceparent(value)
			case TracestateName:
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
			case WriterName:
				if len(value) == 0 || len(value) > doc.MaxBatchWriter {
					c.Fail("request: %s of %d bytes, want 1 to %d", WriterName, len(value), doc.MaxBatchWriter)
				}
				w.Once.Writer = string(value)
			case SeqName:
				v, err := strconv.ParseUint(string(value), 10, 64)
				if err != nil || v == 0 {
					c.Fail("request: %s %q is not a sequence number", SeqName, value)
				}
				w.Once.Seq = v
			default:
				w.Meta = append(w.Meta, string(name), string(value))
			}
		}
		if (w.Once.Writer == "") != (w.Once.Seq == 0) {
			c.Fail("request: %s and %s go together", WriterName, SeqName)
		}
		if len(state) > 0 && w.Trace.IsValid() {
			if ts, err := trace.ParseTraceState(string(state)); err == nil {
				w.Trace = w.Trace.WithTraceState(ts)
			}
		}
	}
	return c.End()
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
	ReplyOK byte = 0 // the handler's reply follows
	// ReplyOKMeta: the handler's reply headers follow, as an array of
	// strings (name, value, ...), then its reply.
	ReplyOKMeta byte = 2
	ReplyRetry  byte = 1 // the receiver does not own the key's partition
)

// OKReply is an empty reply: shared and read-only (a reply's bytes are
// copied into the connection's outbox).
var OKReply = []byte{ReplyOK}

// ReadAnswer reads the status byte of an OpRequest's answer (or takes
// the call's error): the reply, with the reply headers given to ctx's
// sink; or retry, when the receiver said the owner is elsewhere.
func ReadAnswer(ctx context.Context, reply []byte, err error) (out []byte, retry bool, _ error) {
	switch {
	case err != nil:
		return nil, false, err
	case len(reply) == 0:
		return nil, false, errs.New(errs.Internal, "fero: empty reply")
	case reply[0] == ReplyOK:
		return reply[1:], false, nil
	case reply[0] == ReplyOKMeta:
		if reply, err = TakeReplyMeta(ctx, reply[1:]); err != nil {
			return nil, false, err
		}
		return reply, false, nil
	}
	return nil, true, nil
}

// AppendReply appends an OpRequest answer: the status, the reply headers
// if there are any, and the reply.
func AppendReply(b []byte, meta Meta, reply []byte) []byte {
	if len(meta) == 0 {
		return append(append(b, ReplyOK), reply...)
	}
	b = append(b, ReplyOKMeta)
	b = wire.AppendArrayHeader(b, len(meta))
	for _, s := range meta {
		b = wire.AppendStr(b, s)
	}
	return append(b, reply...)
}

// TakeReplyMeta reads the reply headers at the start of b, gives them to
// the sink ctx carries (WithReplyMeta), if any, and returns the reply
// after them.
func TakeReplyMeta(ctx context.Context, b []byte) ([]byte, error) {
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
