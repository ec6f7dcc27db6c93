package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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

// recover reads the directory: snapshots first, then the stream.
func (l *segLog) recover() error {
	des, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("storage: read %s: %w", l.dir, err)
	}
	var ids []uint32
	snaps := map[uint32][]uint64{}
	for _, de := range des {
		name := de.Name()
		switch {
		case strings.HasSuffix(name, tmpSuffix):
			// An unfinished snapshot: the rename never happened.
			if err := os.Remove(filepath.Join(l.dir, name)); err != nil {
				return fmt.Errorf("storage: remove %s: %w", name, err)
			}
		case strings.HasSuffix(name, segSuffix):
			id, err := strconv.ParseUint(strings.TrimSuffix(name, segSuffix), 10, 32)
			if err != nil || name != segName(uint32(id)) {
				return fmt.Errorf("storage: unexpected file %s: %w", name, ErrCorrupt)
			}
			ids = append(ids, uint32(id))
			if info, err := de.Info(); err == nil {
				l.streamBytes += info.Size()
			}
		case strings.HasSuffix(name, snapExt):
			p, base, ok := parseSnapName(name)
			if !ok {
				return fmt.Errorf("storage: unexpected file %s: %w", name, ErrCorrupt)
			}
			snaps[p] = append(snaps[p], base)
		}
	}
	for p, seqs := range snaps {
		slices.Sort(seqs)
		info, err := l.readSnapInfo(p, seqs[len(seqs)-1])
		if err != nil {
			return err
		}
		l.parts[p] = &part{first: info.base + 1, last: info.base, snap: info}
		l.snapSeq = max(l.snapSeq, seqs[len(seqs)-1])
		// Older snapshots are left over from a crash before their removal.
		for _, q := range seqs[:len(seqs)-1] {
			if err := os.Remove(filepath.Join(l.dir, snapName(p, q))); err != nil {
				return fmt.Errorf("storage: remove old snapshot: %w", err)
			}
		}
	}
	slices.Sort(ids)
	for i := 1; i < len(ids); i++ {
		if ids[i] != ids[i-1]+1 {
			return fmt.Errorf("storage: segment %d missing: %w", ids[i-1]+1, ErrCorrupt)
		}
	}
	for i, id := range ids {
		if err := l.replay(id, i == len(ids)-1); err != nil {
			return err
		}
	}
	if len(l.segs) == 0 {
		if err := l.newSegment(1); err != nil {
			return err
		}
	}
	return l.finishReplay()
}

// readSnapInfo reads and checks the header of a snapshot file.
func (l *segLog) readSnapInfo(p uint32, seq uint64) (*snapInfo, error) {
	name := snapName(p, seq)
	f, err := os.Open(filepath.Join(l.dir, name))
	if err != nil {
		return nil, fmt.Errorf("storage: open snapshot: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("storage: stat snapshot %s: %w", name, err)
	}
	head := make([]byte, len(snapMagic)+frameHeader)
	if _, err := io.ReadFull(f, head); err != nil {
		return nil, fmt.Errorf("storage: snapshot %s: short header: %w", name, ErrCorrupt)
	}
	if !bytes.HasPrefix(head, []byte(snapMagic)) {
		return nil, fmt.Errorf("storage: snapshot %s: bad magic: %w", name, ErrCorrupt)
	}
	size := binary.LittleEndian.Uint32(head[len(snapMagic):])
	if size > maxBody || int64(len(head))+int64(size) > st.Size() {
		return nil, fmt.Errorf("storage: snapshot %s: header length %d: %w", name, size, ErrCorrupt)
	}
	head = append(head, make([]byte, size)...)
	if _, err := io.ReadFull(f, head[len(snapMagic)+frameHeader:]); err != nil {
		return nil, fmt.Errorf("storage: read snapshot %s: %w", name, err)
	}
	h, n, err := decodeSnapshotHeader(head[len(snapMagic):])
	if err != nil {
		return nil, fmt.Errorf("storage: snapshot %s: %w", name, err)
	}
	off := int64(len(snapMagic) + n)
	if h.partition != uint64(p) || uint64(st.Size()-off) != h.stateLen {
		return nil, fmt.Errorf("storage: snapshot %s: header does not match the file: %w", name, ErrCorrupt)
	}
	return &snapInfo{name: name, base: h.base, epoch: h.epoch, stateOff: off, stateLen: h.stateLen, stateCRC: h.stateCRC}, nil
}

// replay applies one segment's records. While replaying, a partition's
// locs may have holes (n == 0): a record copied forward comes after
// entries that followed it. finishReplay checks that none is left.
func (l *segLog) replay(id uint32, last bool) error {
	path := filepath.Join(l.dir, segName(id))
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("storage: read %s: %w", path, err)
	}
	if len(data) > maxSegmentSize+maxBody {
		return fmt.Errorf("storage: %s: %d bytes, more than a segment holds: %w", path, len(data), ErrCorrupt)
	}
	torn := func(at int) error {
		if !last {
			return fmt.Errorf("storage: %s: bad record at byte %d of a sealed segment: %w", path, at, ErrCorrupt)
		}
		if synced := markPast(data, at); synced > int64(at) {
			return fmt.Errorf("storage: %s: bad record at byte %d, which an fsync had covered (a later mark says through byte %d): damage, not a torn write: %w", path, at, synced, ErrCorrupt)
		}
		return l.cutTail(path, at, len(data))
	}
	seg := &segment{id: id, path: path}
	l.segs = append(l.segs, seg)
	pos := len(segMagic)
	lostMagic := last && len(data) < len(segMagic)
	if lostMagic {
		// Created, but crashed before its magic was written.
		if err := l.cutTail(path, 0, len(data)); err != nil {
			return err
		}
		data, pos = nil, 0
	} else if !bytes.HasPrefix(data, []byte(segMagic)) {
		return fmt.Errorf("storage: %s: bad magic: %w", path, ErrCorrupt)
	}
	for pos < len(data) {
		body, n, st := parseFrame(data[pos:])
		if st != frameOK {
			if err := torn(pos); err != nil {
				return err
			}
			break
		}
		r, err := decodeRecord(body)
		if err != nil {
			// The CRC matched: this is no torn write.
			return fmt.Errorf("storage: %s at byte %d: %w", path, pos, err)
		}
		if r.kind == kindMark {
			pos += n
			continue
		}
		if err := l.replayRecord(r, loc{seg: id, off: uint32(pos), n: uint32(n)}); err != nil {
			return fmt.Errorf("storage: %s at byte %d: %w", path, pos, err)
		}
		pos += n
	}
	mode := os.O_RDONLY
	if last {
		mode = os.O_RDWR
	}
	f, err := os.OpenFile(path, mode, 0)
	if err != nil {
		return fmt.Errorf("storage: open %s: %w", path, err)
	}
	seg.f = f
	seg.size = int64(pos)
	if last {
		// What the last process wrote may sit unsynced in the page cache:
		// sync it before a mark can claim it.
		if err := f.Sync(); err != nil {
			return fmt.Errorf("storage: sync %s: %w", path, err)
		}
		seg.synced = seg.size
	}
	if lostMagic {
		// Write the magic the crash lost.
		if _, err := f.WriteAt([]byte(segMagic), 0); err != nil {
			return fmt.Errorf("storage: write %s: %w", path, err)
		}
		seg.size = int64(len(segMagic))
	}
	return nil
}

// markPast looks past a bad record at byte at of a segment for a sync mark
// (kindMark) and returns the largest offset one says an fsync covered, or
// 0. It skips the bad record by its length, which a torn write may have
// left intact, and stops at the first record it cannot read. A torn tail
// is writes no fsync covered, so a mark past the damage that covers it
// means the damage is not a torn write: the disk lost bytes it had
// synced. (Valid records after a bad one alone prove nothing: the OS may
// write a crash's unsynced pages out of order.)
func markPast(data []byte, at int) int64 {
	if len(data)-at < frameHeader {
		return 0
	}
	size := int(binary.LittleEndian.Uint32(data[at:]))
	if size == 0 || size > maxBody || at+frameHeader+size > len(data) {
		return 0
	}
	var synced int64
	for pos := at + frameHeader + size; pos < len(data); {
		body, n, st := parseFrame(data[pos:])
		if st != frameOK {
			break
		}
		if r, err := decodeRecord(body); err == nil && r.kind == kindMark {
			synced = max(synced, int64(r.offset))
		}
		pos += n
	}
	return synced
}

// cutTail truncates the file at path to at bytes, of size, and makes the
// cut durable.
func (l *segLog) cutTail(path string, at, size int) error {
	if err := os.Truncate(path, int64(at)); err != nil {
		return fmt.Errorf("storage: cut torn tail of %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("storage: open %s: %w", path, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("storage: sync %s: %w", path, err)
	}
	l.rec.TornBytes += int64(size - at)
	l.rec.TornFile = path
	return nil
}

func (l *segLog) replayRecord(r record, at loc) error {
	switch r.kind {
	case kindEntry:
		p := l.part(uint32(r.partition))
		if r.offset < p.first {
			return nil // at or below the snapshot base
		}
		i := r.offset - p.first
		if i >= uint64(len(p.locs)) {
			// A hole can only span entries whose records are still to
			// come, each over frameHeader bytes of the stream, so a wild
			// offset is corruption, not memory to allocate.
			if i-uint64(len(p.locs)) > uint64(l.streamBytes/frameHeader) {
				return fmt.Errorf("partition %d: offset %d far past the log: %w", r.partition, r.offset, ErrCorrupt)
			}
			p.locs = append(p.locs, make([]loc, i+1-uint64(len(p.locs)))...)
		}
		p.locs[i] = at
	case kindTrunc:
		p := l.part(uint32(r.partition))
		if r.offset+1 < p.first {
			p.locs = p.locs[:0]
		} else if keep := r.offset + 1 - p.first; keep < uint64(len(p.locs)) {
			p.locs = p.locs[:keep]
		}
	case kindMeta:
		l.meta[string(r.key)] = metaValue{value: bytes.Clone(r.value), seg: at.seg, n: at.n}
	}
	return nil
}

// finishReplay checks every partition's log for holes and counts what
// each segment holds.
func (l *segLog) finishReplay() error {
	for pn, p := range l.parts {
		for i, lc := range p.locs {
			if lc.n == 0 {
				return fmt.Errorf("storage: partition %d: entry %d missing: %w", pn, p.first+uint64(i), ErrCorrupt)
			}
			s := l.seg(lc.seg)
			s.live++
			s.liveBytes += int64(lc.n)
		}
		p.last = p.first + uint64(len(p.locs)) - 1
	}
	for _, m := range l.meta {
		s := l.seg(m.seg)
		s.metas++
		s.metaBytes += int64(m.n)
	}
	return nil
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

func (l *segLog) Bounds(p int) (uint64, uint64, error) {
	if err := checkPartition(p); err != nil {
		return 0, 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, 0, ErrClosed
	}
	pt := l.parts[uint32(p)]
	if pt == nil {
		return 1, 0, nil
	}
	return pt.first, pt.last, nil
}

func (l *segLog) Entries(p int, from, to uint64, maxBytes int) ([]Entry, error) {
	if err := checkPartition(p); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return nil, err
	}
	first, last := uint64(1), uint64(0)
	pt := l.parts[uint32(p)]
	if pt != nil {
		first, last = pt.first, pt.last
	}
	if err := checkRange(p, from, to, first, last); err != nil {
		return nil, err
	}
	if from > to {
		return nil, nil
	}
	var out []Entry
	size := 0
	var scratch []byte
	for o := from; o <= to; {
		// Read a run of adjacent records of one segment at once.
		i := o - pt.first
		run := pt.locs[i : i+1]
		for j := i + 1; j <= to-pt.first && len(run) < 1024; j++ {
			prev := pt.locs[j-1]
			if lc := pt.locs[j]; lc.seg != prev.seg || lc.off != prev.off+prev.n {
				break
			}
			run = pt.locs[i : j+1]
		}
		end := run[len(run)-1]
		block, err := l.readLocked(run[0].seg, int64(run[0].off), int64(end.off+end.n-run[0].off), &scratch)
		if err != nil {
			return nil, err
		}
		for k, lc := range run {
			off := lc.off - run[0].off
			e, err := decodeEntryFrame(block[off:off+lc.n], p, o+uint64(k))
			if err != nil {
				return nil, fmt.Errorf("storage: %s at byte %d: %w", l.seg(lc.seg).path, lc.off, err)
			}
			if maxBytes > 0 && len(out) > 0 && size+entrySize(&e) > maxBytes {
				return out, nil
			}
			size += entrySize(&e)
			out = append(out, e)
		}
		o += uint64(len(run))
	}
	return out, nil
}

// decodeEntryFrame decodes a whole entry record, checking its CRC and that
// it is the entry of partition p at offset o.
func decodeEntryFrame(b []byte, p int, o uint64) (Entry, error) {
	body, n, st := parseFrame(b)
	if st != frameOK || n != len(b) {
		return Entry{}, fmt.Errorf("entry %d: bad frame: %w", o, ErrCorrupt)
	}
	r, err := decodeRecord(body)
	if err != nil {
		return Entry{}, err
	}
	if r.kind != kindEntry || r.partition != uint64(p) || r.offset != o {
		return Entry{}, fmt.Errorf("entry %d: record is not partition %d's entry %d: %w", o, p, o, ErrCorrupt)
	}
	e := Entry{Offset: o}
	if err := decodeEntryTail(r.tail, &e); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// readLocked reads n bytes at off of segment id: what lies past the active
// segment's size comes from the buffer (and aliases it when all of it
// does), the rest from the file into *scratch.
func (l *segLog) readLocked(id uint32, off, n int64, scratch *[]byte) ([]byte, error) {
	s := l.seg(id)
	inFile := n
	if s == l.active() {
		inFile = min(n, max(0, s.size-off))
		if off+n-s.size > int64(len(l.buf)) {
			return nil, fmt.Errorf("storage: %s: read past the buffer: %w", s.path, ErrCorrupt)
		}
	}
	if inFile == 0 {
		b := off - s.size
		return l.buf[b : b+n], nil
	}
	if int64(cap(*scratch)) < n {
		*scratch = make([]byte, n)
	}
	b := (*scratch)[:n]
	if _, err := s.f.ReadAt(b[:inFile], off); err != nil {
		return nil, fmt.Errorf("storage: read %s at %d: %w", s.path, off, err)
	}
	copy(b[inFile:], l.buf)
	return b, nil
}

func (l *segLog) SaveSnapshot(p int, s Snapshot) error {
	if err := checkPartition(p); err != nil {
		return err
	}
	if len(s.Epoch.Owner) > MaxEntrySize {
		return fmt.Errorf("partition %d snapshot: owner of %d bytes: %w", p, len(s.Epoch.Owner), ErrTooLarge)
	}
	// Three steps. Under syncMu: the truncation record, if one is needed,
	// and a Sync pass. Then, holding no lock, the file: snapshots of
	// different partitions are written and fsynced side by side (a joining
	// server restores hundreds; one at a time, each waited for its own
	// fsyncs, and the disk did a third of what it does with two or more
	// writers). Then, under syncMu again, the snapshot replaces the old.
	l.syncMu.Lock()
	l.mu.Lock()
	err := l.usable()
	if err == nil && l.closing {
		err = ErrClosed
	}
	if err != nil {
		l.mu.Unlock()
		l.syncMu.Unlock()
		return err
	}
	pt := l.part(uint32(p))
	if s.Base+1 < pt.first {
		// Below the old base: the snapshot replaces the whole log, and a
		// truncation record ahead of it keeps any replay from putting the
		// old entries back.
		if _, err := l.reserveLocked(); err != nil {
			l.mu.Unlock()
			l.syncMu.Unlock()
			return err
		}
		l.buf = appendTruncRecord(l.buf, p, s.Base)
		for _, lc := range pt.locs {
			sg := l.seg(lc.seg)
			sg.live--
			sg.liveBytes -= int64(lc.n)
		}
		pt.locs = pt.locs[:0]
		pt.last = pt.first - 1
		if err := l.wroteLocked(); err != nil {
			l.mu.Unlock()
			l.syncMu.Unlock()
			return err
		}
	}
	l.snapSeq++
	seq := l.snapSeq // unique among the saves in flight
	l.saving.Add(1)  // Close waits for the file
	defer l.saving.Done()
	l.mu.Unlock()
	// Everything written before the snapshot is durable before it is, so a
	// crash never keeps the snapshot without the writes before it.
	err = l.syncPass()
	l.syncMu.Unlock()
	if err != nil {
		return err
	}

	name := snapName(uint32(p), seq)
	header := appendSnapshotHeader([]byte(snapMagic), p, &s)
	if err := writeFileAtomic(l.dir, name, header, s.State); err != nil {
		return err
	}
	info := &snapInfo{name: name, base: s.Base, epoch: s.Epoch, stateOff: int64(len(header)), stateLen: uint64(len(s.State)), stateCRC: crc(s.State)}

	l.syncMu.Lock()
	l.mu.Lock()
	old := pt.snap
	pt.snap = info
	if s.Base+1 < pt.first {
		// Back below the old base: nothing of the old log is left.
		pt.first, pt.last = s.Base+1, s.Base
	}
	l.dropThroughLocked(pt, s.Base)
	if err = l.usable(); err == nil {
		err = l.compactLocked()
	}
	l.mu.Unlock()
	l.syncMu.Unlock()
	if old != nil && old.name != name {
		// Should the removal not survive a crash, Open removes it.
		if rerr := os.Remove(filepath.Join(l.dir, old.name)); rerr != nil && err == nil {
			err = fmt.Errorf("storage: remove old snapshot: %w", rerr)
		}
	}
	return err
}

// dropThroughLocked drops a partition's entries at or below base.
func (l *segLog) dropThroughLocked(pt *part, base uint64) {
	k := min(base+1-pt.first, uint64(len(pt.locs)))
	for _, lc := range pt.locs[:k] {
		s := l.seg(lc.seg)
		s.live--
		s.liveBytes -= int64(lc.n)
	}
	pt.locs = pt.locs[k:]
	pt.first = base + 1
	pt.last = max(pt.last, base)
}

// compactLocked deletes the oldest segments that hold nothing live. Of
// those that hold little (a quarter of a segment), it copies the live
// records forward first, fsyncs them, and deletes them too. The caller
// holds syncMu and mu.
func (l *segLog) compactLocked() error {
	// An active segment of a good size that is mostly dead (every
	// partition snapshotted at its end, say) is sealed, so that it can go.
	if a := l.active(); a.size+int64(len(l.buf)) >= l.opts.SegmentSize/4 &&
		a.liveBytes+a.metaBytes <= (a.size+int64(len(l.buf)))/4 {
		if err := l.rollLocked(); err != nil {
			return err
		}
	}
	var drop []*segment
	var copied bool
	sealed := len(l.segs) - 1 // segments rolled during copying stay
	for _, s := range l.segs[:sealed] {
		if s.live > 0 || s.metas > 0 {
			if s.liveBytes+s.metaBytes > l.opts.SegmentSize/4 {
				break
			}
			if err := l.copyForwardLocked(s); err != nil {
				return err
			}
			copied = true
		}
		drop = append(drop, s)
	}
	if len(drop) == 0 {
		return nil
	}
	if copied {
		// The copies must be durable before the originals go.
		if err := l.flushLocked(); err != nil {
			return err
		}
		if err := l.active().f.Sync(); err != nil {
			return l.fail(fmt.Errorf("storage: sync %s: %w", l.active().path, err))
		}
	}
	for _, s := range drop {
		err := s.f.Close()
		s.f = nil
		if err != nil {
			return l.fail(fmt.Errorf("storage: close %s: %w", s.path, err))
		}
		if err := os.Remove(s.path); err != nil {
			return l.fail(fmt.Errorf("storage: remove %s: %w", s.path, err))
		}
	}
	l.segs = slices.Delete(l.segs, 0, len(drop))
	// Deleting a prefix of the stream changes nothing it means, so a
	// deletion lost in a crash is harmless; the sync keeps the directory
	// from filling with them.
	return syncDir(l.dir)
}

// copyForwardLocked appends a copy of every live record of segment s
// (entries and meta values) to the active segment.
func (l *segLog) copyForwardLocked(s *segment) error {
	data := make([]byte, s.size)
	if _, err := s.f.ReadAt(data, 0); err != nil {
		return fmt.Errorf("storage: read %s: %w", s.path, err)
	}
	for _, pt := range l.parts {
		for i := range pt.locs {
			lc := &pt.locs[i]
			if lc.seg != s.id {
				continue
			}
			off, err := l.reserveLocked()
			if err != nil {
				return err
			}
			l.buf = append(l.buf, data[lc.off:lc.off+lc.n]...)
			a := l.active()
			s.live--
			s.liveBytes -= int64(lc.n)
			a.live++
			a.liveBytes += int64(lc.n)
			lc.seg, lc.off = a.id, off
			if err := l.wroteLocked(); err != nil {
				return err
			}
		}
	}
	for key, m := range l.meta {
		if m.seg == s.id {
			if err := l.setMetaLocked(key, m.value); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *segLog) Snapshot(p int) (Snapshot, bool, error) {
	if err := checkPartition(p); err != nil {
		return Snapshot{}, false, err
	}
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return Snapshot{}, false, ErrClosed
		}
		var info *snapInfo
		if pt := l.parts[uint32(p)]; pt != nil {
			info = pt.snap
		}
		l.mu.Unlock()
		if info == nil {
			return Snapshot{}, false, nil
		}
		s, err := l.readSnapshot(info)
		if errors.Is(err, os.ErrNotExist) && l.snapReplaced(p, info) {
			continue // a newer snapshot replaced it while we looked
		}
		if err != nil {
			return Snapshot{}, false, err
		}
		return s, true, nil
	}
}

func (l *segLog) snapReplaced(p int, info *snapInfo) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	pt := l.parts[uint32(p)]
	return pt != nil && pt.snap != info
}

func (l *segLog) readSnapshot(info *snapInfo) (Snapshot, error) {
	path := filepath.Join(l.dir, info.name)
	f, err := os.Open(path)
	if err != nil {
		return Snapshot{}, fmt.Errorf("storage: open snapshot: %w", err)
	}
	defer f.Close()
	state := make([]byte, info.stateLen)
	if _, err := f.ReadAt(state, info.stateOff); err != nil {
		return Snapshot{}, fmt.Errorf("storage: read %s: %w", path, err)
	}
	if crc(state) != info.stateCRC {
		return Snapshot{}, fmt.Errorf("storage: %s: state fails its CRC: %w", path, ErrCorrupt)
	}
	if len(state) == 0 {
		state = nil
	}
	return Snapshot{Base: info.base, Epoch: info.epoch, State: state}, nil
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
