package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func TestCursorReadsWhatTheHelpersWrite(t *testing.T) {
	b := AppendArrayHeader(nil, 5)
	b = AppendUint(b, 1<<40)
	b = AppendStr(b, "owner")
	b = AppendBin(b, []byte{1, 2, 3})
	b = AppendBin(b, nil)
	b = AppendUint(b, 200)

	var lib []any
	require.NoError(t, msgpack.Unmarshal(b, &lib), "the library reads it")
	assert.Equal(t, []any{uint64(1 << 40), "owner", []byte{1, 2, 3}, nil, uint8(200)}, lib)

	c := NewCursor(b)
	assert.Equal(t, 5, c.Array("x", 5))
	assert.Equal(t, uint64(1<<40), c.Uint("n"))
	prev := "owner"
	got := c.Str("s", prev)
	assert.Equal(t, prev, got)
	assert.Equal(t, []byte{1, 2, 3}, c.Bytes("v"))
	assert.Nil(t, c.Bytes("nil"))
	assert.Equal(t, uint8(200), c.Uint8("u8"))
	assert.Zero(t, c.Left())
	assert.NoError(t, c.End())
}

func TestCursorRefusesBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		b    []byte
		read func(c *Cursor)
	}{
		"wrong count":     {[]byte{0x92, 1, 2}, func(c *Cursor) { c.Array("a", 3) }},
		"hostile array":   {[]byte{0xdd, 0xff, 0xff, 0xff, 0xff}, func(c *Cursor) { c.Array("a", -1) }},
		"uint8 overflow":  {AppendUint(nil, 300), func(c *Cursor) { c.Uint8("u") }},
		"uint32 overflow": {AppendUint(nil, 1<<33), func(c *Cursor) { c.Uint32("u") }},
		"negative":        {[]byte{0xd0, 0xff}, func(c *Cursor) { c.Uint("u") }},
		"short bin":       {[]byte{0xc4, 9, 1}, func(c *Cursor) { c.Bytes("b") }},
		"trailing":        {[]byte{1, 2}, func(c *Cursor) { c.Uint("u") }},
		"not a string":    {[]byte{0x01}, func(c *Cursor) { c.Str("s", "") }},
	} {
		c := NewCursor(tc.b)
		tc.read(&c)
		assert.ErrorIs(t, c.End(), ErrMalformed, name)
	}
	// The first error sticks: later reads return zero values.
	c := NewCursor([]byte{0xc1, 5})
	c.Uint("bad")
	assert.Zero(t, c.Uint("next"))
	assert.ErrorContains(t, c.End(), "bad")
}
