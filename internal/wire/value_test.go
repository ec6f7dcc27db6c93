package wire

import (
	"bytes"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func TestValidateValueAcceptsWhatMsgpackWrites(t *testing.T) {
	for _, v := range []any{
		nil, true, false, 0, -1, 127, -32, 255, -129, 65535, math.MaxInt64, math.MinInt64, uint64(math.MaxUint64),
		float32(1.5), 2.25, "", "short", string(bytes.Repeat([]byte("x"), 70000)),
		[]byte{1, 2, 3}, make([]byte, 300), []any{1, "a", []any{nil}},
		map[string]any{}, []any{}, []any{[]any{}, map[string]any{}}, map[string]any{"e": []any{}},
		map[string]any{"a": 1, "b": map[string]any{"c": []int{1, 2}}},
		make([]int, 20), make([]int, 70000), map[int]int{1: 2, 3: 4},
	} {
		b, err := msgpack.Marshal(v)
		require.NoError(t, err)
		assert.NoErrorf(t, ValidateValue(b), "%T %v", v, b[:min(len(b), 16)])
	}
	// Empty containers in every encoding, alone and nested.
	for _, b := range [][]byte{{0x80}, {0x90}, {0x91, 0x90}, {0x81, 0xa1, 'k', 0x80}, {0xdc, 0, 0}, {0xde, 0, 0}, {0xdd, 0, 0, 0, 0}} {
		assert.NoErrorf(t, ValidateValue(b), "% x", b)
	}
	// Extension types, as the library encodes time.
	b, err := msgpack.Marshal(map[string]any{"t": msgpack.RawMessage{0xd6, 0xff, 0, 0, 0, 1}})
	require.NoError(t, err)
	assert.NoError(t, ValidateValue(b))
	// An extension whose data is a map that holds its pairs, which
	// msgpack reads as that map where it decodes a map.
	ext := []byte{0xd6, 0x30, 0x81, 0xa1, 'a', 0x01}
	require.NoError(t, ValidateValue(ext))
	var m map[string]any
	require.NoError(t, DecodeValue(ext, &m))
	require.Equal(t, map[string]any{"a": int8(1)}, m)
}

func TestValidateValueRefusesHostileValues(t *testing.T) {
	deep := append(bytes.Repeat([]byte{0x91}, MaxValueDepth+2), 0x01)
	for name, b := range map[string][]byte{
		"empty":                        {},
		"array32 of 4 billion":         {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01},
		"map32 of 4 billion":           {0xdf, 0xff, 0xff, 0xff, 0xff},
		"array16 past the end":         {0xdc, 0x00, 0x05, 0x01, 0x02},
		"str32 past the end":           {0xdb, 0x7f, 0xff, 0xff, 0xff, 'a'},
		"nested too deep":              deep,
		"reserved code":                {0xc1},
		"trailing bytes":               {0x01, 0x02},
		"ext past the end":             {0xc9, 0xff, 0xff, 0xff, 0xff, 0x01},
		"the crasher the fuzzer found": []byte("\xdd\xa4\x30\x97\x8c0000"),
		// Ten bytes that made msgpack allocate for 808 million pairs
		// decoding into a map[string]any (FuzzRemoteReply).
		"an extension declaring a map32 it cannot hold": []byte("\xd70\xdf000\xa3001"),
		"an extension with half a map header":           {0xd5, 0x30, 0xdf, 0xff},
		"a 16-byte timestamp declaring a map32":         append([]byte{0xd8, 0xff, 0xdf, 0x7f, 0xff, 0xff, 0xff}, make([]byte, 11)...),
		// A fixmap in extension data, carrying a map32 of 3 billion pairs
		// as its second key (FuzzValidateValue, with map targets).
		"an extension whose map carries a map32": []byte("\xd70\x8d00\xdf\xb2000"),
		"an extension whose map ends early":      {0xd6, 0x30, 0x82, 0xa1, 'a', 0x01},
		"an extension with a map and more":       {0xd6, 0x30, 0x80, 0x01, 0x02, 0x03},
	} {
		assert.ErrorIsf(t, ValidateValue(b), ErrMalformed, "%s", name)
		var v any
		assert.Errorf(t, DecodeValue(b, &v), "%s", name)
	}
}

func FuzzValidateValue(f *testing.F) {
	for _, v := range []any{map[string]any{"a": []any{1, "x", nil}}, 1.5, "s"} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if ValidateValue(b) != nil {
			return
		}
		// What passes decodes without blowing up memory or the stack:
		// into any with msgpack itself, and through Unmarshal (which
		// turns msgpack's panics into errors, and rewrites timestamps)
		// into the types whose decoders read a map inside an extension.
		var v any
		_ = msgpack.Unmarshal(b, &v)
		var m map[string]any
		_ = Unmarshal(b, &m)
		var u map[any]any
		_ = Unmarshal(b, &u)
	})
}

// TestTimestampsThatLookLikeMapsDecode: a timestamp's data may start with
// a msgpack map code and be a valid time (in the 8-byte form, nanoseconds
// from 536,870,912, and 935,329,792 to 939,524,095 for map32; in the
// 4-byte one, seconds from 2038). Such a value is accepted and decodes to
// its time; decoded where a map is expected it fails without msgpack
// allocating for the pairs its bytes seem to declare (2^20 in the first:
// 252 MB allocated before Unmarshal rewrote them).
func TestTimestampsThatLookLikeMapsDecode(t *testing.T) {
	for _, when := range []time.Time{
		time.Unix(1_700_000_000, 0xdf<<22|1<<10).UTC(), // fixext 8; its bytes 1-4 read 2^20
		time.Unix(0xdf000001, 0).UTC(),                 // fixext 4
		time.Unix(1_700_000_000, 0x8f<<22|1<<10).UTC(), // fixext 8 that starts as a fixmap
		time.Unix(0x80000001, 0).UTC(),                 // fixext 4 in 2038 that starts as a fixmap
	} {
		b, err := msgpack.Marshal(when)
		require.NoError(t, err)
		require.True(t, b[2] == 0xdf || b[2]&0xf0 == 0x80, "% x: the data starts with a map code", b)
		require.NoError(t, ValidateValue(b))

		var got time.Time
		require.NoError(t, DecodeValue(b, &got))
		require.True(t, when.Equal(got), "%v decoded as %v", when, got)
		var anyV any
		require.NoError(t, DecodeValue(b, &anyV))
		require.True(t, when.Equal(anyV.(time.Time)), "%v decoded into any as %v", when, anyV)
		doc, err := msgpack.Marshal(map[string]any{"At": when})
		require.NoError(t, err)
		var st struct{ At time.Time }
		require.NoError(t, Unmarshal(doc, &st))
		require.True(t, when.Equal(st.At), "%v decoded in a struct as %v", when, st.At)

		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var m map[string]any
		require.Error(t, DecodeValue(b, &m))
		var u map[any]any
		require.Error(t, DecodeValue(b, &u))
		inMap, err := msgpack.Marshal(map[string]any{"M": when})
		require.NoError(t, err)
		var nested struct{ M map[string]any }
		require.Error(t, DecodeValue(inMap, &nested))
		runtime.ReadMemStats(&after)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated decoding % x as maps", b)
	}
}
