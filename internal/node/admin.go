package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// Report builds this node's protocol.StatusReport.
func (n *Node) Report(ctx context.Context) (*protocol.StatusReport, error) {
	return n.report(ctx, protocol.StatusRequest{})
}

// ReportFor builds this node's protocol.StatusReport as req asks.
func (n *Node) ReportFor(ctx context.Context, req protocol.StatusRequest) (*protocol.StatusReport, error) {
	return n.report(ctx, req)
}

func (n *Node) report(ctx context.Context, req protocol.StatusRequest) (*protocol.StatusReport, error) {
	st, err := n.Status(ctx)
	if err != nil {
		return nil, err
	}
	rep := &protocol.StatusReport{
		ID: n.id, Resource: n.cfg.Resource, Client: n.cfg.Client, Addr: n.Addr(),
		Partitions: n.store.Partitions(), Roles: map[string]int{},
		Keys: n.store.Len(), Stats: n.Stats(),
	}
	if !req.NoDigest {
		rep.Digest = n.store.Digest()
	}
	if n.disk != nil {
		rep.Disk = n.disk.report(n.cfg.DataDir)
	}
	for _, s := range st {
		var onDisk uint64
		if n.disk != nil {
			_, onDisk, _ = n.disk.store.Bounds(s.Partition)
			if onDisk < s.Position.Offset {
				rep.Disk.Behind++
			}
		}
		rep.Roles[s.Role.String()]++
		if s.Role == partition.RoleSyncing {
			rep.Syncing = append(rep.Syncing, protocol.SyncingReport{Partition: s.Partition, Why: s.Why})
		}
		if req.Partitions {
			rep.Parts = append(rep.Parts, protocol.PartReport{
				Partition: s.Partition, Role: s.Role.String(),
				Accepted: fmt.Sprint(s.Accepted), Position: fmt.Sprint(s.Position),
				Keys: n.store.PartitionLen(s.Partition), Digest: n.store.PartitionDigest(s.Partition), Disk: onDisk,
			})
		}
	}
	ci, err := n.clusterInfo(ctx)
	if err != nil {
		return nil, err
	}
	rep.Voting, rep.Yields = ci.voting, ci.yields
	if ci.catchUp != (partition.CatchUp{}) {
		rep.CatchUp = &ci.catchUp
	}
	vs := ci.voters
	if !n.cfg.Client {
		rep.Cluster = ci.cluster.String()
	}
	for id, c := range ci.foreign {
		if rep.Other == nil {
			rep.Other = map[string]string{}
		}
		rep.Other[id] = c.String()
	}
	for _, v := range vs {
		rep.Configuration = append(rep.Configuration, protocol.ConfigEntry{ID: v.ID, Forgotten: v.Left})
	}
	m := n.Map()
	if m != nil {
		rep.MapVersion = m.Version()
	}
	for _, mem := range n.ms.Members() {
		mr := protocol.MemberReport{ID: mem.ID, Addr: mem.Addr, Gossip: mem.Gossip, Client: mem.Role == membership.RoleClient, Status: mem.Status.String()}
		if m != nil {
			mr.Owned = len(m.Owned(mem.ID))
		}
		if mem.ID != n.id {
			mr.Conn = n.peers.report(mem.ID)
		}
		rep.Members = append(rep.Members, mr)
	}
	// Attached clients (attach.go) are copies but not members: listed
	// with the address they attached from.
	n.attach.set.mu.Lock()
	attached := make([]protocol.MemberReport, 0, len(n.attach.set.conns))
	for id, c := range n.attach.set.conns {
		attached = append(attached, protocol.MemberReport{ID: id, Addr: c.RemoteAddr().String(), Client: true, Status: "attached"})
	}
	n.attach.set.mu.Unlock()
	for _, mr := range attached {
		mr.Conn = n.peers.report(mr.ID)
		rep.Members = append(rep.Members, mr)
	}
	slices.SortFunc(rep.Members, func(a, b protocol.MemberReport) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return rep, nil
}

func (n *Node) serveStatus(r *transport.Request) {
	if !n.spawn(func() {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		var req protocol.StatusRequest
		if len(r.Payload()) > 0 {
			if err := wire.DecodeValue(r.Payload(), &req); err != nil {
				_ = r.Fail(errs.Errorf(errs.InvalidArgument, "fero: status request: %v", err))
				return
			}
		}
		rep, err := n.report(ctx, req)
		if err != nil {
			_ = r.Fail(err)
			return
		}
		b, err := msgpack.Marshal(rep)
		if err != nil {
			_ = r.Fail(errs.Errorf(errs.Internal, "fero: encode status: %v", err))
			return
		}
		_ = r.Reply(b)
	}) {
		_ = r.Fail(protocol.ErrClosed)
	}
}

// serveForget answers protocol.OpForget. Like every operator op it takes no
// credentials yet; the hostile-peers work puts them on all of them.
func (n *Node) serveForget(r *transport.Request) {
	ids := strings.Split(string(r.Payload()), "\n")
	id := strings.Join(ids, ", ")
	if !n.spawn(func() {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := n.Forget(ctx, ids...); err != nil {
			_ = r.Fail(err)
			return
		}
		n.logger.Warn("fero: node: server forgotten by an operator", "id", id)
		_ = r.Reply(nil)
	}) {
		_ = r.Fail(protocol.ErrClosed)
	}
}

// tailBuffer is how many changes a tail holds for a slow reader before it
// drops them (and says so in Missed).
const tailBuffer = 4096

func (n *Node) serveTail(r *transport.Request) {
	sub := n.Subscribe(tailBuffer, Drop)
	if !n.spawn(func() {
		defer sub.Close()
		ctx := r.Context()
		for {
			select {
			case ch, ok := <-sub.C():
				if !ok {
					_ = r.Fail(protocol.ErrClosed)
					return
				}
				rec := protocol.TailRecord{Kind: ch.Kind, Partition: ch.Partition, Missed: sub.Dropped()}
				if ch.Kind == partition.EventRestored {
					rec.Term, rec.Offset = ch.Position.Epoch.Term, ch.Position.Offset
				} else {
					e := ch.Entry
					rec.Type, rec.Key, rec.Value, rec.Term, rec.Offset = e.Type, e.Key, e.Value, e.Epoch.Term, e.Offset
				}
				b, err := msgpack.Marshal(&rec)
				if err != nil {
					_ = r.Fail(errs.Errorf(errs.Internal, "fero: encode change: %v", err))
					return
				}
				if err := r.Chunk(b); err != nil {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}) {
		sub.Close()
		_ = r.Fail(protocol.ErrClosed)
	}
}

// Synced reports whether nodes agree on every partition's epoch and none
// of them is still syncing one it owns by its map, every server among them
// voting: the epochs that forming a cluster starts are over, so a write is
// not refused as "epoch changed" nor a NoWait write lost to one. Tests use
// it to wait for a cluster to settle.
func Synced(ctx context.Context, nodes ...*Node) bool {
	var ref []partition.Status
	for _, n := range nodes {
		if !n.cfg.Client {
			if ci, err := n.clusterInfo(ctx); err != nil || !ci.voting {
				return false
			}
		}
		st, err := n.Status(ctx)
		if err != nil {
			return false
		}
		if ref == nil {
			ref = st
		}
		for p, s := range st {
			if s.Accepted != ref[p].Accepted || s.Role == partition.RoleSyncing {
				return false
			}
		}
	}
	return ref != nil
}
