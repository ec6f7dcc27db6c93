package doc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/fero-go/fero/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// Ext is a msgpack extension value (including the timestamp, type -1),
// kept as it arrived so it encodes back to the same bytes. GetInto decodes
// it into whatever Go type the msgpack library registers for it, such as
// time.Time.
type Ext struct {
	Type int8
	Data []byte
}

// EncodeMsgpack lets a value read from the store be encoded again, for
// instance to copy a subtree with Builder.Update.
func (x Ext) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeExtHeader(x.Type, len(x.Data)); err != nil {
		return err
	}
	_, err := e.Writer().Write(x.Data)
	return err
}

// DecodeMsgpack reads any extension value into x.
func (x *Ext) DecodeMsgpack(d *msgpack.Decoder) error {
	id, n, err := d.DecodeExtHeader()
	if err != nil {
		return err
	}
	x.Type, x.Data = id, make([]byte, n)
	return d.ReadFull(x.Data)
}

// maxLevel is how deep a top-level value may nest: a snapshot puts every
// top-level value one level below its own map, and wire.ValidateValue
// refuses anything deeper than wire.MaxValueDepth, so a deeper value could
// be applied but its snapshot never restored.
const maxLevel = wire.MaxValueDepth - 1

// decodeValue validates b and decodes it into the canonical Go form (see
// the package comment), returning how many levels it nests: 0 for a
// scalar or an empty container, 1 for a container of scalars, and so on.
//
// It validates as it decodes, with wire.ValidateValue's rules: one value
// and nothing after it, no container declaring more elements than bytes
// remain (checked before anything is allocated for it), no nesting deeper
// than wire.MaxValueDepth. It does not call wire.ValidateValue because that
// refuses empty fixmaps and fixarrays (0x80, 0x90), which every empty
// partition's snapshot is.
func decodeValue(b []byte) (any, int, error) {
	if len(b) == 0 {
		return nil, 0, errors.New("no value")
	}
	d := valueDecoder{b: b}
	v, level := d.value(0)
	if d.err == nil && d.off != len(b) {
		d.fail("%d trailing bytes after the value", len(b)-d.off)
	}
	if d.err != nil {
		return nil, 0, d.err
	}
	return v, level, nil
}

// valueDecoder decodes untrusted bytes; every length it reads is checked
// against what remains before it is used.
type valueDecoder struct {
	b   []byte
	off int
	err error
}

func (d *valueDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *valueDecoder) take(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail("truncated value")
		return nil
	}
	p := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return p
}

// be reads an n-byte big-endian unsigned integer.
func (d *valueDecoder) be(n int) uint64 {
	var x uint64
	for _, c := range d.take(uint64(n)) {
		x = x<<8 | uint64(c)
	}
	return x
}

func (d *valueDecoder) value(depth int) (any, int) {
	if depth > wire.MaxValueDepth {
		d.fail("value nests deeper than %d", wire.MaxValueDepth)
		return nil, 0
	}
	p := d.take(1)
	if d.err != nil {
		return nil, 0
	}
	c := p[0]
	switch {
	case c <= 0x7f:
		return int64(c), 0
	case c >= 0xe0:
		return int64(int8(c)), 0
	case c <= 0x8f:
		return d.mapOf(uint64(c&0x0f), depth)
	case c <= 0x9f:
		return d.array(uint64(c&0x0f), depth)
	case c <= 0xbf:
		return string(d.take(uint64(c & 0x1f))), 0
	}
	switch c {
	case 0xc0:
		return nil, 0
	case 0xc2:
		return false, 0
	case 0xc3:
		return true, 0
	case 0xc4, 0xc5, 0xc6: // bin 8/16/32
		return append([]byte{}, d.take(d.be(1<<(c-0xc4)))...), 0
	case 0xc7, 0xc8, 0xc9: // ext 8/16/32
		n := d.be(1 << (c - 0xc7))
		return d.ext(n), 0
	case 0xca:
		return float64(math.Float32frombits(uint32(d.be(4)))), 0
	case 0xcb:
		return math.Float64frombits(d.be(8)), 0
	case 0xcc, 0xcd, 0xce, 0xcf:
		return intOf(d.be(1 << (c - 0xcc))), 0
	case 0xd0:
		return int64(int8(d.be(1))), 0
	case 0xd1:
		return int64(int16(d.be(2))), 0
	case 0xd2:
		return int64(int32(d.be(4))), 0
	case 0xd3:
		return int64(d.be(8)), 0
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1/2/4/8/16
		return d.ext(1 << (c - 0xd4)), 0
	case 0xd9, 0xda, 0xdb: // str 8/16/32
		return string(d.take(d.be(1 << (c - 0xd9)))), 0
	case 0xdc, 0xdd:
		return d.array(d.be(2<<(c-0xdc)), depth)
	case 0xde, 0xdf:
		return d.mapOf(d.be(2<<(c-0xde)), depth)
	}
	d.fail("invalid value code 0x%02x", c)
	return nil, 0
}

// intOf keeps an unsigned integer as int64 when it fits, so that the same
// number has one Go type however it was encoded.
func intOf(u uint64) any {
	if u <= math.MaxInt64 {
		return int64(u)
	}
	return u
}

func (d *valueDecoder) ext(n uint64) any {
	t := d.take(1)
	data := d.take(n)
	if d.err != nil {
		return nil
	}
	return Ext{Type: int8(t[0]), Data: append([]byte{}, data...)}
}

func (d *valueDecoder) array(n uint64, depth int) (any, int) {
	if n > uint64(len(d.b)-d.off) {
		d.fail("array declares %d elements, %d bytes remain", n, len(d.b)-d.off)
		return nil, 0
	}
	a := make([]any, n)
	level := 0
	for i := range a {
		v, l := d.value(depth + 1)
		if d.err != nil {
			return nil, 0
		}
		a[i], level = v, max(level, l+1)
	}
	return a, level
}

func (d *valueDecoder) mapOf(n uint64, depth int) (any, int) {
	if n > uint64(len(d.b)-d.off) {
		d.fail("map declares %d entries, %d bytes remain", n, len(d.b)-d.off)
		return nil, 0
	}
	m := make(map[string]any, n)
	level := 0
	for range n {
		k, _ := d.value(depth + 1)
		if d.err != nil {
			return nil, 0
		}
		ks, ok := k.(string)
		if !ok {
			d.fail("map key of type %T: keys must be strings", k)
			return nil, 0
		}
		v, l := d.value(depth + 1)
		if d.err != nil {
			return nil, 0
		}
		m[ks], level = v, max(level, l+1)
	}
	return m, level
}

// appendValue appends the canonical encoding of v, a value in canonical
// form: integers in their shortest form, floats as float64, map keys
// sorted bytewise. Equal values therefore have equal bytes, which is what
// makes snapshots and digests comparable across replicas.
func appendValue(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, 0xc0)
	case bool:
		if v {
			return append(b, 0xc3)
		}
		return append(b, 0xc2)
	case int64:
		return appendInt(b, v)
	case uint64:
		return appendUint(b, v)
	case float64:
		return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(v))
	case string:
		return append(appendStrHeader(b, len(v)), v...)
	case []byte:
		return append(appendLen(b, 0xc4, len(v)), v...)
	case Ext:
		return append(appendExtHeader(b, v.Type, len(v.Data)), v.Data...)
	case []any:
		b = appendContainer(b, 0x90, 0xdc, len(v))
		for _, e := range v {
			b = appendValue(b, e)
		}
		return b
	case map[string]any:
		b = appendContainer(b, 0x80, 0xde, len(v))
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = append(appendStrHeader(b, len(k)), k...)
			b = appendValue(b, v[k])
		}
		return b
	}
	// Values reach the store only through decodeValue.
	panic(fmt.Sprintf("doc: value of type %T is not canonical", v))
}

func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(int8(v)))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

func appendStrHeader(b []byte, n int) []byte {
	if n <= 31 {
		return append(b, 0xa0|byte(n))
	}
	return appendLen(b, 0xd9, n)
}

// appendLen appends a str or bin header: code is the 8-bit form, and the
// 16- and 32-bit forms follow it.
func appendLen(b []byte, code byte, n int) []byte {
	switch {
	case n <= math.MaxUint8:
		return append(b, code, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, code+1), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, code+2), uint32(n))
}

func appendContainer(b []byte, fix, code byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, fix|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, code), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, code+1), uint32(n))
}

func appendExtHeader(b []byte, t int8, n int) []byte {
	switch n {
	case 1, 2, 4, 8, 16:
		return append(b, 0xd4+byte(bitsLen(n)), byte(t))
	}
	return append(appendLen(b, 0xc7, n), byte(t))
}

// bitsLen returns log2(n) for a power of two.
func bitsLen(n int) int {
	l := 0
	for n > 1 {
		n >>= 1
		l++
	}
	return l
}
