// Reading a Store: single keys (Get and its variants), counts, and
// iteration over a partition's or the whole store's keys in key order.

package doc

import (
	"cmp"
	"iter"
	"reflect"
	"slices"
	"strings"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

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
