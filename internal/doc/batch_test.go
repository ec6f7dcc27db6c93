package doc

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
	"github.com/stretchr/testify/require"
)

func batchOf(cs ...Change) *Batch { return &Batch{Changes: cs, Writer: "w", Seq: 1} }

func conditional(c Change, want uint64) Change {
	c.Cond, c.IfVersion = true, want
	return c
}

func TestBatchEncoding(t *testing.T) {
	for _, bt := range []Batch{
		{Changes: []Change{{Type: update, Key: "k", Value: []byte{0x01}}}},
		{
			Writer: "writer-1", Seq: 1 << 40, Reply: []byte("the reply"),
			Changes: []Change{
				{Type: add, Key: "users.ada", Value: []byte{0x81, 0xa1, 'a', 0x01}},
				{Type: remove, Key: "old"},
				{Type: update, Key: "n", Value: []byte{0x05}, Cond: true, IfVersion: 0},
				{Type: update, Key: "m", Value: []byte{0xc0}, Cond: true, IfVersion: 77},
			},
		},
	} {
		b := AppendBatch([]byte("prefix"), &bt)
		require.Equal(t, "prefix", string(b[:6]))
		b = b[6:]
		require.NoError(t, wire.ValidateValue(b), "a record's value must be one msgpack value")
		got, err := DecodeBatch(b)
		require.NoError(t, err)
		require.Equal(t, bt, got)
	}
}

func TestDecodeBatchRefuses(t *testing.T) {
	ok := func(c Change) []byte { return AppendBatch(nil, batchOf(c)) }
	long := make([]byte, MaxBatchWriter+1)
	tooMany := &Batch{Changes: make([]Change, MaxBatchChanges+1)}
	for i := range tooMany.Changes {
		tooMany.Changes[i] = Change{Type: remove, Key: "k"}
	}
	for name, b := range map[string][]byte{
		"empty":            nil,
		"not an array":     {0x01},
		"empty array":      {0x90},
		"format 2":         {0x95, 0x02, 0xa0, 0x00, 0xc0, 0x91, 0x94, 0x03, 0xa1, 'k', 0xc0, 0xc0},
		"4 fields":         {0x94, 0x01, 0xa0, 0x00, 0xc0},
		"no changes":       AppendBatch(nil, &Batch{}),
		"too many changes": AppendBatch(nil, tooMany),
		"long writer":      AppendBatch(nil, &Batch{Writer: string(long), Changes: []Change{{Type: remove, Key: "k"}}}),
		"batch in batch":   ok(Change{Type: wire.RecordBatch, Key: "k", Value: []byte{0x01}}),
		"type 0":           ok(Change{Type: 0, Key: "k"}),
		"type 9":           ok(Change{Type: 9, Key: "k", Value: []byte{0x01}}),
		"update, no value": ok(Change{Type: update, Key: "k"}),
		"remove, a value":  ok(Change{Type: remove, Key: "k", Value: []byte{0x01}}),
		"trailing":         append(ok(Change{Type: remove, Key: "k"}), 0xc0),
		"short":            ok(Change{Type: update, Key: "k", Value: []byte{0x01}})[:10],
		"change of 3":      {0x95, 0x01, 0xa0, 0x00, 0xc0, 0x91, 0x93, 0x03, 0xa1, 'k', 0xc0},
		"int writer":       {0x95, 0x01, 0x01, 0x00, 0xc0, 0x91, 0x94, 0x03, 0xa1, 'k', 0xc0, 0xc0},
		"negative seq":     {0x95, 0x01, 0xa0, 0xff, 0xc0, 0x91, 0x94, 0x03, 0xa1, 'k', 0xc0, 0xc0},
		"hostile count":    {0x95, 0x01, 0xa0, 0x00, 0xc0, 0xdd, 0xff, 0xff, 0xff, 0xff},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeBatch(b)
			requireCode(t, err, errs.InvalidArgument, ErrBatch)
		})
	}
}

// FuzzDecodeBatch: DecodeBatch never panics, and a batch it accepts
// encodes to a valid msgpack value that decodes to the same batch.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(AppendBatch(nil, batchOf(Change{Type: update, Key: "k", Value: []byte{0x01}})))
	f.Add(AppendBatch(nil, &Batch{Writer: "w", Seq: 300, Reply: []byte{1, 2}, Changes: []Change{
		{Type: add, Key: "a.b", Value: []byte{0x90}, Cond: true},
		{Type: remove, Key: "c", Cond: true, IfVersion: 1 << 33},
	}}))
	f.Add([]byte{0x95, 0x01, 0xa0, 0x00, 0xc0, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x95, 0x01, 0xa0, 0x00, 0xc0, 0x91, 0x94, 0x04, 0xa1, 'k', 0xc4, 0x01, 0x01, 0xc0})
	f.Fuzz(func(t *testing.T, b []byte) {
		bt, err := DecodeBatch(b)
		if err != nil {
			requireCode(t, err, errs.InvalidArgument, ErrBatch)
			return
		}
		enc := AppendBatch(nil, &bt)
		require.NoError(t, wire.ValidateValue(enc))
		again, err := DecodeBatch(enc)
		require.NoError(t, err)
		require.Equal(t, len(bt.Changes), len(again.Changes))
		require.Equal(t, bt.Writer, again.Writer)
		require.Equal(t, bt.Seq, again.Seq)
		require.True(t, bytes.Equal(bt.Reply, again.Reply))
		for i, c := range bt.Changes {
			d := again.Changes[i]
			require.True(t, c.Type == d.Type && c.Key == d.Key && bytes.Equal(c.Value, d.Value) &&
				c.Cond == d.Cond && c.IfVersion == d.IfVersion, "change %d: %+v, then %+v", i, c, d)
		}
	})
}

// state is what a batch must leave exactly as it was when it fails.
type state struct {
	snaps    [][]byte
	versions map[string]uint64
	len      int
	digest   uint64
	pdigests []uint64
}

func stateOf(t *testing.T, s *Store) state {
	st := state{snaps: snapshots(t, s), versions: versions(s), len: s.Len(), digest: s.Digest()}
	for p := range s.Partitions() {
		st.pdigests = append(st.pdigests, s.PartitionDigest(p))
	}
	return st
}

// TestApplyBatchAllOrNothing: a batch whose third change fails leaves the
// store exactly as it was, and its error names that change and keeps its
// code and cause.
func TestApplyBatchAllOrNothing(t *testing.T) {
	s, err := New(1)
	require.NoError(t, err)
	applyAt(t, s, 3, update, "a", map[string]any{"n": 1})
	applyAt(t, s, 4, update, "b", 2)
	before := stateOf(t, s)

	for _, tc := range []struct {
		third Change
		code  errs.Code
		cause error
	}{
		{change(t, s, add, "b", 1), errs.FailedPrecondition, ErrExists},
		{change(t, s, update, "b.x", 1), errs.FailedPrecondition, ErrNotContainer},
		{conditional(change(t, s, update, "b", 1), 3), errs.FailedPrecondition, ErrVersion},
		{Change{Type: update, Key: "b", Value: []byte{0xc1}}, errs.InvalidArgument, ErrValue},
		{Change{Type: wire.RecordBatch, Key: "b"}, errs.InvalidArgument, ErrType},
	} {
		bt := batchOf(
			change(t, s, update, "a.n", 2), // a nested change
			change(t, s, add, "c", 3),      // a new key
			tc.third,
			change(t, s, remove, "a", nil),
		)
		for _, err := range []error{s.CheckBatch(0, bt), s.ApplyBatch(0, 10, bt)} {
			requireCode(t, err, tc.code, tc.cause)
			require.Contains(t, err.Error(), fmt.Sprintf("change 2 of the batch, %s %q", tc.third.Type, tc.third.Key))
			require.Equal(t, before, stateOf(t, s), "%v", err)
		}
		if tc.cause == ErrVersion {
			v, ok := VersionOf(s.ApplyBatch(0, 10, bt))
			require.True(t, ok, "the batch's error keeps the version")
			require.Equal(t, uint64(4), v)
		}
	}

	// A change of another partition's key is refused, after one of p's.
	two, err := New(2)
	require.NoError(t, err)
	in, out := "k", "k"
	for two.PartitionOf(in) != 0 {
		in += "0"
	}
	for two.PartitionOf(out) != 1 {
		out += "1"
	}
	err = two.ApplyBatch(0, 1, batchOf(change(t, two, update, in, 1), change(t, two, update, out, 1)))
	requireCode(t, err, errs.InvalidArgument, ErrPartition)
	require.Contains(t, err.Error(), "change 1 of the batch")
	require.Zero(t, two.Len())
	requireCode(t, s.ApplyBatch(0, 1, &Batch{}), errs.InvalidArgument, ErrBatch)
	requireCode(t, s.CheckBatch(0, &Batch{}), errs.InvalidArgument, ErrBatch)
}

// TestApplyBatchOrder: each change sees what the earlier ones left, and
// every key the batch leaves present takes its version.
func TestApplyBatchOrder(t *testing.T) {
	s, err := New(1)
	require.NoError(t, err)
	applyAt(t, s, 3, update, "old", 1)
	applyAt(t, s, 4, update, "gone", 1)
	applyAt(t, s, 5, update, "same", 1)
	bt := batchOf(
		change(t, s, add, "k", map[string]any{}),
		change(t, s, update, "k.x", 1),
		change(t, s, add, "k.tags.-", "a"),
		change(t, s, remove, "old", nil),
		conditional(change(t, s, add, "old", 2), 0), // removed above: at 0
		change(t, s, remove, "gone", nil),
		change(t, s, add, "tmp", 1),
		change(t, s, remove, "tmp", nil),
	)
	require.NoError(t, s.CheckBatch(0, bt))
	require.Equal(t, uint64(3), s.Version("old"), "checked only")
	require.NoError(t, s.ApplyBatch(0, 10, bt))
	got := map[string]any{}
	for k, v := range s.All() {
		got[k] = v
	}
	require.Equal(t, map[string]any{
		"k": map[string]any{"x": int64(1), "tags": []any{"a"}}, "old": int64(2), "same": int64(1),
	}, got)
	require.Equal(t, map[string]uint64{"k": 10, "old": 10, "same": 5}, versions(s))
	require.Equal(t, 3, s.Len())

	requireCode(t, s.ApplyBatch(0, 11, batchOf(change(t, s, add, "n", 1), change(t, s, add, "n", 1))),
		errs.FailedPrecondition, ErrExists)
	_, ok := s.Get("n")
	require.False(t, ok)

	// A condition on a key the batch already left present cannot hold:
	// its version would be the batch's own offset.
	for _, want := range []uint64{0, 10, 12} {
		bt := batchOf(change(t, s, update, "k.x", 2), conditional(change(t, s, update, "k.y", 2), want))
		requireCode(t, s.CheckBatch(0, bt), errs.FailedPrecondition, ErrVersion)
		err := s.ApplyBatch(0, 12, bt)
		requireCode(t, err, errs.FailedPrecondition, ErrVersion)
		v, _ := VersionOf(err)
		require.Equal(t, uint64(10), v, "the version before the batch")
	}
	require.NoError(t, s.ApplyBatch(0, 12, batchOf(conditional(change(t, s, update, "k.x", 2), 10))))
	require.Equal(t, uint64(12), s.Version("k"))

	// A batch is not a change: only ApplyBatch applies it.
	whole := Change{Type: wire.RecordBatch, Key: "k", Value: AppendBatch(nil, batchOf(change(t, s, update, "k", 1)))}
	requireCode(t, s.Apply(0, whole), errs.InvalidArgument, ErrType)
	requireCode(t, s.Check(0, whole), errs.InvalidArgument, ErrType)
}

// TestBatchReadersSeeAllOrNothing: while batches move amounts between two
// keys, and between two fields of one key, a reader never sees a total
// other than 100.
func TestBatchReadersSeeAllOrNothing(t *testing.T) {
	s, err := New(1)
	require.NoError(t, err)
	applyAt(t, s, 1, update, "a", map[string]any{"n": 100})
	applyAt(t, s, 2, update, "b", map[string]any{"n": 0})
	applyAt(t, s, 3, update, "c", map[string]any{"n": 100, "m": 0})
	n := func(v any, f string) int64 { return v.(map[string]any)[f].(int64) }

	const batches = 2000
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := range batches {
			x := int64(i * 37 % 101)
			bt := batchOf(
				change(t, s, update, "a.n", x),
				change(t, s, update, "c.n", x),
				change(t, s, update, "b.n", 100-x),
				change(t, s, update, "c.m", 100-x),
			)
			if err := s.ApplyBatch(0, uint64(10+i), bt); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	reads := 0
	for running := true; running; reads++ {
		select {
		case <-done:
			running = false
		default:
		}
		vals := map[string]any{}
		for k, v := range s.Entries(0) {
			vals[k] = v
		}
		require.Equal(t, int64(100), n(vals["a"], "n")+n(vals["b"], "n"), "a partition read at one moment")
		c, ver, ok := s.GetVersioned("c")
		require.True(t, ok)
		require.Equal(t, int64(100), n(c, "n")+n(c, "m"), "one key at version %d", ver)
	}
	wg.Wait()
	t.Logf("%d reads during %d batches", reads, batches)
	require.Equal(t, uint64(10+batches-1), s.Version("a"))
}

// TestBatchWriter: the header read agrees with DecodeBatch, and refuses
// what is not a batch.
func TestBatchWriter(t *testing.T) {
	b := AppendBatch(nil, &Batch{Changes: []Change{{Type: wire.RecordRemove, Key: "k"}}, Writer: "w~1", Seq: 42})
	w, seq, ok := BatchWriter(b)
	if !ok || w != "w~1" || seq != 42 {
		t.Fatalf("BatchWriter = %q, %d, %v", w, seq, ok)
	}
	for _, bad := range [][]byte{nil, {0x90}, {0x95, 0x02}, b[:3]} {
		if _, _, ok := BatchWriter(bad); ok {
			t.Fatalf("BatchWriter(%x) took it", bad)
		}
	}
}
