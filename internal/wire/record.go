package wire

import (
	"fmt"
	"math"
	"sync"
)

// RecordType is the kind of change a record commits.
type RecordType uint8

// Record types: every mutation reduces to one of these.
const (
	RecordAdd    RecordType = 1
	RecordUpdate RecordType = 2
	RecordRemove RecordType = 3
	// RecordBatch commits several changes as one record, all or none
	// (doc.AppendBatch encodes its value). ParseRecord does not accept it
	// yet: the engine does not carry batches.
	RecordBatch RecordType = 4
)

func (t RecordType) String() string {
	switch t {
	case RecordAdd:
		return "ADD"
	case RecordUpdate:
		return "UPDATE"
	case RecordRemove:
		return "REMOVE"
	case RecordBatch:
		return "BATCH"
	}
	return fmt.Sprintf("RecordType(%d)", uint8(t))
}

// RecordHeader is the part of a record read without touching its value.
type RecordHeader struct {
	Type      RecordType
	Partition uint32
	Epoch     uint64
	Offset    uint64
}

// Record is a change record parsed from received bytes. Its key and raw
// value alias those bytes; the value is decoded at most once, on first
// use of Value. A Record must not be copied after ParseRecord fills it.
type Record struct {
	RecordHeader
	// Key aliases the received bytes.
	Key []byte

	raw  []byte
	once sync.Once
	val  any
	err  error
}

// RecordSize returns the encoded size of a record whose key has k bytes
// and whose encoded value has v bytes.
func RecordSize(h RecordHeader, k, v int) int {
	return 1 + 1 + uintSize(uint64(h.Partition)) + uintSize(h.Epoch) + uintSize(h.Offset) +
		strSize(k) + binHeaderSize(v) + v
}

// AppendRecord appends a record whose value is already msgpack-encoded.
func AppendRecord(b []byte, h RecordHeader, key string, value []byte) []byte {
	b = append(b, codeFixArrayLow|6, byte(h.Type))
	b = appendUint(b, uint64(h.Partition))
	b = appendUint(b, h.Epoch)
	b = appendUint(b, h.Offset)
	b = appendStr(b, key)
	b = appendBinHeader(b, len(value))
	return append(b, value...)
}

// ParseRecord reads one record from the front of b into r and returns the
// number of bytes it used. It reads the header only; the value is not
// decoded.
func ParseRecord(b []byte, r *Record) (int, error) {
	d := decoder{b: b}
	if n := d.arrayLen(); d.err == nil && n != 6 {
		return 0, fmt.Errorf("%w: record has %d fields, want 6", ErrMalformed, n)
	}
	typ := d.uint("type")
	part := d.uint("partition")
	epoch := d.uint("epoch")
	off := d.uint("offset")
	key := d.bytes("key")
	raw := d.bytes("value")
	if d.err != nil {
		return 0, d.err
	}
	if typ == 0 || typ > uint64(RecordRemove) {
		return 0, fmt.Errorf("%w: unknown record type %d", ErrMalformed, typ)
	}
	if part > math.MaxUint32 {
		return 0, fmt.Errorf("%w: partition %d out of range", ErrMalformed, part)
	}
	r.RecordHeader = RecordHeader{Type: RecordType(typ), Partition: uint32(part), Epoch: epoch, Offset: off}
	r.Key = key
	r.raw = raw
	r.once = sync.Once{}
	r.val, r.err = nil, nil
	return d.off, nil
}

// ValueBytes returns the msgpack encoding of the value, aliasing the
// received bytes. It is empty for a remove.
func (r *Record) ValueBytes() []byte { return r.raw }

// Value decodes the value into a dynamic Go value (maps, slices, strings,
// numbers) the first time it is called and returns the same result after.
// A malformed or hostile value is an error (see ValidateValue). It is safe
// for concurrent use.
func (r *Record) Value() (any, error) {
	r.once.Do(func() {
		if len(r.raw) == 0 {
			return
		}
		r.err = DecodeValue(r.raw, &r.val)
	})
	return r.val, r.err
}

// DecodeValue decodes the value into v, a pointer to a Go type. Each call
// decodes afresh; use it for typed values and Value for dynamic ones.
func (r *Record) DecodeValue(v any) error {
	if len(r.raw) == 0 {
		return nil
	}
	return DecodeValue(r.raw, v)
}
