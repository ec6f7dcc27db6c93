package doc

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestApplyBatchAllocates: a batch without a writer allocates what it did
// before the exactly-once table was kept: its pending list and changes,
// and one entry per key it sets.
func TestApplyBatchAllocates(t *testing.T) {
	s, err := New(1)
	require.NoError(t, err)
	bt := &Batch{Changes: []Change{change(t, s, update, "a", value100), change(t, s, update, "b", value100)}}
	require.NoError(t, s.ApplyBatch(0, 1, bt))
	var ver uint64 = 1
	require.Equal(t, 4.0, testing.AllocsPerRun(100, func() {
		ver++
		if err := s.ApplyBatch(0, ver, bt); err != nil {
			t.Fatal(err)
		}
	}))

	// A known writer's, once its window is full, allocates only the copy
	// of its reply beside that.
	bt.Writer, bt.Reply = "w", []byte("reply")
	for range DedupPerWriter {
		ver++
		bt.Seq++
		require.NoError(t, s.ApplyBatch(0, ver, bt))
	}
	require.Equal(t, 5.0, testing.AllocsPerRun(100, func() {
		ver++
		bt.Seq++
		if err := s.ApplyBatch(0, ver, bt); err != nil {
			t.Fatal(err)
		}
	}))
}

// write is a batch of writer's write seq, which sets key to seq and
// answers reply.
func write(t testing.TB, s *Store, writer string, seq uint64, reply []byte, key string) *Batch {
	t.Helper()
	return &Batch{Writer: writer, Seq: seq, Reply: reply, Changes: []Change{change(t, s, update, key, seq)}}
}

// requireOutcome checks what partition p knows of writer's write seq.
func requireOutcome(t testing.TB, s *Store, p int, writer string, seq uint64, want DedupStatus, version uint64, reply []byte) {
	t.Helper()
	o, st := s.Outcome(p, writer, seq)
	require.Equal(t, want, st, "%s %d: %s", writer, seq, st)
	require.Equal(t, Outcome{Version: version, Reply: reply}, o, "%s %d", writer, seq)
}

func TestOutcome(t *testing.T) {
	s, err := New(2)
	require.NoError(t, err)
	key := "k"
	for s.PartitionOf(key) != 0 {
		key += "0"
	}
	reply := []byte("the first answer")
	bt := write(t, s, "w1", 7, reply, key)
	requireOutcome(t, s, 0, "w1", 7, DedupNew, 0, nil)
	require.NoError(t, s.CheckBatch(0, bt))
	requireOutcome(t, s, 0, "w1", 7, DedupNew, 0, nil)

	require.NoError(t, s.ApplyBatch(0, 20, bt))
	requireOutcome(t, s, 0, "w1", 7, DedupDone, 20, []byte("the first answer"))
	copy(reply, "changed!")
	requireOutcome(t, s, 0, "w1", 7, DedupDone, 20, []byte("the first answer"))
	requireOutcome(t, s, 0, "w1", 6, DedupNew, 0, nil)
	requireOutcome(t, s, 0, "w1", 8, DedupNew, 0, nil)
	requireOutcome(t, s, 0, "w2", 7, DedupNew, 0, nil)
	requireOutcome(t, s, 1, "w1", 7, DedupNew, 0, nil)
	requireOutcome(t, s, 2, "w1", 7, DedupNew, 0, nil)

	// A retry applied anyway keeps the first outcome.
	require.NoError(t, s.ApplyBatch(0, 21, write(t, s, "w1", 7, []byte("second"), key)))
	requireOutcome(t, s, 0, "w1", 7, DedupDone, 20, []byte("the first answer"))

	// No reply, an empty one, and one too large to keep.
	require.NoError(t, s.ApplyBatch(0, 22, write(t, s, "w1", 8, nil, key)))
	require.NoError(t, s.ApplyBatch(0, 23, write(t, s, "w1", 9, []byte{}, key)))
	require.NoError(t, s.ApplyBatch(0, 24, write(t, s, "w1", 10, make([]byte, DedupMaxReply), key)))
	require.NoError(t, s.ApplyBatch(0, 25, write(t, s, "w1", 11, make([]byte, DedupMaxReply+1), key)))
	requireOutcome(t, s, 0, "w1", 8, DedupDone, 22, nil)
	requireOutcome(t, s, 0, "w1", 9, DedupDone, 23, nil)
	requireOutcome(t, s, 0, "w1", 10, DedupDone, 24, make([]byte, DedupMaxReply))
	requireOutcome(t, s, 0, "w1", 11, DedupReplyTooLarge, 25, nil)

	// A batch without a writer records nothing, nor does a failed one.
	before := snapshots(t, s)
	require.NoError(t, s.ApplyBatch(0, 26, &Batch{Seq: 12, Reply: []byte("x"), Changes: []Change{change(t, s, update, key, 1)}}))
	requireOutcome(t, s, 0, "", 12, DedupNew, 0, nil)
	failing := write(t, s, "w1", 12, []byte("no"), key)
	failing.Changes = append(failing.Changes, change(t, s, add, key, 1))
	requireCode(t, s.ApplyBatch(0, 27, failing), errs.FailedPrecondition, ErrExists)
	requireOutcome(t, s, 0, "w1", 12, DedupNew, 0, nil)
	after := snapshots(t, s)
	require.NotEqual(t, before[0], after[0], "the batch without a writer changed the key")
	s2, err := New(2)
	require.NoError(t, err)
	require.NoError(t, s2.Restore(0, after[0]))
	requireOutcome(t, s2, 0, "w1", 12, DedupNew, 0, nil)

	// A writer needs a sequence number, and a name of bounded length.
	for _, bt := range []*Batch{
		write(t, s, "w1", 0, nil, key),
		write(t, s, strings.Repeat("w", MaxBatchWriter+1), 1, nil, key),
	} {
		requireCode(t, s.CheckBatch(0, bt), errs.InvalidArgument, ErrBatch)
		requireCode(t, s.ApplyBatch(0, 28, bt), errs.InvalidArgument, ErrBatch)
	}
	require.Equal(t, after, snapshots(t, s))
}

// TestOutcomeKeepsNoReceiveBuffer: the writer and reply of a decoded batch
// alias its bytes, which a receive buffer may reuse; the table keeps
// copies.
func TestOutcomeKeepsNoReceiveBuffer(t *testing.T) {
	s, err := New(1)
	require.NoError(t, err)
	buf := AppendBatch(nil, write(t, s, "writer", 3, []byte("reply"), "k"))
	bt, err := DecodeBatch(buf)
	require.NoError(t, err)
	require.NoError(t, s.ApplyBatch(0, 5, &bt))
	clear(buf)
	requireOutcome(t, s, 0, "writer", 3, DedupDone, 5, []byte("reply"))
	_, st := s.Outcome(0, string(make([]byte, len("writer"))), 3)
	require.Equal(t, DedupNew, st)
}

// TestDedupPerWriter: a partition remembers a writer's DedupPerWriter
// highest sequence numbers; below them, it can no longer tell.
func TestDedupPerWriter(t *testing.T) {
	s, err := New(1)
	require.NoError(t, err)
	// Pipelined: odd sequence numbers commit before the even ones below
	// them, and 2 never does.
	var order []uint64
	for seq := uint64(1); seq <= 2*DedupPerWriter; seq += 2 {
		order = append(order, seq+2, seq+1)
	}
	order = slices.DeleteFunc(order, func(seq uint64) bool { return seq == 2 })
	ver := uint64(100)
	at := map[uint64]uint64{}
	for _, seq := range order {
		ver++
		at[seq] = ver
		require.NoError(t, s.ApplyBatch(0, ver, write(t, s, "w", seq, []byte(fmt.Sprint(seq)), "k")))
	}
	// 3 to 129 recorded: the highest 64 are 66 to 129, and 65 was the
	// last forgotten.
	top := uint64(2*DedupPerWriter + 1)
	floor := top - DedupPerWriter
	for seq := uint64(1); seq <= top+2; seq++ {
		switch {
		case seq > top:
			requireOutcome(t, s, 0, "w", seq, DedupNew, 0, nil)
		case seq > floor:
			requireOutcome(t, s, 0, "w", seq, DedupDone, at[seq], []byte(fmt.Sprint(seq)))
		default:
			requireOutcome(t, s, 0, "w", seq, DedupTooOld, 0, nil)
		}
	}
	// A write below the floor is not recorded: it could be a retry.
	require.NoError(t, s.ApplyBatch(0, 1000, write(t, s, "w", 2, nil, "k")))
	requireOutcome(t, s, 0, "w", 2, DedupTooOld, 0, nil)
	requireOutcome(t, s, 0, "w", floor+1, DedupDone, at[floor+1], []byte(fmt.Sprint(floor+1)))
	// One more above forgets the lowest remembered.
	require.NoError(t, s.ApplyBatch(0, 1001, write(t, s, "w", 1000, nil, "k")))
	requireOutcome(t, s, 0, "w", floor+1, DedupTooOld, 0, nil)
	requireOutcome(t, s, 0, "w", floor+2, DedupDone, at[floor+2], []byte(fmt.Sprint(floor+2)))
	requireOutcome(t, s, 0, "w", 999, DedupNew, 0, nil)
}

// TestDedupWriters: a partition remembers DedupWriters writers; a new one
// forgets the writer whose latest record has the lowest offset, the
// first by name among equals.
func TestDedupWriters(t *testing.T) {
	s, err := New(1)
	require.NoError(t, err)
	name := func(i int) string { return fmt.Sprintf("w%04d", i) }
	for i := range DedupWriters {
		require.NoError(t, s.ApplyBatch(0, uint64(10+i), write(t, s, name(i), 1, nil, "k")))
	}
	// w0000 writes again, so w0001 is now the longest silent.
	next := uint64(10 + DedupWriters)
	require.NoError(t, s.ApplyBatch(0, next, write(t, s, name(0), 2, nil, "k")))
	requireOutcome(t, s, 0, name(1), 1, DedupDone, 11, nil)
	require.NoError(t, s.ApplyBatch(0, next+1, write(t, s, "new", 1, nil, "k")))
	requireOutcome(t, s, 0, name(1), 1, DedupNew, 0, nil)
	requireOutcome(t, s, 0, name(0), 1, DedupDone, 10, nil)
	requireOutcome(t, s, 0, name(2), 1, DedupDone, 12, nil)
	requireOutcome(t, s, 0, "new", 1, DedupDone, next+1, nil)
	require.NoError(t, s.ApplyBatch(0, next+2, write(t, s, "newer", 1, nil, "k")))
	requireOutcome(t, s, 0, name(2), 1, DedupNew, 0, nil)
	requireOutcome(t, s, 0, name(3), 1, DedupDone, 13, nil)

	// Writers at one offset (batches applied without one) go by name.
	s, err = New(1)
	require.NoError(t, err)
	for i := DedupWriters; i >= 0; i-- {
		require.NoError(t, s.ApplyBatch(0, 0, write(t, s, name(i), 1, nil, "k")))
	}
	// The first to arrive is kept; the first by name was already there.
	requireOutcome(t, s, 0, name(DedupWriters), 1, DedupDone, 1, nil)
	requireOutcome(t, s, 0, name(1), 1, DedupNew, 0, nil)
	requireOutcome(t, s, 0, name(0), 1, DedupDone, 1, nil)
	requireOutcome(t, s, 0, name(2), 1, DedupDone, 1, nil)
}

// keyIn returns a top-level key of partition p.
func keyIn(s *Store, p int) string {
	k := "key"
	for s.PartitionOf(k) != p {
		k += "0"
	}
	return k
}

// feed applies n batches of writers drawn from a pool larger than
// DedupWriters, and of a few busy ones, each pipelining its sequence numbers (a few commit before
// lower ones), with replies of every kind, to every partition of each
// store, from offset from on; it returns the writers' next sequence
// numbers, for a later call.
func feed(t testing.TB, rng *rand.Rand, n int, from uint64, next map[string]uint64, stores ...*Store) {
	t.Helper()
	for i := range n {
		w := fmt.Sprintf("writer-%d", rng.IntN(DedupWriters+DedupWriters/8))
		if rng.IntN(10) == 0 {
			w = fmt.Sprintf("busy-%d", rng.IntN(4))
		}
		next[w]++
		seq := next[w] + uint64(rng.IntN(3)) // out of order, and now and then twice
		var reply []byte
		switch rng.IntN(100) {
		case 0:
			reply = make([]byte, DedupMaxReply+1)
		case 1, 2, 3:
		default:
			reply = fmt.Appendf(nil, "reply %d", i)
		}
		p := rng.IntN(stores[0].Partitions())
		for _, s := range stores {
			require.NoError(t, s.ApplyBatch(p, from+uint64(i), write(t, s, w, seq, reply, keyIn(s, p))))
		}
	}
}

// TestDedupDeterministic: stores fed the same batches hold the same
// tables, byte for byte, and so does one restored from a snapshot midway
// and fed the rest: what a table forgets next survives the snapshot.
func TestDedupDeterministic(t *testing.T) {
	stores := make([]*Store, 3)
	for i := range stores {
		var err error
		stores[i], err = New(2)
		require.NoError(t, err)
	}
	a, b, c := stores[0], stores[1], stores[2]
	rng := rand.New(rand.NewPCG(1, 2))
	next := map[string]uint64{}
	feed(t, rng, 4000, 1, next, a, b)
	for p, snap := range snapshots(t, a) {
		require.NoError(t, c.Restore(p, snap))
	}
	feed(t, rng, 4000, 4001, next, a, b, c)
	want := snapshots(t, a)
	require.Equal(t, want, snapshots(t, b))
	require.Equal(t, want, snapshots(t, c))
	for p := range a.Partitions() {
		require.Len(t, a.parts[p].dd.writers, DedupWriters, "partition %d forgot writers", p)
		statuses := map[DedupStatus]int{}
		for w := range next {
			for seq := range next[w] + 3 {
				oa, sa := a.Outcome(p, w, seq)
				oc, sc := c.Outcome(p, w, seq)
				require.Equal(t, sa, sc)
				require.Equal(t, oa, oc)
				statuses[sa]++
			}
		}
		for _, st := range []DedupStatus{DedupNew, DedupDone, DedupReplyTooLarge, DedupTooOld} {
			require.NotZero(t, statuses[st], "partition %d: no outcome %s", p, st)
		}
	}
}

// outcomes returns everything partition p of s knows of writers' writes
// up to seq max.
func outcomes(s *Store, p int, writers []string, max uint64) map[string]DedupStatus {
	m := map[string]DedupStatus{}
	for _, w := range writers {
		for seq := range max + 1 {
			o, st := s.Outcome(p, w, seq)
			m[fmt.Sprintf("%s %d %d %q", w, seq, o.Version, o.Reply)] = st
		}
	}
	return m
}

// TestDedupThroughSnapshots: every way a partition travels carries its
// exactly-once table, which replaces the one the partition held.
func TestDedupThroughSnapshots(t *testing.T) {
	src := newStore(t)
	rng := rand.New(rand.NewPCG(3, 4))
	next := map[string]uint64{}
	feed(t, rng, 3000, 1, next, src)
	for i := range 100 {
		applyAt(t, src, uint64(4000+i), update, fmt.Sprint("k", i), i)
	}
	// A partition with keys and no table, written as format 1.
	plain := partOf(src, "plain")
	require.NoError(t, src.Clear(plain))
	applyAt(t, src, 1<<40, update, "plain", 1)
	writers := slices.Sorted(maps.Keys(next))
	writers = append(writers, "mine")
	want := snapshots(t, src)
	require.Equal(t, byte(snapshotFormatV1), want[plain][1])

	for name, restore := range map[string]func(t *testing.T, dst *Store, p int) error{
		"Restore": func(_ *testing.T, dst *Store, p int) error { return dst.Restore(p, want[p]) },
		"RestoreShared": func(_ *testing.T, dst *Store, p int) error {
			// Its values are small, so they are copied; and replies
			// always are, so the bytes may go.
			b := slices.Clone(want[p])
			defer clear(b)
			return dst.RestoreShared(p, b)
		},
		"StageChunk": func(t *testing.T, dst *Store, p int) error {
			pieces := must(src.SnapshotChunks(p, 200))
			if p != plain {
				require.Greater(t, len(pieces), 1)
				require.Equal(t, byte(snapshotFormat), pieces[0][1], "the table comes first")
				for _, b := range pieces[1:] {
					require.Equal(t, byte(snapshotFormatV1), b[1])
				}
			}
			for i, b := range pieces {
				require.NoError(t, dst.StageChunk(p, b, i == 0))
			}
			return dst.RestoreStaged(p)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dst := newStore(t)
			for p := range testPartitions {
				require.NoError(t, dst.ApplyBatch(p, 1, write(t, dst, "mine", 1, nil, keyIn(dst, p))))
				requireOutcome(t, dst, p, "mine", 1, DedupDone, 1, nil)
				require.NoError(t, restore(t, dst, p))
			}
			require.Equal(t, want, snapshots(t, dst))
			for p := range testPartitions {
				require.Equal(t, outcomes(src, p, writers, 12), outcomes(dst, p, writers, 12), "partition %d", p)
			}
		})
	}
}

// TestDedupEmptied: a partition cleared, restored from nothing or from a
// snapshot of a format without a table, forgets its table; so does a
// staged restore.
func TestDedupEmptied(t *testing.T) {
	unversioned, err := os.ReadFile("testdata/snapshot-unversioned.msgpack")
	require.NoError(t, err)
	for name, empty := range map[string]func(s *Store) error{
		"Clear":         func(s *Store) error { return s.Clear(0) },
		"Restore(nil)":  func(s *Store) error { return s.Restore(0, nil) },
		"format 1":      func(s *Store) error { return s.Restore(0, []byte{0x92, 0x01, 0x81, 0xa1, 'n', 0x92, 0x05, 0x01}) },
		"bare map":      func(s *Store) error { return s.RestoreShared(0, unversioned) },
		"staged, bare":  func(s *Store) error { return errors.Join(s.StageChunk(0, unversioned, true), s.RestoreStaged(0)) },
		"staged, empty": func(s *Store) error { return errors.Join(s.StageChunk(0, []byte{0x80}, true), s.RestoreStaged(0)) },
	} {
		t.Run(name, func(t *testing.T) {
			s, err := New(1)
			require.NoError(t, err)
			require.NoError(t, s.ApplyBatch(0, 9, write(t, s, "w", 1, []byte("r"), "k")))
			requireOutcome(t, s, 0, "w", 1, DedupDone, 9, []byte("r"))
			require.NoError(t, empty(s))
			requireOutcome(t, s, 0, "w", 1, DedupNew, 0, nil)
			snap, err := s.Snapshot(0)
			require.NoError(t, err)
			require.Equal(t, byte(snapshotFormatV1), snap[1], "no table left")
		})
	}
}

// TestStageChunkTableFirst: the table comes with the piece that starts a
// staged restore; a later piece that carries one is refused, and leaves
// the staged restore as it was.
func TestStageChunkTableFirst(t *testing.T) {
	src, err := New(1)
	require.NoError(t, err)
	for i := range 20 {
		require.NoError(t, src.ApplyBatch(0, uint64(10+i), write(t, src, "w", uint64(i+1), nil, fmt.Sprint("k", i))))
	}
	pieces, err := src.SnapshotChunks(0, 100)
	require.NoError(t, err)
	require.Greater(t, len(pieces), 2)
	dst, err := New(1)
	require.NoError(t, err)
	require.NoError(t, dst.StageChunk(0, pieces[1], true))
	err = dst.StageChunk(0, pieces[0], false)
	requireCode(t, err, errs.InvalidArgument, ErrSnapshot)
	require.Contains(t, err.Error(), "exactly-once table in a piece after the first")
	require.NoError(t, dst.StageChunk(0, pieces[2], false))
	require.NoError(t, dst.RestoreStaged(0))
	requireOutcome(t, dst, 0, "w", 1, DedupNew, 0, nil)
	n := 0
	for _, b := range pieces[1:3] {
		one, err := New(1)
		require.NoError(t, err)
		require.NoError(t, one.Restore(0, b))
		n += one.Len()
	}
	require.Equal(t, n, dst.Len(), "the keys of the second and third pieces")

	// A piece that starts a restore, without first, carries the table.
	dst.DropStaged(0)
	require.NoError(t, dst.StageChunk(0, pieces[0], false))
	for _, b := range pieces[1:] {
		require.NoError(t, dst.StageChunk(0, b, false))
	}
	require.NoError(t, dst.RestoreStaged(0))
	require.Equal(t, snapshots(t, src), snapshots(t, dst))
}

// tableSnapshot is a format 2 snapshot with no keys and the given table.
func tableSnapshot(writers ...[]byte) []byte {
	b := append([]byte{0x93, snapshotFormat, 0x80}, wire.AppendArrayHeader(nil, len(writers))...)
	for _, w := range writers {
		b = append(b, w...)
	}
	return b
}

// writerOf encodes a writer of a table.
func writerOf(name string, floor, last uint64, outcomes ...[]byte) []byte {
	b := wire.AppendArrayHeader(nil, 4)
	b = wire.AppendUint(wire.AppendStr(b, name), floor)
	b = wire.AppendArrayHeader(wire.AppendUint(b, last), len(outcomes))
	for _, o := range outcomes {
		b = append(b, o...)
	}
	return b
}

// outcomeOf encodes an outcome of a table: without a reply, one whose
// reply was too large.
func outcomeOf(seq, version uint64, reply ...[]byte) []byte {
	b := wire.AppendArrayHeader(nil, 2+len(reply))
	b = wire.AppendUint(wire.AppendUint(b, seq), version)
	for _, r := range reply {
		b = wire.AppendBin(b, r)
	}
	return b
}

// TestRestoreTable: a table written by hand restores to what it says, and
// snapshots to the same bytes; one that the table's encoding could not
// have written, or past its bounds, is refused.
func TestRestoreTable(t *testing.T) {
	good := tableSnapshot(
		writerOf("a", 0, 5, outcomeOf(1, 5, []byte("r"))),
		writerOf("b", 10, 9, outcomeOf(11, 7), outcomeOf(13, 8, nil), outcomeOf(20, 9, []byte("x"))),
	)
	s, err := New(1)
	require.NoError(t, err)
	require.NoError(t, s.Restore(0, good))
	require.Equal(t, good, must(s.Snapshot(0)))
	requireOutcome(t, s, 0, "a", 1, DedupDone, 5, []byte("r"))
	requireOutcome(t, s, 0, "b", 10, DedupTooOld, 0, nil)
	requireOutcome(t, s, 0, "b", 11, DedupReplyTooLarge, 7, nil)
	requireOutcome(t, s, 0, "b", 12, DedupNew, 0, nil)
	requireOutcome(t, s, 0, "b", 13, DedupDone, 8, nil)
	requireOutcome(t, s, 0, "b", 20, DedupDone, 9, []byte("x"))

	ok := outcomeOf(1, 1)
	many := func(n int) [][]byte {
		outs := make([][]byte, n)
		for i := range outs {
			outs[i] = outcomeOf(uint64(i+1), 1)
		}
		return outs
	}
	tooMany := wire.AppendArrayHeader([]byte{0x93, snapshotFormat, 0x80}, DedupWriters+1)
	for i := range DedupWriters + 1 {
		tooMany = append(tooMany, writerOf(fmt.Sprintf("w%04d", i), 0, 1, ok)...)
	}
	for name, b := range map[string][]byte{
		"format 1 of 3":     {0x93, 0x01, 0x80, 0x90},
		"format 3":          {0x93, 0x03, 0x80, 0x90},
		"no table":          {0x92, snapshotFormat, 0x80},
		"table not array":   {0x93, snapshotFormat, 0x80, 0x80},
		"trailing":          append(tableSnapshot(), 0xc0),
		"too many writers":  tooMany,
		"writers unsorted":  tableSnapshot(writerOf("b", 0, 1, ok), writerOf("a", 0, 1, ok)),
		"writer twice":      tableSnapshot(writerOf("a", 0, 1, ok), writerOf("a", 0, 1, ok)),
		"empty writer":      tableSnapshot(writerOf("", 0, 1, ok)),
		"long writer":       tableSnapshot(writerOf(strings.Repeat("w", MaxBatchWriter+1), 0, 1, ok)),
		"writer of 3":       tableSnapshot([]byte{0x93, 0xa1, 'a', 0x00, 0x01}),
		"no outcomes":       tableSnapshot(writerOf("a", 0, 1)),
		"too many outcomes": tableSnapshot(writerOf("a", 0, 1, many(DedupPerWriter+1)...)),
		"seq at floor":      tableSnapshot(writerOf("a", 1, 1, ok)),
		"seq 0":             tableSnapshot(writerOf("a", 0, 1, outcomeOf(0, 1))),
		"seqs unsorted":     tableSnapshot(writerOf("a", 0, 1, outcomeOf(2, 1), outcomeOf(1, 1))),
		"seq twice":         tableSnapshot(writerOf("a", 0, 1, outcomeOf(1, 1), outcomeOf(1, 1))),
		"offset 0":          tableSnapshot(writerOf("a", 0, 1, outcomeOf(1, 0))),
		"offset past last":  tableSnapshot(writerOf("a", 0, 1, outcomeOf(1, 2))),
		"reply too large":   tableSnapshot(writerOf("a", 0, 1, outcomeOf(1, 1, make([]byte, DedupMaxReply+1)))),
		"outcome of 4":      tableSnapshot(writerOf("a", 0, 1, []byte{0x94, 0x01, 0x01, 0xc0, 0xc0})),
		"outcome of 1":      tableSnapshot(writerOf("a", 0, 1, []byte{0x91, 0x01})),
		"negative seq":      tableSnapshot(writerOf("a", 0, 1, []byte{0x92, 0xff, 0x01})),
		"int reply":         tableSnapshot(writerOf("a", 0, 1, []byte{0x93, 0x01, 0x01, 0x01})),
	} {
		t.Run(name, func(t *testing.T) {
			s, err := New(1)
			require.NoError(t, err)
			require.NoError(t, s.ApplyBatch(0, 3, write(t, s, "w", 1, []byte("r"), "k")))
			before := must(s.Snapshot(0))
			requireCode(t, s.Restore(0, b), errs.InvalidArgument, ErrSnapshot)
			require.Equal(t, before, must(s.Snapshot(0)))
			requireCode(t, s.StageChunk(0, b, true), errs.InvalidArgument, ErrSnapshot)
		})
	}
}

// TestOutcomeWithReaders: a reader that sees a batch's changes sees its
// outcome too, while batches commit; run with -race.
func TestOutcomeWithReaders(t *testing.T) {
	s, err := New(1)
	require.NoError(t, err)
	const batches = 2000
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for seq := uint64(1); seq <= batches; seq++ {
			if err := s.ApplyBatch(0, 100+seq, write(t, s, "w", seq, fmt.Append(nil, seq), "k")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		ver := s.Version("k")
		if ver == 0 {
			continue
		}
		seq := ver - 100
		o, st := s.Outcome(0, "w", seq)
		if st == DedupTooOld {
			continue // forgotten since
		}
		require.Equal(t, DedupDone, st, "seq %d, at version %d", seq, ver)
		require.Equal(t, Outcome{Version: ver, Reply: fmt.Append(nil, seq)}, o)
	}
	wg.Wait()
	requireOutcome(t, s, 0, "w", batches, DedupDone, 100+batches, fmt.Append(nil, batches))
}

// TestDedupReplyBytes: the replies a partition keeps stay within
// DedupReplyBytes; past it the oldest are let go, their outcomes kept
// (DedupReplyTooLarge), on every copy alike and through a snapshot.
func TestDedupReplyBytes(t *testing.T) {
	a, err := New(1)
	require.NoError(t, err)
	b, err := New(1)
	require.NoError(t, err)
	reply := bytes.Repeat([]byte{0xc0}, DedupMaxReply) // msgpack nil, 64 KiB of it
	n := 2*DedupReplyBytes/DedupMaxReply + 3
	for i := range n {
		for _, s := range []*Store{a, b} {
			bt := write(t, s, fmt.Sprint("w", i%5), uint64(i+1), reply, "k")
			require.NoError(t, s.ApplyBatch(0, uint64(100+i), bt))
		}
	}
	kept := 0
	for i := range n {
		o, st := a.Outcome(0, fmt.Sprint("w", i%5), uint64(i+1))
		switch st {
		case DedupDone:
			kept++
			assert.Len(t, o.Reply, DedupMaxReply)
		case DedupReplyTooLarge:
			assert.Less(t, i, n-DedupReplyBytes/DedupMaxReply, "a newer reply let go before an older one: %d", i)
		default:
			t.Fatalf("seq %d: %v", i+1, st)
		}
		assert.Equal(t, uint64(100+i), o.Version)
	}
	assert.Equal(t, DedupReplyBytes/DedupMaxReply, kept, "replies kept")
	sa, err := a.Snapshot(0)
	require.NoError(t, err)
	sb, err := b.Snapshot(0)
	require.NoError(t, err)
	assert.Equal(t, sa, sb, "two copies keep the same replies")
	c, err := New(1)
	require.NoError(t, err)
	require.NoError(t, c.Restore(0, sa))
	sc, err := c.Snapshot(0)
	require.NoError(t, err)
	assert.Equal(t, sa, sc, "through a snapshot")
	// One more reply on both sides of the restore lets go of the same
	// oldest one.
	for _, s := range []*Store{a, c} {
		require.NoError(t, s.ApplyBatch(0, uint64(100+n), write(t, s, "w9", 1, reply, "k")))
	}
	sa, _ = a.Snapshot(0)
	sc, _ = c.Snapshot(0)
	assert.Equal(t, sa, sc, "after one more record")
}
