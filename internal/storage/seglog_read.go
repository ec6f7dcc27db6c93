// The segment log's entry reads: a partition's bounds and its entries, read
// back from the segment files (and the active segment's unwritten buffer).

package storage

import (
	"fmt"
)

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
