package partition

import (
	"cmp"
	"strings"
	"time"

	"github.com/fero-go/fero/internal/wire"
)

// Epoch names one owner's tenure of a partition. Epochs are ordered by
// Term, then Owner, so two nodes that start epochs with the same Term
// (their ring maps disagree) still have a total order every copy agrees on.
type Epoch struct {
	Term  uint64 `msgpack:"t"`
	Owner string `msgpack:"o"`
}

// Compare returns -1, 0 or +1 as e is before, equal to or after o.
func (e Epoch) Compare(o Epoch) int {
	if c := cmp.Compare(e.Term, o.Term); c != 0 {
		return c
	}
	return strings.Compare(e.Owner, o.Owner)
}

// Less reports whether e is before o.
func (e Epoch) Less(o Epoch) bool { return e.Compare(o) < 0 }

// Position is a point in a partition's history: an offset, qualified by the
// epoch whose history it belongs to. Positions order by Epoch, then Offset,
// which is how a syncing owner picks the most up-to-date copy.
type Position struct {
	Epoch  Epoch  `msgpack:"e"`
	Offset uint64 `msgpack:"o"`
}

// Compare returns -1, 0 or +1 as p is before, equal to or after o.
func (p Position) Compare(o Position) int {
	if c := p.Epoch.Compare(o.Epoch); c != 0 {
		return c
	}
	return cmp.Compare(p.Offset, o.Offset)
}

// Entry is one commit of a partition's changelog: the change, and the
// epoch and offset the owner gave it. Value is msgpack (see
// [wire.ValidateValue]); it is empty for a remove. Entries are shared, not
// copied: nobody may modify an Entry's Value after it is proposed.
type Entry struct {
	Epoch  Epoch           `msgpack:"e"`
	Offset uint64          `msgpack:"o"`
	Type   wire.RecordType `msgpack:"t"`
	Key    string          `msgpack:"k"`
	Value  []byte          `msgpack:"v"`
}

// Position returns the entry's position.
func (e *Entry) Position() Position { return Position{Epoch: e.Epoch, Offset: e.Offset} }

// Run says that a log's entries from First on (up to the next run's First)
// belong to Epoch. A log's runs are its epoch column, run-length encoded;
// they are what two copies compare to find where their histories part.
type Run struct {
	Epoch Epoch  `msgpack:"e"`
	First uint64 `msgpack:"f"`
}

// Wait says what a proposer waits for.
type Wait uint8

const (
	// WaitNone: fire and forget; no completion is produced.
	WaitNone Wait = iota
	// WaitAck: the owner committed the write (it has an offset). The write
	// survives an owner change handled by sync, but not the owner's crash.
	WaitAck
	// WaitReplicas: K replicas of the partition's replica group (not
	// counting the owner) have applied the write.
	WaitReplicas
	// WaitMajority: a majority of the replica group (owner included) has
	// applied the write, which makes it survive any owner change (rule 5).
	WaitMajority
)

// Request is a write proposed on this node.
type Request struct {
	Partition int
	Type      wire.RecordType
	Key       string
	// Value is msgpack for ADD and UPDATE, empty for REMOVE. The engine
	// keeps it without copying.
	Value []byte
	// Token identifies the request in its [Completion]; the engine does not
	// interpret it.
	Token uint64
	Wait  Wait
	// K is the replica count for WaitReplicas.
	K int
	// Deadline bounds the write's life: no node commits it afterwards, so
	// its caller may be told it failed once the deadline has passed (rule
	// 1). Zero, or anything later, means the write timeout from now.
	Deadline time.Time
	// Trace is the caller's W3C traceparent, when it is traced: a write
	// forwarded to its owner carries it, so the owner's span joins the
	// caller's trace. The engine does not interpret it.
	Trace string
	// Turn begins or ends the turn of Key (turns.go); TurnID names the
	// turn a TurnEnd ends (its TurnBegin's Token). A turn is taken only on
	// the partition's owner: proposed anywhere else it fails with
	// ErrNotOwner, never forwarded.
	Turn   TurnOp
	TurnID uint64
	// Writer and Seq name the write for exactly-once (dedup.go): a
	// TurnBegin's verb, answered with its first reply if its writer's
	// sequence was committed before. A write's record carries its own (the
	// State reads them); here they say that its caller retries an
	// indefinite failure, so a forward to an owner that leaves the map may
	// be answered at once. The engine does not send them.
	Writer string
	Seq    uint64
}

// Completion reports how a waited-for request ended.
type Completion struct {
	Token     uint64
	Partition int
	// Position of the committed write; zero when Err is set.
	Position Position
	// Err is nil on success, else an *errs.Error (see the Err variables).
	Err error
	// Owner is the answering node's view of the partition's owner when the
	// write was refused as sent to a non-owner; the caller retries there.
	Owner string
	// Duplicate says that the write (or the verb whose turn this was) had
	// been committed before, at Position, and was not committed again;
	// Reply is the verb's reply then (dedup.go). Position's epoch is zero
	// when the owner's log no longer holds that offset.
	Duplicate bool
	Reply     []byte
}

// EventKind says what an [Event] reports.
type EventKind uint8

const (
	// EventCommitted: this node, as owner, committed Entry and applied it.
	EventCommitted EventKind = iota + 1
	// EventApplied: this node, as a copy, applied Entry to its State.
	EventApplied
	// EventDropped: this copy held Entry, an uncommitted write of an older
	// epoch that the partition's history no longer contains (rule 6). Its
	// effect is gone from State: the copy was restored from a snapshot.
	// Several entries dropped at once come newest first, the order that
	// undoes them.
	EventDropped
	// EventRestored: State's partition was replaced by a snapshot at
	// Position (catch-up past the owner's history cap, or a rollback).
	EventRestored
	// EventOwnershipGained: this node synced and started Epoch; it now
	// accepts writes for the partition.
	EventOwnershipGained
	// EventOwnershipLost: this node stopped committing in Epoch (the ring
	// moved the partition, or it was fenced).
	EventOwnershipLost
	// EventFenced: this node learned of Epoch, higher than the one it was
	// writing in or syncing for, and yielded to it.
	EventFenced
)

func (k EventKind) String() string {
	switch k {
	case EventCommitted:
		return "committed"
	case EventApplied:
		return "applied"
	case EventDropped:
		return "dropped"
	case EventRestored:
		return "restored"
	case EventOwnershipGained:
		return "ownership-gained"
	case EventOwnershipLost:
		return "ownership-lost"
	case EventFenced:
		return "fenced"
	}
	return "unknown"
}

// Event is something that happened to a partition, in the order it
// happened. Entry is set for committed, applied and dropped; Position for
// restored; Epoch for ownership and fenced events. An Entry's key and value
// are the log's copies, which never change, not the bytes the write or the
// commit arrived in: a consumer may keep them as long as it likes.
type Event struct {
	Kind      EventKind
	Partition int
	Epoch     Epoch
	Position  Position
	Entry     Entry
	// Took is, for EventOwnershipGained, how long the sync before it took.
	Took time.Duration
}

// Role is what this node is for one partition.
type Role uint8

const (
	// RoleFollower: a server outside the replica group; it keeps a copy.
	RoleFollower Role = iota
	// RoleReplica: a server in the replica group; its acks count toward
	// durability.
	RoleReplica
	// RoleSyncing: the ring names this node owner but it does not accept
	// writes yet: it is syncing, waiting for quorum, or backing off after
	// being fenced. Writes queue (bounded) or fail with Unavailable.
	RoleSyncing
	// RoleOwner: this node commits the partition's writes.
	RoleOwner
	// RoleClient: a client member; it owns nothing and keeps a copy.
	RoleClient
)

func (r Role) String() string {
	switch r {
	case RoleFollower:
		return "follower"
	case RoleReplica:
		return "replica"
	case RoleSyncing:
		return "syncing"
	case RoleOwner:
		return "owner"
	case RoleClient:
		return "client"
	}
	return "unknown"
}

// Status is a snapshot of one partition's engine state, for tools and
// tests.
type Status struct {
	Partition int
	Role      Role
	// Accepted is the highest epoch this node has accepted (promised to).
	Accepted Epoch
	// Position is the epoch whose history the local log is a prefix of,
	// and the last offset applied.
	Position Position
	// Oldest is the oldest offset still kept in the log; Oldest-1 is the
	// log's base (a snapshot or trimmed point).
	Oldest  uint64
	Gap     int // entries buffered past a gap
	Queued  int // writes waiting for sync
	Waiting int // writes waiting for replica acks
	// Lag is, on the owner, how many offsets its slowest live copy's acks
	// trail the log, and LagSeconds how long that copy's acks have not
	// moved (0 when it has never acked in this epoch).
	Lag        uint64
	LagSeconds float64
	// Why says, for a partition this node owns by its map but has not
	// taken yet (RoleSyncing), what it waits for: an operator's first
	// question when writes to it fail with "owner syncing".
	Why string
}

// Ready is the output of the engine since the last Advance. Its slices,
// and the messages in Messages, belong to the engine and are reused after
// Advance: a driver that holds a message longer keeps a copy.
type Ready struct {
	// Messages to send, in order per destination.
	Messages []Envelope
	// Events in the order they happened.
	Events []Event
	// Completions for waiting callers.
	Completions []Completion
	// Durable lists, with WithDurable, what changed in each partition's
	// copy, and Config the configuration when it changed: the driver makes
	// them durable before it sends Messages or hands out Completions
	// (docs/storage.md).
	Durable []Durable
	Config  *Config
	// Cluster names this node's cluster (zero for a client, and for a
	// server that has not heard from a formed cluster): the driver sends
	// it with Messages, and the receiver hands it to Step.
	Cluster ClusterID
}

// Envelope is a message and its destination node.
type Envelope struct {
	To  string
	Msg Message
}

// State is the local copy of the resource's key/value map that the engine
// keeps in step with the log. The engine calls it synchronously from
// Propose and Step, so the state always matches the engine's applied
// position: a snapshot taken at any time is the state at the log's last
// offset. Implementations must be deterministic.
type State interface {
	// Check reports whether Apply would apply e to the partition's current
	// state. The owner calls it before it commits e, so a change that does
	// not fit the state (an ADD of a key that exists, a path through a
	// scalar) is refused to its caller with Check's error instead of being
	// committed as a no-op. It must not change the state.
	Check(partition int, e Entry) error
	// Apply applies one entry of the partition. It must not fail: the
	// owner checked it against the same state, and a copy cannot skip an
	// offset.
	Apply(partition int, e Entry)
	// Snapshot encodes the partition's state.
	Snapshot(partition int) ([]byte, error)
	// Restore replaces the partition's state with a snapshot another node's
	// Snapshot produced. On error the state must be unchanged. An empty
	// snapshot (nil) empties the partition, and must not fail: the engine
	// drops a copy that way when its cluster gives way (rule 9). The
	// snapshot's bytes never change afterwards (a copy of the engine's, or
	// a receive buffer the transport keeps for them), so the state may
	// keep them rather than copies.
	Restore(partition int, snapshot []byte) error
}

// ChunkedState is a State that sends and restores a partition's snapshot
// in pieces, so that no message holds a partition larger than the message
// bound, and a copy catching up stages the pieces as they come (rule 8).
type ChunkedState interface {
	// SnapshotChunks encodes the partition's state in pieces of about max
	// bytes each (at least one piece).
	SnapshotChunks(partition, max int) ([][]byte, error)
	// StageChunk adds a piece to the partition's staged restore, which
	// first starts anew. The state is unchanged; on error the staged
	// restore is as it was.
	StageChunk(partition int, piece []byte, first bool) error
	// RestoreStaged replaces the partition's state with the staged
	// restore.
	RestoreStaged(partition int) error
	// DropStaged forgets the partition's staged restore.
	DropStaged(partition int)
}

// CheckApplier is a State that can check and apply an entry in one step:
// CheckApply applies e if Check would accept it and returns Check's error
// otherwise, leaving the state unchanged. The owner uses it instead of
// Check then Apply, which for a document store decodes each value twice.
type CheckApplier interface {
	CheckApply(partition int, e Entry) error
}
