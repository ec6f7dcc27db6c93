// A Store's partition snapshots: their format, writing them whole or in
// chunks, and restoring them (whole, or staged chunk by chunk); Clear.

package doc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// snapshotState returns partition p's entries in key order and the
// encoding of its exactly-once table (nil when it is empty), as of one
// moment. The table is encoded holding mu, since ApplyBatch changes it in
// place.
func (pt *partition) snapshotState() ([]kv, []byte) {
	pt.mu.RLock()
	es := pt.unsorted()
	var dd []byte
	if len(pt.dd.writers) > 0 {
		dd = pt.dd.appendTo(nil)
	}
	pt.mu.RUnlock()
	sortEntries(es)
	return es, dd
}

// Snapshot returns partition p's state as of one moment: its top-level
// keys, sorted, with their versions and their values in canonical
// encoding (see snapshotFormat). Equal states have equal snapshots.
func (s *Store) Snapshot(p int) ([]byte, error) {
	if p < 0 || p >= len(s.parts) {
		return nil, errs.Errorf(errs.InvalidArgument, "%w: partition %d of %d", ErrPartition, p, len(s.parts))
	}
	es, dd := s.parts[p].snapshotState()
	n := snapshotHead + len(dd)
	for _, e := range es {
		n += snapshotSize(e)
	}
	return appendSnapshot(make([]byte, 0, n), es, dd), nil
}

// snapshotFormat is the number a snapshot starts with, in a msgpack
// array: [snapshotFormat, {key: [version, value], ...}, table], keys
// sorted. table is the exactly-once table:
//
//	[[writer str, floor uint, latest offset uint, [outcome, ...]], ...]
//	outcome: [seq uint, offset uint, reply bin|nil], or [seq uint, offset uint]
//	         when the reply was larger than DedupMaxReply and not kept
//
// writers sorted by name, outcomes by seq.
//
// A partition whose table is empty is written as format 1,
// [1, {key: [version, value], ...}], which is what was written before the
// table was kept, so that stores which have not yet seen a writer keep
// exchanging snapshots with older ones. A snapshot written before
// versions were kept is the bare map {key: value, ...}. Restore takes all
// three: formats 1 and the bare map with an empty table, and the bare
// map's keys at version 1, as last written before versions were kept.
const (
	snapshotFormat   = 2
	snapshotFormatV1 = 1
)

// snapshotHead bounds the bytes of a snapshot's array and map headers.
const snapshotHead = 2 + 5

// snapshotSize bounds the bytes e takes in a snapshot.
func snapshotSize(e kv) int { return 5 + len(e.key) + 1 + 9 + len(e.e.encoding()) }

// appendSnapshot appends a snapshot of es and the encoded table dd (nil:
// empty, written as format 1).
func appendSnapshot(b []byte, es []kv, dd []byte) []byte {
	if dd == nil {
		b = wire.AppendUint(wire.AppendArrayHeader(b, 2), snapshotFormatV1)
	} else {
		b = wire.AppendUint(wire.AppendArrayHeader(b, 3), snapshotFormat)
	}
	b = appendMapHeader(b, len(es))
	for _, e := range es {
		b = wire.AppendStr(b, e.key)
		b = wire.AppendUint(wire.AppendArrayHeader(b, 2), e.ver)
		b = append(b, e.e.encoding()...)
	}
	return append(b, dd...)
}

func appendMapHeader(b []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
}

// Restore replaces partition p's state, its exactly-once table included,
// with a snapshot. The bytes are validated first: they must be one
// msgpack map whose keys are top-level keys of partition p (no
// separator), each once, and whose values are valid, in a snapshot of a
// known format (see snapshotFormat) whose table is within the table's
// bounds. On error the partition is unchanged. b is not retained. An
// empty b (no bytes at all) empties the partition and its table.
//
// Values are kept as the msgpack they arrived as, each checked without
// decoding (wire.NextValue), and decoded when first read, as a written
// value is: a copy catching up or a server loading its disk restores
// whole partitions, and decoding every value into a tree cost most of it.
func (s *Store) Restore(p int, b []byte) error { return s.restore(p, b, false) }

// RestoreShared is Restore for a b that never changes afterwards (a
// receive buffer kept for it, a snapshot read from disk): a value larger
// than the small-object classes keeps its bytes in b instead of a copy.
// So b stays in memory while any such value does; at worst, once all but
// one of them were overwritten, about twice the state it restored. A
// server joining a cluster of 1 GB copied every value in its restores,
// and the copying was a third of the CPU on its driver.
func (s *Store) RestoreShared(p int, b []byte) error { return s.restore(p, b, true) }

func (s *Store) restore(p int, b []byte, shared bool) error {
	if p < 0 || p >= len(s.parts) {
		return errs.Errorf(errs.InvalidArgument, "%w: partition %d of %d", ErrPartition, p, len(s.parts))
	}
	var st restored
	if len(b) > 0 {
		dd, err := s.parseSnapshot(p, b, &st.t, shared)
		if err != nil {
			return err
		}
		st.dd = dd
	}
	s.replace(p, &st)
	return nil
}

// SnapshotChunks encodes partition p as Snapshot does, in pieces of about
// max bytes (one key's value may pass it), each a map of its keys: a
// piece restores on its own, and StageChunk takes them one by one. There
// is always at least one piece. The first carries the whole exactly-once
// table, beside as many keys as fit; a table larger than max makes it
// larger, as a large value does.
func (s *Store) SnapshotChunks(p, max int) ([][]byte, error) {
	if p < 0 || p >= len(s.parts) {
		return nil, errs.Errorf(errs.InvalidArgument, "%w: partition %d of %d", ErrPartition, p, len(s.parts))
	}
	es, dd := s.parts[p].snapshotState()
	var pieces [][]byte
	for len(es) > 0 || pieces == nil {
		n, size := 0, snapshotHead+len(dd)
		for n < len(es) && (n == 0 || size+snapshotSize(es[n]) <= max) {
			size += snapshotSize(es[n])
			n++
		}
		pieces = append(pieces, appendSnapshot(make([]byte, 0, size), es[:n], dd))
		es, dd = es[n:], nil
	}
	return pieces, nil
}

// StageChunk adds a piece of a snapshot (SnapshotChunks) to partition p's
// staged restore, which first starts anew. The partition is unchanged
// until RestoreStaged; a piece that does not check leaves the staged
// restore as it was. The exactly-once table comes in the piece that
// starts the restore; a later piece with one is refused.
func (s *Store) StageChunk(p int, piece []byte, first bool) error {
	if p < 0 || p >= len(s.parts) {
		return errs.Errorf(errs.InvalidArgument, "%w: partition %d of %d", ErrPartition, p, len(s.parts))
	}
	pt := &s.parts[p]
	if first || pt.staged == nil {
		pt.staged = &restored{}
		first = true
	}
	var t table
	dd, err := s.parseSnapshot(p, piece, &t, false)
	switch {
	case err != nil:
		return err
	case !first && len(dd.writers) > 0:
		return errs.Errorf(errs.InvalidArgument, "%w: an exactly-once table in a piece after the first", ErrSnapshot)
	case first:
		pt.staged.dd = dd
	}
	var dup *cell
	t.all(func(c *cell) bool {
		if pt.staged.t.get(c.key, keyHash(c.key)) != nil {
			dup = c
			return false
		}
		return true
	})
	if dup != nil {
		return errs.Errorf(errs.InvalidArgument, "%w: key %q in two pieces", ErrSnapshot, dup.key)
	}
	t.all(func(c *cell) bool {
		pt.staged.t.add(c, keyHash(c.key))
		return true
	})
	return nil
}

// RestoreStaged replaces partition p's state with its staged restore.
func (s *Store) RestoreStaged(p int) error {
	if p < 0 || p >= len(s.parts) || s.parts[p].staged == nil {
		return errs.Errorf(errs.InvalidArgument, "%w: partition %d has no staged restore", ErrSnapshot, p)
	}
	st := s.parts[p].staged
	s.parts[p].staged = nil
	s.replace(p, st)
	return nil
}

// DropStaged forgets partition p's staged restore, if any.
func (s *Store) DropStaged(p int) {
	if p >= 0 && p < len(s.parts) {
		s.parts[p].staged = nil
	}
}

// parseSnapshot checks a snapshot of partition p (or a piece of one),
// adds its keys to t and returns its exactly-once table (empty for the
// formats without one); shared: large values keep their bytes in b.
func (s *Store) parseSnapshot(p int, b []byte, t *table, shared bool) (dedup, error) {
	bad := func(format string, args ...any) (dedup, error) {
		return dedup{}, errs.Errorf(errs.InvalidArgument, "%w: "+format, append([]any{ErrSnapshot}, args...)...)
	}
	r := bytes.NewReader(b)
	// A decoder of its own, not one from msgpack's pool: a pooled decoder
	// keeps the buffer a string's declared length grew, even when the
	// bytes were not there, and snapshots that each declared a key of 2
	// GB grew one pooled buffer by a quarter or more per call, without
	// bound (a FuzzRestore worker reached 24 GB).
	dec := msgpack.NewDecoder(r)
	versioned := len(b) > 0 && b[0]&0xf0 == 0x90 // a fixarray: the formats' wrapper
	// pair reads the header of an array of two, and says what is wrong
	// with it, if anything.
	pair := func() string {
		switch n, err := dec.DecodeArrayLen(); {
		case err != nil:
			return err.Error()
		case n != 2:
			return fmt.Sprintf("an array of %d, not 2", n)
		}
		return ""
	}
	var withTable bool
	if versioned {
		n, err := dec.DecodeArrayLen()
		if err != nil {
			return bad("the snapshot: %v", err)
		}
		f, err := decodeUint(dec)
		switch {
		case err != nil:
			return bad("the format: %v", err)
		case f == snapshotFormatV1 && n == 2:
		case f == snapshotFormat && n == 3:
			withTable = true
		case f == snapshotFormatV1 || f == snapshotFormat:
			return bad("format %d in an array of %d", f, n)
		default:
			return bad("format %d, want %d or %d", f, snapshotFormatV1, snapshotFormat)
		}
	}
	n, err := dec.DecodeMapLen()
	if err != nil || n < 0 {
		return bad("not a map (%v)", err)
	}
	if n > len(b) {
		return bad("a map of %d keys in %d bytes", n, len(b))
	}
	for range n {
		k, err := dec.DecodeString()
		if err != nil {
			return bad("a key: %v", err)
		}
		if strings.Contains(k, s.sep) {
			return bad("key %q contains the separator", k)
		}
		if q := s.part(k); q != p {
			return bad("key %q is in partition %d, not %d", k, q, p)
		}
		// Last written before versions were kept.
		ver := uint64(1)
		if versioned {
			if why := pair(); why != "" {
				return bad("the entry of %q: %s", k, why)
			}
			if ver, err = decodeUint(dec); err != nil {
				return bad("the version of %q: %v", k, err)
			}
			if ver == 0 {
				return bad("%q at version 0, which is absence", k)
			}
		}
		off := len(b) - r.Len()
		vn, _, err := wire.NextValue(b[off:], true)
		if err != nil {
			return bad("the value of %q: %v", k, err)
		}
		h := keyHash(k)
		if t.get(k, h) != nil {
			return bad("key %q twice", k)
		}
		raw := b[off : off+vn : off+vn]
		var e *entry
		if shared && vn > maxPacked {
			e = &entry{raw: raw}
		} else {
			e = newRawEntry(raw)
		}
		t.add(newCell(k, e, ver), h)
		if _, err := r.Seek(int64(vn), io.SeekCurrent); err != nil {
			return bad("%v", err)
		}
	}
	var dd dedup
	if withTable {
		c := wire.NewCursor(b[len(b)-r.Len():])
		dd = parseDedup(&c)
		if err := c.End(); err != nil {
			return bad("the exactly-once table: %v", err)
		}
	} else if r.Len() > 0 {
		return bad("%d trailing bytes", r.Len())
	}
	return dd, nil
}

// decodeUint reads a non-negative integer, which msgpack's DecodeUint64
// would also take from a negative one.
func decodeUint(dec *msgpack.Decoder) (uint64, error) {
	c, err := dec.PeekCode()
	switch {
	case err != nil:
		return 0, err
	case msgpcode.IsFixedNum(c) && int8(c) < 0, c == msgpcode.Int8, c == msgpcode.Int16, c == msgpcode.Int32, c == msgpcode.Int64:
		v, err := dec.DecodeInt64()
		if err == nil && v >= 0 {
			return uint64(v), nil
		}
		return 0, fmt.Errorf("negative integer %d", v)
	}
	return dec.DecodeUint64()
}

// Clear removes every key of partition p, and empties its exactly-once
// table.
func (s *Store) Clear(p int) error {
	if p < 0 || p >= len(s.parts) {
		return errs.Errorf(errs.InvalidArgument, "%w: partition %d of %d", ErrPartition, p, len(s.parts))
	}
	s.replace(p, &restored{})
	return nil
}

// replace makes st partition p's state.
func (s *Store) replace(p int, st *restored) {
	pt := &s.parts[p]
	pt.write.Lock()
	defer pt.write.Unlock()
	pt.mu.Lock()
	old := pt.t.n
	pt.t, pt.dd = st.t, st.dd
	pt.ver++
	pt.mu.Unlock()
	s.n.Add(int64(st.t.n - old))
}
