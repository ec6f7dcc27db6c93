package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// A record is a frame: a little-endian uint32 body length, the body's
// CRC-32C (Castagnoli, which the processor computes), then the body. The
// segment log is a sequence of records; a snapshot file is a magic string,
// one record (its header) and the state, whose CRC the header holds.
//
// Record bodies, by their first byte:
//
//	kindEntry:    partition, offset, then the entry's tail (below)
//	kindTruncate: partition, offset (drop the entries after it)
//	kindMeta:     key length, key, value (the rest)
//	kindMark:     a byte offset of this segment that an fsync covered
//
// An entry's tail, which is also pebble's value for an entry key: term,
// owner length, owner, type (one byte), key length, key, value (the rest).
// Numbers are uvarints except where a width is given.
const (
	frameHeader = 8
	kindEntry   = 1
	kindTrunc   = 2
	kindMeta    = 3
	kindMark    = 4
	// maxBody bounds a record body: an entry of MaxEntrySize plus its
	// numbers. A length field above it is a torn or corrupt frame.
	maxBody = MaxEntrySize + 64
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

var errShort = errors.New("short")

// beginFrame reserves a frame header at the end of b; endFrame fills it in
// once the body follows it.
func beginFrame(b []byte) ([]byte, int) {
	return append(b, 0, 0, 0, 0, 0, 0, 0, 0), len(b)
}

func endFrame(b []byte, start int) []byte {
	body := b[start+frameHeader:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(b[start+4:], crc(body))
	return b
}

// frameStatus is what parseFrame found at the start of b.
type frameStatus int

const (
	frameOK        frameStatus = iota
	frameShort                 // b ends before the frame does
	frameBadLength             // the length is 0 or over maxBody
	frameBadCRC
)

// parseFrame reads the frame at the start of b, returning its body and
// its whole length.
func parseFrame(b []byte) (body []byte, n int, st frameStatus) {
	if len(b) < frameHeader {
		return nil, 0, frameShort
	}
	size := binary.LittleEndian.Uint32(b)
	if size == 0 || size > maxBody {
		return nil, 0, frameBadLength
	}
	n = frameHeader + int(size)
	if len(b) < n {
		return nil, 0, frameShort
	}
	body = b[frameHeader:n]
	if crc(body) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, 0, frameBadCRC
	}
	return body, n, frameOK
}

func appendEntryTail(b []byte, e *Entry) []byte {
	b = binary.AppendUvarint(b, e.Epoch.Term)
	b = binary.AppendUvarint(b, uint64(len(e.Epoch.Owner)))
	b = append(b, e.Epoch.Owner...)
	b = append(b, e.Type)
	b = binary.AppendUvarint(b, uint64(len(e.Key)))
	b = append(b, e.Key...)
	return append(b, e.Value...)
}

func appendEntryRecord(b []byte, p int, e *Entry) []byte {
	b, start := beginFrame(b)
	b = append(b, kindEntry)
	b = binary.AppendUvarint(b, uint64(p))
	b = binary.AppendUvarint(b, e.Offset)
	b = appendEntryTail(b, e)
	return endFrame(b, start)
}

func appendTruncRecord(b []byte, p int, offset uint64) []byte {
	b, start := beginFrame(b)
	b = append(b, kindTrunc)
	b = binary.AppendUvarint(b, uint64(p))
	b = binary.AppendUvarint(b, offset)
	return endFrame(b, start)
}

func appendMetaRecord(b []byte, key string, value []byte) []byte {
	b, start := beginFrame(b)
	b = append(b, kindMeta)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = append(b, value...)
	return endFrame(b, start)
}

func appendMarkRecord(b []byte, synced int64) []byte {
	b, start := beginFrame(b)
	b = append(b, kindMark)
	b = binary.AppendUvarint(b, uint64(synced))
	return endFrame(b, start)
}

// reader decodes a body; the first error sticks and every later read
// returns zero values, so decoders check once at the end.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = errShort
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes(n uint64) []byte {
	if r.err != nil || n > uint64(len(r.b)) {
		r.err = errShort
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u32() uint32 {
	v := r.bytes(4)
	if v == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(v)
}

// decodeEntryTail fills e from an entry's tail, copying the owner, key and
// value out of b.
func decodeEntryTail(b []byte, e *Entry) error {
	r := reader{b: b}
	e.Epoch.Term = r.uvarint()
	e.Epoch.Owner = string(r.bytes(r.uvarint()))
	e.Type = r.byte()
	e.Key = string(r.bytes(r.uvarint()))
	if r.err != nil {
		return fmt.Errorf("entry: %w", ErrCorrupt)
	}
	e.Value = nil
	if len(r.b) > 0 {
		e.Value = append([]byte(nil), r.b...)
	}
	return nil
}

// record is a decoded record body. For kindEntry, tail is the entry's
// tail (aliasing the body); for kindMeta, key and value alias it.
type record struct {
	kind      byte
	partition uint64
	offset    uint64
	tail      []byte
	key       []byte
	value     []byte
}

func decodeRecord(body []byte) (record, error) {
	r := reader{b: body}
	rec := record{kind: r.byte()}
	switch rec.kind {
	case kindEntry, kindTrunc:
		rec.partition = r.uvarint()
		rec.offset = r.uvarint()
		if rec.partition > MaxPartition {
			return rec, fmt.Errorf("record: partition %d: %w", rec.partition, ErrCorrupt)
		}
		if rec.kind == kindEntry {
			rec.tail = r.b
			if r.err == nil {
				if err := checkEntryTail(rec.tail); err != nil {
					return rec, err
				}
			}
		} else if r.err == nil && len(r.b) != 0 {
			r.err = errShort
		}
	case kindMeta:
		rec.key = r.bytes(r.uvarint())
		rec.value = r.b
	case kindMark:
		rec.offset = r.uvarint()
		if r.err == nil && len(r.b) != 0 {
			r.err = errShort
		}
	default:
		return rec, fmt.Errorf("record: kind %d: %w", rec.kind, ErrCorrupt)
	}
	if r.err != nil {
		return rec, fmt.Errorf("record: kind %d: %w", rec.kind, ErrCorrupt)
	}
	return rec, nil
}

// checkEntryTail checks that b decodes as an entry's tail, without
// copying.
func checkEntryTail(b []byte) error {
	r := reader{b: b}
	r.uvarint()
	r.bytes(r.uvarint())
	r.byte()
	r.bytes(r.uvarint())
	if r.err != nil {
		return fmt.Errorf("entry: %w", ErrCorrupt)
	}
	return nil
}

// Snapshot encoding: snapMagic, then a frame whose body is partition,
// base, term, owner length, owner, state length and the state's CRC-32C
// (4 bytes), then the state.
const snapMagic = "fero-sn1"

func appendSnapshotHeader(b []byte, p int, s *Snapshot) []byte {
	b, start := beginFrame(b)
	b = binary.AppendUvarint(b, uint64(p))
	b = binary.AppendUvarint(b, s.Base)
	b = binary.AppendUvarint(b, s.Epoch.Term)
	b = binary.AppendUvarint(b, uint64(len(s.Epoch.Owner)))
	b = append(b, s.Epoch.Owner...)
	b = binary.AppendUvarint(b, uint64(len(s.State)))
	b = binary.LittleEndian.AppendUint32(b, crc(s.State))
	return endFrame(b, start)
}

// snapHeader is a decoded snapshot header.
type snapHeader struct {
	partition uint64
	base      uint64
	epoch     Epoch
	stateLen  uint64
	stateCRC  uint32
}

// decodeSnapshotHeader decodes the frame at the start of b and returns
// the header and the frame's length.
func decodeSnapshotHeader(b []byte) (snapHeader, int, error) {
	body, n, st := parseFrame(b)
	if st != frameOK {
		return snapHeader{}, 0, fmt.Errorf("snapshot header: %w", ErrCorrupt)
	}
	r := reader{b: body}
	h := snapHeader{partition: r.uvarint(), base: r.uvarint()}
	h.epoch.Term = r.uvarint()
	h.epoch.Owner = string(r.bytes(r.uvarint()))
	h.stateLen = r.uvarint()
	h.stateCRC = r.u32()
	if r.err != nil || len(r.b) != 0 || h.partition > MaxPartition {
		return snapHeader{}, 0, fmt.Errorf("snapshot header: %w", ErrCorrupt)
	}
	return h, n, nil
}
