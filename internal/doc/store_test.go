package doc

import (
	"bytes"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/wire"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func TestNewOptions(t *testing.T) {
	for _, tc := range []struct {
		n    int
		opts []Option
	}{
		{0, nil},
		{ring.MaxPartitions + 1, nil},
		{1, []Option{WithSeparator('3')}},
		{1, []Option{WithSeparator('-')}},
	} {
		_, err := New(tc.n, tc.opts...)
		requireCode(t, err, errs.InvalidArgument, ErrOption)
	}
}

// TestDefaultPartitioner checks that the store puts keys where the ring's
// default partitioner routes them.
func TestDefaultPartitioner(t *testing.T) {
	r, err := ring.New(ring.WithPartitions(testPartitions))
	require.NoError(t, err)
	m, err := r.Build(nil)
	require.NoError(t, err)
	s := newStore(t)
	for _, k := range []string{"users", "users.ada.name", "a", "", "sessions.x"} {
		top, _, _ := strings.Cut(k, ".")
		require.Equal(t, m.Partition(k), s.part(top), k)
	}
}

func TestGet(t *testing.T) {
	s := storeOf(t, initial())
	for path, want := range map[string]any{
		"n":            int64(5),
		"z":            nil,
		"u.ada.age":    int64(36),
		"u.ada.tags.1": "b",
		"arr.2":        int64(3),
	} {
		got, ok := s.Get(path)
		require.True(t, ok, path)
		require.Equal(t, want, got, path)
	}
	for _, path := range []string{"missing", "missing.x", "n.x", "z.x", "arr.3", "arr.-", "arr.01", "arr.x", "u.ada.tags.2", "u.bob", ""} {
		_, ok := s.Get(path)
		require.False(t, ok, path)
		_, ok = s.GetBytes(path)
		require.False(t, ok, path)
		var v any
		ok, err := s.GetInto(path, &v)
		require.NoError(t, err)
		require.False(t, ok, path)
	}

	b, ok := s.GetBytes("u.ada")
	require.True(t, ok)
	require.Equal(t, canon(t, map[string]any{"tags": []any{"a", "b"}, "age": 36}), b)
	b, ok = s.GetBytes("u")
	require.True(t, ok)
	require.Equal(t, canon(t, initial()["u"]), b)

	var person struct {
		Tags []string `msgpack:"tags"`
		Age  int      `msgpack:"age"`
	}
	ok, err := s.GetInto("u.ada", &person)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{"a", "b"}, person.Tags)
	require.Equal(t, 36, person.Age)

	var wrong int
	ok, err = s.GetInto("u.ada", &wrong)
	require.True(t, ok)
	require.Equal(t, errs.InvalidArgument, errs.CodeOf(err))
}

func TestIteration(t *testing.T) {
	state := map[string]any{}
	for _, k := range []string{"b", "a", "d", "c", "e", "f", "g", "h", "i", "j"} {
		state[k] = k
	}
	s := storeOf(t, state)
	require.Equal(t, len(state), s.Len())
	keys := slices.Collect(maps.Keys(maps.Collect(s.All())))
	slices.Sort(keys)
	var ordered []string
	for k, v := range s.All() {
		require.Equal(t, k, v)
		ordered = append(ordered, k)
	}
	require.Equal(t, keys, ordered, "All is in key order")

	var total int
	for p := range testPartitions {
		var pk []string
		for k := range s.Entries(p) {
			require.Equal(t, p, partOf(s, k))
			pk = append(pk, k)
		}
		require.True(t, slices.IsSorted(pk))
		total += len(pk)
	}
	require.Equal(t, len(state), total)

	for k := range s.All() {
		if k == "c" {
			break // stopping early must not panic
		}
	}
	require.Empty(t, slices.Collect(maps.Keys(maps.Collect(s.Entries(-1)))))
}

func TestSnapshotRestore(t *testing.T) {
	s := storeOf(t, initial())
	other := newStore(t)
	for p, b := range snapshots(t, s) {
		require.NoError(t, other.Restore(p, b))
	}
	require.Equal(t, s.Digest(), other.Digest())
	require.Equal(t, snapshots(t, s), snapshots(t, other))
	require.Equal(t, s.Len(), other.Len())
	v, ok := other.Get("u.ada.tags.0")
	require.True(t, ok)
	require.Equal(t, "a", v)

	empty := newStore(t)
	b, err := empty.Snapshot(0)
	require.NoError(t, err)
	require.Equal(t, []byte{0x92, snapshotFormatV1, 0x80}, b, "[1, {}]: no table, the format before it")

	// Restore replaces; Clear empties.
	p := partOf(s, "n")
	require.NoError(t, other.Restore(p, b))
	_, ok = other.Get("n")
	require.False(t, ok)
	require.NoError(t, s.Clear(partOf(s, "u")))
	_, ok = s.Get("u")
	require.False(t, ok)
	require.Less(t, s.Len(), len(initial()))
	// No bytes at all empty the partition too (a copy dropped when its
	// cluster gave way, partition.State).
	require.NoError(t, other.Restore(partOf(other, "u"), nil))
	_, ok = other.Get("u")
	require.False(t, ok)

	_, err = s.Snapshot(testPartitions)
	requireCode(t, err, errs.InvalidArgument, ErrPartition)
	requireCode(t, s.Clear(-1), errs.InvalidArgument, ErrPartition)
	requireCode(t, s.Restore(testPartitions, b), errs.InvalidArgument, ErrPartition)
}

func TestRestoreRefuses(t *testing.T) {
	s := storeOf(t, initial())
	p := partOf(s, "n")
	other := (p + 1) % testPartitions
	wrongKey := ""
	for i := 0; wrongKey == ""; i++ {
		if k := string(rune('a' + i)); s.part(k) != p {
			wrongKey = k
		}
	}
	before := snapshots(t, s)
	for name, b := range map[string][]byte{
		"not a map":     {0x91, 0x01},
		"invalid":       {0x81, 0xa1, 'n', 0xc1},
		"trailing":      {0x80, 0x80},
		"int key":       {0x81, 0x01, 0x01},
		"separator key": append(append([]byte{0x81, 0xa3}, "n.x"...), 0x01),
		"foreign key":   {0x81, 0xa1, wrongKey[0], 0x01},
		"hostile":       {0xdf, 0xff, 0xff, 0xff, 0xff},
		"format 2":      {0x92, 0x02, 0x80},
		"no format":     {0x91, 0x80},
		"version 0":     {0x92, 0x01, 0x81, 0xa1, 'n', 0x92, 0x00, 0x01},
		"version -1":    {0x92, 0x01, 0x81, 0xa1, 'n', 0x92, 0xff, 0x01},
		"bare value":    {0x92, 0x01, 0x81, 0xa1, 'n', 0x01},
		"entry of 3":    {0x92, 0x01, 0x81, 0xa1, 'n', 0x93, 0x01, 0x01, 0x01},
	} {
		requireCode(t, s.Restore(p, b), errs.InvalidArgument, ErrSnapshot)
		require.Equal(t, before, snapshots(t, s), name)
	}
	_ = other
}

func TestBuilder(t *testing.T) {
	s := storeOf(t, initial())
	b := s.Builder()

	c, err := b.Push("u.ada.tags", "c")
	require.NoError(t, err)
	require.Equal(t, Change{Type: add, Key: "u.ada.tags.-", Value: canon(t, "c")}, c)
	require.NoError(t, apply(s, c))
	c, _ = b.Push("u.ada.tags", map[string]any{"x": []int{1}})
	require.NoError(t, apply(s, c))
	v, _ := s.Get("u.ada.tags")
	require.Equal(t, []any{"a", "b", "c", map[string]any{"x": []any{int64(1)}}}, v)

	c, _ = b.Push("u.ada.age", 1)
	requireCode(t, apply(s, c), errs.FailedPrecondition, ErrNotArray)
	c, _ = b.Push("list", 1)
	require.NoError(t, apply(s, c), "push to a missing path creates the array")
	v, _ = s.Get("list")
	require.Equal(t, []any{int64(1)}, v)

	cs, err := b.Patch("u.ada", map[string]any{"age": 40, "city": "london", "tags": nil})
	require.NoError(t, err)
	require.Equal(t, []string{"u.ada.age", "u.ada.city", "u.ada.tags"}, keysOf(cs))
	for _, c := range cs {
		require.Equal(t, update, c.Type)
		require.NoError(t, apply(s, c))
	}
	v, _ = s.Get("u.ada")
	require.Equal(t, map[string]any{"age": int64(40), "city": "london", "tags": nil}, v)

	cs, err = b.Patch("", map[string]any{"x": 1, "y": 2})
	require.NoError(t, err)
	require.Equal(t, []string{"x", "y"}, keysOf(cs))

	cs, err = b.Patch("brand.new", map[string]any{"a": 1})
	require.NoError(t, err)
	require.NoError(t, apply(s, cs[0]))
	v, _ = s.Get("brand")
	require.Equal(t, map[string]any{"new": map[string]any{"a": int64(1)}}, v)

	_, err = b.Patch("u", map[string]any{"a.b": 1})
	requireCode(t, err, errs.InvalidArgument, ErrPath)
	_, err = b.Update("k", make(chan int))
	requireCode(t, err, errs.InvalidArgument, ErrValue)
	_, err = b.Add("k", map[int]string{1: "a"})
	requireCode(t, err, errs.InvalidArgument, ErrValue)
	_, err = b.Update(strings.Repeat("a.", maxLevel+1)+"a", 1)
	requireCode(t, err, errs.InvalidArgument, ErrPath)

	require.Equal(t, Change{Type: remove, Key: "a.b"}, b.Remove("a.b"))

	// Struct values and Go integer types become the canonical form.
	type point struct{ X, Y int8 }
	c, err = b.Update("p", point{1, -2})
	require.NoError(t, err)
	require.Equal(t, canon(t, map[string]any{"X": 1, "Y": -2}), c.Value)
}

func keysOf(cs []Change) []string {
	var ks []string
	for _, c := range cs {
		ks = append(ks, c.Key)
	}
	return ks
}

func TestSeparator(t *testing.T) {
	s := newStore(t, WithSeparator('/'))
	b := s.Builder()
	require.Equal(t, byte('/'), b.Sep)
	for _, c := range must(b.Patch("users/ada", map[string]any{"name": "Ada", "tags": []any{}})) {
		require.NoError(t, apply(s, c))
	}
	require.NoError(t, apply(s, must(b.Push("users/ada/tags", "x"))))
	require.NoError(t, apply(s, must(b.Update("a.b", 1)))) // '.' is an ordinary byte here
	v, ok := s.Get("users/ada/tags/0")
	require.True(t, ok)
	require.Equal(t, "x", v)
	v, ok = s.Get("a.b")
	require.True(t, ok)
	require.Equal(t, int64(1), v)
	_, ok = s.Get("users.ada")
	require.False(t, ok)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestWithPartitioner(t *testing.T) {
	s, err := New(4, WithPartitioner(func(key string) int { return len(key) % 4 }))
	require.NoError(t, err)
	c := must(s.Builder().Update("abc.x", 1))
	requireCode(t, s.Apply(0, c), errs.InvalidArgument, ErrPartition)
	require.NoError(t, s.Apply(3, c))
	v, ok := s.Get("abc.x")
	require.True(t, ok)
	require.Equal(t, int64(1), v)

	// A partitioner answering out of range finds nothing and applies nothing.
	bad, err := New(2, WithPartitioner(func(string) int { return 7 }))
	require.NoError(t, err)
	requireCode(t, bad.Apply(1, c), errs.InvalidArgument, ErrPartition)
	_, ok = bad.Get("abc")
	require.False(t, ok)
}

// A stored value and the key it is kept under are copies: the change may
// sit in a receive buffer that is reused as soon as Apply returns. Sizes
// straddle every packed class and the fallback past them.
func TestApplyCopiesKeyAndValue(t *testing.T) {
	s := newStore(t)
	want := map[string][]byte{}
	// The first pass adds every key, the second changes each key's value:
	// a new key and a new value for an old key take different paths.
	for pass := range 2 {
		for n := 1; n <= maxPacked+40; n += 7 {
			keyBuf := []byte(fmt.Sprintf("k%03d", n))
			payload := bytes.Repeat([]byte{byte(n + pass)}, n)
			val := wire.AppendBin(nil, payload)
			key := unsafe.String(&keyBuf[0], len(keyBuf)) // aliases keyBuf, as a decoded key may
			require.NoError(t, apply(s, Change{Type: wire.RecordUpdate, Key: key, Value: val}))
			want[string(keyBuf)] = payload
			clear(keyBuf) // the buffer is reused: key now reads as NULs
			clear(val)
		}
	}
	require.Equal(t, len(want), s.Len())
	for k, payload := range want {
		got, ok := s.Get(k)
		require.True(t, ok, "key %q", k)
		require.Equal(t, payload, got, "key %q", k)
	}
	for k := range s.All() {
		require.Contains(t, want, k)
	}
}

// TestNestedApplyCopiesThePath: a change to a path inside a value keeps
// the path's segments as map keys in the tree; they must be copies too,
// not substrings of a key that sits in a receive buffer (a forwarded
// Patch corrupted a server's copy: its new fields' names read as the
// bytes a later frame brought).
func TestNestedApplyCopiesThePath(t *testing.T) {
	s := newStore(t)
	mustApply(t, s, wire.RecordUpdate, "user3", map[string]any{"n": 3})
	for _, path := range []string{"user3.name", "user3.n", "user3.deep.er", "fresh.x"} {
		keyBuf := []byte(path)
		key := unsafe.String(&keyBuf[0], len(keyBuf)) // aliases keyBuf, as a decoded key may
		require.NoError(t, apply(s, Change{Type: wire.RecordUpdate, Key: key, Value: wire.AppendStr(nil, "v")}))
		for i := range keyBuf {
			keyBuf[i] = '#' // the buffer is reused
		}
	}
	got, ok := s.Get("user3")
	require.True(t, ok)
	require.Equal(t, map[string]any{"n": "v", "name": "v", "deep": map[string]any{"er": "v"}}, got)
	got, ok = s.Get("fresh")
	require.True(t, ok)
	require.Equal(t, map[string]any{"x": "v"}, got)
}

// TestDigestFollowsEveryChange: a partition's digest is kept until the
// partition changes (status calls hashed the whole state each time); every
// kind of change makes it computed again, and equal states still have
// equal digests.
func TestDigestFollowsEveryChange(t *testing.T) {
	s := storeOf(t, initial())
	same := storeOf(t, initial())
	empty := newStore(t).Digest()
	d0 := s.Digest()
	require.Equal(t, d0, same.Digest())
	require.Equal(t, d0, s.Digest(), "kept while nothing changed")

	mustApply(t, s, wire.RecordUpdate, "n", 7)
	d1 := s.Digest()
	require.NotEqual(t, d0, d1, "an update")
	mustApply(t, same, wire.RecordUpdate, "n", 7)
	require.Equal(t, d1, same.Digest())

	mustApply(t, s, wire.RecordUpdate, "u.ada.tags.0", "z")
	require.NotEqual(t, d1, s.Digest(), "a nested update")
	mustApply(t, s, wire.RecordUpdate, "u.ada.tags.0", "a")
	require.Equal(t, d1, s.Digest(), "back to the same state")

	mustApply(t, s, wire.RecordAdd, "fresh", 1)
	require.NotEqual(t, d1, s.Digest(), "an add")
	mustApply(t, s, wire.RecordRemove, "fresh", nil)
	require.Equal(t, d1, s.Digest(), "a remove")

	for p := range testPartitions {
		b, err := same.Snapshot(p)
		require.NoError(t, err)
		require.NoError(t, s.Clear(p))
		require.NoError(t, s.Restore(p, b))
	}
	require.Equal(t, d1, s.Digest(), "cleared and restored")
	for p := range testPartitions {
		require.NoError(t, s.Restore(p, nil))
	}
	require.Equal(t, empty, s.Digest(), "emptied")
}

// TestRestoreSharedKeepsTheBytes: RestoreShared restores what Restore
// does, without copying the large values (their bytes stay in the
// snapshot's), and Restore still copies them.
func TestRestoreSharedKeepsTheBytes(t *testing.T) {
	state := map[string]any{}
	for i := range 200 {
		state[fmt.Sprintf("k%03d", i)] = strings.Repeat(string(rune('a'+i%26)), 5_000)
	}
	state["small"] = "x"
	s := storeOf(t, state)
	snaps := snapshots(t, s)
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	total := 0
	for _, b := range snaps {
		total += len(b)
	}
	shared, copied := newStore(t), newStore(t)
	sharedBytes := allocated(func() {
		for p, b := range snaps {
			require.NoError(t, shared.RestoreShared(p, b))
		}
	})
	copiedBytes := allocated(func() {
		for p, b := range snaps {
			require.NoError(t, copied.Restore(p, b))
		}
	})
	t.Logf("snapshots of %d bytes: RestoreShared allocated %d, Restore %d", total, sharedBytes, copiedBytes)
	require.Equal(t, s.Digest(), shared.Digest())
	require.Equal(t, s.Digest(), copied.Digest())
	require.Less(t, sharedBytes, uint64(total/4), "RestoreShared copied the values")
	require.Greater(t, copiedBytes, uint64(total), "Restore kept the snapshot's bytes")
	v, ok := shared.Get("k007")
	require.True(t, ok)
	require.Equal(t, state["k007"], v)
	// A value written over a shared one is the store's own.
	nv, err := msgpack.Marshal("new")
	require.NoError(t, err)
	require.NoError(t, apply(shared, Change{Type: wire.RecordUpdate, Key: "k007", Value: nv}))
	v, _ = shared.Get("k007")
	require.Equal(t, "new", v)
}

// TestGetIntoReplaces checks that GetInto leaves in v the value at path
// and nothing of what v held before: a map or field the stored value
// lacks is not kept from an earlier read. (msgpack, like encoding/json,
// merges into a non-zero target; a caller polling a key into one
// variable then never saw an entry go.)
func TestGetIntoReplaces(t *testing.T) {
	s := newStore(t)
	type user struct {
		Name     string            `msgpack:"name"`
		Sessions map[string]string `msgpack:"sessions,omitempty"`
	}
	apply := func(v any) {
		t.Helper()
		mustApply(t, s, wire.RecordUpdate, "u", v)
	}
	apply(map[string]any{"name": "ann", "sessions": map[string]any{"t1": "x"}})
	var got user
	ok, err := s.GetInto("u", &got)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, user{Name: "ann", Sessions: map[string]string{"t1": "x"}}, got)

	apply(map[string]any{"name": "ann", "sessions": map[string]any{}})
	ok, err = s.GetInto("u", &got)
	require.NoError(t, err)
	require.True(t, ok)
	require.Empty(t, got.Sessions, "the session removed since the last read")

	apply(map[string]any{"name": "bob"})
	got.Sessions = map[string]string{"stale": "y"}
	ok, err = s.GetInto("u", &got)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, user{Name: "bob"}, got)
}
