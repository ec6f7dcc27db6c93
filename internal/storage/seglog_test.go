package storage

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// frameLen is the length of e's record in partition p.
func frameLen(p int, e Entry) int { return len(appendEntryRecord(nil, p, &e)) }

// crash abandons a segment log as a killed process would: what it had
// not written to its file is lost; what it had is in the page cache.
func crash(t *testing.T, s Store) {
	t.Helper()
	l := s.(*segLog)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	require.NoError(t, l.closeFiles())
}

func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	require.NoError(t, err)
	slices.Sort(names)
	return names
}

func flipByte(t *testing.T, path string, at int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b := []byte{0}
	_, err = f.ReadAt(b, at)
	require.NoError(t, err)
	b[0] ^= 0x40
	_, err = f.WriteAt(b, at)
	require.NoError(t, err)
}

func TestSegmentLogTornTail(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSegmentLog(dir, Options{})
	require.NoError(t, err)
	all := entries(ep1, 1, 100)
	require.NoError(t, s.Append(0, all))
	require.NoError(t, s.Sync())
	require.NoError(t, s.Close())
	require.Zero(t, s.Recovery().TornBytes)

	// Where each record starts.
	at := []int64{int64(len(segMagic))}
	for _, e := range all {
		at = append(at, at[len(at)-1]+int64(frameLen(0, e)))
	}
	seg := segFiles(t, dir)[0]
	st, err := os.Stat(seg)
	require.NoError(t, err)
	require.Equal(t, at[100], st.Size())

	// Cut the last record short: the log ends at entry 99.
	require.NoError(t, os.Truncate(seg, at[100]-5))
	s, err = OpenSegmentLog(dir, Options{})
	require.NoError(t, err)
	rec := s.Recovery()
	require.Equal(t, at[100]-5-at[99], rec.TornBytes)
	require.Equal(t, seg, rec.TornFile)
	require.Equal(t, 99, rec.Entries)
	requireLog(t, s, 0, all[:99], 1)
	require.NoError(t, s.Close())

	// Flip a byte inside entry 90's record: the log ends at entry 89.
	flipByte(t, seg, at[89]+frameHeader+5)
	s, err = OpenSegmentLog(dir, Options{})
	require.NoError(t, err)
	require.Equal(t, at[99]-at[89], s.Recovery().TornBytes)
	requireLog(t, s, 0, all[:89], 1)

	// The log goes on from there, and a clean reopen cuts nothing.
	require.NoError(t, s.Append(0, all[89:]))
	require.NoError(t, s.Close())
	s, err = OpenSegmentLog(dir, Options{})
	require.NoError(t, err)
	require.Zero(t, s.Recovery().TornBytes)
	requireLog(t, s, 0, all, 1)
	require.NoError(t, s.Close())

	// A torn length field (zeros, as a crash leaves past the end) too.
	f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(make([]byte, 300))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	s, err = OpenSegmentLog(dir, Options{})
	require.NoError(t, err)
	require.Equal(t, int64(300), s.Recovery().TornBytes)
	requireLog(t, s, 0, all, 1)
	require.NoError(t, s.Close())

	// A segment created just before a crash, its magic cut short.
	next := filepath.Join(dir, segName(2))
	require.NoError(t, os.WriteFile(next, []byte(segMagic[:3]), 0o644))
	s, err = OpenSegmentLog(dir, Options{})
	require.NoError(t, err)
	require.Equal(t, int64(3), s.Recovery().TornBytes)
	require.NoError(t, s.Append(0, entries(ep1, 101, 1)))
	require.NoError(t, s.Close())
	s, err = OpenSegmentLog(dir, Options{})
	require.NoError(t, err)
	require.Zero(t, s.Recovery().TornBytes)
	requireLog(t, s, 0, entries(ep1, 1, 101), 1)
	require.NoError(t, s.Close())
}

func TestSegmentLogCorruption(t *testing.T) {
	opts := Options{SegmentSize: 4096}
	t.Run("sealed segment", func(t *testing.T) {
		dir := t.TempDir()
		s, err := OpenSegmentLog(dir, opts)
		require.NoError(t, err)
		require.NoError(t, s.Append(0, entries(ep1, 1, 200)))
		require.NoError(t, s.Close())
		segs := segFiles(t, dir)
		require.Greater(t, len(segs), 2)
		flipByte(t, segs[0], 100)
		_, err = OpenSegmentLog(dir, opts)
		require.ErrorIs(t, err, ErrCorrupt)
	})
	t.Run("missing segment", func(t *testing.T) {
		dir := t.TempDir()
		s, err := OpenSegmentLog(dir, opts)
		require.NoError(t, err)
		require.NoError(t, s.Append(0, entries(ep1, 1, 200)))
		require.NoError(t, s.Close())
		require.NoError(t, os.Remove(segFiles(t, dir)[1]))
		_, err = OpenSegmentLog(dir, opts)
		require.ErrorIs(t, err, ErrCorrupt)
	})
	t.Run("snapshot", func(t *testing.T) {
		dir := t.TempDir()
		s, err := OpenSegmentLog(dir, opts)
		require.NoError(t, err)
		require.NoError(t, s.SaveSnapshot(3, Snapshot{Base: 10, Epoch: ep1, State: bytes.Repeat([]byte("x"), 1000)}))
		path := filepath.Join(dir, snapName(3, 1)) // the first snapshot written
		flipByte(t, path, 500)
		_, _, err = s.Snapshot(3)
		require.ErrorIs(t, err, ErrCorrupt)
		require.NoError(t, s.Close())

		// A damaged header stops Open; a leftover temporary file does not.
		require.NoError(t, os.WriteFile(filepath.Join(dir, "p0000000001-00000000000000000005.snap.tmp"), []byte("partial"), 0o644))
		flipByte(t, path, int64(len(snapMagic))+frameHeader+1)
		_, err = OpenSegmentLog(dir, opts)
		require.ErrorIs(t, err, ErrCorrupt)
		require.NoError(t, os.Remove(path))
		s, err = OpenSegmentLog(dir, opts)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		_, err = os.Stat(filepath.Join(dir, "p0000000001-00000000000000000005.snap.tmp"))
		require.ErrorIs(t, err, os.ErrNotExist)
	})
}

// TestSegmentLogCopiesForward: a partition written once and never
// snapshotted does not pin the segments after it.
func TestSegmentLogCopiesForward(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 4096}
	s, err := OpenSegmentLog(dir, opts)
	require.NoError(t, err)
	quiet := entries(ep1, 1, 3)
	require.NoError(t, s.Append(0, quiet))
	require.NoError(t, s.SetMeta("node-id", []byte("n1")))
	busy := entries(ep1, 1, 1000)
	require.NoError(t, s.Append(1, busy))
	require.Greater(t, len(segFiles(t, dir)), 10)

	require.NoError(t, s.SaveSnapshot(1, Snapshot{Base: 1000, Epoch: ep1, State: []byte("s")}))
	require.LessOrEqual(t, len(segFiles(t, dir)), 2)
	requireLog(t, s, 0, quiet, 1)
	requireLog(t, s, 1, nil, 1001)
	require.NoError(t, s.Close())

	s, err = OpenSegmentLog(dir, opts)
	require.NoError(t, err)
	requireLog(t, s, 0, quiet, 1)
	requireLog(t, s, 1, nil, 1001)
	v, ok, err := s.Meta("node-id")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []byte("n1"), v)
	require.NoError(t, s.Close())
}

// TestSegmentLogCrashKeepsAPrefix: a crash keeps everything synced and a
// prefix of what followed, never entries a truncation replaced mixed with
// their replacements.
func TestSegmentLogCrashKeepsAPrefix(t *testing.T) {
	for _, wb := range []int{1, 700, 1 << 20} {
		dir := t.TempDir()
		opts := Options{SegmentSize: 8192, WriteBuffer: wb}
		s, err := OpenSegmentLog(dir, opts)
		require.NoError(t, err)
		old := entries(ep1, 1, 50)
		require.NoError(t, s.Append(0, old))
		require.NoError(t, s.Sync())
		require.NoError(t, s.TruncateAfter(0, 20))
		repl := entries(ep2, 21, 40)
		require.NoError(t, s.Append(0, repl))
		crash(t, s)

		s, err = OpenSegmentLog(dir, opts)
		require.NoError(t, err)
		first, last, err := s.Bounds(0)
		require.NoError(t, err)
		got, err := s.Entries(0, first, last, 0)
		require.NoError(t, err)
		want := append(slices.Clone(old[:20]), repl...)
		if last == 50 && got[49].Epoch == ep1 {
			want = old // the truncation was not written
		}
		require.GreaterOrEqual(t, len(got), 20, "write buffer %d", wb)
		require.Equal(t, normalize(want[:len(got)]), normalize(got), "write buffer %d", wb)
		if wb == 1 {
			require.Equal(t, normalize(want), normalize(got), "everything reached the file")
		}
		require.NoError(t, s.Close())
	}
}

func FuzzDecode(f *testing.F) {
	e := entries(ep1, 7, 1)[0]
	f.Add(appendEntryRecord(nil, 3, &e))
	f.Add(appendTruncRecord(nil, 3, 9))
	f.Add(appendMetaRecord(nil, "k", []byte("v")))
	f.Add(appendSnapshotHeader(nil, 3, &Snapshot{Base: 4, Epoch: ep2, State: []byte("state")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if body, n, st := parseFrame(b); st == frameOK {
			require.LessOrEqual(t, n, len(b))
			if r, err := decodeRecord(body); err == nil && r.kind == kindEntry {
				var e Entry
				require.NoError(t, decodeEntryTail(r.tail, &e))
			}
		}
		var e Entry
		_ = decodeEntryTail(b, &e)
		_, _, _ = decodeSnapshotHeader(b)
	})
}

func FuzzEntryRoundTrip(f *testing.F) {
	f.Add(uint32(3), uint64(7), uint64(2), "10.0.0.1:7946", uint8(2), "key", []byte("value"))
	f.Fuzz(func(t *testing.T, p uint32, offset, term uint64, owner string, typ uint8, key string, value []byte) {
		e := Entry{Epoch: Epoch{Term: term, Owner: owner}, Offset: offset, Type: typ, Key: key, Value: value}
		b := appendEntryRecord(nil, int(p), &e)
		body, n, st := parseFrame(b)
		require.Equal(t, frameOK, st)
		require.Equal(t, len(b), n)
		r, err := decodeRecord(body)
		require.NoError(t, err)
		require.Equal(t, uint64(p), r.partition)
		got := Entry{Offset: r.offset}
		require.NoError(t, decodeEntryTail(r.tail, &got))
		require.Equal(t, normalize([]Entry{e}), normalize([]Entry{got}))
	})
}

// TestSegmentLogStopsAfterAFailedWrite: once a write or fsync fails, the
// log refuses writes, and Close says why.
func TestSegmentLogStopsAfterAFailedWrite(t *testing.T) {
	s, err := OpenSegmentLog(t.TempDir(), Options{})
	require.NoError(t, err)
	require.NoError(t, s.Append(0, entries(ep1, 1, 5)))
	l := s.(*segLog)
	require.NoError(t, l.active().f.Close()) // every write to it fails from now on
	err = s.Sync()
	require.Error(t, err)
	require.ErrorIs(t, s.Append(0, entries(ep1, 6, 1)), err)
	require.ErrorIs(t, s.SetMeta("k", nil), err)
	require.ErrorIs(t, s.Sync(), err)
	require.ErrorIs(t, s.Close(), err)
	require.ErrorIs(t, s.Sync(), ErrClosed)
}

// A killed process loses nothing it flushed: Flush hands the buffer to
// the OS, where crash (which drops only the buffer) leaves it.
func TestSegmentLogFlushSurvivesAProcessCrash(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSegmentLog(dir, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Append(0, entries(ep1, 1, 10)))
	require.NoError(t, s.Flush())
	require.NoError(t, s.Append(0, entries(ep1, 11, 20)))
	crash(t, s)

	s, err = OpenSegmentLog(dir, Options{})
	require.NoError(t, err)
	defer s.Close()
	first, last, err := s.Bounds(0)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 10}, []uint64{first, last}, "the flushed entries, not the buffered ones")
}

// A bad record in the last segment that an fsync had covered is damage,
// not a torn write: a later sync mark says so, and Open refuses the log
// instead of cutting records it may have acknowledged. Damage past the
// last fsync is a torn tail, cut as ever.
func TestSegmentLogDamageUnderASyncMarkIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSegmentLog(dir, Options{})
	require.NoError(t, err)
	for i := range 5 {
		require.NoError(t, s.Append(0, entries(ep1, uint64(1+10*i), 10)))
		require.NoError(t, s.Sync())
	}
	require.NoError(t, s.Close())
	path := segFiles(t, dir)[0]
	flipByte(t, path, int64(len(segMagic))+frameHeader+3) // inside the first record
	_, err = OpenSegmentLog(dir, Options{})
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "an fsync had covered")

	// The same damage in records no fsync covered yet is a torn tail.
	dir = t.TempDir()
	s, err = OpenSegmentLog(dir, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Append(0, entries(ep1, 1, 10)))
	require.NoError(t, s.Sync())
	info, err := os.Stat(segFiles(t, dir)[0])
	require.NoError(t, err)
	require.NoError(t, s.Append(0, entries(ep1, 11, 10)))
	require.NoError(t, s.Flush())
	crash(t, s)
	flipByte(t, segFiles(t, dir)[0], info.Size()+frameHeader+3) // the first unsynced record
	s, err = OpenSegmentLog(dir, Options{})
	require.NoError(t, err)
	defer s.Close()
	require.NotZero(t, s.Recovery().TornBytes)
	_, last, err := s.Bounds(0)
	require.NoError(t, err)
	require.Equal(t, uint64(10), last)
}
