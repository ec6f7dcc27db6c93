package storage

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// impl is one Store implementation under the conformance suite.
type impl struct {
	name string
	open func(dir string) (Store, error)
}

// impls are every implementation; the segment log gets small segments so
// the tests roll, compact and copy forward.
var impls = []impl{
	{"seglog", func(dir string) (Store, error) {
		return OpenSegmentLog(dir, Options{SegmentSize: 16 << 10, WriteBuffer: 4 << 10})
	}},
	{"pebble", func(dir string) (Store, error) { return OpenPebble(dir, Options{}) }},
}

func forEach(t *testing.T, f func(t *testing.T, im impl)) {
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) { f(t, im) })
	}
}

func mustOpen(t *testing.T, im impl, dir string) Store {
	t.Helper()
	s, err := im.open(dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var ep1 = Epoch{Term: 1, Owner: "10.0.0.1:7946"}
var ep2 = Epoch{Term: 2, Owner: "10.0.0.2:7946"}

// entries returns n entries from offset first, in epoch ep.
func entries(ep Epoch, first uint64, n int) []Entry {
	out := make([]Entry, n)
	for i := range out {
		o := first + uint64(i)
		out[i] = Entry{Epoch: ep, Offset: o, Type: 2, Key: fmt.Sprintf("key-%d", o), Value: []byte(fmt.Sprintf("value %d of %s", o, ep.Owner))}
	}
	return out
}

// normalize makes empty values nil, so entries compare by content.
func normalize(es []Entry) []Entry {
	out := slices.Clone(es)
	for i := range out {
		if len(out[i].Value) == 0 {
			out[i].Value = nil
		}
	}
	return out
}

func requireLog(t *testing.T, s Store, p int, want []Entry, first uint64) {
	t.Helper()
	f, l, err := s.Bounds(p)
	require.NoError(t, err)
	require.Equal(t, first, f, "first of partition %d", p)
	require.Equal(t, first+uint64(len(want))-1, l, "last of partition %d", p)
	if len(want) == 0 {
		return
	}
	got, err := s.Entries(p, f, l, 0)
	require.NoError(t, err)
	require.Equal(t, normalize(want), normalize(got))
}

func TestAppendReadBack(t *testing.T) {
	forEach(t, func(t *testing.T, im impl) {
		s := mustOpen(t, im, t.TempDir())
		first, last, err := s.Bounds(7)
		require.NoError(t, err)
		require.Equal(t, [2]uint64{1, 0}, [2]uint64{first, last})

		a := entries(ep1, 1, 50)
		b := entries(ep1, 1, 30)
		require.NoError(t, s.Append(3, a[:20]))
		require.NoError(t, s.Append(9, b))
		require.NoError(t, s.Append(3, a[20:]))
		require.NoError(t, s.Append(3, nil))
		requireLog(t, s, 3, a, 1)
		requireLog(t, s, 9, b, 1)

		got, err := s.Entries(3, 10, 12, 0)
		require.NoError(t, err)
		require.Equal(t, normalize(a[9:12]), normalize(got))
		got, err = s.Entries(3, 5, 4, 0)
		require.NoError(t, err)
		require.Empty(t, got)

		// maxBytes stops early, but never before the first entry.
		size := entrySize(&a[0])
		got, err = s.Entries(3, 1, 50, 3*size)
		require.NoError(t, err)
		require.Len(t, got, 3)
		got, err = s.Entries(3, 1, 50, 1)
		require.NoError(t, err)
		require.Len(t, got, 1)

		_, err = s.Entries(3, 40, 51, 0)
		require.ErrorIs(t, err, ErrUnavailable)
		require.ErrorIs(t, s.Append(3, entries(ep1, 52, 1)), ErrNotContiguous)
		require.ErrorIs(t, s.Append(3, []Entry{a[0], a[2]}), ErrNotContiguous)
		require.Error(t, s.Append(-1, a[:1]))
		requireLog(t, s, 3, a, 1)

		// The caller's entries are the caller's.
		e := entries(ep1, 51, 1)
		require.NoError(t, s.Append(3, e))
		e[0].Value[0] = 'X'
		got, err = s.Entries(3, 51, 51, 0)
		require.NoError(t, err)
		require.Equal(t, byte('v'), got[0].Value[0])
	})
}

func TestTruncateSuffix(t *testing.T) {
	forEach(t, func(t *testing.T, im impl) {
		dir := t.TempDir()
		s := mustOpen(t, im, dir)
		old := entries(ep1, 1, 10)
		require.NoError(t, s.Append(0, old))
		require.NoError(t, s.TruncateAfter(0, 6))
		require.NoError(t, s.TruncateAfter(0, 6)) // at Last: nothing to do
		require.NoError(t, s.TruncateAfter(0, 60))
		requireLog(t, s, 0, old[:6], 1)
		_, err := s.Entries(0, 7, 7, 0)
		require.ErrorIs(t, err, ErrUnavailable)

		repl := entries(ep2, 7, 5)
		require.NoError(t, s.Append(0, repl))
		want := append(slices.Clone(old[:6]), repl...)
		requireLog(t, s, 0, want, 1)

		require.NoError(t, s.TruncateAfter(0, 0))
		requireLog(t, s, 0, nil, 1)
		require.NoError(t, s.Append(0, want))
		require.NoError(t, s.Sync())
		require.NoError(t, s.Close())

		s = mustOpen(t, im, dir)
		requireLog(t, s, 0, want, 1)
		require.Equal(t, len(want), s.Recovery().Entries)
	})
}

func TestSnapshotCompaction(t *testing.T) {
	forEach(t, func(t *testing.T, im impl) {
		dir := t.TempDir()
		s := mustOpen(t, im, dir)
		_, ok, err := s.Snapshot(4)
		require.NoError(t, err)
		require.False(t, ok)

		all := entries(ep1, 1, 100)
		require.NoError(t, s.Append(4, all))
		snap := Snapshot{Base: 60, Epoch: ep1, State: []byte("state at 60")}
		require.NoError(t, s.SaveSnapshot(4, snap))
		requireLog(t, s, 4, all[60:], 61)
		_, err = s.Entries(4, 50, 70, 0)
		require.ErrorIs(t, err, ErrCompacted)
		got, ok, err := s.Snapshot(4)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, snap, got)

		require.ErrorIs(t, s.TruncateAfter(4, 59), ErrCompacted)
		require.NoError(t, s.TruncateAfter(4, 60))
		requireLog(t, s, 4, nil, 61)
		require.NoError(t, s.Append(4, all[60:90]))

		// A snapshot below the base replaces the whole log (a divergent
		// suffix gives way to a peer's shorter history).
		back := Snapshot{Base: 40, Epoch: ep2, State: []byte("their state at 40")}
		require.NoError(t, s.SaveSnapshot(4, back))
		requireLog(t, s, 4, nil, 41)
		got, _, err = s.Snapshot(4)
		require.NoError(t, err)
		require.Equal(t, back, got)
		require.NoError(t, s.Append(4, entries(ep2, 41, 30)))
		requireLog(t, s, 4, entries(ep2, 41, 30), 41)

		// A snapshot past the log (a copy catching up) empties it there.
		snap = Snapshot{Base: 150, Epoch: ep2, State: bytes.Repeat([]byte("s"), 50_000)}
		require.NoError(t, s.SaveSnapshot(4, snap))
		requireLog(t, s, 4, nil, 151)
		next := entries(ep2, 151, 20)
		require.NoError(t, s.Append(4, next))
		// An empty state, and a snapshot at the same base again.
		require.NoError(t, s.SaveSnapshot(5, Snapshot{Base: 0, Epoch: Epoch{}}))
		require.NoError(t, s.SaveSnapshot(5, Snapshot{Base: 0, Epoch: ep1, State: []byte("again")}))
		require.NoError(t, s.Close())

		s = mustOpen(t, im, dir)
		requireLog(t, s, 4, next, 151)
		got, ok, err = s.Snapshot(4)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, snap, got)
		got, ok, err = s.Snapshot(5)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, Snapshot{Base: 0, Epoch: ep1, State: []byte("again")}, got)
		requireLog(t, s, 5, nil, 1)
	})
}

func TestMeta(t *testing.T) {
	forEach(t, func(t *testing.T, im impl) {
		dir := t.TempDir()
		s := mustOpen(t, im, dir)
		_, ok, err := s.Meta("node-id")
		require.NoError(t, err)
		require.False(t, ok)
		v := []byte("node-1")
		require.NoError(t, s.SetMeta("node-id", v))
		v[0] = 'X' // the store keeps a copy
		require.NoError(t, s.SetMeta("accepted/7", []byte{1}))
		require.NoError(t, s.SetMeta("accepted/7", []byte{2}))
		require.NoError(t, s.SetMeta("empty", nil))
		check := func(s Store) {
			got, ok, err := s.Meta("node-id")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, []byte("node-1"), got)
			got, ok, err = s.Meta("accepted/7")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, []byte{2}, got)
			got, ok, err = s.Meta("empty")
			require.NoError(t, err)
			require.True(t, ok)
			require.Empty(t, got)
		}
		check(s)
		require.NoError(t, s.Sync())
		require.NoError(t, s.Close())
		check(mustOpen(t, im, dir))
	})
}

func TestClosedAndLocked(t *testing.T) {
	forEach(t, func(t *testing.T, im impl) {
		dir := t.TempDir()
		s := mustOpen(t, im, dir)
		_, err := im.open(dir)
		require.Error(t, err, "a second store on one directory")
		require.NoError(t, s.Close())
		require.NoError(t, s.Close())
		require.ErrorIs(t, s.Append(0, entries(ep1, 1, 1)), ErrClosed)
		require.ErrorIs(t, s.Sync(), ErrClosed)
		_, _, err = s.Bounds(0)
		require.ErrorIs(t, err, ErrClosed)
		_, err = s.Entries(0, 1, 1, 0)
		require.ErrorIs(t, err, ErrClosed)
		_, _, err = s.Meta("x")
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, s.SaveSnapshot(0, Snapshot{}), ErrClosed)
	})
}

// model is what a store must hold: the reference the randomized test
// compares against.
type model struct {
	parts map[int]*modelPart
	meta  map[string][]byte
}

type modelPart struct {
	first   uint64
	entries []Entry
	snap    *Snapshot
}

func (m *model) part(p int) *modelPart {
	if m.parts[p] == nil {
		m.parts[p] = &modelPart{first: 1}
	}
	return m.parts[p]
}

func (m *model) check(t *testing.T, s Store) {
	t.Helper()
	for p, mp := range m.parts {
		requireLog(t, s, p, mp.entries, mp.first)
		got, ok, err := s.Snapshot(p)
		require.NoError(t, err)
		require.Equal(t, mp.snap != nil, ok)
		if ok {
			require.Equal(t, *mp.snap, got)
		}
	}
	for k, v := range m.meta {
		got, ok, err := s.Meta(k)
		require.NoError(t, err)
		require.True(t, ok)
		require.True(t, bytes.Equal(v, got), "meta %s", k)
	}
}

// TestRandomOperations runs seeded random appends, truncations, snapshots
// and meta writes on a few partitions, reopening now and then, and checks
// the store against a model after each reopen.
func TestRandomOperations(t *testing.T) {
	forEach(t, func(t *testing.T, im impl) {
		for seed := range uint64(3) {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
				dir := t.TempDir()
				rng := rand.New(rand.NewPCG(seed, 18))
				s := mustOpen(t, im, dir)
				m := &model{parts: map[int]*modelPart{}, meta: map[string][]byte{}}
				term := uint64(1)
				for op := range 1500 {
					p := rng.IntN(6)
					mp := m.part(p)
					last := mp.first + uint64(len(mp.entries)) - 1
					switch r := rng.IntN(100); {
					case r < 60:
						es := entries(Epoch{Term: term, Owner: "n"}, last+1, 1+rng.IntN(20))
						for i := range es {
							es[i].Value = bytes.Repeat([]byte{byte(op)}, rng.IntN(300))
						}
						require.NoError(t, s.Append(p, es))
						mp.entries = append(mp.entries, es...)
					case r < 70:
						at := mp.first - 1 + uint64(rng.IntN(len(mp.entries)+1))
						require.NoError(t, s.TruncateAfter(p, at))
						mp.entries = mp.entries[:at+1-mp.first]
						term++
					case r < 76:
						base := mp.first - 1 + uint64(rng.IntN(len(mp.entries)+3))
						snap := Snapshot{Base: base, Epoch: Epoch{Term: term, Owner: "s"}, State: bytes.Repeat([]byte{byte(op)}, rng.IntN(2000))}
						require.NoError(t, s.SaveSnapshot(p, snap))
						if len(snap.State) == 0 {
							snap.State = nil
						}
						mp.snap = &snap
						drop := min(base+1-mp.first, uint64(len(mp.entries)))
						mp.entries = mp.entries[drop:]
						mp.first = base + 1
					case r < 90:
						k := fmt.Sprint("k", rng.IntN(10))
						v := bytes.Repeat([]byte{byte(op)}, rng.IntN(50))
						require.NoError(t, s.SetMeta(k, v))
						m.meta[k] = v
					case r < 97:
						require.NoError(t, s.Sync())
					default:
						require.NoError(t, s.Close())
						s = mustOpen(t, im, dir)
						m.check(t, s)
					}
				}
				m.check(t, s)
				require.NoError(t, s.Close())
				m.check(t, mustOpen(t, im, dir))
			})
		}
	})
}

func TestCommitterPolicies(t *testing.T) {
	s, err := OpenSegmentLog(t.TempDir(), Options{})
	require.NoError(t, err)
	defer s.Close()
	c, err := NewCommitter(s, SyncPolicy{Mode: SyncInterval, Interval: time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, s.Append(0, entries(ep1, 1, 1)))
	require.NoError(t, c.Err())
	require.Eventually(t, func() bool { return c.Syncs() > 0 }, 5*time.Second, time.Millisecond)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	require.ErrorIs(t, c.Err(), ErrClosed)
	_, err = NewCommitter(s, SyncPolicy{Mode: SyncInterval, Interval: -1})
	require.Error(t, err)
	// The node syncs each round itself under SyncEachGroup, and not at
	// all under SyncNever: a Committer runs neither.
	for _, m := range []SyncMode{SyncEachGroup, SyncNever} {
		_, err = NewCommitter(s, SyncPolicy{Mode: m})
		require.ErrorContains(t, err, m.String())
	}
	_, err = NewCommitter(s, SyncPolicy{Mode: 9})
	require.Error(t, err)
	require.NoError(t, s.Sync())
}

// A snapshot below the base, then a new history after it: a reopen finds
// the new snapshot and the new entries, none of the replaced history (the
// segment log's stream still holds those records, before its truncation).
func TestSnapshotBelowTheBaseSurvivesReopen(t *testing.T) {
	forEach(t, func(t *testing.T, im impl) {
		dir := t.TempDir()
		s := mustOpen(t, im, dir)
		require.NoError(t, s.Append(2, entries(ep1, 1, 100)))
		require.NoError(t, s.SaveSnapshot(2, Snapshot{Base: 60, Epoch: ep1, State: []byte("ours at 60")}))
		back := Snapshot{Base: 40, Epoch: ep2, State: []byte("theirs at 40")}
		require.NoError(t, s.SaveSnapshot(2, back))
		next := entries(ep2, 41, 10)
		require.NoError(t, s.Append(2, next))
		require.NoError(t, s.Sync())
		require.NoError(t, s.Close())

		s = mustOpen(t, im, dir)
		defer s.Close()
		requireLog(t, s, 2, next, 41)
		got, ok, err := s.Snapshot(2)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, back, got)
	})
}

// TestConcurrentSnapshots: snapshots of different partitions saved side by
// side, each partition with its own writer appending, replacing its log
// and saving in turn (the order within a partition is its writer's), and
// a Close that races the last saves: every save that returned is there
// after a reopen, with the entries appended after it.
func TestConcurrentSnapshots(t *testing.T) {
	forEach(t, func(t *testing.T, im impl) {
		dir := t.TempDir()
		s, err := im.open(dir)
		require.NoError(t, err)
		const parts, rounds = 8, 12
		type want struct {
			snap Snapshot
			tail []Entry
		}
		wants := make([]want, parts)
		var wg sync.WaitGroup
		for p := range parts {
			wg.Go(func() {
				last := uint64(0)
				for r := range rounds {
					es := entries(ep1, last+1, 5+r)
					if err := s.Append(p, es); err != nil {
						t.Errorf("partition %d append: %v", p, err)
						return
					}
					last += uint64(len(es))
					base := last - 2
					if r%3 == 2 {
						base = last + 40 // restored from a peer: past the log
					}
					snap := Snapshot{Base: base, Epoch: ep2, State: bytes.Repeat([]byte{byte(p), byte(r)}, 20_000+p*1000)}
					if err := s.SaveSnapshot(p, snap); err != nil {
						t.Errorf("partition %d snapshot: %v", p, err)
						return
					}
					var tail []Entry
					if base < last {
						tail = es[len(es)-int(last-base):]
					}
					last = max(last, base)
					wants[p] = want{snap, tail}
				}
			})
		}
		wg.Wait()
		require.NoError(t, s.Sync())
		require.NoError(t, s.Close())

		s = mustOpen(t, im, dir)
		for p, w := range wants {
			got, ok, err := s.Snapshot(p)
			require.NoError(t, err)
			require.True(t, ok, "partition %d", p)
			require.Equal(t, w.snap, got, "partition %d", p)
			requireLog(t, s, p, w.tail, w.snap.Base+1)
		}
	})
}

// TestCloseWaitsForSnapshotInFlight: a Close while snapshots are being
// written waits for them; each save either returned nil and is on disk
// after a reopen, or returned ErrClosed.
func TestCloseWaitsForSnapshotInFlight(t *testing.T) {
	forEach(t, func(t *testing.T, im impl) {
		dir := t.TempDir()
		s, err := im.open(dir)
		require.NoError(t, err)
		const parts = 16
		errs := make([]error, parts)
		first := make(chan struct{}, parts)
		var wg sync.WaitGroup
		for p := range parts {
			wg.Go(func() {
				errs[p] = s.SaveSnapshot(p, Snapshot{Base: 3, Epoch: ep1, State: bytes.Repeat([]byte{byte(p)}, 1<<20)})
				first <- struct{}{}
			})
		}
		<-first // the others are queued or in flight
		require.NoError(t, s.Close())
		wg.Wait()
		s = mustOpen(t, im, dir)
		saved := 0
		for p, err := range errs {
			got, ok, gerr := s.Snapshot(p)
			require.NoError(t, gerr)
			if err != nil {
				require.ErrorIs(t, err, ErrClosed, "partition %d", p)
				continue
			}
			saved++
			require.True(t, ok, "partition %d saved but not there", p)
			require.Equal(t, bytes.Repeat([]byte{byte(p)}, 1<<20), got.State)
		}
		t.Logf("%d of %d saves finished before the close", saved, parts)
	})
}
