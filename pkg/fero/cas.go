package fero

import (
	"context"

	"github.com/fero-go/fero/internal/doc"
)

// Version is a key's version, for compare-and-set: the changelog offset of
// the last committed write to its top-level key ("ada" for "ada.langs").
// It only grows while the key exists; an absent key (never written, or
// removed) is at version 0. Every copy of the key holds the same version
// with the same value. A key last written before fero kept versions
// (restored from an older snapshot) is at version 1.
//
// A version read from a node's copy ([Resource.GetVersion]) may be of a
// write the owner has not yet had acknowledged: with Ack, a crash of the
// owner can drop it (a dropped event), and the offset may then be reused
// by another write of the partition. A version read after a Majority
// write, or through the owner, names one write for good.
type Version uint64

// GetVersion returns the value at path in this node's copy, as [Resource.Get],
// with its top-level key's version, read together.
func (r *Resource) GetVersion(path string) (v any, ver Version, ok bool) {
	v, n, ok := r.n.Store().GetVersioned(path)
	return v, Version(n), ok
}

// UpdateIf sets the value at path, as Update, only if path's top-level key
// is at version ver (0: absent), checked by the owner as it commits. A
// mismatch fails with CodeFailedPrecondition, definite, and the current
// version in the error ([VersionOf]). So a read-modify-write from outside
// a handler is safe:
//
//	for {
//		v, ver, _ := users.GetVersion("ada.visits")
//		n, _ := v.(int64)
//		err := users.UpdateIf(ctx, "ada.visits", ver, n+1)
//		if fero.CodeOf(err) != fero.CodeFailedPrecondition {
//			return err
//		}
//	}
//
// Inside a handler, its key's turn makes this unnecessary (see [Handler]).
func (r *Resource) UpdateIf(ctx context.Context, path string, ver Version, value any, wait ...Wait) error {
	c, err := r.build.Update(path, value)
	if err != nil {
		return err
	}
	c.Cond, c.IfVersion = true, uint64(ver)
	return r.write(ctx, c, wait)
}

// RemoveIf deletes the value at path, as Remove, only if path's top-level
// key is at version ver; see [Resource.UpdateIf].
func (r *Resource) RemoveIf(ctx context.Context, path string, ver Version, wait ...Wait) error {
	c := r.build.Remove(path)
	c.Cond, c.IfVersion = true, uint64(ver)
	return r.write(ctx, c, wait)
}

// VersionOf returns the current version a compare-and-set's failure
// carries (an UpdateIf, RemoveIf or PutIf whose version did not match).
func VersionOf(err error) (Version, bool) {
	v, ok := doc.VersionOf(err)
	return Version(v), ok
}

// GetVersion returns the value of key decoded as V, with its version; see
// [Resource.GetVersion].
func (m *Map[V]) GetVersion(key string) (v V, ver Version, ok bool, err error) {
	if err := checkKey(key); err != nil {
		return v, 0, false, err
	}
	st := m.r.n.Store()
	for {
		// The value and the version of one moment: read the version on
		// both sides of the value, and again if a write came between.
		before := st.Version(key)
		var got V
		ok, err = m.r.GetInto(key, &got)
		if after := st.Version(key); after == before {
			return got, Version(before), ok, err
		}
	}
}

// PutIf sets key to v only if key is at version ver (0: absent); see
// [Resource.UpdateIf].
func (m *Map[V]) PutIf(ctx context.Context, key string, ver Version, v V, wait ...Wait) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return m.r.UpdateIf(ctx, key, ver, v, wait...)
}
