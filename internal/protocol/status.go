package protocol

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/wire"
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

// Stats counts what happened to this node's copy since it started.
type Stats struct {
	Committed uint64 `msgpack:"committed" json:"committed"` // changes this node committed as owner
	Applied   uint64 `msgpack:"applied" json:"applied"`     // owners' commits applied to this copy
	Dropped   uint64 `msgpack:"dropped" json:"dropped"`     // uncommitted changes undone (rule 6)
	Restored  uint64 `msgpack:"restored" json:"restored"`   // partitions replaced by a snapshot
	Gained    uint64 `msgpack:"gained" json:"gained"`       // partitions this node took ownership of
	Lost      uint64 `msgpack:"lost" json:"lost"`           // partitions this node stopped owning
	// Relayed counts the engine batches this server sent a peer through
	// another server, RelayedFor the batches and requests it passed on
	// for two others (docs/engine.md, rule 17).
	Relayed    uint64 `msgpack:"relayed,omitempty" json:"relayed,omitempty"`
	RelayedFor uint64 `msgpack:"relayed_for,omitempty" json:"relayed_for,omitempty"`
}

// Traffic is a reading of the write and call metrics: totals since the
// node started, and the latency histograms' cumulative bucket counts
// (Buckets[i] counts the observations up to Bounds[i]; the writes'
// histograms of every wait are summed).
type Traffic struct {
	// Writes and Calls count those that succeeded (writes with wait none
	// once queued); Errors counts the failed writes and calls by their
	// error's code. The latency histograms time the successful ones only:
	// a refused write's quick answer is not the system's speed.
	Writes, Calls             uint64
	Errors                    map[string]uint64
	Bounds                    []float64
	WriteBuckets, CallBuckets []uint64
	WriteCount, CallCount     uint64
}

// Readiness is whether a node serves its share of the cluster, for a load
// balancer's or Kubernetes' readiness probe: Why lists what is missing,
// empty when Ready.
type Readiness struct {
	Ready bool     `json:"ready"`
	Why   []string `json:"why,omitempty"`
}
