package node

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/storage"
	"github.com/fero-go/fero/internal/wire"
)

// A server's data directory (Config.DataDir; docs/storage.md): the
// engine's durable part of every round goes to a storage.Store before the
// round's messages leave and its completions are answered, and a node
// that starts on a directory loads its partitions from it.

// diskFormat is the data directory's format version; a directory written
// by a newer one is refused.
const diskFormat = 1

// Meta keys of the data directory.
const (
	metaFormat     = "fero/format"
	metaResource   = "fero/resource"
	metaNode       = "fero/node"
	metaPartitions = "fero/partitions"
	metaClean      = "fero/clean" // "1": the node closed cleanly, every write synced
	metaConfig     = "fero/config"
	metaPartPrefix = "p/"
)

// ErrDisk answers writes on a node whose disk failed: it sends nothing
// more (no promise or ack it could not keep), leaves the cluster, serves
// local reads, and must be restarted once the disk is fixed (say, has
// room again).
var ErrDisk = errs.New(errs.Unavailable, "this node's disk failed; it left the cluster and takes no writes until restarted")

// disk is a node's open data directory.
type disk struct {
	store  storage.Store
	policy storage.SyncPolicy
	commit *storage.Committer // SyncInterval's timer; nil otherwise
	logger *slog.Logger
	// clean says the last run closed cleanly: every write it acked is on
	// disk whatever the policy.
	clean bool
	// failed is the first error that stopped the disk's writes.
	failed atomic.Pointer[error]
	ents   []storage.Entry           // scratch for Append
	snap   [snapWriters]bytes.Buffer // scratch for snapshots' encodings
	syncs  atomic.Uint64
	// Nanoseconds spent in write and, of it, in saving snapshots.
	writeNanos, snapNanos atomic.Int64
	snaps, snapBytes      atomic.Uint64
}

// damaged says what to do about a data directory whose segment or
// snapshot is corrupt (storage.ErrCorrupt): the same advice for both.
func damaged(dir string, err error) error {
	if !errors.Is(err, storage.ErrCorrupt) {
		return err
	}
	return fmt.Errorf("fero: data dir %s is damaged where a crash cannot explain it; this node will not serve from it (move it away to start empty and catch up from peers): %w", dir, err)
}

// openDisk opens (or creates) the data directory, checks that it belongs
// to this resource and node, and fills in cfg.ID from it when unset.
func openDisk(cfg *Config, partitions int, logger *slog.Logger) (*disk, error) {
	st, err := storage.OpenSegmentLog(cfg.DataDir, storage.Options{}) // the node says what Open found
	if err != nil {
		if errors.Is(err, storage.ErrLocked) {
			return nil, fmt.Errorf("fero: data dir %s is in use by another process (another fero serve on it?): %w", cfg.DataDir, err)
		}
		if errors.Is(err, storage.ErrCorrupt) {
			return nil, damaged(cfg.DataDir, err)
		}
		return nil, fmt.Errorf("fero: data dir %s: %w", cfg.DataDir, err)
	}
	d := &disk{store: st, policy: cfg.Sync, logger: logger}
	if err := d.checkIdentity(cfg, partitions); err != nil {
		_ = st.Close()
		return nil, err
	}
	if rec := st.Recovery(); rec.TornBytes > 0 {
		logger.Warn("fero: node: data dir had a torn tail (a crash mid-write); cut it and will fetch the rest from peers",
			"dir", cfg.DataDir, "file", rec.TornFile, "bytes", rec.TornBytes)
	}
	clean, _, err := st.Meta(metaClean)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	d.clean = string(clean) == "1"
	// From now on a crash is not a clean close.
	if err := errors.Join(st.SetMeta(metaClean, []byte("0")), st.Sync()); err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("fero: data dir %s: %w", cfg.DataDir, err)
	}
	if cfg.Sync.Mode == storage.SyncInterval {
		if d.commit, err = storage.NewCommitter(st, cfg.Sync); err != nil {
			_ = st.Close()
			return nil, err
		}
	}
	return d, nil
}

func (d *disk) checkIdentity(cfg *Config, partitions int) error {
	dir := cfg.DataDir
	get := func(k string) (string, bool, error) {
		v, ok, err := d.store.Meta(k)
		return string(v), ok, err
	}
	format, known, err := get(metaFormat)
	if err != nil {
		return err
	}
	if !known {
		// A new directory: it is this node's from now on.
		if cfg.ID == "" {
			cfg.ID = randomID()
		}
		return errors.Join(
			d.store.SetMeta(metaFormat, []byte(strconv.Itoa(diskFormat))),
			d.store.SetMeta(metaResource, []byte(cfg.Resource)),
			d.store.SetMeta(metaNode, []byte(cfg.ID)),
			d.store.SetMeta(metaPartitions, []byte(strconv.Itoa(partitions))),
			d.store.Sync(),
		)
	}
	if f, err := strconv.Atoi(format); err != nil || f != diskFormat {
		return fmt.Errorf("fero: data dir %s has format %q; this fero reads format %d (written by a newer fero?)", dir, format, diskFormat)
	}
	res, _, err := get(metaResource)
	if err != nil {
		return err
	}
	if res != cfg.Resource {
		return fmt.Errorf("fero: data dir %s holds resource %q, not %q", dir, res, cfg.Resource)
	}
	id, _, err := get(metaNode)
	if err != nil {
		return err
	}
	switch {
	case cfg.ID == "":
		cfg.ID = id
	case cfg.ID != id:
		return fmt.Errorf("fero: data dir %s belongs to node %q, not %q (start it with that name, or give this node its own directory)", dir, id, cfg.ID)
	}
	parts, _, err := get(metaPartitions)
	if err != nil {
		return err
	}
	if parts != strconv.Itoa(partitions) {
		return fmt.Errorf("fero: data dir %s was written with %s partitions, this node has %d", dir, parts, partitions)
	}
	return nil
}

func partKey(p int) string { return metaPartPrefix + strconv.Itoa(p) }

// load restores the engine from the disk: every partition's snapshot,
// entries and meta, and (when the node's acks never outran its disk) the
// configuration, so that it continues its vote. It returns how many
// entries it loaded.
func (d *disk) load(eng *partition.Engine, partitions int) (int, error) {
	total := 0
	for p := range partitions {
		var snap *partition.Snapshot
		s, ok, err := d.store.Snapshot(p)
		if err != nil {
			return 0, fmt.Errorf("fero: data dir: partition %d snapshot: %w", p, err)
		}
		if ok {
			snap = new(partition.Snapshot)
			if err := msgpack.Unmarshal(s.State, snap); err != nil || snap.Base != s.Base {
				return 0, fmt.Errorf("fero: data dir: partition %d: snapshot does not decode (%v): %w", p, err, storage.ErrCorrupt)
			}
		}
		first, last, err := d.store.Bounds(p)
		if err != nil {
			return 0, err
		}
		var ents []partition.Entry
		if first <= last {
			es, err := d.store.Entries(p, first, last, 0)
			if err != nil {
				return 0, fmt.Errorf("fero: data dir: partition %d entries: %w", p, err)
			}
			ents = make([]partition.Entry, len(es))
			for i, e := range es {
				ents[i] = partition.Entry{
					Epoch: partition.Epoch{Term: e.Epoch.Term, Owner: e.Epoch.Owner}, Offset: e.Offset,
					Type: wire.RecordType(e.Type), Key: e.Key, Value: e.Value,
				}
			}
		}
		var meta *partition.PartMeta
		if b, ok, err := d.store.Meta(partKey(p)); err != nil {
			return 0, err
		} else if ok {
			meta = new(partition.PartMeta)
			if err := msgpack.Unmarshal(b, meta); err != nil {
				return 0, fmt.Errorf("fero: data dir: partition %d meta does not decode (%v): %w", p, err, storage.ErrCorrupt)
			}
		}
		if err := eng.Restore(partitions, p, snap, ents, meta); err != nil {
			return 0, fmt.Errorf("fero: data dir: %w", err)
		}
		total += len(ents)
	}
	b, ok, err := d.store.Meta(metaConfig)
	if err != nil || !ok {
		return total, err
	}
	var c partition.Config
	if err := msgpack.Unmarshal(b, &c); err != nil {
		return 0, fmt.Errorf("fero: data dir: configuration does not decode (%v): %w", err, storage.ErrCorrupt)
	}
	if d.policy.Mode != storage.SyncEachGroup && !d.clean {
		// Acks may have outrun the disk: this life is a new member, a
		// learner until it has caught up (rule 9), with its data loaded.
		d.logger.Warn("fero: node: restarted after a crash with an fsync policy that acks before the disk; rejoining as a new member (its data loaded, the tail fetched from peers)", "fsync", d.policy.Mode)
		return total, nil
	}
	return total, eng.RestoreConfig(c)
}

// write makes a round's durable part durable as the policy says, before
// the round's messages and completions go out.
func (d *disk) write(rd partition.Ready) error {
	if err := d.err(); err != nil {
		return err
	}
	began := time.Now()
	err := d.writeRound(rd)
	d.writeNanos.Add(int64(time.Since(began)))
	if err != nil {
		d.failed.CompareAndSwap(nil, &err)
		return err
	}
	return nil
}

func (d *disk) writeRound(rd partition.Ready) error {
	if len(rd.Durable) == 0 && rd.Config == nil {
		return nil
	}
	st := d.store
	if err := d.saveSnapshots(rd.Durable); err != nil {
		return err
	}
	for _, w := range rd.Durable {
		p := w.Partition
		if len(w.Entries) > 0 {
			d.ents = d.ents[:0]
			for _, e := range w.Entries {
				d.ents = append(d.ents, storage.Entry{
					Epoch: storage.Epoch{Term: e.Epoch.Term, Owner: e.Epoch.Owner}, Offset: e.Offset,
					Type: uint8(e.Type), Key: e.Key, Value: e.Value,
				})
			}
			err := st.Append(p, d.ents)
			clear(d.ents)
			if err != nil {
				return err
			}
		}
		if w.Meta != nil {
			b, err := msgpack.Marshal(w.Meta)
			if err != nil {
				return err
			}
			if err := st.SetMeta(partKey(p), b); err != nil {
				return err
			}
		}
	}
	if rd.Config != nil {
		b, err := msgpack.Marshal(rd.Config)
		if err != nil {
			return err
		}
		if err := st.SetMeta(metaConfig, b); err != nil {
			return err
		}
	}
	if d.policy.Mode == storage.SyncEachGroup {
		d.syncs.Add(1)
		return st.Sync()
	}
	return st.Flush()
}

// snapWriters bounds the snapshots a round saves side by side. Written
// one at a time, each waiting for its own fsyncs, 271 files of 3.8 MB went
// to this machine's disk at 350-570 MB/s; with two, four or eight writers
// at 810-1,040 MB/s (scratch benchmark, session 16). Four, not two, so
// that a small partition's file does not wait behind a large one's.
const snapWriters = 4

// saveSnapshots saves a round's snapshots, side by side when there are
// several (a server catching up restores many in a round), before any of
// the round's other writes: a partition's snapshot precedes its entries
// and meta (partition.Durable).
func (d *disk) saveSnapshots(ws []partition.Durable) error {
	st := d.store
	var snaps []int // indexes into ws
	for i, w := range ws {
		p := w.Partition
		if w.Err != nil {
			d.logger.Error("fero: node: cannot snapshot a partition for the disk", "partition", p, "err", w.Err)
		}
		s := w.Snapshot
		if s == nil {
			continue
		}
		first, last, err := st.Bounds(p)
		if err != nil {
			return err
		}
		if s.Base+1 >= first && s.Base < last {
			// Entries past the snapshot belong to a history it replaced.
			if err := st.TruncateAfter(p, s.Base); err != nil {
				return err
			}
		}
		snaps = append(snaps, i)
	}
	switch len(snaps) {
	case 0:
		return nil // most rounds
	case 1:
		return d.saveSnapshot(&d.snap[0], ws[snaps[0]])
	}
	errs := make([]error, len(snaps))
	next := make(chan int)
	var wg sync.WaitGroup
	for i := range min(snapWriters, len(snaps)) {
		wg.Go(func() {
			for k := range next {
				errs[k] = d.saveSnapshot(&d.snap[i], ws[snaps[k]])
			}
		})
	}
	for k := range snaps {
		next <- k
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// saveSnapshot encodes w's snapshot into buf and saves it.
func (d *disk) saveSnapshot(buf *bytes.Buffer, w partition.Durable) error {
	s, p := w.Snapshot, w.Partition
	began := time.Now()
	// Encoded into a buffer sized for it, kept for the next: msgpack.Marshal
	// grows its buffer by doubling, copying and clearing a state of
	// megabytes at each step (bytes.Buffer's growth showed in a join's
	// profile; this change alone was not timed).
	buf.Reset()
	buf.Grow(len(s.State) + 1<<10)
	if err := msgpack.NewEncoder(buf).Encode(s); err != nil {
		return fmt.Errorf("encode partition %d snapshot: %w", p, err)
	}
	err := d.store.SaveSnapshot(p, storage.Snapshot{Base: s.Base, Epoch: storage.Epoch{Term: s.BaseEpoch.Term, Owner: s.BaseEpoch.Owner}, State: buf.Bytes()})
	if buf.Cap() > 64<<20 {
		*buf = bytes.Buffer{} // one huge partition need not be kept
	}
	if err != nil {
		return err
	}
	d.snapNanos.Add(int64(time.Since(began)))
	d.snaps.Add(1)
	d.snapBytes.Add(uint64(len(s.State)))
	return nil
}

// DiskErr is what stopped the node's data directory, nil if nothing did
// (or it has none).
func (n *Node) DiskErr() error {
	if n.disk == nil {
		return nil
	}
	return n.disk.err()
}

func (d *disk) err() error {
	if e := d.failed.Load(); e != nil {
		return *e
	}
	return nil
}

// close marks a clean close (every write synced) and closes the store.
func (d *disk) close() error {
	if d.commit != nil {
		_ = d.commit.Close()
	}
	var err error
	if d.err() == nil {
		err = d.store.SetMeta(metaClean, []byte("1"))
	}
	return errors.Join(err, d.store.Close())
}

// diskFailed handles a round whose durable part did not reach the disk:
// nothing of it leaves the node (a promise or ack it cannot keep), its
// callers learn that their writes may or may not have taken effect (this
// node applied them in memory), and the node leaves the cluster, so that
// the other servers take its partitions over, but stays up for local
// reads of its copy (which no longer follows the cluster). engMu is held.
func (n *Node) diskFailed(rd partition.Ready, err error) {
	if !n.notes.diskLogged {
		n.notes.diskLogged = true
		n.logger.Error("fero: node: the data dir failed; this node leaves the cluster and takes no writes until restarted (local reads of its copy still work)",
			"dir", n.cfg.DataDir, "err", err)
		// A graceful leave, which can take its timeout; Close waits for it.
		n.wg.Go(func() { _ = n.ms.Close() })
	}
	for _, ev := range rd.Events {
		n.publish(ev)
	}
	for _, c := range rd.Completions {
		if w, ok := n.waiters.Take(c.Token); ok {
			n.complete(w, partition.Completion{Token: c.Token, Partition: c.Partition, Err: errs.Errorf(errs.Aborted, "%v: %v", ErrDisk, err)})
		}
	}
}

// report describes the directory for the node's status.
func (d *disk) report(dir string) *protocol.DiskReport {
	r := &protocol.DiskReport{Dir: dir, Fsync: d.policy.Mode.String(), Syncs: d.syncs.Load(),
		WriteSeconds: time.Duration(d.writeNanos.Load()).Seconds(), SnapshotSeconds: time.Duration(d.snapNanos.Load()).Seconds(),
		Snapshots: d.snaps.Load(), SnapshotBytes: d.snapBytes.Load()}
	if d.policy.Mode == storage.SyncInterval {
		r.Fsync += "=" + d.policy.Interval.String()
		r.Syncs = d.commit.Syncs()
	}
	if err := d.err(); err != nil {
		r.Err = err.Error()
	}
	if des, err := os.ReadDir(dir); err == nil {
		for _, de := range des {
			if info, err := de.Info(); err == nil {
				r.Bytes += info.Size()
			}
		}
	}
	return r
}
