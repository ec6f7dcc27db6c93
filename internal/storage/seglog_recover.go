// The segment log's recovery at Open: reading the snapshots, replaying the
// segment stream over them, and cutting a torn tail.

package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

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
