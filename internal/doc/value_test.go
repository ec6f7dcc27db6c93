package doc

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/fero-go/fero/internal/wire"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// TestDecodeAllTypes feeds every msgpack encoding and checks the canonical
// Go value and canonical bytes it becomes.
func TestDecodeAllTypes(t *testing.T) {
	str := func(n int) string { return strings.Repeat("s", n) }
	bin := func(n int) []byte { return bytes.Repeat([]byte{7}, n) }
	tests := []struct {
		name  string
		in    []byte
		want  any
		canon []byte // nil: same as in
	}{
		{"nil", []byte{0xc0}, nil, nil},
		{"false", []byte{0xc2}, false, nil},
		{"true", []byte{0xc3}, true, nil},
		{"posfixint", []byte{0x7f}, int64(127), nil},
		{"negfixint", []byte{0xe0}, int64(-32), nil},
		{"uint8", []byte{0xcc, 0xff}, int64(255), nil},
		{"uint8 small", []byte{0xcc, 0x05}, int64(5), []byte{0x05}},
		{"uint16", []byte{0xcd, 0x01, 0x00}, int64(256), nil},
		{"uint32", []byte{0xce, 0, 1, 0, 0}, int64(65536), nil},
		{"uint64 small", []byte{0xcf, 0, 0, 0, 0, 0, 0, 0, 1}, int64(1), []byte{0x01}},
		{"uint64 big", []byte{0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, uint64(math.MaxUint64), nil},
		{"int8", []byte{0xd0, 0x80}, int64(-128), nil},
		{"int8 positive", []byte{0xd0, 0x05}, int64(5), []byte{0x05}},
		{"int16", []byte{0xd1, 0x80, 0x00}, int64(math.MinInt16), nil},
		{"int32", []byte{0xd2, 0x80, 0, 0, 0}, int64(math.MinInt32), nil},
		{"int64", []byte{0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0}, int64(math.MinInt64), nil},
		{"int64 small", []byte{0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, int64(-1), []byte{0xff}},
		{"float32", []byte{0xca, 0x3f, 0xc0, 0, 0}, 1.5, []byte{0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}},
		{"float64", []byte{0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}, 1.5, nil},
		{"fixstr empty", []byte{0xa0}, "", nil},
		{"fixstr", append([]byte{0xa3}, "abc"...), "abc", nil},
		{"str8", append([]byte{0xd9, 32}, str(32)...), str(32), nil},
		{"str8 short", append([]byte{0xd9, 3}, "abc"...), "abc", append([]byte{0xa3}, "abc"...)},
		{"str16", append([]byte{0xda, 1, 0}, str(256)...), str(256), nil},
		{"str32", append([]byte{0xdb, 0, 1, 0, 0}, str(65536)...), str(65536), nil},
		{"bin8", []byte{0xc4, 2, 1, 2}, []byte{1, 2}, nil},
		{"bin8 empty", []byte{0xc4, 0}, []byte{}, nil},
		{"bin16", append([]byte{0xc5, 1, 0}, bin(256)...), bin(256), nil},
		{"bin32", append([]byte{0xc6, 0, 1, 0, 0}, bin(65536)...), bin(65536), nil},
		{"fixarray empty", []byte{0x90}, []any{}, nil},
		{"fixarray", []byte{0x92, 0x01, 0xc0}, []any{int64(1), nil}, nil},
		{"array16", []byte{0xdc, 0, 1, 0x01}, []any{int64(1)}, []byte{0x91, 0x01}},
		{"array32", []byte{0xdd, 0, 0, 0, 1, 0x01}, []any{int64(1)}, []byte{0x91, 0x01}},
		{"fixmap empty", []byte{0x80}, map[string]any{}, nil},
		{"fixmap sorted", []byte{0x82, 0xa1, 'b', 0x02, 0xa1, 'a', 0x01}, map[string]any{"a": int64(1), "b": int64(2)},
			[]byte{0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x02}},
		{"map16", []byte{0xde, 0, 1, 0xa1, 'a', 0x01}, map[string]any{"a": int64(1)}, []byte{0x81, 0xa1, 'a', 0x01}},
		{"map32", []byte{0xdf, 0, 0, 0, 1, 0xa1, 'a', 0x01}, map[string]any{"a": int64(1)}, []byte{0x81, 0xa1, 'a', 0x01}},
		{"map repeated key", []byte{0x82, 0xa1, 'a', 0x01, 0xa1, 'a', 0x02}, map[string]any{"a": int64(2)}, []byte{0x81, 0xa1, 'a', 0x02}},
		{"fixext1", []byte{0xd4, 5, 9}, Ext{5, []byte{9}}, nil},
		{"fixext16", append([]byte{0xd8, 5}, bin(16)...), Ext{5, bin(16)}, nil},
		{"ext8", []byte{0xc7, 3, 5, 1, 2, 3}, Ext{5, []byte{1, 2, 3}}, nil},
		{"ext8 empty", []byte{0xc7, 0, 5}, Ext{5, []byte{}}, nil},
		{"ext8 as fixext", []byte{0xc7, 1, 5, 9}, Ext{5, []byte{9}}, []byte{0xd4, 5, 9}},
		{"ext16", append([]byte{0xc8, 1, 0, 0xfb}, bin(256)...), Ext{-5, bin(256)}, nil},
		{"ext32", append([]byte{0xc9, 0, 1, 0, 0, 0xfb}, bin(65536)...), Ext{-5, bin(65536)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, _, err := decodeValue(tt.in)
			require.NoError(t, err)
			require.Equal(t, tt.want, v)
			want := tt.canon
			if want == nil {
				want = tt.in
			}
			require.Equal(t, want, appendValue(nil, v))
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	deep := append(bytes.Repeat([]byte{0x91}, wire.MaxValueDepth+1), 0x01)
	for name, b := range map[string][]byte{
		"empty":          {},
		"never used":     {0xc1},
		"trailing":       {0x01, 0x01},
		"truncated str":  {0xa3, 'a'},
		"truncated int":  {0xcd, 0x01},
		"truncated ext":  {0xd8, 1, 2},
		"huge array":     {0xdd, 0xff, 0xff, 0xff, 0xff},
		"huge map":       {0xdf, 0xff, 0xff, 0xff, 0xff, 0x01},
		"huge bin":       {0xc6, 0xff, 0xff, 0xff, 0xff},
		"int key":        {0x81, 0x01, 0x01},
		"bin key":        {0x81, 0xc4, 0x01, 'a', 0x01},
		"nil key":        {0x81, 0xc0, 0x01},
		"too deep":       deep,
		"deep map value": append([]byte{0x81, 0xa1, 'a'}, deep[1:]...),
	} {
		_, _, err := decodeValue(b)
		require.Error(t, err, name)
	}
	_, level, err := decodeValue(deep[1:])
	require.NoError(t, err, "MaxValueDepth levels are allowed")
	require.Equal(t, wire.MaxValueDepth, level)
}

// TestEncodeMatchesMsgpack checks the canonical encoder against the
// msgpack library's encoding with sorted keys and compact integers, on
// random values.
func TestEncodeMatchesMsgpack(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		v := randomValue(r, 3)
		var buf bytes.Buffer
		enc := msgpack.NewEncoder(&buf)
		enc.SetSortMapKeys(true)
		enc.UseCompactInts(true)
		require.NoError(t, enc.Encode(v))
		require.Equal(t, buf.Bytes(), appendValue(nil, v), "%#v", v)
		back, _, err := decodeValue(buf.Bytes())
		require.NoError(t, err)
		require.Equal(t, v, back)
	}
}

// randomValue returns a random value in canonical form.
func randomValue(r *rand.Rand, depth int) any {
	n := 10
	if depth > 0 {
		n = 12
	}
	switch r.IntN(n) {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return int64(r.Uint64()) >> r.IntN(64)
	case 3:
		return -int64(r.Uint64()>>1) >> r.IntN(64)
	case 4:
		return uint64(math.MaxInt64) + 1 + r.Uint64()>>1
	case 5:
		return r.NormFloat64()
	case 6:
		return strings.Repeat("x", []int{0, 1, 31, 32, 255, 256, 70000}[r.IntN(7)])
	case 7:
		return bytes.Repeat([]byte{1}, []int{0, 1, 255, 256, 70000}[r.IntN(5)])
	case 8:
		return Ext{Type: int8(r.IntN(256) - 128), Data: bytes.Repeat([]byte{2}, []int{0, 1, 2, 3, 4, 8, 16, 17, 300}[r.IntN(9)])}
	case 9:
		return string(rune('a' + r.IntN(26)))
	case 10:
		a := make([]any, []int{0, 1, 15, 16}[r.IntN(4)])
		for i := range a {
			a[i] = randomValue(r, depth-1)
		}
		return a
	}
	m := map[string]any{}
	for range []int{0, 1, 15, 16}[r.IntN(4)] {
		m[string(rune('a'+r.IntN(26)))+string(rune('a'+r.IntN(26)))] = randomValue(r, depth-1)
	}
	return m
}

func TestTimestampRoundTrip(t *testing.T) {
	s := newStore(t)
	at := time.Date(2024, 5, 6, 7, 8, 9, 10, time.UTC)
	mustApply(t, s, update, "event", map[string]any{"at": at})
	v, ok := s.Get("event.at")
	require.True(t, ok)
	require.IsType(t, Ext{}, v)
	require.Equal(t, int8(-1), v.(Ext).Type)
	var got time.Time
	ok, err := s.GetInto("event.at", &got)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, at.Equal(got), "%v != %v", at, got)

	// A value read from the store can be written back.
	c, err := s.Builder().Update("copy", v)
	require.NoError(t, err)
	require.NoError(t, apply(s, c))
	a, _ := s.GetBytes("event.at")
	b, _ := s.GetBytes("copy")
	require.Equal(t, a, b)
	var x Ext
	ok, err = s.GetInto("copy", &x)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, v, x)
}
