package fero

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/testkit"
	"github.com/fero-go/fero/internal/wire"
)

// fuzzDoc is a user type as services declare them: nested slices, maps
// and structs, a pointer to its own type, a time, raw bytes, and
// interface fields, two of them with methods.
type fuzzDoc struct {
	Name   string
	Tags   []string
	Scores map[string]float64
	Kids   []fuzzDoc
	Parent *fuzzDoc
	Meta   map[string][]map[string]any
	Grid   [2][3]int8
	When   time.Time
	Blob   []byte
	Raw    msgpack.RawMessage
	Any    any
	Label  fmt.Stringer
	Err    error
}

// fuzzTypes are what fuzzed bytes are decoded into: each call returns a
// pointer to a fresh zero value.
var fuzzTypes = []func() any{
	func() any { return new(fuzzDoc) },
	func() any { return new(any) },
	func() any { return new(map[string]any) },
	func() any { return new([]fuzzDoc) },
	func() any { return new(map[int]string) },
	func() any { return new(*int64) },
	func() any { return new(string) },
}

// FuzzRemoteReply decodes arbitrary bytes into representative user types
// along every path that decodes a stranger's msgpack into one: a
// handler's Request.Decode of its payload, Resource.Call and Remote.Call
// of a reply (a handler's reply that echoes the payload), and
// Change.Decode of a stored value (any value the engine accepts, which
// any client may write). Each must never panic: it decodes, or fails with
// an error, the same way on every path.
func FuzzRemoteReply(f *testing.F) {
	r, err := Open(context.Background(), "fuzz",
		WithID("a"), WithLogger(slog.New(slog.DiscardHandler)),
		WithPreset(PresetLocal), WithoutMulticast(), WithGossipTransport(memnet.New(1).NewTransport()),
		WithGossipTuning(testkit.ClusterTimers), WithLeaveTimeout(time.Second),
		WithPartitions(8), WithTick(20*time.Millisecond),
		WithHandler(func(_ context.Context, q *Request) (any, error) {
			return msgpack.RawMessage(bytes.Clone(q.Payload)), nil
		}))
	require.NoError(f, err)
	f.Cleanup(func() { _ = r.Close() })
	remote, err := Dial(context.Background(), r.Addr())
	require.NoError(f, err)
	f.Cleanup(func() { _ = remote.Close() })
	require.Eventually(f, func() bool { return r.node().Map() != nil }, 20*time.Second, 5*time.Millisecond)

	doc, err := msgpack.Marshal(fuzzDoc{
		Name: "x", Tags: []string{"a"}, Scores: map[string]float64{"s": 1.5},
		Kids: []fuzzDoc{{Name: "kid"}}, Parent: &fuzzDoc{Name: "p"},
		Meta: map[string][]map[string]any{"m": {{"k": []any{1, "two"}}}},
		When: time.Unix(1700000000, 5).UTC(), Blob: []byte{1, 2}, Any: map[string]any{"n": nil},
	})
	require.NoError(f, err)
	nested := append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 1<<20)...)
	nested[len(nested)-1] = 0xc0
	for i := range fuzzTypes {
		f.Add(doc, uint8(i))
	}
	f.Add(nested, uint8(0))
	f.Add(nested, uint8(1))
	f.Add([]byte{0x81, 0xa5, 'L', 'a', 'b', 'e', 'l', 0x01}, uint8(0))        // a Stringer field holding an int
	f.Add([]byte{0x81, 0xa3, 'E', 'r', 'r', 0xa2, 'n', 'o'}, uint8(0))        // an error field holding a string
	f.Add([]byte{0x81, 0xa3, 'E', 'r', 'r', 0x01}, uint8(0))                  // an error field holding an int
	f.Add([]byte{0x81, 0xa4, 'W', 'h', 'e', 'n', 0xd4, 0xff, 0x00}, uint8(0)) // a time of 1 byte
	f.Add([]byte("\xde\xad\xbe\xef garbage"), uint8(0))
	f.Add([]byte{}, uint8(0))

	f.Fuzz(func(t *testing.T, b []byte, which uint8) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// The decode every path makes: bounded, then msgpack's.
		errOf := func(newV func() any) error { return wire.DecodeValue(b, newV()) }

		stored := len(b) > 0 && wire.ValidateValue(b) == nil // what the engine lets in
		for _, newV := range fuzzTypes {
			q := &Request{Verb: "FUZZ", Key: "k", Payload: b}
			v := newV()
			err := q.Decode(v)
			want := errOf(newV)
			switch {
			case len(b) == 0:
				require.Equal(t, CodeInvalidArgument, CodeOf(err), "an empty payload: %v", err)
			case want != nil:
				require.Equal(t, CodeInvalidArgument, CodeOf(err), "%T: %v", v, err)
			default:
				require.NoError(t, err, "%T", v)
			}
			if stored {
				err := Change{Key: "k", Value: b}.Decode(newV())
				require.Equal(t, want == nil, err == nil, "Change.Decode into %T: %v", v, err)
			}
		}

		newV := fuzzTypes[int(which)%len(fuzzTypes)]
		want := errOf(newV)
		if len(b) == 0 {
			want = nil // an empty reply decodes nothing
		}
		local, remoteV := newV(), newV()
		for name, err := range map[string]error{
			"Resource.Call": r.Call(ctx, "FUZZ", "k", msgpack.RawMessage(b), local),
			"Remote.Call":   remote.Call(ctx, "FUZZ", "k", msgpack.RawMessage(b), remoteV),
		} {
			if want != nil {
				require.Equal(t, CodeInternal, CodeOf(err), "%s into %T: %v", name, local, err)
			} else {
				require.NoError(t, err, "%s into %T", name, local)
			}
		}
	})
}
