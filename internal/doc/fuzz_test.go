package doc

import (
	"runtime"
	"testing"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
	"github.com/stretchr/testify/require"
)

// FuzzApply applies arbitrary changes to a populated store: Apply must not
// panic, a failed Apply must leave the state as it was, and a successful
// one must leave a state whose snapshots restore to the same digest.
func FuzzApply(f *testing.F) {
	for _, seed := range []struct {
		op   uint8
		key  string
		part int8
		val  []byte
	}{
		{2, "u.ada.age", 0, []byte{0x01}},
		{1, "u.ada.tags.-", 0, []byte{0xa1, 'c'}},
		{1, "arr.1", 0, []byte{0x80}},
		{3, "arr.0", 0, nil},
		{3, "u.ada", 0, nil},
		{2, "n.x", 0, []byte{0x90}},
		{2, "k", 0, []byte{0xdd, 0xff, 0xff, 0xff, 0xff}},
		{2, "k", 1, []byte{0x81, 0x01, 0x01}},
		{4, "k", 0, []byte{0x01}},
		{1, "z.-", 0, []byte{0xc0}},
	} {
		f.Add(seed.op, seed.key, seed.part, seed.val)
	}
	f.Fuzz(func(t *testing.T, op uint8, key string, part int8, val []byte) {
		s := storeOf(t, initial())
		before, snaps := s.Digest(), snapshots(t, s)
		// Mostly the right partition, sometimes another one.
		p := (partOf(s, key) + int(part)) % (testPartitions + 1)
		err := s.Apply(p, Change{Type: wire.RecordType(op), Key: key, Value: val})
		if err != nil {
			code := errs.CodeOf(err)
			require.True(t, code == errs.InvalidArgument || code == errs.FailedPrecondition, "%v", err)
			require.Equal(t, before, s.Digest())
			require.Equal(t, snaps, snapshots(t, s))
			return
		}
		restored := newStore(t)
		for p, b := range snapshots(t, s) {
			require.NoError(t, restored.Restore(p, b))
		}
		require.Equal(t, s.Digest(), restored.Digest())
	})
}

// FuzzRestore restores arbitrary bytes: Restore must not panic, a refused
// snapshot must leave the partition, its exactly-once table included, as
// it was, and an accepted one must snapshot to bytes that restore to
// themselves.
func FuzzRestore(f *testing.F) {
	good := snapshots(f, storeOf(f, initial()))
	for _, b := range good {
		f.Add(b)
	}
	withTable := storeOf(f, initial())
	for i, w := range []string{"w1", "w2", "w1"} {
		bt := write(f, withTable, w, uint64(1+i), []byte("reply"), "n")
		require.NoError(f, withTable.ApplyBatch(partOf(withTable, "n"), uint64(10+i), bt))
	}
	require.NoError(f, withTable.ApplyBatch(partOf(withTable, "s"), 20, write(f, withTable, "w3", 5, make([]byte, DedupMaxReply+1), "s")))
	for _, p := range []int{partOf(withTable, "n"), partOf(withTable, "s")} {
		f.Add(must(withTable.Snapshot(p)))
	}
	for _, b := range [][]byte{{0x80}, {0x90}, {0x81, 0xa1, 'k', 0x01}, {0xdf, 0xff, 0xff, 0xff, 0xff}, {0x81, 0x01, 0x01}} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// One partition, so any key may be restored into it.
		s, err := New(1)
		require.NoError(t, err)
		mustApply(t, s, update, "old", 1)
		require.NoError(t, s.ApplyBatch(0, 2, write(t, s, "w", 1, []byte("r"), "old")))
		before := must(s.Snapshot(0))
		if err := s.Restore(0, b); err != nil {
			require.Equal(t, errs.InvalidArgument, errs.CodeOf(err), "%v", err)
			require.ErrorIs(t, err, ErrSnapshot)
			require.Equal(t, before, must(s.Snapshot(0)))
			return
		}
		snap, err := s.Snapshot(0)
		require.NoError(t, err)
		again, err := New(1)
		require.NoError(t, err)
		require.NoError(t, again.Restore(0, snap))
		snap2, err := again.Snapshot(0)
		require.NoError(t, err)
		require.Equal(t, snap, snap2)
		require.Equal(t, s.Digest(), again.Digest())
		for k := range s.All() {
			_, ok := s.Get(k)
			require.True(t, ok, "restored key %q cannot be read", k)
		}
	})
}

// TestRestoreOfHugeDeclaredKeysStaysSmall: snapshots whose keys declare 2
// GB and hold a few bytes are refused, and refusing them allocates about
// what each holds. Restore took a pooled msgpack decoder, whose buffer
// each such key grew and the pool kept: 30 in a row allocated gigabytes.
func TestRestoreOfHugeDeclaredKeysStaysSmall(t *testing.T) {
	s, err := New(1)
	require.NoError(t, err)
	b := []byte{0x81, 0xdb, 0x7f, 0xff, 0xff, 0xff, 'k', 'e', 'y'} // {str32 of 2 GB: ...}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 30 {
		require.ErrorIs(t, s.Restore(0, b), ErrSnapshot)
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	require.Less(t, allocated, uint64(128<<20), "30 refused snapshots allocated %d MB", allocated>>20)
}

// FuzzLazyValue: Apply keeps a top-level value undecoded once
// wire.ValueLevel accepts it, and decodes it when first read; so
// ValueLevel must accept exactly what decodeValue accepts, with the same
// level.
func FuzzLazyValue(f *testing.F) {
	for _, b := range [][]byte{
		{0x01}, {0xc0}, {0x90}, {0x80}, {0x91, 0x01}, {0x81, 0xa1, 'a', 0x92, 0x01, 0x02},
		{0x81, 0x01, 0x02},       // an integer key: refused
		{0xc1},                   // the unused code: refused
		{0x92, 0x01},             // short: refused
		{0xd6, 0xff, 0, 0, 0, 0}, // a timestamp ext
		{0xca, 0, 0, 0, 0},       // a float32
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		level, err := wire.ValueLevel(b, true)
		_, want, werr := decodeValue(b)
		require.Equal(t, werr == nil, err == nil, "ValueLevel says %v, decodeValue %v", err, werr)
		if err == nil {
			require.Equal(t, want, level)
		}
	})
}
