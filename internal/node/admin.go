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
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// Operator ops: what the fero CLI and other tools ask a node for. Any node
// answers them; no hello is needed.
const (
	// OpStatus (call) answers a StatusReport.
	OpStatus uint32 = 5
	// OpTail (stream) streams this node's change stream as TailRecords
	// until the caller cancels.
	OpTail uint32 = 6
	// OpForget (call) removes the server whose ID is the payload from the
	// cluster's configuration (Node.Forget); it answers nothing.
	OpForget uint32 = 7
)

// FormatMapVersion is how a partition map's version (a 64-bit hash) is
// shown to people, the same in `fero status`, the admin API and the
// dashboard: 16 hex digits.
func FormatMapVersion(v uint64) string { return fmt.Sprintf("%016x", v) }

// StatusReport is one node's view of its cluster.
type StatusReport struct {
	ID         string         `msgpack:"id" json:"id"`
	Resource   string         `msgpack:"resource" json:"resource"`
	Client     bool           `msgpack:"client" json:"client"`
	Addr       string         `msgpack:"addr" json:"addr"`
	MapVersion uint64         `msgpack:"map_version" json:"map_version"`
	Partitions int            `msgpack:"partitions" json:"partitions"`
	Members    []MemberReport `msgpack:"members" json:"members"`
	// Roles counts this node's partitions by role (owner, replica,
	// follower, syncing, client).
	Roles  map[string]int `msgpack:"roles" json:"roles"`
	Keys   int            `msgpack:"keys" json:"keys"`
	Digest uint64         `msgpack:"digest" json:"digest"`
	Stats  Stats          `msgpack:"stats" json:"stats"`
	// Configuration is the servers whose majority makes a quorum, as this
	// node knows them (docs/engine.md, rule 9).
	Configuration []ConfigEntry `msgpack:"configuration" json:"configuration"`
	// Voting says this server's vote counts: false while a restarted or
	// newly joined server catches up (a learner).
	Voting bool `msgpack:"voting" json:"voting"`
	// Cluster names this node's cluster: the server whose vote formed it
	// and when ("founder@time"; "none" before it has formed or been
	// heard of). Other lists servers of other clusters whose messages
	// this node refuses, with their cluster's name (docs/engine.md rule
	// 9, cluster identity), and Yields counts the times this node's
	// cluster gave way to another.
	Cluster string            `msgpack:"cluster,omitempty" json:"cluster,omitempty"`
	Other   map[string]string `msgpack:"other_clusters,omitempty" json:"other_clusters,omitempty"`
	Yields  uint64            `msgpack:"yields,omitempty" json:"yields,omitempty"`
	// CatchUp counts what this node's copy took to catch up since it
	// started (snapshots received and restored, stale replies, retries).
	CatchUp *partition.CatchUp `msgpack:"catch_up,omitempty" json:"catch_up,omitempty"`
	// Syncing lists the partitions this node owns by its map but has not
	// taken yet, each with what it waits for.
	Syncing []SyncingReport `msgpack:"syncing,omitempty" json:"syncing,omitempty"`
	// Parts is every partition's detail, when asked for (StatusRequest):
	// where two nodes' digests differ, it shows which partitions do.
	Parts []PartReport `msgpack:"parts,omitempty" json:"parts,omitempty"`
	// Disk is the node's data directory; nil without one.
	Disk *DiskReport `msgpack:"disk,omitempty" json:"disk,omitempty"`
}

// DiskReport is a node's data directory in a StatusReport.
type DiskReport struct {
	Dir   string `msgpack:"dir" json:"dir"`
	Fsync string `msgpack:"fsync" json:"fsync"`
	// Bytes is the directory's size on disk.
	Bytes int64 `msgpack:"bytes" json:"bytes"`
	// Syncs counts the fsyncs of write groups since start.
	Syncs uint64 `msgpack:"syncs" json:"syncs"`
	// WriteSeconds is the time the driver spent writing rounds to the
	// disk since start (fsyncs included), and SnapshotSeconds the part of
	// it spent saving snapshots.
	WriteSeconds    float64 `msgpack:"write_s" json:"write_s"`
	SnapshotSeconds float64 `msgpack:"snapshot_s" json:"snapshot_s"`
	// Snapshots and SnapshotBytes count the snapshots saved since start.
	Snapshots     uint64 `msgpack:"snapshots" json:"snapshots"`
	SnapshotBytes uint64 `msgpack:"snapshot_bytes" json:"snapshot_bytes"`
	// Behind counts the partitions whose last offset on disk trails the
	// last one applied (0 after every round under the group policy; under
	// the others, "on disk" means handed to the OS).
	Behind int `msgpack:"behind" json:"behind"`
	// Err is what stopped the disk's writes, if anything did.
	Err string `msgpack:"err,omitempty" json:"err,omitempty"`
}

// StatusRequest is OpStatus's payload, which may be empty.
type StatusRequest struct {
	Partitions bool `msgpack:"partitions,omitempty"`
	// NoDigest leaves the whole resource's digest out (StatusReport.Digest
	// 0): it hashes every partition a write touched since the last call,
	// seconds of CPU for a gigabyte under writes, and a dashboard's poll or
	// a backup's first call has no use for it. (A node of a build without
	// the field ignores it and computes the digest.)
	NoDigest bool `msgpack:"no_digest,omitempty"`
}

// PartReport is one partition as a node holds it, in a StatusReport.
type PartReport struct {
	Partition int    `msgpack:"p" json:"p"`
	Role      string `msgpack:"role" json:"role"`
	Accepted  string `msgpack:"accepted" json:"accepted"` // the highest epoch accepted
	Position  string `msgpack:"position" json:"position"` // the epoch the log continues, and its last offset
	Keys      int    `msgpack:"keys" json:"keys"`
	Digest    uint64 `msgpack:"digest" json:"digest"`
	// Disk is the partition's last offset on disk (0 without a data
	// directory).
	Disk uint64 `msgpack:"disk,omitempty" json:"disk,omitempty"`
}

// SyncingReport is one partition a node is syncing, in a StatusReport.
type SyncingReport struct {
	Partition int    `msgpack:"partition" json:"partition"`
	Why       string `msgpack:"why" json:"why"`
}

// ConfigEntry is one server of the configuration in a StatusReport.
type ConfigEntry struct {
	ID        string `msgpack:"id" json:"id"`
	Forgotten bool   `msgpack:"forgotten,omitempty" json:"forgotten,omitempty"`
}

// MemberReport is one member in a StatusReport.
type MemberReport struct {
	ID     string `msgpack:"id" json:"id"`
	Addr   string `msgpack:"addr" json:"addr"`
	Gossip string `msgpack:"gossip" json:"gossip"`
	Client bool   `msgpack:"client" json:"client"`
	Status string `msgpack:"status" json:"status"`
	Owned  int    `msgpack:"owned" json:"owned"`
	// Conn is this node's data connection to the member: "up, opened by
	// ID", "none", or the last dial's error.
	Conn string `msgpack:"conn,omitempty" json:"conn,omitempty"`
}

// Report builds this node's StatusReport.
func (n *Node) Report(ctx context.Context) (*StatusReport, error) {
	return n.report(ctx, StatusRequest{})
}

// ReportFor builds this node's StatusReport as req asks.
func (n *Node) ReportFor(ctx context.Context, req StatusRequest) (*StatusReport, error) {
	return n.report(ctx, req)
}

func (n *Node) report(ctx context.Context, req StatusRequest) (*StatusReport, error) {
	st, err := n.Status(ctx)
	if err != nil {
		return nil, err
	}
	rep := &StatusReport{
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
			rep.Syncing = append(rep.Syncing, SyncingReport{Partition: s.Partition, Why: s.Why})
		}
		if req.Partitions {
			rep.Parts = append(rep.Parts, PartReport{
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
		rep.Configuration = append(rep.Configuration, ConfigEntry{ID: v.ID, Forgotten: v.Left})
	}
	m := n.Map()
	if m != nil {
		rep.MapVersion = m.Version()
	}
	for _, mem := range n.ms.Members() {
		mr := MemberReport{ID: mem.ID, Addr: mem.Addr, Gossip: mem.Gossip, Client: mem.Role == membership.RoleClient, Status: mem.Status.String()}
		if m != nil {
			mr.Owned = len(m.Owned(mem.ID))
		}
		if mem.ID != n.id {
			mr.Conn = n.connReport(mem.ID)
		}
		rep.Members = append(rep.Members, mr)
	}
	// Attached clients (attach.go) are copies but not members: listed
	// with the address they attached from.
	n.attached.mu.Lock()
	attached := make([]MemberReport, 0, len(n.attached.conns))
	for id, c := range n.attached.conns {
		attached = append(attached, MemberReport{ID: id, Addr: c.RemoteAddr().String(), Client: true, Status: "attached"})
	}
	n.attached.mu.Unlock()
	for _, mr := range attached {
		mr.Conn = n.connReport(mr.ID)
		rep.Members = append(rep.Members, mr)
	}
	slices.SortFunc(rep.Members, func(a, b MemberReport) int {
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
		var req StatusRequest
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
		_ = r.Fail(ErrClosed)
	}
}

// serveForget answers OpForget. Like every operator op it takes no
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
		_ = r.Fail(ErrClosed)
	}
}

// TailRecord is one change in an OpTail stream.
type TailRecord struct {
	Kind      partition.EventKind `msgpack:"kind" json:"kind"`
	Type      wire.RecordType     `msgpack:"type,omitempty" json:"type,omitempty"`
	Key       string              `msgpack:"key,omitempty" json:"key,omitempty"`
	Value     msgpack.RawMessage  `msgpack:"value,omitempty" json:"value,omitempty"`
	Partition int                 `msgpack:"partition" json:"partition"`
	Term      uint64              `msgpack:"term" json:"term"`
	Offset    uint64              `msgpack:"offset" json:"offset"`
	// Missed is how many changes the stream has dropped so far because
	// its reader fell a full buffer behind.
	Missed uint64 `msgpack:"missed,omitempty" json:"missed,omitempty"`
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
					_ = r.Fail(ErrClosed)
					return
				}
				rec := TailRecord{Kind: ch.Kind, Partition: ch.Partition, Missed: sub.Dropped()}
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
		_ = r.Fail(ErrClosed)
	}
}

// connReport describes this node's data connection to peer id (see
// MemberReport.Conn).
func (n *Node) connReport(id string) string {
	if by, ok := n.pool.initiatorOf(id); ok {
		if v := n.pool.protocolOf(id); v != 0 {
			by += fmt.Sprintf(", protocol %d", v)
		}
		n.smu.Lock()
		defer n.smu.Unlock()
		if sq, ok := n.spills[id]; ok {
			return fmt.Sprintf("up, opened by %s; %d messages (%d bytes) queued behind a full outbox for %v",
				by, len(sq.q), sq.must+sq.loose, time.Since(sq.since).Round(time.Millisecond))
		}
		return "up, opened by " + by
	}
	n.dmu.Lock()
	defer n.dmu.Unlock()
	var dialing string
	if at, ok := n.dialAt[id]; ok {
		dialing = fmt.Sprintf("; dialing for %v, %d messages waiting", time.Since(at).Round(time.Millisecond), len(n.dialing[id]))
	}
	if e, ok := n.dialErr[id]; ok {
		return "down: " + e + dialing
	}
	return "none" + dialing
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
