package node

import (
	"context"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// backupFrameSlack is what a reply's frame adds to its payload, at most.
const backupFrameSlack = 64

// backupTimeout bounds one partition's backup on the node.
const backupTimeout = 30 * time.Second

func (n *Node) serveBackup(r *transport.Request) {
	var req protocol.BackupRequest
	if err := wire.DecodeValue(r.Payload(), &req); err != nil {
		_ = r.Fail(errs.Errorf(errs.InvalidArgument, "fero: backup request: %v", err))
		return
	}
	if !n.spawn(func() {
		ctx, cancel := context.WithTimeout(r.Context(), backupTimeout)
		defer cancel()
		b, err := n.backup(ctx, req)
		if err != nil {
			_ = r.Fail(err)
			return
		}
		if max := r.Conn().MaxFrame() - backupFrameSlack; len(b) > max {
			_ = r.Fail(errs.Errorf(errs.ResourceExhausted, "fero: backup of partition %d: its %d bytes do not go in one message of at most %d: raise --max-frame on every node (a partition travels whole)", req.Partition, len(b), max))
			return
		}
		_ = r.Reply(b)
	}) {
		_ = r.Fail(protocol.ErrClosed)
	}
}

// backup answers req here if this node owns the partition, or asks the
// owner.
func (n *Node) backup(ctx context.Context, req protocol.BackupRequest) ([]byte, error) {
	if n.cfg.Client {
		return nil, errs.New(errs.FailedPrecondition, "fero: a client node owns no partition; back up through a server")
	}
	owner, ok := n.ownerOf(req.Partition)
	if ok && owner != n.id {
		if req.Forwarded {
			return nil, errs.Wrapf(partition.ErrNotOwner, "partition %d: this node's map names %s", req.Partition, owner)
		}
		c, err := n.peers.connTo(ctx, owner)
		if err != nil {
			return nil, err
		}
		fwd := req
		fwd.Forwarded = true
		p, err := msgpack.Marshal(fwd)
		if err != nil {
			return nil, err
		}
		return c.Call(ctx, protocol.OpBackup, p)
	}
	part, err := n.backupPart(ctx, req.Partition)
	if err != nil {
		return nil, err
	}
	return msgpack.Marshal(part)
}

// backupPart takes partition p as this node holds it, if it is the
// partition's active owner: under the engine lock, so the state and the
// offset belong together.
func (n *Node) backupPart(ctx context.Context, p int) (*protocol.BackupPart, error) {
	type result struct {
		part *protocol.BackupPart
		err  error
	}
	out := make(chan result, 1)
	err := n.query(ctx, func(e *partition.Engine) {
		if p < 0 || p >= e.Partitions() {
			out <- result{err: errs.Errorf(errs.InvalidArgument, "fero: partition %d out of range [0, %d)", p, e.Partitions())}
			return
		}
		st := e.Status(p)
		if st.Role != partition.RoleOwner {
			why := st.Why
			if why == "" {
				why = "not its owner"
			}
			out <- result{err: errs.Wrapf(partition.ErrNotOwner, "partition %d on %s: %s", p, n.id, why)}
			return
		}
		snap, err := n.store.Snapshot(p)
		if err != nil {
			out <- result{err: err}
			return
		}
		out <- result{part: &protocol.BackupPart{
			Partition: p, Owner: n.id, Epoch: fmt.Sprint(st.Position.Epoch), Offset: st.Position.Offset,
			Keys: n.store.PartitionLen(p), Digest: n.store.PartitionDigest(p), Snapshot: snap,
		}}
	})
	if err != nil {
		return nil, err
	}
	select {
	case r := <-out:
		return r.part, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
