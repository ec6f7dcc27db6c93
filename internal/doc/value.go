package doc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/fero-go/fero/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
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

// decodeValue checks b with wire.ValidateValue, then decodes it with the
// msgpack library into the canonical Go form (see the package comment),
// returning how many levels it nests: 0 for a scalar or an empty
// container, 1 for a container of scalars, and so on.
//
// The validation comes first because it is what makes decoding untrusted
// bytes safe: one value and nothing after it, no container declaring more
// elements than bytes remain (so nothing below allocates more than b's
// size), no nesting deeper than wire.MaxValueDepth (so the walk below
// recurses at most that deep).
func decodeValue(b []byte) (any, int, error) {
	if err := wire.ValidateValue(b); err != nil {
		return nil, 0, err
	}
	r := readers.Get().(*valueReader)
	r.br.Reset(b)
	r.dec.Reset(&r.br)
	v, level, err := r.value()
	r.br.Reset(nil) // b may be a receive buffer: do not keep it alive
	readers.Put(r)
	if err != nil {
		return nil, 0, err
	}
	return v, level, nil
}

// valueReader is a msgpack decoder over a bytes.Reader, pooled together
// so that decoding a value allocates only the value. The bytes.Reader
// gives the decoder an io.ByteScanner, so it reads straight from the
// bytes without buffering of its own.
type valueReader struct {
	br  bytes.Reader
	dec *msgpack.Decoder
}

var readers = sync.Pool{New: func() any {
	r := &valueReader{}
	r.dec = msgpack.NewDecoder(&r.br)
	return r
}}

// value decodes one value with the decoder's typed methods, chosen by the
// value's code, so that each msgpack type has one Go type: the library's
// DecodeInterface would keep int8 or uint16 as such, and refuses
// extension types that no Go type is registered for.
func (r *valueReader) value() (any, int, error) {
	d := r.dec
	c, err := d.PeekCode()
	if err != nil {
		return nil, 0, err
	}
	switch {
	case msgpcode.IsFixedNum(c):
		v, err := d.DecodeInt64()
		return v, 0, err
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		return r.mapOf()
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		return r.array()
	case msgpcode.IsString(c):
		v, err := d.DecodeString()
		return v, 0, err
	case msgpcode.IsBin(c):
		v, err := d.DecodeBytes()
		return v, 0, err
	case msgpcode.IsExt(c): // the timestamp too: kept as it arrived
		var x Ext
		err := x.DecodeMsgpack(d)
		return x, 0, err
	}
	switch c {
	case msgpcode.Nil:
		return nil, 0, d.DecodeNil()
	case msgpcode.False, msgpcode.True:
		v, err := d.DecodeBool()
		return v, 0, err
	case msgpcode.Float, msgpcode.Double:
		v, err := d.DecodeFloat64()
		return v, 0, err
	case msgpcode.Uint64:
		v, err := d.DecodeUint64()
		if v <= math.MaxInt64 {
			// The same number has one Go type however it was encoded.
			return int64(v), 0, err
		}
		return v, 0, err
	case msgpcode.Uint8, msgpcode.Uint16, msgpcode.Uint32,
		msgpcode.Int8, msgpcode.Int16, msgpcode.Int32, msgpcode.Int64:
		v, err := d.DecodeInt64()
		return v, 0, err
	}
	// wire.ValidateValue refuses the one unused code, 0xc1.
	return nil, 0, fmt.Errorf("invalid value code 0x%02x", c)
}

func (r *valueReader) array() (any, int, error) {
	n, err := r.dec.DecodeArrayLen()
	if err != nil {
		return nil, 0, err
	}
	a := make([]any, n)
	level := 0
	for i := range a {
		v, l, err := r.value()
		if err != nil {
			return nil, 0, err
		}
		a[i], level = v, max(level, l+1)
	}
	return a, level, nil
}

func (r *valueReader) mapOf() (any, int, error) {
	n, err := r.dec.DecodeMapLen()
	if err != nil {
		return nil, 0, err
	}
	m := make(map[string]any, n)
	level := 0
	for range n {
		// DecodeString would also take bin and nil as a key.
		c, err := r.dec.PeekCode()
		if err != nil {
			return nil, 0, err
		}
		if !msgpcode.IsString(c) {
			return nil, 0, fmt.Errorf("map key of msgpack code 0x%02x: keys must be strings", c)
		}
		k, err := r.dec.DecodeString()
		if err != nil {
			return nil, 0, err
		}
		v, l, err := r.value()
		if err != nil {
			return nil, 0, err
		}
		m[k], level = v, max(level, l+1)
	}
	return m, level, nil
}

// appendValue appends the canonical encoding of v, a value in canonical
// form: the msgpack library's encoding with map keys sorted and integers
// in their shortest form (floats stay float64, and an Ext encodes through
// its EncodeMsgpack). Equal values therefore have equal bytes, which is
// what makes snapshots and digests comparable across replicas.
func appendValue(b []byte, v any) []byte {
	w := writers.Get().(*valueWriter)
	w.buf.Reset()
	mustEncode(w.enc.Encode(v))
	b = append(b, w.buf.Bytes()...)
	if w.buf.Cap() <= maxPooledBuffer {
		writers.Put(w)
	}
	return b
}

// valueWriter is a canonical msgpack encoder and the buffer it writes to,
// pooled together so that encoding a value allocates only its copy.
type valueWriter struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

// maxPooledBuffer bounds the buffers kept for reuse, so that encoding one
// huge value does not pin its size in memory.
const maxPooledBuffer = 1 << 20

var writers = sync.Pool{New: func() any {
	w := &valueWriter{}
	w.enc = msgpack.NewEncoder(&w.buf)
	w.enc.SetSortMapKeys(true)
	w.enc.UseCompactInts(true)
	return w
}}

// mustEncode panics on an error from an encoder writing to a bytes.Buffer,
// which cannot fail, of a value in canonical form, which it can always
// encode: values reach the store only through decodeValue.
func mustEncode(err error) {
	if err != nil {
		panic(fmt.Sprintf("doc: encoding a canonical value: %v", err))
	}
}

// canonicalScalar reports whether raw is one msgpack nil, bool, fixint,
// string or binary value with the shortest header for its length: what
// the canonical encoder writes for it, so its canonical encoding is raw
// itself and need not be decoded and encoded again. Large values are
// mostly strings and binaries, and every snapshot and digest of a raw
// value did that: a copy, a decoded copy kept for good, and a canonical
// copy kept for good (about three times the state in memory).
func canonicalScalar(raw []byte) bool {
	n := len(raw)
	if n == 0 {
		return false
	}
	switch b := raw[0]; {
	case b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3:
		return n == 1
	case b&0xe0 == 0xa0: // fixstr
		return n == 1+int(b&0x1f)
	case b == 0xd9: // str8
		return n >= 2 && raw[1] >= 32 && n == 2+int(raw[1])
	case b == 0xda: // str16
		return n >= 3 && binary.BigEndian.Uint16(raw[1:]) >= 256 && n == 3+int(binary.BigEndian.Uint16(raw[1:]))
	case b == 0xdb: // str32
		return n >= 5 && binary.BigEndian.Uint32(raw[1:]) >= 1<<16 && uint64(n) == 5+uint64(binary.BigEndian.Uint32(raw[1:]))
	case b == 0xc4: // bin8
		return n >= 2 && n == 2+int(raw[1])
	case b == 0xc5: // bin16
		return n >= 3 && binary.BigEndian.Uint16(raw[1:]) >= 256 && n == 3+int(binary.BigEndian.Uint16(raw[1:]))
	case b == 0xc6: // bin32
		return n >= 5 && binary.BigEndian.Uint32(raw[1:]) >= 1<<16 && uint64(n) == 5+uint64(binary.BigEndian.Uint32(raw[1:]))
	}
	return false
}
