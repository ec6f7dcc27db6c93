// Store: its options, its partitions and entries, New, and digests of its
// state. Changing it is in apply.go, reading it in read.go, its snapshots
// in snapshot.go.

package doc

import (
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/ring"
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
