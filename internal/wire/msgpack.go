package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The header fields are written and read by hand rather than through
// msgpack.Encoder/Decoder: the library's decoder cannot hand out a string or
// bin without allocating a copy, and its encoder writes each field through
// an io.Writer. The byte codes below are msgpack's own (a test checks them
// against msgpcode), and tests decode our bytes with the library.
const (
	codePosFixMax   = 0x7f
	codeFixArrayLow = 0x90
	codeFixArrayMax = 0x9f
	codeFixStrLow   = 0xa0
	codeFixStrMax   = 0xbf
	codeNil         = 0xc0
	codeBin8        = 0xc4
	codeBin16       = 0xc5
	codeBin32       = 0xc6
	codeUint8       = 0xcc
	codeUint16      = 0xcd
	codeUint32      = 0xce
	codeUint64      = 0xcf
	codeInt8        = 0xd0
	codeInt16       = 0xd1
	codeInt32       = 0xd2
	codeInt64       = 0xd3
	codeStr8        = 0xd9
	codeStr16       = 0xda
	codeStr32       = 0xdb
	codeArray16     = 0xdc
	codeArray32     = 0xdd
)

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= codePosFixMax:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, codeUint8, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, codeUint16), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, codeUint32), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, codeUint64), v)
	}
}

func uintSize(v uint64) int {
	switch {
	case v <= codePosFixMax:
		return 1
	case v <= math.MaxUint8:
		return 2
	case v <= math.MaxUint16:
		return 3
	case v <= math.MaxUint32:
		return 5
	default:
		return 9
	}
}

func appendArrayHeader(b []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, codeFixArrayLow|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, codeArray16), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, codeArray32), uint32(n))
	}
}

func appendBinHeader(b []byte, n int) []byte {
	switch {
	case n <= math.MaxUint8:
		return append(b, codeBin8, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, codeBin16), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, codeBin32), uint32(n))
	}
}

func binHeaderSize(n int) int {
	switch {
	case n <= math.MaxUint8:
		return 2
	case n <= math.MaxUint16:
		return 3
	default:
		return 5
	}
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n <= 31:
		b = append(b, codeFixStrLow|byte(n))
	case n <= math.MaxUint8:
		b = append(b, codeStr8, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, codeStr16), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, codeStr32), uint32(n))
	}
	return append(b, s...)
}

func strSize(n int) int {
	switch {
	case n <= 31:
		return 1 + n
	case n <= math.MaxUint8:
		return 2 + n
	case n <= math.MaxUint16:
		return 3 + n
	default:
		return 5 + n
	}
}

// decoder reads msgpack primitives from a byte slice without allocating.
// The first error sticks; later reads return zero values.
type decoder struct {
	b   []byte
	off int
	err error

	level      int  // the deepest value skipValue met
	stringKeys bool // skipValue refuses maps with keys that are not str
	// stamps are the offsets of the timestamps whose data starts with
	// msgpack's map32 code (skipExt), kept with keepStamps for Unmarshal
	// to rewrite.
	stamps     []int
	keepStamps bool
	inExt      bool // walking an extension's data (skipExt)
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (d *decoder) need(n int) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || len(d.b)-d.off < n {
		d.fail("need %d bytes at offset %d, have %d", n, d.off, len(d.b)-d.off)
		return false
	}
	return true
}

func (d *decoder) byte1() byte {
	if !d.need(1) {
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

func (d *decoder) be(n int) uint64 {
	if !d.need(n) {
		return 0
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	switch n {
	case 1:
		return uint64(p[0])
	case 2:
		return uint64(binary.BigEndian.Uint16(p))
	case 4:
		return uint64(binary.BigEndian.Uint32(p))
	default:
		return binary.BigEndian.Uint64(p)
	}
}

// uint reads a non-negative integer in any msgpack integer encoding.
func (d *decoder) uint(field string) uint64 {
	c := d.byte1()
	if d.err != nil {
		return 0
	}
	switch {
	case c <= codePosFixMax:
		return uint64(c)
	case c == codeUint8:
		return d.be(1)
	case c == codeUint16:
		return d.be(2)
	case c == codeUint32:
		return d.be(4)
	case c == codeUint64:
		return d.be(8)
	case c >= codeInt8 && c <= codeInt64:
		v := int64(0)
		switch c {
		case codeInt8:
			v = int64(int8(d.be(1)))
		case codeInt16:
			v = int64(int16(d.be(2)))
		case codeInt32:
			v = int64(int32(d.be(4)))
		default:
			v = int64(d.be(8))
		}
		if v < 0 {
			d.fail("%s: negative integer %d", field, v)
			return 0
		}
		return uint64(v)
	}
	d.fail("%s: want integer, got code 0x%02x", field, c)
	return 0
}

func (d *decoder) arrayLen() int {
	c := d.byte1()
	if d.err != nil {
		return 0
	}
	switch {
	case c >= codeFixArrayLow && c <= codeFixArrayMax:
		return int(c & 0x0f)
	case c == codeArray16:
		return int(d.be(2))
	case c == codeArray32:
		return int(d.be(4))
	}
	d.fail("want array, got code 0x%02x", c)
	return 0
}

// bytes reads a bin or str and returns it as a sub-slice of the input.
func (d *decoder) bytes(field string) []byte {
	c := d.byte1()
	if d.err != nil {
		return nil
	}
	var n uint64
	switch {
	case c >= codeFixStrLow && c <= codeFixStrMax:
		n = uint64(c & 0x1f)
	case c == codeStr8, c == codeBin8:
		n = d.be(1)
	case c == codeStr16, c == codeBin16:
		n = d.be(2)
	case c == codeStr32, c == codeBin32:
		n = d.be(4)
	case c == codeNil:
		return nil
	default:
		d.fail("%s: want str or bin, got code 0x%02x", field, c)
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail("%s: length %d exceeds the %d bytes left", field, n, len(d.b)-d.off)
		return nil
	}
	p := d.b[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return p
}

// The exported helpers below let other packages write their hot messages
// as msgpack arrays by hand, the way the frame and record headers are.

// AppendUint appends v as a msgpack integer in its shortest form.
func AppendUint(b []byte, v uint64) []byte { return appendUint(b, v) }

// AppendArrayHeader appends the header of a msgpack array of n elements.
func AppendArrayHeader(b []byte, n int) []byte { return appendArrayHeader(b, n) }

// AppendStr appends s as a msgpack str.
func AppendStr(b []byte, s string) []byte { return appendStr(b, s) }

// AppendBin appends p as a msgpack bin, or nil when p is empty, so that an
// empty value and no value read back the same.
func AppendBin(b []byte, p []byte) []byte {
	if len(p) == 0 {
		return append(b, codeNil)
	}
	return append(appendBinHeader(b, len(p)), p...)
}

// Cursor reads msgpack primitives from a byte slice, in order, without
// allocating (Str excepted). The first error sticks: later reads return
// zero values, and Err reports it. Every length is checked against the
// bytes left before anything is read, so hostile input costs no memory.
type Cursor struct{ d decoder }

// NewCursor returns a cursor at the start of b.
func NewCursor(b []byte) Cursor { return Cursor{d: decoder{b: b}} }

// Uint reads a non-negative integer; field names it in errors.
func (c *Cursor) Uint(field string) uint64 { return c.d.uint(field) }

// Uint32 reads an integer that must fit 32 bits.
func (c *Cursor) Uint32(field string) uint32 { return uint32(c.bounded(field, 32)) }

// Uint8 reads an integer that must fit 8 bits.
func (c *Cursor) Uint8(field string) uint8 { return uint8(c.bounded(field, 8)) }

func (c *Cursor) bounded(field string, bits int) uint64 {
	v := c.d.uint(field)
	if v>>bits != 0 {
		c.d.fail("%s: %d overflows %d bits", field, v, bits)
		return 0
	}
	return v
}

// Array reads an array header and checks that it has want elements (any
// count when want is negative). An array cannot declare more elements than
// bytes remain.
func (c *Cursor) Array(field string, want int) int {
	n := c.d.arrayLen()
	switch {
	case c.d.err != nil:
		return 0
	case want >= 0 && n != want:
		c.d.fail("%s: array of %d elements, want %d", field, n, want)
		return 0
	case n > len(c.d.b)-c.d.off:
		c.d.fail("%s: array declares %d elements, %d bytes remain", field, n, len(c.d.b)-c.d.off)
		return 0
	}
	return n
}

// Bytes reads a bin or str as a sub-slice of the input (nil for nil).
func (c *Cursor) Bytes(field string) []byte { return c.d.bytes(field) }

// Str reads a str or bin as a string. If it equals prev, prev is returned
// and nothing is allocated: repeated names cost one string.
func (c *Cursor) Str(field, prev string) string {
	p := c.d.bytes(field)
	if string(p) == prev {
		return prev
	}
	return string(p)
}

// Nil reads a nil and reports true if the next value is one; otherwise
// it reads nothing and reports false.
func (c *Cursor) Nil() bool {
	d := &c.d
	if d.err != nil || d.off >= len(d.b) || d.b[d.off] != codeNil {
		return false
	}
	d.off++
	return true
}

// AppendStrHeader appends the header of a msgpack str of n bytes, which
// the caller appends next.
func AppendStrHeader(b []byte, n int) []byte {
	switch {
	case n <= 31:
		return append(b, codeFixStrLow|byte(n))
	case n <= math.MaxUint8:
		return append(b, codeStr8, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, codeStr16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, codeStr32), uint32(n))
}

// AppendNil appends a msgpack nil.
func AppendNil(b []byte) []byte { return append(b, codeNil) }

// Err returns the first error, if any; unlike End it allows bytes to
// remain.
func (c *Cursor) Err() error { return c.d.err }

// Left returns how many bytes remain.
func (c *Cursor) Left() int { return len(c.d.b) - c.d.off }

// Fail records an error found by the caller, unless one is recorded.
func (c *Cursor) Fail(format string, args ...any) { c.d.fail(format, args...) }

// End returns the first error, or an error if bytes remain after the
// value read.
func (c *Cursor) End() error {
	if c.d.err == nil && c.d.off != len(c.d.b) {
		c.d.fail("%d trailing bytes", len(c.d.b)-c.d.off)
	}
	return c.d.err
}
