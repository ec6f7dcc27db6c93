package wire

import (
	"encoding/binary"
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
	return Unmarshal(b, v)
}

// Unmarshal validates b as ValidateValue does and decodes it into v, as
// msgpack.Unmarshal does but for two things msgpack gets wrong with
// hostile bytes:
//   - A value that meets a nil interface field with methods (a
//     fmt.Stringer, an error) which its type does not implement makes
//     msgpack call reflect.Set with it and panic. Anyone who can write a
//     value or answer a call could crash every process that decodes it
//     into such a type (found by FuzzRemoteReply). Unmarshal returns an
//     error instead.
//   - Asked for a map where it meets an extension, msgpack reads a map
//     from the extension's data (skipExt). A timestamp's data can begin
//     with a map code and still be a valid time, so Unmarshal hands
//     msgpack those timestamps in their 12-byte form, the same time in
//     data that starts with a byte below 0x40.
func Unmarshal(b []byte, v any) (err error) {
	d := decoder{b: b, keepStamps: true}
	d.skipValue(0)
	switch {
	case d.err != nil:
		return d.err
	case d.off != len(b):
		return fmt.Errorf("%w: %d trailing bytes after the value", ErrMalformed, len(b)-d.off)
	case len(d.stamps) > 0:
		b = longStamps(b, d.stamps)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: cannot decode into %T: %v", ErrMalformed, v, p)
		}
	}()
	return msgpack.Unmarshal(b, v)
}

// longStamps returns a copy of b with the timestamps at offsets (fixext 4
// or 8) in their 12-byte form: nanoseconds as a uint32, then seconds as an
// int64 (the msgpack spec's timestamp 96).
func longStamps(b []byte, offsets []int) []byte {
	out := make([]byte, 0, len(b)+9*len(offsets))
	from := 0
	for _, at := range offsets {
		out = append(out, b[from:at]...)
		var nsec uint32
		var sec int64
		switch data := b[at+2:]; b[at] {
		case 0xd6: // fixext 4: seconds as a uint32
			sec = int64(binary.BigEndian.Uint32(data))
			from = at + 6
		default: // fixext 8: nanoseconds in the top 30 bits, seconds in the low 34
			x := binary.BigEndian.Uint64(data)
			nsec, sec = uint32(x>>34), int64(x&(1<<34-1))
			from = at + 10
		}
		out = append(out, 0xc7, 12, 0xff)
		out = binary.BigEndian.AppendUint32(out, nsec)
		out = binary.BigEndian.AppendUint64(out, uint64(sec))
	}
	return append(out, b[from:]...)
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
	at := d.off
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
		d.skipExt(at, d.be(1<<(c-0xc7)), depth)
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
		d.skipExt(at, 1<<(c-0xd4), depth)
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

// skipExt skips an extension (its code at offset at) of n bytes of data
// after its type byte. The data is opaque to msgpack but for one thing:
// asked for a map where it meets an extension, msgpack's decoder reads a
// map header from the extension's data (Decoder.DecodeMapLen) and then
// the pairs that follow, as msgpack, past the data's end if the header
// says so. Decoding into a map[string]any or a map[any]any it allocates
// room for every pair a header declares before it reads one: ten bytes
// declaring 808 million pairs took a process past 24 GB (FuzzRemoteReply),
// and a fixmap in the data can carry an unvalidated map32 inside
// (FuzzValidateValue). So data that starts with a map code must be one
// well-formed map, wholly inside the data; except a timestamp (type -1)
// of 4 or 8 bytes, which may start with such a byte and be a valid time
// (nanoseconds from 536,870,912 in the 8-byte form, seconds from 2038 in
// the 4-byte one): its offset is kept, for Unmarshal to hand msgpack the
// same time in its 12-byte form, whose data starts below 0x40.
func (d *decoder) skipExt(at int, n uint64, depth int) {
	typAt := d.off
	d.skipBytes(1 + n)
	if d.err != nil || n == 0 {
		return
	}
	data := d.b[typAt+1 : typAt+1+int(n)]
	if c := data[0]; !(c >= 0x80 && c <= 0x8f) && c != 0xde && c != 0xdf {
		return
	}
	if int8(d.b[typAt]) == -1 && (n == 4 || n == 8) {
		if d.inExt {
			// Unmarshal could not rewrite it without rewriting the
			// extension around it.
			d.fail("a timestamp that starts as a map, inside extension data")
		} else if d.keepStamps {
			d.stamps = append(d.stamps, at)
		}
		return
	}
	// The data is walked at the extension's depth, as msgpack would
	// decode it, but it stays a scalar to the value around it: its level
	// is not the value's, nor do a document's rules for keys apply to it
	// (the store keeps an extension as the bytes that came).
	inner := decoder{b: data, inExt: true}
	inner.skipValue(depth + 1)
	switch {
	case inner.err != nil:
		d.fail("extension data that starts as a map: %v", inner.err)
	case inner.off != len(data):
		d.fail("extension data holds a map and %d bytes more", len(data)-inner.off)
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
