package fero

import (
	"context"
	"iter"
	"slices"
	"strings"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// Map is the typed form of a resource: top-level keys mapped to values of
// type V, encoded with msgpack (struct fields by their msgpack tags). It
// is a thin view over a [Resource]; the resource's dynamic form stays
// available through [Map.Resource], for nested paths and custom verbs.
//
// Keys are top-level keys and may not contain the path separator '.'.
type Map[V any] struct {
	r *Resource
}

// OpenMap opens the named resource (see [Open]) in its typed form.
func OpenMap[V any](ctx context.Context, name string, opts ...NodeOption) (*Map[V], error) {
	r, err := Open(ctx, name, opts...)
	if err != nil {
		return nil, err
	}
	return &Map[V]{r: r}, nil
}

// Typed views an open resource as a Map of V. Several views of one
// resource may coexist.
func Typed[V any](r *Resource) *Map[V] { return &Map[V]{r: r} }

// Resource returns the resource in its dynamic form.
func (m *Map[V]) Resource() *Resource { return m.r }

func checkKey(key string) error {
	if key == "" || strings.IndexByte(key, '.') >= 0 {
		return errs.Errorf(errs.InvalidArgument, "fero: typed key %q must be non-empty and contain no '.'", key)
	}
	return nil
}

// Get returns the value at key in this node's copy. ok is false when there
// is none; err is set when the stored value does not decode as V.
func (m *Map[V]) Get(key string) (v V, ok bool, err error) {
	if err := checkKey(key); err != nil {
		return v, false, err
	}
	ok, err = m.r.GetInto(key, &v)
	return v, ok, err
}

// Len returns the number of keys in this node's copy.
func (m *Map[V]) Len() int { return m.r.Len() }

// All yields every key and its value decoded as V, each partition read at
// one moment (see [Resource.All]). A value that does not decode as V
// (written through the dynamic form) is skipped; Get reports it.
func (m *Map[V]) All() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		for k, val := range m.r.All() {
			var v V
			b, err := msgpack.Marshal(val)
			if err != nil || wire.Unmarshal(b, &v) != nil {
				continue
			}
			if !yield(k, v) {
				return
			}
		}
	}
}

// Snapshot returns every key and value, each partition read at one offset.
func (m *Map[V]) Snapshot() map[string]V {
	out := make(map[string]V, m.Len())
	for k, v := range m.All() {
		out[k] = v
	}
	return out
}

// Put sets key to v (an UPDATE).
func (m *Map[V]) Put(ctx context.Context, key string, v V, wait ...Wait) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return m.r.Update(ctx, key, v, wait...)
}

// Add sets key to v only if key has no value; otherwise it fails with
// CodeFailedPrecondition.
func (m *Map[V]) Add(ctx context.Context, key string, v V, wait ...Wait) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return m.r.Add(ctx, key, v, wait...)
}

// Delete removes key. Deleting a key that is not there succeeds.
func (m *Map[V]) Delete(ctx context.Context, key string, wait ...Wait) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return m.r.Remove(ctx, key, wait...)
}

// Changes yields the resource's changes (see [Resource.Changes]; opts
// include [Prefix]); use [Change.Decode] to read a value as V.
func (m *Map[V]) Changes(ctx context.Context, opts ...StreamOption) iter.Seq[Change] {
	return m.r.Changes(ctx, opts...)
}

// Watch yields the changes under prefix (see [Prefix]; "" is the whole
// map, a key is that key and the paths under it), each with its value
// decoded as V. The value is V's zero when there is none to decode: a
// Remove, a Restored partition, a nested path written through the dynamic
// form, or a value that does not decode as V ([Change.Decode] says why).
// A Dropped change's value is the one that was undone, not the key's
// value now; after a Dropped or Restored change, [Map.Get] reads what the
// key holds. No change is skipped, so a watcher never mistakes a missing change for
// an unchanged key. opts are those of [Resource.Changes].
func (m *Map[V]) Watch(ctx context.Context, prefix string, opts ...StreamOption) iter.Seq2[Change, V] {
	return func(yield func(Change, V) bool) {
		for c := range m.r.Changes(ctx, slices.Concat(opts, []StreamOption{Prefix(prefix)})...) {
			var v V
			if len(c.Value) > 0 && strings.IndexByte(c.Key, '.') < 0 && wire.DecodeValue(c.Value, &v) != nil {
				v = *new(V)
			}
			if !yield(c, v) {
				return
			}
		}
	}
}

// Close closes the resource.
func (m *Map[V]) Close() error { return m.r.Close() }
