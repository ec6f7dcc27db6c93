package doc

import (
	"strings"
	"testing"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
	"github.com/stretchr/testify/require"
)

const (
	add    = wire.RecordAdd
	update = wire.RecordUpdate
	remove = wire.RecordRemove
)

// initial is the state every apply case starts from.
func initial() map[string]any {
	return map[string]any{
		"u":   map[string]any{"ada": map[string]any{"tags": []any{"a", "b"}, "age": 36}},
		"n":   5,
		"s":   "str",
		"z":   nil,
		"arr": []any{1, 2, 3},
	}
}

// with returns initial() with top-level key k set to v (deleted for del).
func with(k string, v any) map[string]any {
	m := initial()
	m[k] = v
	return m
}

func without(k string) map[string]any {
	m := initial()
	delete(m, k)
	return m
}

func ada(tags []any, extra ...any) map[string]any {
	m := map[string]any{"tags": tags, "age": 36}
	for i := 0; i < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return map[string]any{"ada": m}
}

func TestApply(t *testing.T) {
	deep := strings.Repeat("d.", maxLevel) + "x"
	tests := []struct {
		name string
		typ  wire.RecordType
		key  string
		val  any
		raw  []byte // used instead of val when set
		want map[string]any
		code errs.Code
		err  error
	}{
		// UPDATE
		{name: "update new top-level key", typ: update, key: "k", val: 1, want: with("k", 1)},
		{name: "update replaces top-level", typ: update, key: "n", val: "x", want: with("n", "x")},
		{name: "update nested map key", typ: update, key: "u.ada.age", val: 37,
			want: with("u", map[string]any{"ada": map[string]any{"tags": []any{"a", "b"}, "age": 37}})},
		{name: "update creates maps under new key", typ: update, key: "new.a.b", val: true,
			want: with("new", map[string]any{"a": map[string]any{"b": true}})},
		{name: "update creates maps under existing", typ: update, key: "u.bob.age", val: 1,
			want: with("u", map[string]any{"ada": ada([]any{"a", "b"})["ada"], "bob": map[string]any{"age": 1}})},
		{name: "update digit segment on map is a key", typ: update, key: "u.7", val: 1,
			want: with("u", map[string]any{"ada": ada([]any{"a", "b"})["ada"], "7": 1})},
		{name: "update empty segment is a key", typ: update, key: "u.", val: 1,
			want: with("u", map[string]any{"ada": ada([]any{"a", "b"})["ada"], "": 1})},
		{name: "update array element", typ: update, key: "u.ada.tags.1", val: "c", want: with("u", ada([]any{"a", "c"}))},
		{name: "update array element deep", typ: update, key: "arr.0", val: map[string]any{"x": 1},
			want: with("arr", []any{map[string]any{"x": 1}, 2, 3})},
		{name: "update array index at len", typ: update, key: "arr.3", val: 1, code: errs.FailedPrecondition, err: ErrIndex},
		{name: "update array index beyond", typ: update, key: "arr.9", val: 1, code: errs.FailedPrecondition, err: ErrIndex},
		{name: "update array push segment", typ: update, key: "arr.-", val: 1, code: errs.FailedPrecondition, err: ErrIndex},
		{name: "update array word segment", typ: update, key: "arr.x", val: 1, code: errs.FailedPrecondition, err: ErrIndex},
		{name: "update array leading zero", typ: update, key: "arr.01", val: 1, code: errs.FailedPrecondition, err: ErrIndex},
		{name: "update array negative", typ: update, key: "arr.-1", val: 1, code: errs.FailedPrecondition, err: ErrIndex},
		{name: "update array huge index", typ: update, key: "arr.99999999999999999999", val: 1, code: errs.FailedPrecondition, err: ErrIndex},
		{name: "update through array out of range", typ: update, key: "arr.5.x", val: 1, code: errs.FailedPrecondition, err: ErrIndex},
		{name: "update through number", typ: update, key: "n.x", val: 1, code: errs.FailedPrecondition, err: ErrNotContainer},
		{name: "update through string deep", typ: update, key: "s.x.y", val: 1, code: errs.FailedPrecondition, err: ErrNotContainer},
		{name: "update through nil", typ: update, key: "z.x", val: 1, code: errs.FailedPrecondition, err: ErrNotContainer},
		{name: "update through array element", typ: update, key: "arr.0.x", val: 1, code: errs.FailedPrecondition, err: ErrNotContainer},
		{name: "update no value", typ: update, key: "k", raw: []byte{}, code: errs.InvalidArgument, err: ErrValue},
		{name: "update invalid code", typ: update, key: "k", raw: []byte{0xc1}, code: errs.InvalidArgument, err: ErrValue},
		{name: "update trailing bytes", typ: update, key: "k", raw: []byte{0x01, 0x02}, code: errs.InvalidArgument, err: ErrValue},
		{name: "update truncated", typ: update, key: "k", raw: []byte{0x92, 0x01}, code: errs.InvalidArgument, err: ErrValue},
		{name: "update hostile length", typ: update, key: "k", raw: []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, code: errs.InvalidArgument, err: ErrValue},
		{name: "update int map key", typ: update, key: "k", raw: []byte{0x81, 0x01, 0x02}, code: errs.InvalidArgument, err: ErrValue},
		{name: "update too deep", typ: update, key: deep, val: []any{1}, code: errs.InvalidArgument, err: ErrPath},
		{name: "update deepest allowed", typ: update, key: deep, val: 1,
			want: with("d", nest(maxLevel))},
		{name: "unknown type", typ: 9, key: "k", val: 1, code: errs.InvalidArgument, err: ErrType},

		// ADD
		{name: "add new top-level key", typ: add, key: "k", val: 1, want: with("k", 1)},
		{name: "add existing top-level key", typ: add, key: "n", val: 1, code: errs.FailedPrecondition, err: ErrExists},
		{name: "add existing nil top-level key", typ: add, key: "z", val: 1, code: errs.FailedPrecondition, err: ErrExists},
		{name: "add nested map key", typ: add, key: "u.ada.city", val: "london", want: with("u", ada([]any{"a", "b"}, "city", "london"))},
		{name: "add existing nested key", typ: add, key: "u.ada.age", val: 1, code: errs.FailedPrecondition, err: ErrExists},
		{name: "add creates maps", typ: add, key: "new.a", val: 1, want: with("new", map[string]any{"a": 1})},
		{name: "add array front", typ: add, key: "arr.0", val: 0, want: with("arr", []any{0, 1, 2, 3})},
		{name: "add array middle", typ: add, key: "arr.2", val: 9, want: with("arr", []any{1, 2, 9, 3})},
		{name: "add array at len", typ: add, key: "arr.3", val: 4, want: with("arr", []any{1, 2, 3, 4})},
		{name: "add array push", typ: add, key: "arr.-", val: 4, want: with("arr", []any{1, 2, 3, 4})},
		{name: "add nested push", typ: add, key: "u.ada.tags.-", val: "c", want: with("u", ada([]any{"a", "b", "c"}))},
		{name: "add array beyond len", typ: add, key: "arr.4", val: 4, code: errs.FailedPrecondition, err: ErrIndex},
		{name: "add array word", typ: add, key: "arr.x", val: 4, code: errs.FailedPrecondition, err: ErrIndex},
		{name: "add push to missing creates array", typ: add, key: "k.-", val: 1, want: with("k", []any{1})},
		{name: "add push to missing nested", typ: add, key: "u.bob.tags.-", val: 1,
			want: with("u", map[string]any{"ada": ada([]any{"a", "b"})["ada"], "bob": map[string]any{"tags": []any{1}}})},
		{name: "add push to map", typ: add, key: "u.-", val: 1, code: errs.FailedPrecondition, err: ErrNotArray},
		{name: "add push to scalar", typ: add, key: "s.-", val: 1, code: errs.FailedPrecondition, err: ErrNotArray},
		{name: "add push to nil", typ: add, key: "z.-", val: 1, code: errs.FailedPrecondition, err: ErrNotArray},
		{name: "update dash on map is a key", typ: update, key: "u.-", val: 1,
			want: with("u", map[string]any{"ada": ada([]any{"a", "b"})["ada"], "-": 1})},
		{name: "add push as intermediate", typ: add, key: "arr.-.x", val: 1, code: errs.FailedPrecondition, err: ErrIndex},
		{name: "add invalid value", typ: add, key: "k", raw: []byte{0xc1}, code: errs.InvalidArgument, err: ErrValue},

		// REMOVE
		{name: "remove top-level key", typ: remove, key: "n", want: without("n")},
		{name: "remove nil top-level key", typ: remove, key: "z", want: without("z")},
		{name: "remove missing top-level key", typ: remove, key: "k", want: initial()},
		{name: "remove nested key", typ: remove, key: "u.ada.age",
			want: with("u", map[string]any{"ada": map[string]any{"tags": []any{"a", "b"}}})},
		{name: "remove last nested key keeps map", typ: remove, key: "u.ada", want: with("u", map[string]any{})},
		{name: "remove missing nested key", typ: remove, key: "u.bob", want: initial()},
		{name: "remove missing intermediate", typ: remove, key: "u.bob.age", want: initial()},
		{name: "remove under missing top-level", typ: remove, key: "k.a.b", want: initial()},
		{name: "remove array first", typ: remove, key: "arr.0", want: with("arr", []any{2, 3})},
		{name: "remove array middle", typ: remove, key: "arr.1", want: with("arr", []any{1, 3})},
		{name: "remove array last", typ: remove, key: "arr.2", want: with("arr", []any{1, 2})},
		{name: "remove array out of range", typ: remove, key: "arr.3", want: initial()},
		{name: "remove array word", typ: remove, key: "arr.x", want: initial()},
		{name: "remove array push segment", typ: remove, key: "arr.-", want: initial()},
		{name: "remove through array out of range", typ: remove, key: "arr.7.x", want: initial()},
		{name: "remove through scalar", typ: remove, key: "n.x", want: initial()},
		{name: "remove through nil", typ: remove, key: "z.x.y", want: initial()},
		{name: "remove ignores value", typ: remove, key: "n", raw: []byte{0xc1}, want: without("n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := storeOf(t, initial())
			before, snaps := s.Digest(), snapshots(t, s)
			c := Change{Type: tt.typ, Key: tt.key, Value: tt.raw}
			if tt.raw == nil && tt.typ != remove {
				c.Value = canon(t, tt.val)
			}
			p := partOf(s, tt.key)
			checkErr := s.Check(p, c)
			require.Equal(t, before, s.Digest(), "Check changed the state")
			err := s.Apply(p, c)
			require.Equal(t, checkErr, err, "Check and Apply disagree")
			if tt.err != nil {
				requireCode(t, err, tt.code, tt.err)
				require.Equal(t, before, s.Digest(), "failed Apply changed the state")
				require.Equal(t, snaps, snapshots(t, s))
				return
			}
			require.NoError(t, err)
			want := storeOf(t, tt.want)
			require.Equal(t, snapshots(t, want), snapshots(t, s))
			require.Equal(t, want.Digest(), s.Digest())
			require.Equal(t, len(tt.want), s.Len())
			got, ok := s.GetBytes(tt.key)
			switch tt.typ {
			case remove:
				var parent any
				if i := strings.LastIndexByte(tt.key, '.'); i >= 0 {
					parent, _ = s.Get(tt.key[:i])
				}
				if _, isArray := parent.([]any); !isArray {
					require.False(t, ok, "value left after REMOVE")
				}
			case update:
				require.True(t, ok)
				require.Equal(t, c.Value, got)
			}
		})
	}
}

// nest returns n maps nested under key "d", ending in 1 under "x"; the
// top-level value of deep paths in TestApply.
func nest(n int) any {
	var v any = map[string]any{"x": 1}
	for range n - 1 {
		v = map[string]any{"d": v}
	}
	return v
}

func TestApplyWrongPartition(t *testing.T) {
	s := newStore(t)
	c := change(t, s, update, "users.ada", 1)
	p := partOf(s, "users")
	requireCode(t, s.Apply((p+1)%testPartitions, c), errs.InvalidArgument, ErrPartition)
	requireCode(t, s.Apply(-1, c), errs.InvalidArgument, ErrPartition)
	requireCode(t, s.Apply(testPartitions, c), errs.InvalidArgument, ErrPartition)
	require.Equal(t, 0, s.Len())
	require.NoError(t, s.Apply(p, c))
}

// TestApplyDoesNotModifyReadValues checks copy-on-write: a value a reader
// got before a change still encodes as it did.
func TestApplyDoesNotModifyReadValues(t *testing.T) {
	s := storeOf(t, initial())
	u, _ := s.Get("u")
	arr, _ := s.Get("arr")
	uEnc, arrEnc := appendValue(nil, u), appendValue(nil, arr)
	for _, c := range []Change{
		change(t, s, update, "u.ada.age", 1),
		change(t, s, add, "u.ada.tags.0", "z"),
		change(t, s, remove, "u.ada.tags.1", nil),
		change(t, s, update, "u.bob.x", 1),
		change(t, s, remove, "u.ada", nil),
		change(t, s, update, "arr.0", 9),
		change(t, s, add, "arr.1", 9),
		change(t, s, remove, "arr.2", nil),
	} {
		require.NoError(t, apply(s, c))
	}
	require.Equal(t, uEnc, appendValue(nil, u))
	require.Equal(t, arrEnc, appendValue(nil, arr))
}
