package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// pebbleStore is the Store on github.com/cockroachdb/pebble/v2. Keys:
//
//	'e' partition(4, big-endian) offset(8, big-endian)  an entry's tail (codec.go)
//	'h' partition(4)                                    a snapshot header frame
//	's' partition(4)                                    a snapshot's state
//	'm' key                                             a meta value
//
// so a partition's entries are one ordered key range: a truncation or a
// compaction is one range deletion. Each Append, TruncateAfter and SetMeta
// is a batch committed without an fsync; Sync commits a batch holding only
// a LogData record with an fsync, which makes every batch before it in the
// WAL durable (pebble's LogWriter syncs the WAL up to that record, and
// closes a rotated WAL with an fsync). An empty batch will not do: the
// commit pipeline returns at once for it, with no fsync. This is what
// pebble's maintainers suggest (cockroachdb/pebble#4598).
type pebbleStore struct {
	db       *pebble.DB
	fsCloser io.Closer

	// closeMu is held shared by every call, exclusively by Close: pebble
	// panics on a closed DB.
	closeMu sync.RWMutex
	closed  bool

	mu    sync.Mutex
	parts map[uint32]*bounds
	err   error // sticky, as in the segment log

	dirty atomic.Bool // written since the last Sync began
	rec   Recovery
}

type bounds struct{ first, last uint64 }

const (
	keyEntry    = 'e'
	keySnapHead = 'h'
	keySnap     = 's'
	keyMeta     = 'm'
)

func entryKey(b []byte, p uint32, o uint64) []byte {
	b = append(b, keyEntry)
	b = binary.BigEndian.AppendUint32(b, p)
	return binary.BigEndian.AppendUint64(b, o)
}

func partKey(kind byte, p uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{kind}, p)
}

func metaKey(key string) []byte { return append([]byte{keyMeta}, key...) }

// OpenPebble opens the pebble store in dir, creating it if needed.
func OpenPebble(dir string, opts Options) (Store, error) {
	start := time.Now()
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	// The disk health checker is ours to close: pebble makes its own when
	// given none, but leaks its goroutine when Open fails.
	logger := opts.Logger
	fs, fsCloser := vfs.WithDiskHealthChecks(vfs.Default, 5*time.Second, nil, func(info vfs.DiskSlowInfo) {
		logger.Warn("storage: pebble: slow disk", "path", info.Path, "op", info.OpType.String(), "duration", info.Duration)
	})
	db, err := pebble.Open(dir, &pebble.Options{
		FS:                 fs,
		Logger:             pebbleLogger{opts.Logger},
		FormatMajorVersion: pebble.FormatNewest,
	})
	if err != nil {
		_ = fsCloser.Close()
		return nil, fmt.Errorf("storage: open pebble %s: %w", dir, err)
	}
	s := &pebbleStore{db: db, fsCloser: fsCloser, parts: map[uint32]*bounds{}}
	if err := s.load(); err != nil {
		_ = db.Close()
		_ = fsCloser.Close()
		return nil, err
	}
	s.rec.Duration = time.Since(start)
	for _, b := range s.parts {
		s.rec.Entries += int(b.last + 1 - b.first)
	}
	return s, nil
}

// load finds every partition's bounds: its snapshot header's base, then
// its first and last entry keys (two seeks a partition).
func (s *pebbleStore) load() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{keySnapHead}, UpperBound: []byte{keySnapHead + 1}})
	if err != nil {
		return fmt.Errorf("storage: pebble: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		h, _, err := decodeSnapshotHeader(it.Value())
		if err != nil || len(k) != 5 || h.partition != uint64(binary.BigEndian.Uint32(k[1:])) {
			_ = it.Close()
			return fmt.Errorf("storage: pebble: snapshot header %x: %w", k, ErrCorrupt)
		}
		s.parts[uint32(h.partition)] = &bounds{first: h.base + 1, last: h.base}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("storage: pebble: %w", err)
	}

	it, err = s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{keyEntry}, UpperBound: []byte{keyEntry + 1}})
	if err != nil {
		return fmt.Errorf("storage: pebble: %w", err)
	}
	defer it.Close()
	for valid := it.First(); valid; {
		k := it.Key()
		if len(k) != 13 {
			return fmt.Errorf("storage: pebble: entry key %x: %w", k, ErrCorrupt)
		}
		p := binary.BigEndian.Uint32(k[1:])
		first := binary.BigEndian.Uint64(k[5:])
		next := partKey(keyEntry, p+1)
		if p == MaxPartition {
			next = []byte{keyEntry + 1}
		}
		if !it.SeekLT(next) {
			return fmt.Errorf("storage: pebble: partition %d's entries vanished: %w", p, ErrCorrupt)
		}
		last := binary.BigEndian.Uint64(it.Key()[5:])
		b := s.parts[p]
		if b == nil {
			b = &bounds{first: 1}
			s.parts[p] = b
		}
		// Entries at or below the base were deleted with the snapshot's
		// batch; none may be missing after it.
		if first > b.first {
			return fmt.Errorf("storage: pebble: partition %d: entries %d…%d missing: %w", p, b.first, first-1, ErrCorrupt)
		}
		b.last = max(b.last, last)
		valid = it.SeekGE(next)
	}
	return nil
}

// begin holds closeMu shared and reports whether the store takes calls.
func (s *pebbleStore) begin() error {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (s *pebbleStore) end() { s.closeMu.RUnlock() }

func (s *pebbleStore) sticky() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *pebbleStore) fail(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
	return err
}

func (s *pebbleStore) bounds(p uint32) bounds {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.parts[p]; b != nil {
		return *b
	}
	return bounds{first: 1}
}

func (s *pebbleStore) setBounds(p uint32, b bounds) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parts[p] = &b
}

// apply commits batch b without an fsync (sync: with one).
func (s *pebbleStore) apply(b *pebble.Batch, sync bool) error {
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	if err := s.db.Apply(b, opts); err != nil {
		return s.fail(fmt.Errorf("storage: pebble: %w", err))
	}
	s.dirty.Store(true)
	return b.Close()
}

func (s *pebbleStore) Append(p int, entries []Entry) error {
	if err := checkPartition(p); err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	if err := s.sticky(); err != nil {
		return err
	}
	bd := s.bounds(uint32(p))
	if err := checkEntries(p, bd.last+1, entries); err != nil {
		return err
	}
	b := s.db.NewBatch()
	var key, val []byte
	for i := range entries {
		key = entryKey(key[:0], uint32(p), entries[i].Offset)
		val = appendEntryTail(val[:0], &entries[i])
		if err := b.Set(key, val, nil); err != nil {
			_ = b.Close()
			return fmt.Errorf("storage: pebble: %w", err)
		}
	}
	if err := s.apply(b, false); err != nil {
		return err
	}
	bd.last += uint64(len(entries))
	s.setBounds(uint32(p), bd)
	return nil
}

func (s *pebbleStore) TruncateAfter(p int, offset uint64) error {
	if err := checkPartition(p); err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	if err := s.sticky(); err != nil {
		return err
	}
	bd := s.bounds(uint32(p))
	if offset+1 < bd.first {
		return fmt.Errorf("partition %d: truncate after %d, below first %d: %w", p, offset, bd.first, ErrCompacted)
	}
	if offset >= bd.last {
		return nil
	}
	b := s.db.NewBatch()
	if err := b.DeleteRange(entryKey(nil, uint32(p), offset+1), entryKey(nil, uint32(p), bd.last+1), nil); err != nil {
		_ = b.Close()
		return fmt.Errorf("storage: pebble: %w", err)
	}
	if err := s.apply(b, false); err != nil {
		return err
	}
	bd.last = offset
	s.setBounds(uint32(p), bd)
	return nil
}

// Flush: pebble's write-ahead log writer passes committed batches to the
// OS on its own; there is nothing to hand over.
func (s *pebbleStore) Flush() error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	return s.sticky()
}

func (s *pebbleStore) Sync() error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	if err := s.sticky(); err != nil {
		return err
	}
	if !s.dirty.Swap(false) {
		return nil
	}
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return s.fail(fmt.Errorf("storage: pebble: sync: %w", err))
	}
	return nil
}

func (s *pebbleStore) Bounds(p int) (uint64, uint64, error) {
	if err := checkPartition(p); err != nil {
		return 0, 0, err
	}
	if err := s.begin(); err != nil {
		return 0, 0, err
	}
	defer s.end()
	bd := s.bounds(uint32(p))
	return bd.first, bd.last, nil
}

func (s *pebbleStore) Entries(p int, from, to uint64, maxBytes int) ([]Entry, error) {
	if err := checkPartition(p); err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.end()
	bd := s.bounds(uint32(p))
	if err := checkRange(p, from, to, bd.first, bd.last); err != nil {
		return nil, err
	}
	if from > to {
		return nil, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: entryKey(nil, uint32(p), from),
		UpperBound: entryKey(nil, uint32(p), to+1),
	})
	if err != nil {
		return nil, fmt.Errorf("storage: pebble: %w", err)
	}
	var out []Entry
	size, full := 0, false
	o := from
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		if len(k) != 13 || binary.BigEndian.Uint64(k[5:]) != o {
			_ = it.Close()
			return nil, fmt.Errorf("storage: pebble: partition %d: entry %d missing: %w", p, o, ErrCorrupt)
		}
		e := Entry{Offset: o}
		if err := decodeEntryTail(it.Value(), &e); err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("storage: pebble: partition %d offset %d: %w", p, o, err)
		}
		if maxBytes > 0 && len(out) > 0 && size+entrySize(&e) > maxBytes {
			full = true
			break
		}
		size += entrySize(&e)
		out = append(out, e)
		o++
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("storage: pebble: %w", err)
	}
	if o <= to && !full {
		return nil, fmt.Errorf("storage: pebble: partition %d: entry %d missing: %w", p, o, ErrCorrupt)
	}
	return out, nil
}

func (s *pebbleStore) SaveSnapshot(p int, snap Snapshot) error {
	if err := checkPartition(p); err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	if err := s.sticky(); err != nil {
		return err
	}
	bd := s.bounds(uint32(p))
	// Entries at or below the base go; below the old base, the snapshot
	// replaces the whole log.
	end := entryKey(nil, uint32(p), snap.Base+1)
	replace := snap.Base+1 < bd.first
	if replace {
		end = partKey(keyEntry, uint32(p)+1)
		if uint64(p) == MaxPartition {
			end = []byte{keyEntry + 1}
		}
	}
	b := s.db.NewBatch()
	err := errors.Join(
		b.Set(partKey(keySnapHead, uint32(p)), appendSnapshotHeader(nil, p, &snap), nil),
		b.Set(partKey(keySnap, uint32(p)), snap.State, nil),
		b.DeleteRange(entryKey(nil, uint32(p), 0), end, nil),
	)
	if err != nil {
		_ = b.Close()
		return fmt.Errorf("storage: pebble: %w", err)
	}
	// One batch with an fsync: the snapshot, its compaction and every
	// batch before it are durable together.
	if err := s.apply(b, true); err != nil {
		return err
	}
	last := max(bd.last, snap.Base)
	if replace {
		last = snap.Base
	}
	s.setBounds(uint32(p), bounds{first: snap.Base + 1, last: last})
	return nil
}

func (s *pebbleStore) Snapshot(p int) (Snapshot, bool, error) {
	if err := checkPartition(p); err != nil {
		return Snapshot{}, false, err
	}
	if err := s.begin(); err != nil {
		return Snapshot{}, false, err
	}
	defer s.end()
	// One point-in-time view, so the header and the state match.
	view := s.db.NewSnapshot()
	defer view.Close()
	head, ok, err := get(view, partKey(keySnapHead, uint32(p)))
	if err != nil || !ok {
		return Snapshot{}, false, err
	}
	h, _, err := decodeSnapshotHeader(head)
	if err != nil || h.partition != uint64(p) {
		return Snapshot{}, false, fmt.Errorf("storage: pebble: partition %d snapshot header: %w", p, ErrCorrupt)
	}
	state, ok, err := get(view, partKey(keySnap, uint32(p)))
	if err != nil {
		return Snapshot{}, false, err
	}
	if !ok || uint64(len(state)) != h.stateLen || crc(state) != h.stateCRC {
		return Snapshot{}, false, fmt.Errorf("storage: pebble: partition %d snapshot state fails its checks: %w", p, ErrCorrupt)
	}
	if len(state) == 0 {
		state = nil
	}
	return Snapshot{Base: h.base, Epoch: h.epoch, State: state}, true, nil
}

// get returns a copy of key's value.
func get(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("storage: pebble: get %x: %w", key, err)
	}
	v = bytes.Clone(v)
	if err := closer.Close(); err != nil {
		return nil, false, fmt.Errorf("storage: pebble: %w", err)
	}
	return v, true, nil
}

func (s *pebbleStore) SetMeta(key string, value []byte) error {
	if len(key)+len(value) > MaxEntrySize {
		return fmt.Errorf("meta %q: %d bytes: %w", key, len(key)+len(value), ErrTooLarge)
	}
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	if err := s.sticky(); err != nil {
		return err
	}
	b := s.db.NewBatch()
	if err := b.Set(metaKey(key), value, nil); err != nil {
		_ = b.Close()
		return fmt.Errorf("storage: pebble: %w", err)
	}
	return s.apply(b, false)
}

func (s *pebbleStore) Meta(key string) ([]byte, bool, error) {
	if err := s.begin(); err != nil {
		return nil, false, err
	}
	defer s.end()
	v, ok, err := get(s.db, metaKey(key))
	if ok && len(v) == 0 {
		v = []byte{}
	}
	return v, ok, err
}

func (s *pebbleStore) Recovery() Recovery { return s.rec }

func (s *pebbleStore) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	// Closing the WAL syncs it.
	err := s.db.Close()
	if cerr := s.fsCloser.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("storage: pebble: close: %w", err)
	}
	return s.sticky()
}

// pebbleLogger passes pebble's messages to a slog.Logger: its chatty info
// at Debug.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf is how pebble stops on an error it cannot go on from (a failed
// WAL write); it must not return.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble")
	panic("storage: pebble: " + msg)
}
