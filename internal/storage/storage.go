package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// Epoch is a partition epoch as the store keeps it: the engine's
// partition.Epoch, field for field. The store never orders epochs; it
// keeps what it is given.
type Epoch struct {
	Term  uint64
	Owner string
}

// Entry is one changelog entry of a partition: the engine's
// partition.Entry, with Type holding the wire.RecordType's value (the store
// does not interpret it).
type Entry struct {
	Epoch  Epoch
	Offset uint64
	Type   uint8
	Key    string
	Value  []byte
}

// Snapshot is a partition's state at offset Base, the last offset it
// covers, and Epoch, the epoch of the entry at Base. State is opaque to the
// store; the engine encodes in it whatever it needs besides the two (its
// epoch runs, for one).
type Snapshot struct {
	Base  uint64
	Epoch Epoch
	State []byte
}

// Recovery describes what Open found.
type Recovery struct {
	// Duration is how long Open took, reading everything it needs to serve.
	Duration time.Duration
	// TornBytes is how many bytes of a torn tail Open cut (0 for a clean
	// shutdown). A torn tail is what a crash leaves of writes that no Sync
	// covered; TornFile names the file it was cut from. Pebble cuts its
	// write-ahead log's tail itself and does not say; it reports 0.
	TornBytes int64
	TornFile  string
	// Entries is how many entries the store holds after Open.
	Entries int
}

// Store is a server's durable storage: per partition, a changelog of
// entries with contiguous offsets and at most one snapshot below them;
// and, node-wide, a few small values the engine must never forget across
// a restart (the epoch each partition accepted or promised, its own terms,
// its identity).
//
// The one durability point is Sync. Append, TruncateAfter and SetMeta take
// effect at once for every read of this Store, and become durable when a
// later Sync returns. A crash before that may lose them, even a crash of
// the process alone, since writes are buffered in memory (the segment
// log's write buffer, pebble's 32 KiB WAL block). What a crash keeps is a
// prefix of the writes in the order they were made: never a later write
// without an earlier one, never an entry that was truncated before a
// Sync. SaveSnapshot is durable when it returns, with every write before
// it.
//
// A partition's log holds entries First…Last (see Bounds); First-1 is the
// base of its snapshot, or 0. A Store is safe for concurrent use, but the
// writes to one partition must be issued in their order by one caller (the
// engine's driver). Snapshots of different partitions may be saved side
// by side, and are written to disk side by side. Entries returned to callers are their own: they alias
// nothing the store keeps, and the store keeps nothing of theirs.
type Store interface {
	// Append adds entries to the end of partition p's log. entries must
	// be contiguous and start at Last+1; an engine that replaces a
	// conflicting suffix calls TruncateAfter first. Append of no entries
	// does nothing. Durable at the next Sync.
	Append(p int, entries []Entry) error
	// TruncateAfter drops partition p's entries after offset, which must
	// be at least First-1 (ErrCompacted below that); an offset at or past
	// Last does nothing. Durable at the next Sync; until then a crash may
	// bring the dropped entries back, but never with anything appended
	// after the truncation.
	TruncateAfter(p int, offset uint64) error
	// Sync makes every Append, TruncateAfter and SetMeta that returned
	// before Sync was called durable (an fsync, or none when nothing was
	// written since the last Sync). Writes may go on while it runs. Under
	// SyncEachGroup the caller (the node) calls it once per write round
	// itself, so one Sync covers every write the round took (group
	// commit). A failed Sync promises nothing about writes since the last
	// successful one, and the store refuses writes from then on: the
	// kernel may have dropped the pages it could not write, so a later
	// fsync could succeed without them.
	Sync() error
	// Flush hands every write made so far to the operating system without
	// waiting for the disk: a crash of the process alone then loses
	// nothing, a crash of the machine whatever the OS had not written back.
	// The fsync policies that do not sync each group call it every round.
	Flush() error
	// Bounds returns the offsets of partition p's first and last entries;
	// first = last+1 when the log is empty (first = 1, last = 0 for a
	// partition never written).
	Bounds(p int) (first, last uint64, err error)
	// Entries returns partition p's entries from offset from through to
	// (inclusive), stopping early once their keys and values exceed
	// maxBytes, but always with at least one entry when from <= to
	// (maxBytes <= 0: no limit). from below First is ErrCompacted; to
	// past Last is ErrUnavailable.
	Entries(p int, from, to uint64, maxBytes int) ([]Entry, error)
	// SaveSnapshot stores s as partition p's snapshot, replacing the one
	// it had, and drops the entries at or below s.Base (compaction);
	// entries above it stay. A base past Last leaves the log empty at
	// s.Base (a copy restored from a snapshot). An engine whose entries
	// past s.Base conflict with s truncates them first. A base below
	// First-1 replaces the whole log (a copy whose divergent suffix, past
	// its old snapshot, gave way to a peer's shorter history): every entry
	// goes. Durable when it returns, and so is every write made before it;
	// a crash keeps the old snapshot and log or the new, never a mix. It
	// keeps no reference to s.State once it returns.
	SaveSnapshot(p int, s Snapshot) error
	// Snapshot returns partition p's snapshot; ok is false when it has
	// none. A snapshot that fails its checks is ErrCorrupt, never served.
	Snapshot(p int) (s Snapshot, ok bool, err error)
	// SetMeta sets the node-wide value of key (a copy is kept). Durable at
	// the next Sync.
	SetMeta(key string, value []byte) error
	// Meta returns the value of key, a copy; ok is false when it was
	// never set.
	Meta(key string) (value []byte, ok bool, err error)
	// Recovery describes what Open found.
	Recovery() Recovery
	// Close makes every write durable, as Sync does (it returns the
	// error that stopped the store's writes, if one did), and releases
	// the store's files. It is idempotent; every other method that can
	// fail fails after it with ErrClosed.
	Close() error
}

// Errors. Check them with errors.Is: the store wraps them with context.
var (
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("storage: closed")
	// ErrCompacted: the offsets asked for are at or below the snapshot
	// base; the snapshot replaced them.
	ErrCompacted = errors.New("storage: entries compacted")
	// ErrUnavailable: the offsets asked for are past the last entry.
	ErrUnavailable = errors.New("storage: entries unavailable")
	// ErrNotContiguous: an append does not continue the log.
	ErrNotContiguous = errors.New("storage: entries not contiguous")
	// ErrCorrupt: a file fails its checks (CRC, length, format) somewhere
	// a crash cannot explain; the store refuses to serve it.
	ErrCorrupt = errors.New("storage: corrupt")
	// ErrTooLarge: an entry, snapshot or value over the store's limits.
	ErrTooLarge = errors.New("storage: too large")
	// ErrLocked: another process (or Store) has the directory open.
	ErrLocked = errors.New("storage: directory in use")
)

// MaxEntrySize bounds an entry's owner, key and value together, and a
// meta key and value; larger ones are ErrTooLarge.
const MaxEntrySize = 64 << 20

// MaxPartition is the largest partition number a store takes.
const MaxPartition = math.MaxUint32

func checkPartition(p int) error {
	if p < 0 || uint64(p) > MaxPartition {
		return fmt.Errorf("storage: partition %d out of range", p)
	}
	return nil
}

// Options configure both implementations. The zero value is ready.
type Options struct {
	// Logger receives what the store has to report (a torn tail cut at
	// Open, pebble's messages). Nil discards.
	Logger *slog.Logger
	// SegmentSize is the size at which the segment log starts a new
	// segment (default 64 MiB, at most 1 GiB).
	SegmentSize int64
	// WriteBuffer is how many bytes the segment log buffers before it
	// writes them to its file (default 1 MiB); Sync writes them at once.
	WriteBuffer int
}

const (
	defaultSegmentSize = 64 << 20
	maxSegmentSize     = 1 << 30
	defaultWriteBuffer = 1 << 20
)

func (o Options) withDefaults() (Options, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.SegmentSize == 0:
		o.SegmentSize = defaultSegmentSize
	case o.SegmentSize < 4096 || o.SegmentSize > maxSegmentSize:
		return o, fmt.Errorf("storage: segment size %d outside [4 KiB, 1 GiB]", o.SegmentSize)
	}
	switch {
	case o.WriteBuffer == 0:
		o.WriteBuffer = defaultWriteBuffer
	case o.WriteBuffer < 0:
		return o, fmt.Errorf("storage: write buffer %d is negative", o.WriteBuffer)
	}
	return o, nil
}

// entrySize is what Entries' maxBytes counts of an entry.
func entrySize(e *Entry) int { return len(e.Key) + len(e.Value) }

// checkEntries checks that entries are contiguous from next and within
// the size limit.
func checkEntries(p int, next uint64, entries []Entry) error {
	for i := range entries {
		e := &entries[i]
		if e.Offset != next+uint64(i) {
			return fmt.Errorf("partition %d: entry at offset %d, want %d: %w", p, e.Offset, next+uint64(i), ErrNotContiguous)
		}
		if len(e.Epoch.Owner)+len(e.Key)+len(e.Value) > MaxEntrySize {
			return fmt.Errorf("partition %d offset %d: %d bytes: %w", p, e.Offset, len(e.Epoch.Owner)+len(e.Key)+len(e.Value), ErrTooLarge)
		}
	}
	return nil
}

// checkRange checks a read of from…to against a log first…last.
func checkRange(p int, from, to, first, last uint64) error {
	if from < first && from <= to {
		return fmt.Errorf("partition %d: offset %d below first %d: %w", p, from, first, ErrCompacted)
	}
	if to > last && from <= to {
		return fmt.Errorf("partition %d: offset %d past last %d: %w", p, to, last, ErrUnavailable)
	}
	return nil
}
