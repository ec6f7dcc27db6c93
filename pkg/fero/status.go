package fero

// The records of a node's status as [Remote.Status] returns them. They are
// pkg/fero's own: decoded from the node's answer by their msgpack names,
// which are the protocol's (TestNodeStatusReadsEveryField checks that
// every field the node sends lands here).

// NodeStatus is one node's view of its cluster, as [Remote.Status]
// returns it.
type NodeStatus struct {
	ID         string         `msgpack:"id" json:"id"`
	Resource   string         `msgpack:"resource" json:"resource"`
	Client     bool           `msgpack:"client" json:"client"`
	Addr       string         `msgpack:"addr" json:"addr"`
	MapVersion uint64         `msgpack:"map_version" json:"map_version"`
	Partitions int            `msgpack:"partitions" json:"partitions"`
	Members    []MemberStatus `msgpack:"members" json:"members"`
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
	CatchUp *CatchUpStats `msgpack:"catch_up,omitempty" json:"catch_up,omitempty"`
	// Syncing lists the partitions this node owns by its map but has not
	// taken yet, each with what it waits for.
	Syncing []SyncingPartition `msgpack:"syncing,omitempty" json:"syncing,omitempty"`
	// Parts is every partition's detail, when asked for ([Remote.StatusWithPartitions]):
	// where two nodes' digests differ, it shows which partitions do.
	Parts []PartitionStatus `msgpack:"parts,omitempty" json:"parts,omitempty"`
	// Disk is the node's data directory; nil without one.
	Disk *DiskStatus `msgpack:"disk,omitempty" json:"disk,omitempty"`
}

// MemberStatus is one member in a [NodeStatus].
type MemberStatus struct {
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

// ConfigEntry is one server of the configuration a [NodeStatus] reports.
type ConfigEntry struct {
	ID        string `msgpack:"id" json:"id"`
	Forgotten bool   `msgpack:"forgotten,omitempty" json:"forgotten,omitempty"`
}

// SyncingPartition is a partition a node owns by its map but has not
// taken yet, and what it waits for.
type SyncingPartition struct {
	Partition int    `msgpack:"partition" json:"partition"`
	Why       string `msgpack:"why" json:"why"`
}

// PartitionStatus is one partition's detail in a [NodeStatus]
// ([Remote.StatusWithPartitions]).
type PartitionStatus struct {
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

// DiskStatus is a node's data directory in a [NodeStatus].
type DiskStatus struct {
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

// CatchUpStats counts what a node's copy took to catch up since it
// started: snapshot pieces received and their bytes, stale replies,
// partitions restored, fetches answered busy, and retries.
type CatchUpStats struct {
	Pieces, PieceBytes, Stale, Restored, Busy, Retries uint64
}
