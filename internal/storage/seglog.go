// The segment log: its files and invariants (segLog), Open, writes,
// Sync and Close. Its recovery at Open is in seglog_recover.go, its reads
// in seglog_read.go, its snapshots and compaction in seglog_snap.go.

package storage

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// segLog is the segment-file Store. Every partition's records go to one
// stream of segment files, so one fsync makes a whole write group durable
// whatever partitions it touched; 271 files per server would take 271
// fsyncs. A segment is deleted once none of its records is live: an
// entry above its partition's snapshot base and not truncated, or a
// meta value not set again since. The oldest segments' few live records
// (a partition written once and never snapshotted since) are copied
// forward so they do not pin the segments behind them.
//
// Invariants:
//   - Segments are numbered consecutively; the stream is their records in
//     order. Replaying the stream over the snapshots gives the store's
//     state; replaying any prefix of it gives the state after some prefix
//     of the writes.
//   - Only the last segment can end torn: a segment is fsynced before the
//     next one is created, and written only at its end.
//   - A record copied forward is identical to the original; replay lets the
//     later copy stand for the offset (an entry's content never changes:
//     a truncation is a record of its own).
//   - Files are never rewritten in place, except the last segment's torn
//     tail, cut at Open.
type segLog struct {
	dir  string
	opts Options
	lock *os.File

	// syncMu serializes Sync passes, snapshots and the deletion of
	// segments; taken before mu. A pass holds it while it fsyncs, without
	// mu, so writers go on meanwhile.
	syncMu sync.Mutex
	mu     sync.Mutex
	closed bool
	// err is sticky: after a failed write or fsync the log refuses writes.
	err   error
	segs  []*segment // by id, consecutive; the last is the active one
	buf   []byte     // the active segment's bytes past size, not yet written
	dirty bool       // written since the last Sync pass began
	parts map[uint32]*part
	meta  map[string]metaValue
	rec   Recovery
	// streamBytes is the size of every segment at Open.
	streamBytes int64
	// snapSeq is the sequence number of the last snapshot begun.
	snapSeq uint64
	// saving counts the snapshot files being written, which Close waits
	// for (they are written holding no lock).
	saving  sync.WaitGroup
	closing bool // Close has begun: no new save
}

type segment struct {
	id        uint32
	path      string
	f         *os.File
	size      int64 // bytes in the file; the active segment's buffer follows
	synced    int64 // bytes an fsync has covered (the active segment's)
	live      int   // live entries
	liveBytes int64 // their records' bytes
	metas     int   // current meta values
	metaBytes int64
}

// loc is where an entry's record is: segment, byte offset, length.
type loc struct{ seg, off, n uint32 }

type part struct {
	first, last uint64
	locs        []loc // entries first…last
	snap        *snapInfo
}

type snapInfo struct {
	name     string
	base     uint64
	epoch    Epoch
	stateOff int64
	stateLen uint64
	stateCRC uint32
}

type metaValue struct {
	value []byte
	seg   uint32
	n     uint32 // the record's length
}

const (
	segMagic  = "fero-sg1"
	segSuffix = ".seg"
	snapExt   = ".snap"
)

func segName(id uint32) string { return fmt.Sprintf("%010d%s", id, segSuffix) }

// snapName names partition p's snapshot by its sequence number: of a
// partition's snapshot files (a crash may leave two), the one written
// last counts, whatever its base (a copy whose divergent suffix a peer's
// snapshot replaced moves its base back).
func snapName(p uint32, seq uint64) string {
	return fmt.Sprintf("p%010d-%020d%s", p, seq, snapExt)
}

func parseSnapName(name string) (p uint32, seq uint64, ok bool) {
	s, found := strings.CutSuffix(name, snapExt)
	if !found || len(s) != 32 || s[0] != 'p' || s[11] != '-' {
		return 0, 0, false
	}
	pv, err1 := strconv.ParseUint(s[1:11], 10, 32)
	bv, err2 := strconv.ParseUint(s[12:], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uint32(pv), bv, true
}

// OpenSegmentLog opens the segment log in dir, creating it if needed. It
// cuts a torn tail (logged, and reported by Recovery) and fails with
// ErrCorrupt on damage a crash cannot explain.
func OpenSegmentLog(dir string, opts Options) (Store, error) {
	start := time.Now()
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	format, written, err := checkFormat(dir)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	l := &segLog{dir: dir, opts: opts, lock: lock, parts: map[uint32]*part{}, meta: map[string]metaValue{}}
	if err := l.recover(); err != nil {
		_ = l.closeFiles()
		return nil, err
	}
	if !written || format < FormatVersion {
		// Read whole: the directory is this build's format from now on.
		if err := writeFormat(dir); err != nil {
			_ = l.closeFiles()
			return nil, err
		}
	}
	l.rec.Duration = time.Since(start)
	for _, p := range l.parts {
		l.rec.Entries += len(p.locs)
	}
	if l.rec.TornBytes > 0 {
		opts.Logger.Warn("storage: cut a torn log tail", "file", l.rec.TornFile, "bytes", l.rec.TornBytes)
	}
	return l, nil
}

func (l *segLog) part(p uint32) *part {
	pt := l.parts[p]
	if pt == nil {
		pt = &part{first: 1}
		l.parts[p] = pt
	}
	return pt
}

func (l *segLog) seg(id uint32) *segment { return l.segs[id-l.segs[0].id] }

func (l *segLog) active() *segment { return l.segs[len(l.segs)-1] }

// newSegment creates segment id, empty but for its magic, and makes its
// directory entry durable.
func (l *segLog) newSegment(id uint32) error {
	path := filepath.Join(l.dir, segName(id))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("storage: create %s: %w", path, err)
	}
	if _, err := f.WriteAt([]byte(segMagic), 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("storage: write %s: %w", path, err)
	}
	l.segs = append(l.segs, &segment{id: id, path: path, f: f, size: int64(len(segMagic))})
	return syncDir(l.dir)
}

// usable reports why the log cannot take a write or a read.
func (l *segLog) usable() error {
	if l.closed {
		return ErrClosed
	}
	return l.err
}

// fail makes err sticky and returns it.
func (l *segLog) fail(err error) error {
	if l.err == nil {
		l.err = err
	}
	return err
}

// flushLocked writes the buffer to the active segment's file.
func (l *segLog) flushLocked() error {
	if len(l.buf) == 0 {
		return nil
	}
	a := l.active()
	if _, err := a.f.WriteAt(l.buf, a.size); err != nil {
		return l.fail(fmt.Errorf("storage: write %s: %w", a.path, err))
	}
	a.size += int64(len(l.buf))
	if cap(l.buf) > 4*l.opts.WriteBuffer {
		l.buf = nil // a large batch grew it; let it go
	}
	l.buf = l.buf[:0]
	return nil
}

// reserveLocked rolls to a new segment if the active one is full, and
// returns the offset at which the next record goes.
func (l *segLog) reserveLocked() (uint32, error) {
	if a := l.active(); a.size+int64(len(l.buf)) >= l.opts.SegmentSize {
		if err := l.rollLocked(); err != nil {
			return 0, err
		}
	}
	a := l.active()
	return uint32(a.size + int64(len(l.buf))), nil
}

// rollLocked seals the active segment and starts the next one.
func (l *segLog) rollLocked() error {
	a := l.active()
	if err := l.flushLocked(); err != nil {
		return err
	}
	// Sealed segments never end torn: sync before the next one exists.
	if err := a.f.Sync(); err != nil {
		return l.fail(fmt.Errorf("storage: sync %s: %w", a.path, err))
	}
	if err := l.newSegment(a.id + 1); err != nil {
		return l.fail(err)
	}
	return nil
}

// wroteLocked accounts for a record appended to the buffer and writes the
// buffer out once it is full.
func (l *segLog) wroteLocked() error {
	l.dirty = true
	if len(l.buf) >= l.opts.WriteBuffer {
		return l.flushLocked()
	}
	return nil
}

func (l *segLog) Append(p int, entries []Entry) error {
	if err := checkPartition(p); err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	pt := l.part(uint32(p))
	if err := checkEntries(p, pt.last+1, entries); err != nil {
		return err
	}
	for i := range entries {
		off, err := l.reserveLocked()
		if err != nil {
			return err
		}
		n := len(l.buf)
		l.buf = appendEntryRecord(l.buf, p, &entries[i])
		a := l.active()
		lc := loc{seg: a.id, off: off, n: uint32(len(l.buf) - n)}
		pt.locs = append(pt.locs, lc)
		pt.last++
		a.live++
		a.liveBytes += int64(lc.n)
		if err := l.wroteLocked(); err != nil {
			return err
		}
	}
	return nil
}

func (l *segLog) TruncateAfter(p int, offset uint64) error {
	if err := checkPartition(p); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	pt := l.part(uint32(p))
	if offset+1 < pt.first {
		return fmt.Errorf("partition %d: truncate after %d, below first %d: %w", p, offset, pt.first, ErrCompacted)
	}
	if offset >= pt.last {
		return nil
	}
	if _, err := l.reserveLocked(); err != nil {
		return err
	}
	l.buf = appendTruncRecord(l.buf, p, offset)
	keep := offset + 1 - pt.first
	for _, lc := range pt.locs[keep:] {
		s := l.seg(lc.seg)
		s.live--
		s.liveBytes -= int64(lc.n)
	}
	pt.locs = pt.locs[:keep]
	pt.last = offset
	return l.wroteLocked()
}

func (l *segLog) SetMeta(key string, value []byte) error {
	if len(key)+len(value) > MaxEntrySize {
		return fmt.Errorf("meta %q: %d bytes: %w", key, len(key)+len(value), ErrTooLarge)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	return l.setMetaLocked(key, bytes.Clone(value))
}

func (l *segLog) setMetaLocked(key string, value []byte) error {
	if _, err := l.reserveLocked(); err != nil {
		return err
	}
	n := len(l.buf)
	l.buf = appendMetaRecord(l.buf, key, value)
	if old, ok := l.meta[key]; ok {
		s := l.seg(old.seg)
		s.metas--
		s.metaBytes -= int64(old.n)
	}
	a := l.active()
	m := metaValue{value: value, seg: a.id, n: uint32(len(l.buf) - n)}
	l.meta[key] = m
	a.metas++
	a.metaBytes += int64(m.n)
	return l.wroteLocked()
}

func (l *segLog) Meta(key string) ([]byte, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, false, ErrClosed
	}
	m, ok := l.meta[key]
	return bytes.Clone(m.value), ok, nil
}

func (l *segLog) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	return l.flushLocked()
}

func (l *segLog) Sync() error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return l.syncPass()
}

// syncPass writes out the buffer and fsyncs the active segment; the
// caller holds syncMu. Writers go on during the fsync: what they write
// after the buffer was taken is the next pass's.
func (l *segLog) syncPass() error {
	l.mu.Lock()
	if err := l.usable(); err != nil {
		l.mu.Unlock()
		return err
	}
	if !l.dirty {
		l.mu.Unlock()
		return nil
	}
	l.dirty = false
	a := l.active()
	if a.synced > int64(len(segMagic)) {
		// What the last fsync of this segment covered, for Open to tell
		// damage from a torn write (markPast).
		l.buf = appendMarkRecord(l.buf, a.synced)
	}
	if err := l.flushLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	covered := a.size
	l.mu.Unlock()
	// A roll meanwhile syncs a itself before it leaves it, and nothing
	// closes a segment while syncMu is held.
	if err := a.f.Sync(); err != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.fail(fmt.Errorf("storage: sync %s: %w", a.path, err))
	}
	l.mu.Lock()
	a.synced = max(a.synced, covered)
	l.mu.Unlock()
	return nil
}

func (l *segLog) Recovery() Recovery {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec
}

func (l *segLog) Close() error {
	// Saves that begin from now on are refused, and those whose files are
	// in flight finish first.
	l.syncMu.Lock()
	l.mu.Lock()
	l.closing = true
	l.mu.Unlock()
	l.syncMu.Unlock()
	l.saving.Wait()
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	err := l.err
	if err == nil {
		err = l.flushLocked()
		if err == nil {
			if serr := l.active().f.Sync(); serr != nil {
				err = fmt.Errorf("storage: sync %s: %w", l.active().path, serr)
			}
		}
	}
	l.closed = true
	if cerr := l.closeFiles(); err == nil {
		err = cerr
	}
	return err
}

// closeFiles closes every segment and the lock.
func (l *segLog) closeFiles() error {
	var err error
	for _, s := range l.segs {
		if s.f == nil {
			continue
		}
		if cerr := s.f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("storage: close %s: %w", s.path, cerr)
		}
		s.f = nil
	}
	if cerr := l.lock.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("storage: close lock: %w", cerr)
	}
	return err
}
