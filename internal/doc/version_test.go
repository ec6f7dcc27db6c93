package doc

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
	"github.com/stretchr/testify/require"
)

// applyAt builds a change and applies it at offset version.
func applyAt(t testing.TB, s *Store, version uint64, typ wire.RecordType, key string, v any) {
	t.Helper()
	c := change(t, s, typ, key, v)
	require.NoError(t, s.ApplyAt(partOf(s, key), version, c))
}

// versions returns every top-level key's version.
func versions(s *Store) map[string]uint64 {
	m := map[string]uint64{}
	for k := range s.All() {
		m[k] = s.Version(k)
	}
	return m
}

func TestVersions(t *testing.T) {
	s := newStore(t)
	require.Zero(t, s.Version("k"), "absent")

	applyAt(t, s, 5, add, "k", map[string]any{"x": 1})
	require.Equal(t, uint64(5), s.Version("k"))
	applyAt(t, s, 7, update, "k", map[string]any{"x": 2})
	require.Equal(t, uint64(7), s.Version("k"))
	applyAt(t, s, 9, update, "k.x", 3)
	require.Equal(t, uint64(9), s.Version("k"), "a nested change versions its top-level key")
	require.Equal(t, uint64(9), s.Version("k.x"))
	require.Equal(t, uint64(9), s.Version("k.missing.deeper"), "the top-level key's, whatever lies below")
	applyAt(t, s, 10, remove, "k.missing", nil)
	require.Equal(t, uint64(10), s.Version("k"), "a REMOVE that finds nothing below still touches the key")

	v, ver, ok := s.GetVersioned("k.x")
	require.True(t, ok)
	require.Equal(t, int64(3), v)
	require.Equal(t, uint64(10), ver)
	_, ver, ok = s.GetVersioned("k.nope")
	require.False(t, ok)
	require.Equal(t, uint64(10), ver, "a missing path below a present key")

	// Refused and checked changes leave the version.
	requireCode(t, s.ApplyAt(partOf(s, "k"), 11, change(t, s, add, "k", 1)), errs.FailedPrecondition, ErrExists)
	require.NoError(t, s.Check(partOf(s, "k"), change(t, s, update, "k", 1)))
	require.Equal(t, uint64(10), s.Version("k"))

	applyAt(t, s, 12, remove, "k", nil)
	require.Zero(t, s.Version("k"), "removed: absent")
	_, ver, ok = s.GetVersioned("k")
	require.False(t, ok)
	require.Zero(t, ver)
	applyAt(t, s, 13, remove, "k", nil)
	applyAt(t, s, 14, remove, "k.x", nil)
	require.Zero(t, s.Version("k"), "a REMOVE leaves an absent key absent")
	applyAt(t, s, 15, add, "k", 1)
	require.Equal(t, uint64(15), s.Version("k"), "re-added")

	// Without an offset: 1.
	mustApply(t, s, update, "k", 2)
	require.Equal(t, uint64(1), s.Version("k"))
	applyAt(t, s, 0, update, "j", map[string]any{})
	require.Equal(t, uint64(1), s.Version("j"))
	applyAt(t, s, 20, update, "j.x", 2)
	applyAt(t, s, 0, update, "j.x", 2)
	require.Equal(t, uint64(1), s.Version("j"))
}

// TestVersionsThroughSnapshots: every way a partition travels keeps its
// keys' versions, and a store restored from another snapshots the same.
func TestVersionsThroughSnapshots(t *testing.T) {
	src := newStore(t)
	for i, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "big"} {
		applyAt(t, src, uint64(100+i), update, k, map[string]any{"i": i})
	}
	applyAt(t, src, 1<<40, update, "big", strings.Repeat("x", 2*maxPacked))
	applyAt(t, src, 200, update, "a.i", 7)
	want := versions(src)
	require.Equal(t, uint64(1<<40), want["big"])

	restores := map[string]func(dst *Store, p int) error{
		"Restore": func(dst *Store, p int) error {
			b, err := src.Snapshot(p)
			require.NoError(t, err)
			return dst.Restore(p, b)
		},
		"RestoreShared": func(dst *Store, p int) error {
			b, err := src.Snapshot(p)
			require.NoError(t, err)
			return dst.RestoreShared(p, b)
		},
		"StageChunk": func(dst *Store, p int) error {
			pieces, err := src.SnapshotChunks(p, 20)
			require.NoError(t, err)
			for i, b := range pieces {
				require.NoError(t, dst.StageChunk(p, b, i == 0))
			}
			return dst.RestoreStaged(p)
		},
	}
	for name, restore := range restores {
		t.Run(name, func(t *testing.T) {
			dst := newStore(t)
			applyAt(t, dst, 3, update, "a", "overwritten")
			for p := range testPartitions {
				require.NoError(t, restore(dst, p))
			}
			require.Equal(t, want, versions(dst))
			require.Equal(t, snapshots(t, src), snapshots(t, dst))
			require.Equal(t, src.Digest(), dst.Digest())
		})
	}
}

// TestRestoreUnversionedSnapshot: a snapshot written before versions were
// kept (testdata/snapshot-unversioned.msgpack, made by the code at
// 7c6c9d5: New(1), five UPDATEs, Snapshot(0)) restores by every path,
// each key at version 1.
func TestRestoreUnversionedSnapshot(t *testing.T) {
	old, err := os.ReadFile("testdata/snapshot-unversioned.msgpack")
	require.NoError(t, err)
	want := map[string]any{
		"n": int64(5), "s": "str", "z": nil, "big": strings.Repeat("x", 600),
		"u": map[string]any{"ada": map[string]any{"tags": []any{"a", "b"}, "age": int64(36)}},
	}
	for name, restore := range map[string]func(s *Store) error{
		"Restore":       func(s *Store) error { return s.Restore(0, old) },
		"RestoreShared": func(s *Store) error { return s.RestoreShared(0, old) },
		"StageChunk": func(s *Store) error {
			require.NoError(t, s.StageChunk(0, old, true))
			return s.RestoreStaged(0)
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := New(1)
			require.NoError(t, err)
			require.NoError(t, restore(s))
			got := map[string]any{}
			for k, v := range s.All() {
				got[k] = v
				require.Equal(t, uint64(1), s.Version(k), k)
			}
			require.Equal(t, want, got)

			// Written again, it is in the new format, and restores the same.
			b, err := s.Snapshot(0)
			require.NoError(t, err)
			require.NotEqual(t, old, b)
			again, err := New(1)
			require.NoError(t, err)
			require.NoError(t, again.Restore(0, b))
			require.Equal(t, s.Digest(), again.Digest())
			require.Equal(t, versions(s), versions(again))
		})
	}
}

func TestConditions(t *testing.T) {
	s := newStore(t)
	applyAt(t, s, 5, update, "k", map[string]any{"x": 1})
	p := partOf(s, "k")
	cond := func(c Change, want uint64) Change {
		c.Cond, c.IfVersion = true, want
		return c
	}
	mismatch := func(err error, want, have uint64) {
		t.Helper()
		requireCode(t, err, errs.FailedPrecondition, ErrVersion)
		require.Contains(t, err.Error(), `"k"`)
		require.Contains(t, err.Error(), fmt.Sprintf("version %d, not %d", have, want))
		v, ok := VersionOf(err)
		require.True(t, ok)
		require.Equal(t, have, v)
		// The version crosses the wire with the error.
		var e *errs.Error
		require.ErrorAs(t, err, &e)
		v, ok = VersionOf(errs.FromWire(uint32(e.Code()), e.Message(), e.Details()))
		require.True(t, ok)
		require.Equal(t, have, v)
	}

	for _, c := range []Change{
		change(t, s, update, "k", 2),        // the hot path
		change(t, s, update, "k.x", 2),      // nested
		change(t, s, add, "k.y", 2),         // nested ADD
		change(t, s, remove, "k.x", nil),    // nested REMOVE
		change(t, s, remove, "k", nil),      // REMOVE
		change(t, s, add, "k", 2),           // ADD: the condition comes first
		change(t, s, update, "k.a.b.c", 2),  // deep
		change(t, s, remove, "k.none", nil), // a no-op REMOVE
	} {
		before := snapshots(t, s)
		mismatch(s.Check(p, cond(c, 4)), 4, 5)
		mismatch(s.ApplyAt(p, 6, cond(c, 4)), 4, 5)
		mismatch(s.Apply(p, cond(c, 0)), 0, 5)
		require.Equal(t, before, snapshots(t, s), "%s %q", c.Type, c.Key)
		require.Equal(t, uint64(5), s.Version("k"))
	}

	require.NoError(t, s.Check(p, cond(change(t, s, update, "k.x", 2), 5)))
	require.NoError(t, s.ApplyAt(p, 6, cond(change(t, s, update, "k.x", 2), 5)))
	require.Equal(t, uint64(6), s.Version("k"))
	require.NoError(t, s.ApplyAt(p, 7, cond(change(t, s, update, "k", 3), 6)))
	require.NoError(t, s.ApplyAt(p, 8, cond(change(t, s, remove, "k", nil), 7)))
	require.Zero(t, s.Version("k"))

	// An absent key is at version 0.
	mismatch(s.ApplyAt(p, 9, cond(change(t, s, update, "k", 1), 8)), 8, 0)
	require.NoError(t, s.ApplyAt(p, 9, cond(change(t, s, update, "k.x", 1), 0)))
	v, ver, ok := s.GetVersioned("k")
	require.True(t, ok)
	require.Equal(t, map[string]any{"x": int64(1)}, v)
	require.Equal(t, uint64(9), ver)

	// An InvalidArgument comes before the condition.
	bad := cond(Change{Type: update, Key: "k", Value: []byte{0xc1}}, 1)
	requireCode(t, s.Apply(p, bad), errs.InvalidArgument, ErrValue)

	_, ok = VersionOf(s.Apply(p, change(t, s, add, "k", 1)))
	require.False(t, ok, "no version in another error")
	_, ok = VersionOf(nil)
	require.False(t, ok)
}

// TestApplyAtAllocates: the commonest change, an UPDATE of a top-level
// key, allocates its entry and nothing more, with a version or without.
func TestApplyAtAllocates(t *testing.T) {
	s := newStore(t)
	c := change(t, s, update, "user1", value100)
	p := partOf(s, c.Key)
	require.NoError(t, s.ApplyAt(p, 1, c))
	var ver uint64 = 1
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() {
		ver++
		if err := s.ApplyAt(p, ver, c); err != nil {
			t.Fatal(err)
		}
	}))
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() {
		if err := s.Apply(p, c); err != nil {
			t.Fatal(err)
		}
	}))
}
