package doc

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// value100 is a typical small value: a map that encodes to 100 bytes.
var value100 = map[string]any{"name": "Ada Lovelace", "email": "ada@example.com", "age": 36,
	"tags": []any{"math", "engines"}, "bio": strings.Repeat("b", 30)}

func BenchmarkApplyUpdateTopLevel(b *testing.B) {
	s := newStore(b)
	keys := make([]Change, 1024)
	for i := range keys {
		keys[i] = change(b, s, update, "user"+strconv.Itoa(i), value100)
	}
	require.Len(b, keys[0].Value, 100)
	parts := make([]int, len(keys))
	for i, c := range keys {
		parts[i] = partOf(s, c.Key)
	}
	b.ReportAllocs()
	b.SetBytes(100)
	for i := 0; b.Loop(); i++ {
		j := i % len(keys)
		if err := s.Apply(parts[j], keys[j]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyUpdateNested sets users.<id>.age in a "users" map of n
// users: copy-on-write copies the users map, so the cost grows with n.
func BenchmarkApplyUpdateNested(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run("users="+strconv.Itoa(n), func(b *testing.B) {
			s := newStore(b)
			users := map[string]any{}
			for i := range n {
				users["u"+strconv.Itoa(i)] = value100
			}
			mustApply(b, s, update, "users", users)
			c := change(b, s, update, "users.u1.age", 37)
			p := partOf(s, "users")
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Apply(p, c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkGet(b *testing.B) {
	s := newStore(b)
	mustApply(b, s, update, "users", map[string]any{"ada": value100})
	for _, path := range []string{"users", "users.ada.tags.1"} {
		b.Run(path, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := s.Get(path); !ok {
					b.Fatal("missing")
				}
			}
		})
	}
	b.Run("GetInto", func(b *testing.B) {
		var v struct {
			Name string
			Age  int
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.GetInto("users.ada", &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// store10k returns a one-partition store of 10k keys of 100-byte values.
func store10k(b *testing.B) *Store {
	s, err := New(1)
	require.NoError(b, err)
	for i := range 10_000 {
		mustApply(b, s, update, "user"+strconv.Itoa(i), value100)
	}
	return s
}

// BenchmarkSnapshot snapshots a partition of 10k keys of 100-byte values.
// Encodings are cached per key after the first snapshot, so this is the
// steady state: collecting and sorting keys, copying bytes.
func BenchmarkSnapshot(b *testing.B) {
	s := store10k(b)
	snap, err := s.Snapshot(0)
	require.NoError(b, err)
	b.SetBytes(int64(len(snap)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Snapshot(0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshotCold is the first snapshot after a restore: every value
// is encoded.
func BenchmarkSnapshotCold(b *testing.B) {
	s := store10k(b)
	snap, err := s.Snapshot(0)
	require.NoError(b, err)
	b.SetBytes(int64(len(snap)))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		require.NoError(b, s.Restore(0, snap))
		b.StartTimer()
		if _, err := s.Snapshot(0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRestore(b *testing.B) {
	s := store10k(b)
	snap, err := s.Snapshot(0)
	require.NoError(b, err)
	b.SetBytes(int64(len(snap)))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Restore(0, snap); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDigest(b *testing.B) {
	s := store10k(b)
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Digest()
	}
}
