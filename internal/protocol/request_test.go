package protocol

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// TestAttempts: which failures a write that names its writer makes again,
// and what its caller is told when the attempts end.
func TestAttempts(t *testing.T) {
	once := Once{Writer: "w", Seq: 1}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Lost track of (indefinite): again; then a refusal of the retry is
	// made again too, and if the attempts end on it the caller is told
	// indefinite: the first attempt may have committed. (Before, the
	// refusal reached the caller as definite: the fault suite's set
	// workload found committed pushes answered "no quorum".)
	a := NewAttempts(ctx, once)
	for _, err := range []error{partition.ErrOwnershipLost, partition.ErrOwnerGone, transport.ErrConnLost, ErrClosedInFlight} {
		assert.True(t, a.Again(err), "%v", err)
	}
	assert.True(t, a.Again(partition.ErrNoQuorum), "a refusal after an indefinite failure")
	got := a.Answer(partition.ErrNoQuorum)
	assert.False(t, errs.Definite(got), "told definite after an indefinite attempt: %v", got)
	assert.ErrorIs(t, got, partition.ErrNoQuorum)
	assert.Nil(t, a.Answer(nil))

	// A first attempt refused is the caller's answer, as it was; but one
	// that met a non-owner goes again to the owner by then.
	b := NewAttempts(ctx, once)
	assert.False(t, b.Again(partition.ErrNoQuorum))
	assert.Equal(t, partition.ErrNoQuorum, b.Answer(partition.ErrNoQuorum))
	assert.True(t, b.Again(partition.ErrNotOwner))
	assert.False(t, b.uncertain)
	// A handler's own answer is never made again.
	assert.False(t, b.Again(errs.Errorf(409, "taken")))

	// A call in flight when this side closed its connection may have been
	// carried out: again (the pool dials anew), and if this side's
	// transport itself is closed, no further attempt, and indefinite.
	cl := NewAttempts(ctx, once)
	assert.True(t, cl.Again(transport.ErrClosedInFlight))
	assert.False(t, cl.Again(transport.ErrClosed))
	got = cl.Answer(transport.ErrClosed)
	assert.False(t, errs.Definite(got), "told definite after a call closed in flight: %v", got)

	// Without a writer nothing is made again.
	c := NewAttempts(ctx, Once{})
	assert.False(t, c.Again(partition.ErrOwnershipLost))

	// Past the budget, no more attempts.
	expired, stop := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer stop()
	d := NewAttempts(expired, once)
	assert.False(t, d.Again(partition.ErrOwnershipLost))
}

// TestTraceparent: W3C Trace Context level 1's rules for reading a
// traceparent, and writing one back.
func TestTraceparent(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	sc, ok := ParseTraceparent([]byte(tp))
	require.True(t, ok)
	require.True(t, sc.IsSampled())
	require.True(t, sc.IsRemote())
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", sc.TraceID().String())
	require.Equal(t, "b7ad6b7169203331", sc.SpanID().String())
	require.Equal(t, tp, string(AppendTraceparent(nil, sc)))
	// A later version may append fields; flags other than sampled are not
	// kept.
	sc, ok = ParseTraceparent([]byte("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03-what-follows"))
	require.True(t, ok)
	require.Equal(t, trace.FlagsSampled, sc.TraceFlags())
	for _, bad := range []string{
		"",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0",        // short
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",     // version 00 with more
		"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",       // version ff
		"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",       // upper case
		"00-00000000000000000000000000000000-b7ad6b7169203331-01",       // zero trace id
		"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",       // zero span id
		"00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",       // separator
		"cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01.later", // later version, bad separator
	} {
		_, ok := ParseTraceparent([]byte(bad))
		require.False(t, ok, bad)
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = ParseTraceparent([]byte(tp)) }), "reading a traceparent allocates")
}

func TestWireRequestRoundTrip(t *testing.T) {
	for _, w := range []Request{
		{Verb: VerbUpdate, Key: "users.ada", Payload: []byte{0x81, 0xa1, 'n', 0x01}, Hops: 1},
		{Verb: "LOGIN", Key: strings.Repeat("k", 300)},
		{Verb: VerbUpdate, Key: "k", Wait: WaitSpec{Set: true, Kind: partition.WaitMajority}},
		{Verb: VerbRemove, Key: "k", Hops: 1, Wait: WaitSpec{Set: true, Kind: partition.WaitReplicas, K: 2}},
		{Verb: VerbAdd, Key: "k", Wait: WaitSpec{Set: true, Kind: partition.WaitNone}},
		{Verb: "LOGIN", Key: "k", Trace: remoteSpan(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
		{Verb: "LOGIN", Key: "k", Trace: remoteSpan(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")},
		{Verb: VerbUpdate, Key: "k", Hops: 1, Wait: WaitSpec{Set: true, Kind: partition.WaitMajority}, Meta: Meta{"a", "", "b", "2"}},
		{Verb: "WAIT", Key: "k", Timeout: 1500 * time.Millisecond},
		{Verb: "WAIT", Key: "k", Timeout: time.Microsecond, Wait: WaitSpec{Set: true, Kind: partition.WaitAck}, Trace: remoteSpan(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
		{Verb: VerbUpdate, Key: "k", Meta: Meta{"a", "1"}, Trace: withState(t, remoteSpan(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), "ro=1,vendor=x")},
	} {
		var got Request
		require.NoError(t, got.Decode(w.Append(nil)))
		assert.Equal(t, w, got)
		var lib []any
		require.NoError(t, msgpack.Unmarshal(w.Append(nil), &lib), "the library reads it too")
		assert.Equal(t, w.Verb, lib[0])
	}
	for name, b := range map[string][]byte{
		"empty":                nil,
		"three fields":         {0x93, 0xa1, 'V', 0xa1, 'k', 0xc0},
		"trailing":             append((&Request{Verb: "V"}).Append(nil), 0),
		"hops too big":         {0x94, 0xa1, 'V', 0xa1, 'k', 0xc0, 0xcd, 0x01, 0x00},
		"five fields":          {0x95, 0xa1, 'V', 0xa1, 'k', 0xc0, 0x00, 0x01},
		"unknown wait":         {0x96, 0xa1, 'V', 0xa1, 'k', 0xc0, 0x00, 0x09, 0x00},
		"k, no wait":           {0x97, 0xa1, 'V', 0xa1, 'k', 0xc0, 0x00, 0xc0, 0x01, 0x90},
		"odd metadata":         {0x97, 0xa1, 'V', 0xa1, 'k', 0xc0, 0x00, 0xc0, 0xc0, 0x91, 0xa1, 'a'},
		"metadata not strings": {0x97, 0xa1, 'V', 0xa1, 'k', 0xc0, 0x00, 0xc0, 0xc0, 0x92, 0x01, 0x02},
		"too many pairs":       (&Request{Verb: "V", Meta: make(Meta, 2*MaxMetaPairs+2)}).Append(nil),
		"long name":            (&Request{Verb: "V", Meta: Meta{strings.Repeat("n", MaxMetaName+1), ""}}).Append(nil),
		"long value":           (&Request{Verb: "V", Meta: Meta{"n", strings.Repeat("v", MaxMetaValue+1)}}).Append(nil),
	} {
		var got Request
		assert.ErrorIs(t, got.Decode(b), wire.ErrMalformed, name)
	}
}

// remoteSpan is the remote span context a traceparent names.
func remoteSpan(t *testing.T, tp string) trace.SpanContext {
	t.Helper()
	sc, ok := ParseTraceparent([]byte(tp))
	require.True(t, ok, tp)
	return sc
}

func withState(t *testing.T, sc trace.SpanContext, state string) trace.SpanContext {
	t.Helper()
	ts, err := trace.ParseTraceState(state)
	require.NoError(t, err)
	return sc.WithTraceState(ts)
}

// TestRequestMetadataNames pins the names a request's metadata carries on
// the wire: older and newer nodes read them by these exact bytes, and the
// W3C trace context's are W3C's. (The split into this package once
// capitalised "traceparent" and every round trip still passed.)
func TestRequestMetadataNames(t *testing.T) {
	ts, err := trace.ParseTraceState("k=v")
	require.NoError(t, err)
	w := Request{
		Verb: "V", Key: "k", Timeout: time.Second, If: IfVersion{Set: true, Version: 7},
		Once:  Once{Writer: "w", Seq: 9},
		Trace: remoteSpan(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").WithTraceState(ts),
		Meta:  Meta{"x-user", "u"},
	}
	var fields []any
	require.NoError(t, msgpack.Unmarshal(w.Append(nil), &fields))
	require.Len(t, fields, 7)
	var names []string
	meta := fields[6].([]any)
	for i := 0; i < len(meta); i += 2 {
		names = append(names, meta[i].(string))
	}
	require.Equal(t, []string{"fero-timeout", "fero-if-version", "fero-writer", "fero-seq", "traceparent", "tracestate", "x-user"}, names)
}
