// The segment log's snapshots (saved to files of their own, read back) and
// the compaction that saving one allows: deleting the segments that hold
// nothing live, after copying the last few live records forward.

package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

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
