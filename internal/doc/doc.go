// Package doc owns a resource's state: the dynamic document that change
// records apply to. It holds each partition's top-level keys and their
// values, applies ADD, UPDATE and REMOVE records at paths of any depth,
// serves local reads, and snapshots, restores and digests partitions. It
// knows nothing of logs, epochs, owners or the network: the partition
// engine decides what to apply, and in which order.
//
// # Values
//
// Values arrive as msgpack bytes. Every value is checked by
// wire.ValidateValue before anything is allocated for it (a hostile value
// cannot make the decoder allocate gigabytes or recurse without end), then
// decoded with the msgpack library and kept in one canonical Go form:
//
//	msgpack           Go
//	nil               nil
//	bool              bool
//	int, uint         int64; uint64 only above math.MaxInt64
//	float 32 and 64   float64
//	str               string
//	bin               []byte
//	array             []any
//	map               map[string]any (keys must be str; a repeated key keeps its last value)
//	ext, timestamp    Ext
//
// Each value encodes back in one canonical way, the msgpack library's
// encoding with compact integers and sorted map keys (shortest integers,
// float64, map keys sorted bytewise), so equal states have byte-identical
// snapshots and equal digests however their records were encoded, and Go
// map order never reaches an encoding.
//
// # Paths
//
// A record's key is a path: segments separated by one byte, '.' unless
// WithSeparator says otherwise. The first segment is the top-level key,
// which decides the partition (ring.TopLevel hashes the key up to its first
// separator). Below it, a segment names a map key, or, in an array, an
// element by its decimal index without sign or leading zero: in
// "users.ada.tags.0", users and ada are maps and tags an array.
//
// There is no escaping: the separator always splits. The ring's partitioner
// splits without escaping too, and an escape rule that only the store knew
// would let the two disagree about a key's top-level segment. So a key
// without the separator is always one top-level key, and a segment can
// never contain the separator. A Partitioner must depend on the top-level
// segment only, or nested keys of one top-level value would be routed to
// different partitions; Apply refuses a change whose top-level key is not
// in the partition it is given.
//
// # Semantics
//
// Each record type below, at a path whose last segment is s in a parent
// container. The path before s is walked first: UPDATE and ADD create a
// missing value on the way as a map (as an array when all that follows is
// the push segment "-"), and fail on a scalar (including nil) or on an
// array segment that is not an index in range.
//
//	record    parent map                 parent array                  scalar parent
//	UPDATE    set s                      replace element s (s < len)   FailedPrecondition
//	ADD       set s if absent, else      insert before element s       FailedPrecondition
//	          FailedPrecondition         (s <= len)
//	ADD "-"   FailedPrecondition         append (push)                 FailedPrecondition
//	REMOVE    delete s if present        delete element s if s < len,  no-op
//	                                     shifting the rest down
//
// A top-level key behaves like a key of a map. "-" is the push segment only
// as the last segment of an ADD; anywhere else it is an ordinary map key
// (and never an array index). REMOVE of a path that does not resolve to a
// value, for whatever reason, is a no-op, so REMOVE is idempotent and
// never fails on the state; after REMOVE of a map key, Get reports no
// value for it. ADD on a map differs from UPDATE: it is a create-if-absent,
// which the owner can use as a uniqueness check.
//
// Any other failure leaves the state unchanged and returns an *errs.Error:
// InvalidArgument when the change is wrong whatever the state (value not
// valid msgpack, map keys not strings, nesting deeper than
// wire.MaxValueDepth-1 once placed, wrong partition), FailedPrecondition
// when it does not fit the current state. Apply is deterministic, so the
// owner applies (or Checks) a change before committing it, commits only
// what succeeded, and no copy ever meets an error for a committed record.
//
// Builder makes the records of the original's helpers: Update, Remove,
// Add, Push (ADD at path + ".-", which creates the array if it is missing)
// and Patch (one UPDATE per key of a map under a base path, in key order).
//
// # Versions and conditions
//
// Every top-level key has a version: the offset of the last committed
// change under it, which the engine passes to ApplyAt. An absent key is at
// 0, so a REMOVE of the top-level key takes it back to 0; a change applied
// without an offset (Apply), and a key restored from a snapshot written
// before versions were kept, are at 1. Versions come only from offsets,
// so every copy keeps the same ones. A version lives in the key's cell,
// beside its entry, so an UPDATE allocates no more than it did without.
//
// A change with Cond set applies only if its top-level key is at
// IfVersion (0: absent); otherwise it fails with FailedPrecondition,
// wrapping ErrVersion, and carries the current version (VersionOf). With
// GetVersioned, which reads a value and its key's version at one moment,
// that is a compare-and-set.
//
// # Batches
//
// A Batch is several changes committed as one record (wire.RecordBatch,
// encoded by AppendBatch). ApplyBatch applies them in order, each seeing
// what the earlier ones left, all or nothing: the new entries are all made
// first, holding the partition's write lock, and swapped in under one
// lock, so a failing change leaves the store exactly as it was and a
// reader sees the whole batch or none of it. Every key the batch leaves
// present takes the batch's offset as its version.
//
// # Exactly-once writes
//
// A write may carry a writer ID and a sequence number (Batch.Writer and
// Seq), and its answer (Batch.Reply). A writer retries a write whose
// answer it did not get, so before committing such a batch the owner
// asks Outcome whether the partition already committed it; if so, the
// retry is answered with the first outcome (the offset it was committed
// at, and its reply) and not applied twice.
//
// What Outcome reads is each partition's exactly-once table, which
// ApplyBatch updates on every copy, in log order, as part of the batch: a
// failed batch records nothing, and a new owner, a restarted server and a
// copy that caught up from a snapshot answer as the old owner would have.
// The table is a window, not a history. Per partition it remembers, for
// each of at most DedupWriters (1024) writers, the outcomes of at most
// DedupPerWriter (64) sequence numbers: the highest, since a writer's
// sequence numbers increase, though a pipelining writer's may commit out
// of order. Recording one more forgets the lowest, which becomes the
// writer's floor; recording a new writer in a full table forgets the
// writer whose latest record has the lowest offset (then the first by
// name), with everything it had. A reply larger than DedupMaxReply
// (64 KiB) is not kept: its outcome says only that it was committed, and
// where (DedupReplyTooLarge).
//
// So Outcome has four answers. DedupDone: committed, here is how.
// DedupNew: never committed, as far as the window tells: the writer is
// unknown, or the sequence number is above its floor and not remembered.
// DedupTooOld: the sequence number is at or below the writer's floor and
// not remembered, so it may have been committed and forgotten; the
// partition cannot tell, and the owner must not apply it. A writer
// forgotten whole reads as DedupNew: a writer silent while 1024 others
// wrote to the partition loses its guarantee.
//
// Everything the table forgets depends only on the batches applied and
// their offsets, never on time or map order, so every copy forgets the
// same outcomes at the same offset.
//
// # Snapshots and digests
//
// A partition's snapshot is a msgpack array [2, map, table], the map from
// its top-level keys, in sorted order, to [version, canonical value], and
// table its exactly-once table, writers sorted by name (the layout is at
// snapshotFormat). A partition with an empty table is written as
// [1, map], as before the table was kept. Restore takes both, and the
// bare map {key: value} written before versions were kept; the last two
// restore an empty table. A restore replaces the table with the
// snapshot's; Clear empties it. In pieces (SnapshotChunks), the first
// piece carries the table. Restore validates a snapshot as it validates
// values, and also refuses keys that contain the separator or belong to
// another partition, since Get could never find them, and a table past
// the window's bounds. Digest hashes every partition's keys and values
// in order, not versions nor the table; two copies with equal digests
// hold the same values.
//
// # Concurrency
//
// The workload is read-heavy, so reads take no lock beyond a read lock
// held for one table lookup. Values are copy-on-write: a change copies the
// containers along its path and swaps the top-level entry, and nothing
// stored is modified afterwards. A value from Get is therefore a stable
// snapshot the reader may keep without copying, but must not modify. The
// price is that a nested change copies every container on its path, so a
// huge map under one top-level key is slow to change; many top-level keys
// are cheap, and spread over partitions besides. Changes to one partition
// are serialized; different partitions change in parallel.
package doc
