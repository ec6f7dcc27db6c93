package wire

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// MaxValueDepth bounds how deeply arrays and maps may nest in a value.
const MaxValueDepth = 256

// ValidateValue checks that b holds exactly one well-formed msgpack value
// whose containers each declare no more elements than bytes remain, nested
// at most MaxValueDepth deep. Decoding a value that passes allocates
// memory proportional to its size; without the check, a few hostile bytes
// declaring a 4-billion-element array make the msgpack decoder (which
// caps typed slices but not []any) allocate tens of gigabytes, and deep
// nesting exhausts the stack.
func ValidateValue(b []byte) error {
	d := decoder{b: b}
	d.skipValue(0)
	if d.err != nil {
		return d.err
	}
	if d.off != len(b) {
		return fmt.Errorf("%w: %d trailing bytes after the value", ErrMalformed, len(b)-d.off)
	}
	return nil
}

// ValueLevel validates b as ValidateValue does and returns how deeply the
// value nests: 0 for a scalar or an empty container, 1 for a container of
// scalars, and so on. With stringKeys, a map whose keys are not all str
// is refused too. It allocates nothing.
func ValueLevel(b []byte, stringKeys bool) (int, error) {
	d := decoder{b: b, stringKeys: stringKeys}
	d.skipValue(0)
	if d.err != nil {
		return 0, d.err
	}
	if d.off != len(b) {
		return 0, fmt.Errorf("%w: %d trailing bytes after the value", ErrMalformed, len(b)-d.off)
	}
	return d.level, nil
}

// NextValue validates the first msgpack value in b as ValueLevel does and
// returns its length in bytes and how deeply it nests; bytes after it are
// not looked at. It allocates nothing.
func NextValue(b []byte, stringKeys bool) (n, level int, err error) {
	d := decoder{b: b, stringKeys: stringKeys}
	d.skipValue(0)
	if d.err != nil {
		return 0, 0, d.err
	}
	return d.off, d.level, nil
}

// DecodeValue validates b and decodes it into v.
func DecodeValue(b []byte, v any) error {
	if err := ValidateValue(b); err != nil {
		return err
	}
	return Unmarshal(b, v)
}

// Unmarshal is msgpack.Unmarshal that returns an error where msgpack
// panics: a value that meets a nil interface field with methods (a
// fmt.Stringer, an error) which its type does not implement makes msgpack
// call reflect.Set with it. Anyone who can write a value or answer a call
// could otherwise crash every process that decodes it into such a type
// (found by FuzzRemoteReply). Use DecodeValue for bytes off the network;
// this for bytes already validated, such as stored values.
func Unmarshal(b []byte, v any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: cannot decode into %T: %v", ErrMalformed, v, p)
		}
	}()
	return msgpack.Unmarshal(b, v)
}

func (d *decoder) skipBytes(n uint64) {
	if n > uint64(len(d.b)-d.off) {
		d.fail("value declares %d bytes, %d remain", n, len(d.b)-d.off)
		return
	}
	d.off += int(n)
}

func (d *decoder) skipValue(depth int) {
	if depth > MaxValueDepth {
		d.fail("value nests deeper than %d", MaxValueDepth)
		return
	}
	c := d.byte1()
	if d.err != nil {
		return
	}
	d.level = max(d.level, depth)
	switch {
	case c <= codePosFixMax || c >= 0xe0: // fixints
		return
	case c >= 0x80 && c <= 0x8f: // fixmap, possibly empty
		d.skipMap(uint64(c&0x0f), depth)
		return
	case c >= codeFixArrayLow && c <= codeFixArrayMax: // fixarray, possibly empty
		d.skipItems(uint64(c&0x0f), depth)
		return
	case c >= codeFixStrLow && c <= codeFixStrMax:
		d.skipBytes(uint64(c & 0x1f))
		return
	}
	switch c {
	case codeNil, 0xc2, 0xc3: // nil, false, true
	case codeBin8, codeStr8:
		d.skipBytes(d.be(1))
	case codeBin16, codeStr16:
		d.skipBytes(d.be(2))
	case codeBin32, codeStr32:
		d.skipBytes(d.be(4))
	case 0xc7, 0xc8, 0xc9: // ext 8/16/32: length, type byte, data
		d.skipExt(d.be(1 << (c - 0xc7)))
	case 0xca: // float32
		d.skipBytes(4)
	case 0xcb: // float64
		d.skipBytes(8)
	case codeUint8, codeInt8:
		d.skipBytes(1)
	case codeUint16, codeInt16:
		d.skipBytes(2)
	case codeUint32, codeInt32:
		d.skipBytes(4)
	case codeUint64, codeInt64:
		d.skipBytes(8)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1/2/4/8/16: type byte, data
		d.skipExt(1 << (c - 0xd4))
	case codeArray16:
		d.skipItems(d.be(2), depth)
	case codeArray32:
		d.skipItems(d.be(4), depth)
	case 0xde: // map16
		d.skipMap(d.be(2), depth)
	case 0xdf: // map32
		d.skipMap(d.be(4), depth)
	default: // 0xc1 is never used
		d.fail("invalid value code 0x%02x", c)
	}
}

// skipExt skips an extension's type byte and its n bytes of data, which
// are opaque, except for one thing. msgpack's decoder, asked for a map
// where it meets an extension, reads a map header from the extension's
// data (Decoder.DecodeMapLen) and, decoding into a map[string]any or a
// map[any]any, allocates room for every pair the header declares before it
// reads one: ten bytes declaring 808 million pairs took a process past 24
// GB and the kernel killed it (FuzzRemoteReply). So data that starts with
// a map header must hold the pairs it declares, two bytes or more each.
func (d *decoder) skipExt(n uint64) {
	start := d.off + 1 // after the type byte
	d.skipBytes(1 + n)
	if d.err != nil || n == 0 {
		return
	}
	data := d.b[start : start+int(n)]
	var pairs uint64
	hdr := 1
	switch c := data[0]; {
	case c >= 0x80 && c <= 0x8f: // fixmap
		pairs = uint64(c & 0x0f)
	case c == 0xde || c == 0xdf: // map16, map32
		hdr += 2 << (c - 0xde)
		if len(data) < hdr {
			d.fail("extension data holds a truncated map header")
			return
		}
		for _, b := range data[1:hdr] {
			pairs = pairs<<8 | uint64(b)
		}
	default:
		return
	}
	if 2*pairs > uint64(len(data)-hdr) {
		d.fail("extension data declares a map of %d pairs in %d bytes", pairs, len(data)-hdr)
	}
}

// skipItems walks n elements, refusing counts the remaining bytes cannot
// hold (every element takes at least one byte).
func (d *decoder) skipItems(n uint64, depth int) {
	if d.err != nil {
		return
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail("container declares %d elements, %d bytes remain", n, len(d.b)-d.off)
		return
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		d.skipValue(depth + 1)
	}
}

// skipMap walks a map of n pairs; with stringKeys set, every key must be
// a str.
func (d *decoder) skipMap(n uint64, depth int) {
	if !d.stringKeys {
		d.skipItems(2*n, depth)
		return
	}
	if d.err != nil {
		return
	}
	if 2*n > uint64(len(d.b)-d.off) {
		d.fail("map declares %d pairs, %d bytes remain", n, len(d.b)-d.off)
		return
	}
	for i := uint64(0); i < n && d.need(1); i++ {
		if c := d.b[d.off]; !(c >= codeFixStrLow && c <= codeFixStrMax) && c != codeStr8 && c != codeStr16 && c != codeStr32 {
			d.fail("map key of msgpack code 0x%02x: keys must be strings", c)
			return
		}
		d.skipValue(depth + 1)
		d.skipValue(depth + 1)
	}
}
