// Package storage owns what a server keeps on its local disk (issue 18):
// per partition, its changelog entries and its latest snapshot, and
// node-wide, the few values the engine must never forget across a restart
// (the epoch each partition accepted or promised, its own term counters,
// its node identity).
//
// It is a seam the node driver calls, in the spirit of hashicorp/raft's
// LogStore and SnapshotStore: the partition engine stays a deterministic
// state machine with no I/O, and its tests keep running on memory. The
// package imports nothing of fero's: [Entry] and [Epoch] mirror the
// engine's types field for field, and the driver converts.
//
// # How a write flows
//
// The driver steps the engine for a round, then hands the round's new
// entries to [Store.Append] (one call per partition touched),
// truncations to [Store.TruncateAfter] and changed promises to
// [Store.SetMeta]. None of these waits for the disk. The driver then
// makes them durable under the user's [SyncPolicy]:
//
//   - SyncEachGroup: the caller (the node) syncs once per write round
//     itself: one [Store.Sync] after the round's writes, before any of the
//     round's acknowledgements go out. The inputs that arrive while one
//     round's fsync runs are taken by the next round, so one fsync covers
//     them all (group commit): the fsync rate follows the disk and the
//     batch grows with the load.
//   - SyncInterval: acknowledged at once (each round handed to the
//     operating system with [Store.Flush]), fsynced every interval by a
//     [Committer].
//   - SyncNever: acknowledged at once (Flush each round), never fsynced
//     before Close.
//
// [Store.SaveSnapshot] writes a partition's snapshot and drops the entries
// it covers; it is durable when it returns. At start-up, Open recovers
// everything synced, and [Store.Recovery] says how long that took and how
// many bytes of torn tail it cut. Store's comment gives each method's
// promise; the one rule under all of them: what a crash keeps is a
// prefix of the writes, in their order.
//
// # Two implementations
//
// [OpenSegmentLog] is a log written here, in the shape of Kafka's
// segments. Every partition's records go to one stream of segment files,
// not a file per partition: a write group touches many of the 271
// partitions, and one stream makes it one write and one fsync, where a
// file per partition would take one fsync per partition touched. A record
// is a length, a CRC-32C and a body (an entry, a truncation, or a meta
// value); the index (where each partition's entries lie) is rebuilt on
// Open by reading the segments. A bad record in the last segment is a
// torn tail: it and everything after it are cut (and reported). Anywhere
// else it is ErrCorrupt: a segment is fsynced before the next one is
// created, so only the last can be torn. Snapshots are files of their
// own, written to a temporary file, fsynced, renamed and the directory
// fsynced. A segment is deleted once nothing in it is live; the oldest
// segments' few live records (a partition that is rarely written, its
// meta values) are copied forward first, so a quiet partition does not
// pin the stream behind it. The costs: Open reads the whole log (recovery
// time grows with the log kept), the index is 12 bytes an entry in
// memory, and up to a quarter segment of dead records can stay in the
// active segment.
//
// [OpenPebble] keeps the same things in github.com/cockroachdb/pebble/v2:
// entries under partition and offset (big-endian, so a partition's log is
// one key range and truncation or compaction is one range deletion),
// snapshots under the partition, meta values under their key. Append is a
// batch committed without an fsync; Sync commits a batch holding only a
// LogData record with an fsync, which covers every batch before it in
// the write-ahead log (an empty batch would not: pebble returns at once
// for it). Open replays only the write-ahead log since the last memtable
// flush; the LSM's compactions reclaim the space of dropped entries in
// the background, rewriting what survives.
//
// Which is the default is decided by the comparison below, run on a quiet
// machine; both pass the same conformance suite (storage_test.go), and the
// segment log its own tests of torn tails, damage and copying forward
// (seglog_test.go).
//
// # The comparison (bench_test.go)
//
// The shape is fero's write path: 271 partitions, keys of 10 bytes,
// values of 100.
//
//   - BenchmarkGroupCommit/<impl>/<policy>/writers=N: the driver's
//     shape. N writers, each owning its share of the partitions, queue one
//     entry at a time for the next round and wait for it; one goroutine
//     runs the rounds, as the node's engine loop does: it takes every
//     write queued, appends them (one Append per partition touched) and
//     calls Store.Sync once for the round (group) or Store.Flush (never),
//     then lets the round's writers go on. Reports writes/s, fsyncs/s and
//     writes/fsync (group), or writes/s, flushes/s and writes/flush
//     (never: the CPU cost of a write and its round).
//   - BenchmarkSpace/<impl>: writes -storage.entries entries (Sync every
//     256 appends of 16), snapshots every partition at its end (the state:
//     each key's latest value, -storage.keys keys a partition) and reports
//     bytes on disk per key and value byte written, before the snapshots
//     (disk/written), after them (disk/written-after-snap), and after
//     pebble's memtable flush and full compaction, once the directory
//     stops changing (disk/written-after-compact; the segment log repeats
//     its figure). state/written is the floor: the snapshots alone.
//   - BenchmarkRecovery/<impl>: the same writes, Close, then Open timed
//     (ms/open).
//
// The data directory is under $FERO_STORAGE_BENCH_DIR, else os.TempDir();
// the benchmarks refuse tmpfs and ramfs, where fsync is free. Run on a
// quiet machine, interleaving the two implementations, from the module
// root:
//
//	df -T "${FERO_STORAGE_BENCH_DIR:-${TMPDIR:-/tmp}}"   # the disk under test
//	for i in 1 2 3 4 5 6; do
//	  for impl in seglog pebble; do
//	    go test ./internal/storage -run '^$' -bench "GroupCommit/$impl/" -benchtime 5s
//	  done
//	done | tee group-commit.txt
//	for i in 1 2 3; do
//	  for impl in seglog pebble; do
//	    go test ./internal/storage -run '^$' -bench "(Space|Recovery)/$impl\$" -benchtime 1x -storage.entries=1000000
//	  done
//	done | tee space-recovery.txt
//
// Compare medians. Recovery after a clean Close and after a crash costs
// the same for the segment log (it reads everything either way); for
// pebble a clean Close leaves its last memtable in the write-ahead log,
// so the figure is close to a crash's.
package storage
