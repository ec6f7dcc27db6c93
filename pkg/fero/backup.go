package fero

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/backup"
	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/wire"
)

// ErrBackupDamaged: a backup file is not whole (cut short, changed, or
// not a backup); [Remote.Restore] refuses it before writing anything.
var ErrBackupDamaged = backup.ErrDamaged

// BackupStats says what a backup or a restore covered.
type BackupStats struct {
	Resource   string
	Partitions int
	Keys       int
	// Bytes is the partitions' encoded size (the file is a little larger).
	Bytes int64
	// Digest is the resource's digest as the backup holds it: after a
	// restore, every node's [NodeStatus].Digest equals it once its copy
	// has the restored keys.
	Digest uint64
	Took   time.Duration
}

// BackupProgress is called after each partition of a backup or a
// restore, with the partitions done so far and the keys and bytes they
// held.
type BackupProgress func(done, total, keys int, bytes int64)

// Backup writes a backup of the resource to w: every partition as its
// owner holds it at one commit (under the owner's engine lock, so each
// partition is one point of its log, with its offset), asked through the
// node this Remote talks to, which asks each owner for the partitions it
// does not own. Writes go on meanwhile: partitions are taken one after
// another, each at its own moment, so the backup is not one moment of the
// whole resource (as the writes themselves are not ordered across
// partitions). A partition whose ownership is moving is asked again until
// ctx ends. The file carries a SHA-256 of its contents; see Restore.
func (c *Remote) Backup(ctx context.Context, w io.Writer, progress BackupProgress) (BackupStats, error) {
	began := time.Now()
	st, err := c.statusNoDigest(ctx)
	if err != nil {
		return BackupStats{}, err
	}
	if st.Client {
		return BackupStats{}, errs.New(errs.FailedPrecondition, "fero: backup: this is a client node; give a server's address")
	}
	out := BackupStats{Resource: st.Resource, Partitions: st.Partitions}
	bw, err := backup.NewWriter(w, backup.Header{Resource: st.Resource, Partitions: st.Partitions, Created: began.UTC(), Via: st.ID})
	if err != nil {
		return out, err
	}
	digests := make([]uint64, st.Partitions)
	for p := range st.Partitions {
		part, err := c.backupPart(ctx, p)
		if err != nil {
			return out, fmt.Errorf("fero: backup of partition %d: %w", p, err)
		}
		if err := bw.Part(part); err != nil {
			return out, err
		}
		digests[p] = part.Digest
		out.Keys += part.Keys
		out.Bytes += int64(len(part.Snapshot))
		if progress != nil {
			progress(p+1, st.Partitions, out.Keys, out.Bytes)
		}
	}
	if _, err := bw.Close(); err != nil {
		return out, err
	}
	out.Digest = doc.CombineDigests(digests)
	out.Took = time.Since(began)
	return out, nil
}

// backupPart asks for partition p until it gets it, ctx ends, or the
// answer is one that asking again will not change.
func (c *Remote) backupPart(ctx context.Context, p int) (*protocol.BackupPart, error) {
	req, err := msgpack.Marshal(protocol.BackupRequest{Partition: p})
	if err != nil {
		return nil, err
	}
	backoff := 20 * time.Millisecond
	for {
		b, err := c.peer.Call(ctx, protocol.OpBackup, req)
		if err == nil {
			var part protocol.BackupPart
			if err := wire.DecodeValue(b, &part); err != nil {
				return nil, errs.Errorf(errs.Internal, "fero: decode partition %d: %w", p, err)
			}
			if part.Partition != p {
				return nil, errs.Errorf(errs.Internal, "fero: asked for partition %d, got %d", p, part.Partition)
			}
			return &part, nil
		}
		switch code := errs.CodeOf(err); {
		case ctx.Err() != nil:
			return nil, err
		case code == errs.Unavailable, code == errs.Aborted, code == errs.DeadlineExceeded, errors.Is(err, partition.ErrNotOwner):
			// Ownership moving, the owner busy past the node's bound for
			// one partition: ask again.
		default:
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// RestoreOptions tune Restore.
type RestoreOptions struct {
	// Force restores into a resource that already holds keys (they stay,
	// and a restored key overwrites one of the same name) or that has a
	// different number of partitions (the keys are the same, the digest
	// differs).
	Force bool
	// Concurrency is how many writes are in flight at once (default 64).
	Concurrency int
	Progress    BackupProgress
}

// Restore checks the backup read from r whole (its checksum, every
// record) and, only if it is whole, writes every key it holds into the
// resource through the node this Remote talks to, each a Majority write:
// a fresh cluster seeded from the backup holds the same keys and values
// (equal digests). Versions start anew (each key's version is the offset
// of its restored write), and the exactly-once table does not carry over.
// It refuses, before writing anything, a damaged file ([ErrBackupDamaged]),
// and, without opts.Force, a resource that already holds keys or has
// another number of partitions. r is read twice.
func (c *Remote) Restore(ctx context.Context, r io.ReadSeeker, opts RestoreOptions) (BackupStats, error) {
	began := time.Now()
	h, end, err := backup.Read(r, nil, nil)
	if err != nil {
		return BackupStats{}, err
	}
	out := BackupStats{Resource: h.Resource, Partitions: h.Partitions}
	st, err := c.Status(ctx)
	if err != nil {
		return out, err
	}
	switch {
	case opts.Force:
	case st.Partitions != h.Partitions:
		return out, errs.Errorf(errs.FailedPrecondition, "fero: restore: the backup has %d partitions and the resource %d: start the cluster with --partitions %d (or force it: the keys restore, the digest differs)", h.Partitions, st.Partitions, h.Partitions)
	case st.Keys > 0:
		return out, errs.Errorf(errs.FailedPrecondition, "fero: restore: the resource already holds %d keys; restore seeds an empty one (or force it: restored keys overwrite theirs, the others stay)", st.Keys)
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return out, err
	}
	scratch, err := doc.New(h.Partitions)
	if err != nil {
		return out, err
	}
	workers := opts.Concurrency
	if workers <= 0 {
		workers = 64
	}
	type write struct {
		key string
		val msgpack.RawMessage
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	writes := make(chan write, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for w := range writes {
				if wctx.Err() != nil {
					continue
				}
				if err := c.restoreWrite(wctx, w.key, w.val); err != nil {
					cancel(fmt.Errorf("fero: restore %q: %w", w.key, err))
				}
			}
		})
	}
	digests := make([]uint64, h.Partitions)
	_, _, err = backup.Read(r, nil, func(p *protocol.BackupPart) error {
		if err := scratch.Restore(p.Partition, p.Snapshot); err != nil {
			return fmt.Errorf("%w: partition %d: %v", backup.ErrDamaged, p.Partition, err)
		}
		if d := scratch.PartitionDigest(p.Partition); d != p.Digest {
			return fmt.Errorf("%w: partition %d holds digest %016x, its record says %016x", backup.ErrDamaged, p.Partition, d, p.Digest)
		}
		digests[p.Partition] = p.Digest
		for key, val := range scratch.EncodedEntries(p.Partition) {
			select {
			case writes <- write{key, val}:
			case <-wctx.Done():
				return context.Cause(wctx)
			}
		}
		_ = scratch.Clear(p.Partition)
		out.Keys += p.Keys
		out.Bytes += int64(len(p.Snapshot))
		if opts.Progress != nil {
			opts.Progress(p.Partition+1, h.Partitions, out.Keys, out.Bytes)
		}
		return nil
	})
	close(writes)
	wg.Wait()
	if err == nil {
		err = context.Cause(wctx)
	}
	if err != nil {
		return out, err
	}
	if out.Keys != end.Keys {
		return out, errs.Errorf(errs.Internal, "fero: restore wrote %d keys of the backup's %d", out.Keys, end.Keys)
	}
	out.Digest = doc.CombineDigests(digests)
	out.Took = time.Since(began)
	return out, nil
}

// restoreWrite writes one restored key, a Majority UPDATE, until it
// succeeds, fails in a way another try will not change, or ctx ends.
// Writing the same value twice is harmless, so it goes without the
// Remote's exactly-once sequence and the order that keeps (its writes
// need none): before a Remote's sequences were taken as they were sent,
// 64 writes in flight on one writer to one partition were refused as "a
// retry older than the owner's memory of its writer".
func (c *Remote) restoreWrite(ctx context.Context, key string, val msgpack.RawMessage) error {
	opts := protocol.CallOpts{Wait: Majority.spec()}
	backoff := 20 * time.Millisecond
	for {
		_, err := c.callNode(ctx, "fero.restore", VerbUpdate, key, val, opts)
		if err == nil || ctx.Err() != nil {
			return err
		}
		switch errs.CodeOf(err) {
		case errs.Unavailable, errs.Aborted, errs.DeadlineExceeded, errs.ResourceExhausted:
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}
