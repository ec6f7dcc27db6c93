package doc

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"iter"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Partitioner returns the partition of a top-level key. It must be
// deterministic and agree with the partitioner that routes records: pass
// ring.Map.Partition, or rely on the default.
type Partitioner func(key string) int

// Option configures a [Store]. Options are sealed: only this package makes them.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithSeparator sets the byte that separates path segments (default
// ring.DefaultSeparator, '.'). It must match the partitioner's: the
// default ring partitioner hashes the key up to its first separator. It
// may not be an ASCII digit or '-', which array segments use.
func WithSeparator(sep byte) Option { return optionFunc(func(c *config) { c.sep = sep }) }

// WithPartitioner sets how Get finds a top-level key's partition and how
// Apply and Restore check the partition they are given (default: the ring's
// default, xxhash64 of the top-level key modulo the partition count).
func WithPartitioner(p Partitioner) Option { return optionFunc(func(c *config) { c.partitioner = p }) }

type config struct {
	sep         byte
	partitioner Partitioner
}

// Store is the state of one resource: every partition's top-level keys and
// their values. It is safe for concurrent use; see the package comment for
// what a reader may assume.
type Store struct {
	sep   string
	part  Partitioner
	parts []partition
	n     atomic.Int64 // top-level keys, for Len
}

type partition struct {
	// staged is a restore arriving in pieces (StageChunk), until
	// RestoreStaged swaps it in; only the engine's driver touches it.
	staged *restored
	// write serializes changes to the partition; a writer builds the new
	// value holding only write, so readers wait for nothing but the swap.
	write sync.Mutex
	// mu guards t, the cells in it and dd. Writers hold write as well,
	// so a writer may read them without mu.
	mu sync.RWMutex
	t  table
	dd dedup // the exactly-once table
	// ver counts the changes to t (under mu, written), so a digest of
	// the partition is computed again only when it changed: status calls
	// hashed the whole state each time, a second of CPU per call with
	// 1 GB, and a catching-up node polled for status spent half its time
	// hashing.
	ver uint64
	dig struct {
		sync.Mutex
		ver, sum uint64
		ok       bool
	}
}

// restored is a partition's state to swap in (replace): a restore, whole
// or staged in pieces, or nothing, for Clear.
type restored struct {
	t  table
	dd dedup
}

// entry is one top-level key's value. It is never modified once stored:
// a change stores a new entry.
//
// A value written whole at its top-level key is kept as the msgpack it
// came as (raw), checked but not decoded: copies apply every commit, and
// most values are read far less often than they are written, if at all
// (a value overwritten before anyone reads it is never decoded). The first
// reader decodes it. So that a write pays for no more than it uses, the
// decoded form lives apart, in a decoded made on that first read; the
// entry itself is two words and a pointer.
type entry struct {
	raw  []byte // the value's msgpack as written; nil if the value was set decoded
	lazy atomic.Pointer[decoded]
}

// decoded is an entry's decoded value, and its canonical encoding once
// something asked for it.
type decoded struct {
	val  any
	once sync.Once
	enc  []byte
}

// decodedEntry is an entry whose value was set decoded, in one allocation.
type decodedEntry struct {
	entry
	d decoded
}

func newDecodedEntry(v any) *entry {
	de := &decodedEntry{d: decoded{val: v}}
	de.lazy.Store(&de.d)
	return &de.entry
}

// dec returns the decoded value, decoding raw on first use. Readers that
// race to decode agree on the result, and all keep the first stored.
func (e *entry) dec() *decoded {
	if d := e.lazy.Load(); d != nil {
		return d
	}
	// Apply checked raw with wire.ValueLevel, which refuses everything
	// decodeValue refuses (FuzzLazyValue).
	v, _, _ := decodeValue(e.raw)
	d := &decoded{val: v}
	if e.lazy.CompareAndSwap(nil, d) {
		return d
	}
	return e.lazy.Load()
}

// newRawEntry returns an entry holding a copy of raw, which may sit in a
// receive buffer. Up to maxPacked bytes, the entry and its copy take one
// allocation, sized to one of the allocator's classes: one object per
// value to allocate and for the collector to mark, instead of two.
func newRawEntry(raw []byte) *entry {
	switch n := len(raw); {
	case n <= 16:
		return packEntry[[16]byte](raw)
	case n <= 32:
		return packEntry[[32]byte](raw)
	case n <= 48:
		return packEntry[[48]byte](raw)
	case n <= 64:
		return packEntry[[64]byte](raw)
	case n <= 80:
		return packEntry[[80]byte](raw)
	case n <= 96:
		return packEntry[[96]byte](raw)
	case n <= 112:
		return packEntry[[112]byte](raw)
	case n <= 128:
		return packEntry[[128]byte](raw)
	case n <= 160:
		return packEntry[[160]byte](raw)
	case n <= 192:
		return packEntry[[192]byte](raw)
	case n <= 224:
		return packEntry[[224]byte](raw)
	case n <= 256:
		return packEntry[[256]byte](raw)
	case n <= 320:
		return packEntry[[320]byte](raw)
	case n <= 384:
		return packEntry[[384]byte](raw)
	case n <= maxPacked:
		return packEntry[[maxPacked]byte](raw)
	}
	// Past the small size classes one allocation more is noise beside the
	// copy.
	return &entry{raw: slices.Clone(raw)}
}

// maxPacked is the most value bytes packEntry takes: with the entry's 32
// bytes, 512, the largest class of small objects.
const maxPacked = 480

// packed is an entry followed by the bytes of its value.
type packed[B any] struct {
	entry
	b B
}

func packEntry[B any](raw []byte) *entry {
	p := new(packed[B])
	b := unsafe.Slice((*byte)(unsafe.Pointer(&p.b)), unsafe.Sizeof(p.b))
	n := copy(b, raw)
	p.raw = b[:n:n]
	return &p.entry
}

// value returns the decoded value.
func (e *entry) value() any { return e.dec().val }

// encoding returns the canonical encoding of the value, computed on first
// use: a write does not pay for it, a snapshot or digest pays once.
func (e *entry) encoding() []byte {
	if e.raw != nil && canonicalScalar(e.raw) {
		return e.raw
	}
	d := e.dec()
	d.once.Do(func() { d.enc = appendValue(nil, d.val) })
	return d.enc
}

// New returns an empty store of the given number of partitions.
func New(partitions int, opts ...Option) (*Store, error) {
	c := config{sep: ring.DefaultSeparator}
	for _, o := range opts {
		o.apply(&c)
	}
	if partitions < 1 || partitions > ring.MaxPartitions {
		return nil, errs.Errorf(errs.InvalidArgument, "%w: %d partitions, want 1 to %d", ErrOption, partitions, ring.MaxPartitions)
	}
	if c.sep >= '0' && c.sep <= '9' || c.sep == '-' {
		return nil, errs.Errorf(errs.InvalidArgument, "%w: separator %q is used by array segments", ErrOption, c.sep)
	}
	if c.partitioner == nil {
		h, n := ring.TopLevel(c.sep), uint64(partitions)
		c.partitioner = func(key string) int { return int(h.Hash(key) % n) }
	}
	s := &Store{sep: string(c.sep), part: c.partitioner, parts: make([]partition, partitions)}
	return s, nil
}

// Builder returns a Builder that uses the store's separator.
func (s *Store) Builder() Builder { return Builder{Sep: s.sep[0]} }

// PartitionOf returns the partition of key's top-level segment, as the
// partitioner answers it.
func (s *Store) PartitionOf(key string) int {
	top, _, _ := strings.Cut(key, s.sep)
	return s.part(top)
}

// Partitions returns the number of partitions.
func (s *Store) Partitions() int { return len(s.parts) }

// Apply makes change c to partition p. On error the store is unchanged.
// c.Value is not retained, so it may alias a receive buffer.
// Given the same state and change, every store returns the same error or
// reaches the same state, so a change the owner applied without error
// applies on every copy.
//
// Apply is ApplyAt with no offset: the key's version becomes 1, as
// though it was last written before versions were kept.
func (s *Store) Apply(p int, c Change) error { return s.ApplyAt(p, 0, c) }

// ApplyAt is Apply for the change committed at offset version: the
// change's top-level key gets that version, unless the change leaves the
// key absent. Versions derive only from the offsets passed in, so copies
// that apply the same commits keep the same versions. Version 0 (no
// offset) records 1, since 0 is the version of an absent key.
func (s *Store) ApplyAt(p int, version uint64, c Change) error {
	return s.apply(p, max(version, 1), c, true)
}

// Check reports the error Apply would return, without changing anything.
// It costs as much as Apply. Its answer holds until the next change to p,
// so an owner that checks before committing must check against a state
// that includes every change it committed before.
func (s *Store) Check(p int, c Change) error { return s.apply(p, 0, c, false) }

func (s *Store) apply(p int, version uint64, c Change, commit bool) error {
	pc, err := s.prepare(p, c, commit)
	if err != nil {
		return err
	}
	pt := &s.parts[p]
	pt.write.Lock()
	defer pt.write.Unlock()
	h := keyHash(pc.top)
	cl := pt.t.get(pc.top, h)
	if !pc.nested && c.Type == wire.RecordUpdate && !c.Cond {
		// The commonest change needs no look at the old value.
		if commit {
			s.store(pt, pc.top, h, cl, newRawEntry(c.Value), version)
		}
		return nil
	}
	var old *entry
	var cur uint64
	if cl != nil {
		old, cur = cl.e, cl.ver
	}
	if c.Cond && c.IfVersion != cur {
		return versionError(pc.top, c.IfVersion, cur, "")
	}
	ne, err := pc.result(old, commit)
	switch {
	case err != nil || !commit:
		return err
	case ne != nil:
		s.store(pt, pc.top, h, cl, ne, version)
	case cl != nil:
		pt.mu.Lock()
		pt.t.remove(pc.top, h)
		pt.ver++
		pt.mu.Unlock()
		s.n.Add(-1)
	}
	return nil
}

// prepared is a change that passed every check that does not depend on
// the state, split at its top-level key.
type prepared struct {
	c         Change
	top, rest string
	nested    bool
	e         edit
}

// prepare checks c for every error that does not depend on the state
// (InvalidArgument). keep: the change is to be stored, so the parts of its
// key the stored tree keeps are copied.
func (s *Store) prepare(p int, c Change, keep bool) (prepared, error) {
	top, rest, nested := strings.Cut(c.Key, s.sep)
	if nested && keep {
		// The path's segments become map keys in the stored tree, and
		// the key may sit in a receive buffer (TestNestedApplyCopiesThePath).
		// (A top-level key is copied where it is stored.)
		rest = strings.Clone(rest)
	}
	if err := s.checkPartition(p, top, c.Key); err != nil {
		return prepared{}, err
	}
	pc := prepared{c: c, top: top, rest: rest, nested: nested, e: edit{typ: c.Type, key: c.Key, sep: s.sep}}
	switch c.Type {
	case wire.RecordAdd, wire.RecordUpdate:
		var level int
		var err error
		if nested {
			// A value placed inside another is decoded now, into the tree.
			pc.e.val, level, err = decodeValue(c.Value)
		} else {
			level, err = wire.ValueLevel(c.Value, true)
		}
		if err != nil {
			return prepared{}, errs.Errorf(errs.InvalidArgument, "%w for %q: %w", ErrValue, c.Key, err)
		}
		if err := checkDepth(c.Key, s.sep, level); err != nil {
			return prepared{}, err
		}
	case wire.RecordRemove:
	case wire.RecordBatch:
		return prepared{}, errs.Errorf(errs.InvalidArgument, "%w: %s is not a change: apply it with ApplyBatch", ErrType, c.Type)
	default:
		return prepared{}, errs.Errorf(errs.InvalidArgument, "%w: %d", ErrType, uint8(c.Type))
	}
	return pc, nil
}

// result returns the entry the change leaves at its top-level key, whose
// entry is old (nil: absent); nil when it leaves the key absent. Without
// build it only checks, and makes no entry.
func (pc *prepared) result(old *entry, build bool) (*entry, error) {
	c := &pc.c
	switch {
	case pc.nested:
		var cur any
		switch {
		case old != nil:
			cur = old.value()
		case c.Type == wire.RecordRemove:
			return nil, nil
		default:
			cur = pc.e.missing(pc.rest)
		}
		nv, changed, err := pc.e.apply(cur, pc.rest)
		switch {
		case err != nil:
			return nil, err
		case !changed:
			// A REMOVE of a missing path: the value stays, and the key
			// still takes the change's version.
			return old, nil
		case !build:
			return nil, nil
		}
		return newDecodedEntry(nv), nil
	case c.Type == wire.RecordRemove:
		return nil, nil
	case c.Type == wire.RecordAdd && old != nil:
		return nil, errs.Errorf(errs.FailedPrecondition, "%w: %q", ErrExists, c.Key)
	case !build:
		return nil, nil
	}
	return newRawEntry(c.Value), nil
}

// store sets top, whose hash is h and whose cell in pt is cl (nil for a
// new key), to e at version. The caller holds pt.write.
func (s *Store) store(pt *partition, top string, h uint64, cl *cell, e *entry, version uint64) {
	if cl != nil {
		pt.mu.Lock()
		cl.e, cl.ver = e, version
		pt.ver++
		pt.mu.Unlock()
		return
	}
	cl = newCell(top, e, version)
	pt.mu.Lock()
	pt.t.add(cl, h)
	pt.ver++
	pt.mu.Unlock()
	s.n.Add(1)
}

// VersionDetail is the type of the errs.Detail a version mismatch
// (ErrVersion) carries: the key's current version, a msgpack uint.
const VersionDetail = "fero.version"

// versionError reports a condition on top that wanted version want where
// the key is at have; why, if not empty, says more.
func versionError(top string, want, have uint64, why string) error {
	if why != "" {
		why = " (" + why + ")"
	}
	return errs.Errorf(errs.FailedPrecondition, "%w: %q is at version %d%s, not %d", ErrVersion, top, have, why, want).
		WithDetail(errs.Detail{Type: VersionDetail, Value: wire.AppendUint(nil, have)})
}

// VersionOf returns the current version a version mismatch reports (its
// VersionDetail), on this node or after the error crossed the wire.
func VersionOf(err error) (uint64, bool) {
	for _, d := range errs.DetailsOf(err) {
		if d.Type != VersionDetail {
			continue
		}
		c := wire.NewCursor(d.Value)
		if v := c.Uint("version"); c.End() == nil {
			return v, true
		}
	}
	return 0, false
}

func (s *Store) checkPartition(p int, top, key string) error {
	if p < 0 || p >= len(s.parts) {
		return errs.Errorf(errs.InvalidArgument, "%w: partition %d of %d", ErrPartition, p, len(s.parts))
	}
	if q := s.part(top); q != p {
		return errs.Errorf(errs.InvalidArgument, "%w: %q is in partition %d, not %d", ErrPartition, key, q, p)
	}
	return nil
}

// checkDepth refuses a value of the given level that would nest deeper
// than maxLevel once placed at key.
func checkDepth(key, sep string, level int) error {
	if _, rest, nested := strings.Cut(key, sep); nested {
		level += strings.Count(rest, sep) + 1
	}
	if level > maxLevel {
		return errs.Errorf(errs.InvalidArgument, "%w: %q: value would nest %d levels deep, more than %d",
			ErrPath, key, level, maxLevel)
	}
	return nil
}

// partitionOf returns the partition of a top-level key, or nil when the
// partitioner answers out of range.
func (s *Store) partitionOf(top string) *partition {
	p := s.part(top)
	if p < 0 || p >= len(s.parts) {
		return nil
	}
	return &s.parts[p]
}

// lookup returns the entry of path's top-level key and its version, and
// the value at path; ok is false when there is none (the version is still
// the top-level key's).
func (s *Store) lookup(path string) (e *entry, version uint64, v any, ok bool) {
	top, rest, nested := strings.Cut(path, s.sep)
	pt := s.partitionOf(top)
	if pt == nil {
		return nil, 0, nil, false
	}
	pt.mu.RLock()
	if cl := pt.t.get(top, keyHash(top)); cl != nil {
		e, version = cl.e, cl.ver
	}
	pt.mu.RUnlock()
	if e == nil {
		return nil, 0, nil, false
	}
	v = e.value()
	for nested {
		var seg string
		seg, rest, nested = strings.Cut(rest, s.sep)
		if v, ok = child(v, seg); !ok {
			return nil, version, nil, false
		}
	}
	return e, version, v, true
}

// Get returns the value at path. The value is shared with the store and
// with every other reader: treat it as read-only (use GetInto for a copy
// of your own). It never changes under you; a later change stores a new
// value rather than modifying this one.
func (s *Store) Get(path string) (any, bool) {
	_, _, v, ok := s.lookup(path)
	return v, ok
}

// Version returns the version of path's top-level key: the offset of the
// last change committed under it (ApplyAt), 1 if that change came without
// one, and 0 if the key is absent.
func (s *Store) Version(path string) uint64 {
	top, _, _ := strings.Cut(path, s.sep)
	pt := s.partitionOf(top)
	if pt == nil {
		return 0
	}
	pt.mu.RLock()
	defer pt.mu.RUnlock()
	if cl := pt.t.get(top, keyHash(top)); cl != nil {
		return cl.ver
	}
	return 0
}

// GetVersioned is Get with the version of path's top-level key, read at
// the same moment: a condition on that version (Change.IfVersion) holds
// only if nothing changed the key since. When the top-level key is
// present but path below it is not, ok is false and version is still the
// key's.
func (s *Store) GetVersioned(path string) (v any, version uint64, ok bool) {
	_, version, v, ok = s.lookup(path)
	return v, version, ok
}

// GetBytes returns the canonical msgpack encoding of the value at path.
// For a top-level key the bytes are cached and shared: do not modify them.
func (s *Store) GetBytes(path string) ([]byte, bool) {
	e, _, v, ok := s.lookup(path)
	switch {
	case !ok:
		return nil, false
	case !strings.Contains(path, s.sep):
		return e.encoding(), true
	}
	return appendValue(nil, v), true
}

// GetInto decodes the value at path into v, a pointer, by way of its
// msgpack encoding; ok is false, and v untouched, when there is no value.
// A value found replaces what v held: nothing of an earlier read is kept.
func (s *Store) GetInto(path string, v any) (ok bool, err error) {
	b, ok := s.GetBytes(path)
	if !ok {
		return false, nil
	}
	// msgpack merges into what v holds (as encoding/json does): a map
	// entry or field the stored value lacks would survive from an
	// earlier read into the same variable. A read replaces.
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv.Elem().SetZero()
	}
	if err := wire.Unmarshal(b, v); err != nil {
		return true, errs.Errorf(errs.InvalidArgument, "decode %q into %T: %w", path, v, err)
	}
	return true, nil
}

// Len returns the number of top-level keys.
func (s *Store) Len() int { return int(s.n.Load()) }

// PartitionLen returns the number of top-level keys in partition p.
func (s *Store) PartitionLen(p int) int {
	pt := &s.parts[p]
	pt.mu.RLock()
	defer pt.mu.RUnlock()
	return pt.t.n
}

type kv struct {
	key string
	e   *entry
	ver uint64
}

// sorted returns partition p's entries in key order, as of one moment.
func (pt *partition) sorted() []kv {
	es, _ := pt.sortedAt()
	return es
}

// sortedAt is sorted, with the partition's version the entries are of.
func (pt *partition) sortedAt() ([]kv, uint64) {
	pt.mu.RLock()
	es := pt.unsorted()
	ver := pt.ver
	pt.mu.RUnlock()
	sortEntries(es)
	return es, ver
}

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

// unsorted returns the partition's entries; the caller holds mu.
func (pt *partition) unsorted() []kv {
	es := make([]kv, 0, pt.t.n)
	for cl := range pt.t.all {
		es = append(es, kv{cl.key, cl.e, cl.ver})
	}
	return es
}

func sortEntries(es []kv) {
	slices.SortFunc(es, func(a, b kv) int { return cmp.Compare(a.key, b.key) })
}

// Entries yields partition p's top-level keys and values in key order, as
// they were when iteration began. Values are read-only, as with Get. An
// out-of-range p yields nothing.
func (s *Store) Entries(p int) iter.Seq2[string, any] {
	return func(yield func(string, any) bool) {
		if p < 0 || p >= len(s.parts) {
			return
		}
		for _, e := range s.parts[p].sorted() {
			if !yield(e.key, e.e.value()) {
				return
			}
		}
	}
}

// EncodedEntries yields partition p's top-level keys in key order, each
// with its value's canonical msgpack encoding, as they were when
// iteration began: what a backup restores by writing each key again. The
// bytes are shared with the store; do not change them. An out-of-range p
// yields nothing.
func (s *Store) EncodedEntries(p int) iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		if p < 0 || p >= len(s.parts) {
			return
		}
		for _, e := range s.parts[p].sorted() {
			if !yield(e.key, e.e.encoding()) {
				return
			}
		}
	}
}

// All yields every top-level key and value in key order. Each partition is
// read at one moment, but not all partitions at the same moment.
func (s *Store) All() iter.Seq2[string, any] {
	return func(yield func(string, any) bool) {
		var es []kv
		for i := range s.parts {
			es = append(es, s.parts[i].sorted()...)
		}
		slices.SortFunc(es, func(a, b kv) int { return cmp.Compare(a.key, b.key) })
		for _, e := range es {
			if !yield(e.key, e.e.value()) {
				return
			}
		}
	}
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

// Digest returns a hash of the whole state: every partition's number, keys
// and canonical values in order. Two stores with equal digests hold the
// same state (up to hash collisions); tests use it to compare replicas.
// Versions are not hashed, nor the exactly-once table: a digest compares
// values, and copies that hold equal values agree however they came by
// them (one restored from a snapshot written before versions were kept
// holds version 1 where the other holds offsets).
func (s *Store) Digest() uint64 {
	parts := make([]uint64, len(s.parts))
	for p := range s.parts {
		parts[p] = s.PartitionDigest(p)
	}
	return CombineDigests(parts)
}

// CombineDigests is Digest from every partition's PartitionDigest, in
// partition order: what a backup's partitions add up to.
func CombineDigests(parts []uint64) uint64 {
	h := xxhash.New()
	var buf [12]byte
	for p, d := range parts {
		binary.BigEndian.PutUint32(buf[:4], uint32(p))
		binary.BigEndian.PutUint64(buf[4:], d)
		_, _ = h.Write(buf[:])
	}
	return h.Sum64()
}

// PartitionDigest is Digest for partition p alone: where two stores'
// digests differ, it finds the partitions that do. It is kept until the
// partition changes.
func (s *Store) PartitionDigest(p int) uint64 {
	pt := &s.parts[p]
	pt.dig.Lock()
	defer pt.dig.Unlock()
	pt.mu.RLock()
	ver := pt.ver
	pt.mu.RUnlock()
	if pt.dig.ok && pt.dig.ver == ver {
		return pt.dig.sum
	}
	h := xxhash.New()
	es, ver := pt.sortedAt()
	var buf []byte
	for _, e := range es {
		enc := e.e.encoding()
		buf = binary.AppendUvarint(buf[:0], uint64(len(e.key)))
		buf = append(buf, e.key...)
		buf = binary.AppendUvarint(buf, uint64(len(enc)))
		_, _ = h.Write(buf)
		_, _ = h.Write(enc)
	}
	pt.dig.ver, pt.dig.sum, pt.dig.ok = ver, h.Sum64(), true
	return pt.dig.sum
}

// Warm loads, changing nothing, the memory that changes to keys[i] in
// partitions parts[i] will touch first: each top-level key's slot and
// cell. It returns a value computed from what it loaded; keep it (a sum
// will do), so the loads cannot be optimized away.
//
// A caller about to apply a batch of changes warms them first. Applying
// them one by one waits out each cache miss in turn, since each load needs
// the one before (the slot says where the cell is); Warm makes the first
// loads of every key, then the second, so the misses of many keys overlap.
//
// Warm reads without locking, so only a goroutine that makes changes to
// the store, or is ordered with every one that does, may call it.
func (s *Store) Warm(parts []int, keys []string) uint64 {
	const chunk = 32
	var sink uint64
	var slots [chunk]*tslot
	var cells [chunk]*cell
	for len(keys) > 0 && len(parts) > 0 {
		n := min(len(keys), len(parts), chunk)
		for i := range n {
			slots[i] = nil
			if p := parts[i]; p >= 0 && p < len(s.parts) {
				if t := &s.parts[p].t; len(t.slots) > 0 {
					top, _, _ := strings.Cut(keys[i], s.sep)
					slots[i] = &t.slots[keyHash(top)&uint64(len(t.slots)-1)]
				}
			}
		}
		for i := range n {
			cells[i] = nil
			if slots[i] != nil {
				cells[i] = slots[i].c
			}
		}
		for i := range n {
			if cells[i] != nil {
				sink += uint64(len(cells[i].key))
			}
		}
		parts, keys = parts[n:], keys[n:]
	}
	return sink
}
