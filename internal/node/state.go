package node

import (
	"log/slog"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/wire"
)

// docState lets the partition engine apply commits to a document store.
type docState struct {
	store  *doc.Store
	logger *slog.Logger
}

var (
	_ partition.State        = docState{}
	_ partition.CheckApplier = docState{}
)

// CheckApply applies e if it fits the state; on error nothing changed. A
// key takes e's offset as its version; a batch's changes apply all or
// none.
func (d docState) CheckApply(p int, e partition.Entry) error {
	if e.Type == wire.RecordBatch {
		bt, err := doc.DecodeBatch(e.Value)
		if err != nil {
			return errs.Errorf(errs.InvalidArgument, "fero: a batch record: %w", err)
		}
		for _, c := range bt.Changes {
			// No key has a version the log has not reached: such a
			// version was made up, not read.
			if c.Cond && c.IfVersion >= e.Offset {
				return errs.Errorf(errs.InvalidArgument, "fero: version %d of %q is from the future: the partition's log is at %d", c.IfVersion, c.Key, e.Offset-1)
			}
		}
		return d.store.ApplyBatch(p, e.Offset, &bt)
	}
	return d.store.ApplyAt(p, e.Offset, change(e))
}

func change(e partition.Entry) doc.Change {
	return doc.Change{Type: e.Type, Key: e.Key, Value: e.Value}
}

// Check is the owner's test of a write against its state.
func (d docState) Check(p int, e partition.Entry) error {
	if e.Type == wire.RecordBatch {
		bt, err := doc.DecodeBatch(e.Value)
		if err != nil {
			return errs.Errorf(errs.InvalidArgument, "fero: a batch record: %w", err)
		}
		return d.store.CheckBatch(p, &bt)
	}
	return d.store.Check(p, change(e))
}

// Apply applies a committed entry. The owner checked it against the same
// state, and every copy applies the same entries in the same order, so an
// error here means copies have diverged: it is logged loudly, and the
// entry is skipped, as the owner's Check would have refused it.
func (d docState) Apply(p int, e partition.Entry) {
	if err := d.CheckApply(p, e); err != nil {
		d.logger.Error("fero: node: a committed entry does not apply; this copy has diverged",
			"partition", p, "epoch", e.Epoch, "offset", e.Offset, "key", e.Key, "err", err)
	}
}

func (d docState) Snapshot(p int) ([]byte, error) { return d.store.Snapshot(p) }

// Restore keeps a large snapshot's bytes as its values' (the engine never
// changes them: partition.State); a small one is copied, so that it does
// not hold a receive block shared with other messages.
func (d docState) Restore(p int, b []byte) error {
	if len(b) >= sharedRestoreMin {
		return d.store.RestoreShared(p, b)
	}
	return d.store.Restore(p, b)
}

// sharedRestoreMin is the least snapshot whose values keep its bytes.
const sharedRestoreMin = 256 << 10

func (d docState) Warm(parts []int, keys []string) uint64 { return d.store.Warm(parts, keys) }

var _ partition.ChunkedState = docState{}

func (d docState) SnapshotChunks(p, max int) ([][]byte, error) { return d.store.SnapshotChunks(p, max) }

func (d docState) StageChunk(p int, piece []byte, first bool) error {
	return d.store.StageChunk(p, piece, first)
}

func (d docState) RestoreStaged(p int) error { return d.store.RestoreStaged(p) }

func (d docState) DropStaged(p int) { d.store.DropStaged(p) }

var _ partition.Deduper = docState{}

// WriterOf reads the writer and sequence a batch record names.
func (d docState) WriterOf(e partition.Entry) (string, uint64) {
	if e.Type != wire.RecordBatch {
		return "", 0
	}
	w, seq, ok := doc.BatchWriter(e.Value)
	if !ok {
		return "", 0 // refused as it commits
	}
	return w, seq
}

// Outcome is what the partition's table remembers of writer's seq.
func (d docState) Outcome(p int, writer string, seq uint64) (uint64, []byte, partition.DedupStatus) {
	o, st := d.store.Outcome(p, writer, seq)
	switch st {
	case doc.DedupDone:
		return o.Version, o.Reply, partition.DedupDone
	case doc.DedupTooOld, doc.DedupReplyTooLarge:
		// Committed, but its reply was not kept: a verb's retry cannot
		// be answered as the first call was.
		return 0, nil, partition.DedupTooOld
	}
	return 0, nil, partition.DedupNew
}
