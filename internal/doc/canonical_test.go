package doc

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCanonicalScalar: a raw value canonicalScalar accepts is its own
// canonical encoding (decoding and encoding it again gives the same
// bytes), and the canonical encoder's output for every scalar of every
// header size is accepted; longer headers than needed are not.
func TestCanonicalScalar(t *testing.T) {
	var vals []any
	for _, n := range []int{0, 1, 31, 32, 255, 256, 65535, 65536, 70000} {
		vals = append(vals, strings.Repeat("x", n), bytes.Repeat([]byte{7}, n))
	}
	vals = append(vals, nil, true, false, 0, 1, 127, -1, -32)
	for _, v := range vals {
		raw := appendValue(nil, v)
		require.True(t, canonicalScalar(raw), "%T of %d bytes", v, len(raw))
		back, _, err := decodeValue(raw)
		require.NoError(t, err)
		require.Equal(t, raw, appendValue(nil, back))
	}
	for name, raw := range map[string][]byte{
		"str8, short":    {0xd9, 3, 'a', 'b', 'c'},
		"str16, short":   append([]byte{0xda, 0, 3}, "abc"...),
		"str32, short":   append([]byte{0xdb, 0, 0, 1, 0}, make([]byte, 256)...),
		"bin16, short":   {0xc5, 0, 1, 9},
		"truncated str":  {0xa5, 'a'},
		"trailing bytes": {0xa1, 'a', 'b'},
		"a map":          {0x81, 0xa1, 'a', 0x01},
		"uint8 for 1":    {0xcc, 0x01},
		"empty":          {},
	} {
		require.False(t, canonicalScalar(raw), name)
	}
}

// FuzzCanonicalScalar: whatever bytes canonicalScalar accepts decode, and
// encode again to themselves.
func FuzzCanonicalScalar(f *testing.F) {
	f.Add([]byte{0xa3, 'a', 'b', 'c'})
	f.Add([]byte{0xc4, 1, 9})
	f.Add([]byte{0xd9, 40})
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !canonicalScalar(raw) {
			return
		}
		v, _, err := decodeValue(raw)
		if err != nil {
			t.Fatalf("accepted %x, which does not decode: %v", raw, err)
		}
		if enc := appendValue(nil, v); !bytes.Equal(enc, raw) {
			t.Fatalf("accepted %x, whose canonical encoding is %x", raw, enc)
		}
	})
}
