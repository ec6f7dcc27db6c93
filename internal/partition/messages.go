package partition

import (
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// MsgKind tags a message type for encoding. Values are part of the wire
// protocol: never renumber.
type MsgKind uint8

// Message kinds.
const (
	KindCommit        MsgKind = 1
	KindCommitAck     MsgKind = 2
	KindEpochStart    MsgKind = 3
	KindFenced        MsgKind = 4
	KindPosRequest    MsgKind = 5
	KindPosReply      MsgKind = 6
	KindFetch         MsgKind = 7
	KindFetchReply    MsgKind = 8
	KindSnapshotReply MsgKind = 9
	KindForward       MsgKind = 10
	KindForwardReply  MsgKind = 11
	KindHeartbeat     MsgKind = 12
	KindVoters        MsgKind = 13
	KindReadProbe     MsgKind = 14
	KindReadAck       MsgKind = 15
	KindRecover       MsgKind = 16
	KindRecoverReply  MsgKind = 17
)

// Message is one of the pointer types below. Messages are shared: the
// engine never modifies a message it sent or received, and one *Commit may
// go to many peers.
type Message interface {
	Kind() MsgKind
	// Part returns the partition the message is about.
	Part() uint32
}

// Commit carries entries of one epoch, in offset order, from the owner to
// every copy.
type Commit struct {
	Partition uint32  `msgpack:"p"`
	Entries   []Entry `msgpack:"e"`
}

// CommitAck tells the owner a copy's position (rule 7 lag detection, and
// the k-replica dial).
type CommitAck struct {
	Partition uint32   `msgpack:"p"`
	Position  Position `msgpack:"s"`
	// Inc is the sender's incarnation: the ack counts toward a Majority
	// only from the incarnation that holds the sender's vote (rule 9).
	Inc uint64 `msgpack:"n"`
}

// EpochStart announces an epoch: the owner's history is its log up to
// Start, whose last entry has PrevEpoch. The owner resends it (with Last,
// its current last offset) to copies whose acks stop advancing.
type EpochStart struct {
	Partition uint32 `msgpack:"p"`
	Epoch     Epoch  `msgpack:"e"`
	Start     uint64 `msgpack:"s"`
	PrevEpoch Epoch  `msgpack:"v"`
	Last      uint64 `msgpack:"l"`
}

// Fenced refuses a message from an epoch older than Epoch.
type Fenced struct {
	Partition uint32 `msgpack:"p"`
	Epoch     Epoch  `msgpack:"e"`
}

// PosRequest asks for a copy's position on behalf of a syncing owner.
// Answering it is a promise: the copy accepts nothing from an epoch below
// Epoch afterwards (like Paxos' prepare), so a write cannot be acked behind
// the syncing owner's back.
type PosRequest struct {
	Partition uint32 `msgpack:"p"`
	Epoch     Epoch  `msgpack:"e"`
}

// PosReply answers a PosRequest for Epoch with the copy's position and the
// oldest offset its log still holds.
type PosReply struct {
	Partition uint32   `msgpack:"p"`
	Epoch     Epoch    `msgpack:"e"`
	Position  Position `msgpack:"s"`
	Oldest    uint64   `msgpack:"o"`
	// Inc is the sender's incarnation: the promise counts only from the
	// incarnation that holds the sender's vote (rule 9).
	Inc uint64 `msgpack:"n"`
	// Voters is the configuration as the copy knows it: a syncing owner
	// merges it before it counts its quorum, so a node that joined late
	// learns of servers it never saw (rule 9).
	Voters []Voter `msgpack:"v"`
}

// Fetch asks for entries from From on. It describes the asker's log (its
// base and epoch runs) so the server can tell where the two histories part
// and answer with a snapshot instead when they do.
type Fetch struct {
	Partition uint32 `msgpack:"p"`
	ID        uint64 `msgpack:"i"`
	From      uint64 `msgpack:"f"`
	Max       uint32 `msgpack:"m"`
	Base      uint64 `msgpack:"b"`
	BaseEpoch Epoch  `msgpack:"be"`
	Runs      []Run  `msgpack:"r"`
	// Snap, when set, asks for piece Chunk of the server's snapshot Snap,
	// which the asker is restoring piece by piece.
	Snap  uint64 `msgpack:"sn,omitempty"`
	Chunk uint32 `msgpack:"c,omitempty"`
}

// FetchReply carries entries that extend the asker's log. Position and
// Start describe the server: its log is a prefix of Position.Epoch's
// history, which began at offset Start.
type FetchReply struct {
	Partition uint32   `msgpack:"p"`
	ID        uint64   `msgpack:"i"`
	Position  Position `msgpack:"s"`
	Start     uint64   `msgpack:"st"`
	Entries   []Entry  `msgpack:"e"`
	// Busy says the fetch needs a snapshot and the server has as many
	// snapshots in flight to the asker as it allows (MaxSnapshotsInFlight):
	// the asker asks again shortly.
	Busy bool `msgpack:"bz,omitempty"`
}

// SnapshotReply answers a Fetch the log cannot: the asker is behind the
// server's history cap, or holds entries the server's history does not
// (it keeps only those up to TruncateTo). State is the partition's state
// at Position.Offset, whose entry has OffsetEpoch.
type SnapshotReply struct {
	Partition   uint32   `msgpack:"p"`
	ID          uint64   `msgpack:"i"`
	Position    Position `msgpack:"s"`
	Start       uint64   `msgpack:"st"`
	OffsetEpoch Epoch    `msgpack:"oe"`
	TruncateTo  uint64   `msgpack:"t"`
	State       []byte   `msgpack:"d"`
	// Runs is the server's epoch history up to Position.Offset, which the
	// copy keeps so that it can check others' logs in turn (rule 8).
	Runs []Run `msgpack:"r"`
	// A state larger than a message goes in pieces (ChunkedState): Snap
	// names the snapshot, State is its piece Chunk, and More says pieces
	// follow, each asked for with a Fetch naming Snap and the next Chunk.
	Snap  uint64 `msgpack:"sn,omitempty"`
	Chunk uint32 `msgpack:"c,omitempty"`
	More  bool   `msgpack:"mo,omitempty"`
}

// Forward carries a write from the node that received it to the owner by
// that node's map. ID 0 means the sender waits for nothing.
type Forward struct {
	Partition uint32          `msgpack:"p"`
	ID        uint64          `msgpack:"i"`
	Hops      uint8           `msgpack:"h"`
	Type      wire.RecordType `msgpack:"t"`
	Key       string          `msgpack:"k"`
	Value     []byte          `msgpack:"v"`
	Wait      Wait            `msgpack:"w"`
	K         uint8           `msgpack:"n"`
	// Epoch is the partition's epoch as the sender knew it: the owner
	// commits the write only in that epoch or in the one that continues
	// its history (rule 1), so a write held up in a paused owner's socket
	// cannot come back in the owner's next tenure.
	Epoch Epoch `msgpack:"e"`
	// Deadline is when the sender answers its caller if it has heard
	// nothing, in Unix nanoseconds: no node commits the write after it
	// (less the clock-skew margin), so a write takes effect before its
	// caller is answered, or never (rule 1).
	Deadline int64 `msgpack:"d"`
	// Trace is the caller's W3C traceparent, "" when it is not traced
	// (Request.Trace).
	Trace string `msgpack:"x,omitempty"`
}

// ForwardReply ends a forwarded write: Code 0 with its Position, or a coded
// error with the answering node's view of the Owner.
type ForwardReply struct {
	Partition uint32   `msgpack:"p"`
	ID        uint64   `msgpack:"i"`
	Position  Position `msgpack:"s"`
	Code      uint32   `msgpack:"c"`
	Msg       string   `msgpack:"m"`
	Owner     string   `msgpack:"o"`
	// Details are the refusal's error details (the version a failed
	// compare-and-set found), so the caller's error is the owner's.
	Details []errs.Detail `msgpack:"d"`
}

// Heartbeat tells a server that its sender still reaches it. Servers send
// one to every other server each probe interval, whatever the traffic; an
// owner that has not heard from a quorum of servers within the lease stops
// accepting writes (rule 9). Partition is always 0.
type Heartbeat struct {
	Partition uint32 `msgpack:"p"`
}

// Voters spreads the configuration (see [Voter]): servers send it to each
// other with their heartbeats, and each merges what it receives, so a
// graceful leave or a Forget reaches every server and a newcomer learns of
// servers that are down. Partition is always 0.
type Voters struct {
	Partition uint32  `msgpack:"p"`
	List      []Voter `msgpack:"l"`
	// Empty: the sender founded its cluster alone, is its only server and
	// holds nothing (rule 9, cluster identity).
	Empty bool `msgpack:"e,omitempty"`
	// Kin lists the other names the sender's cluster is known by: names
	// that servers of one forming cluster each gave it at once, before
	// they agreed on the lowest.
	Kin []ClusterID `msgpack:"k,omitempty"`
}

// ReadProbe asks a server whether it still accepts the owner's Epoch, for
// the reads the owner holds (see [Engine.ProposeRead]): a read completes
// once a majority of the configuration answered a probe sent after it
// arrived, each at a position that holds what the read saw.
type ReadProbe struct {
	Partition uint32 `msgpack:"p"`
	Epoch     Epoch  `msgpack:"e"`
	Seq       uint64 `msgpack:"s"`
}

// ReadAck answers a ReadProbe: the copy has promised no later epoch, and
// holds Position.
type ReadAck struct {
	Partition uint32   `msgpack:"p"`
	Epoch     Epoch    `msgpack:"e"`
	Seq       uint64   `msgpack:"s"`
	Position  Position `msgpack:"o"`
	// Inc is the sender's incarnation (see CommitAck.Inc).
	Inc uint64 `msgpack:"n"`
}

// Recover asks a server for the epoch it has accepted in every partition:
// a server that does not vote yet (restarted with nothing, or new) learns
// back the promises it may have made before it takes its vote (rule 9).
// Partition is always 0.
type Recover struct {
	Partition uint32 `msgpack:"p"`
}

// RecoverReply answers Recover: the sender's incarnation, and the epoch it
// has accepted in each partition, in partition order.
type RecoverReply struct {
	Partition uint32  `msgpack:"p"`
	Inc       uint64  `msgpack:"n"`
	Accepted  []Epoch `msgpack:"a"`
}

// Kind implements Message.
func (*Commit) Kind() MsgKind        { return KindCommit }
func (*CommitAck) Kind() MsgKind     { return KindCommitAck }
func (*EpochStart) Kind() MsgKind    { return KindEpochStart }
func (*Fenced) Kind() MsgKind        { return KindFenced }
func (*PosRequest) Kind() MsgKind    { return KindPosRequest }
func (*PosReply) Kind() MsgKind      { return KindPosReply }
func (*Fetch) Kind() MsgKind         { return KindFetch }
func (*FetchReply) Kind() MsgKind    { return KindFetchReply }
func (*SnapshotReply) Kind() MsgKind { return KindSnapshotReply }
func (*Forward) Kind() MsgKind       { return KindForward }
func (*ForwardReply) Kind() MsgKind  { return KindForwardReply }
func (*Heartbeat) Kind() MsgKind     { return KindHeartbeat }
func (*Voters) Kind() MsgKind        { return KindVoters }
func (*ReadProbe) Kind() MsgKind     { return KindReadProbe }
func (*ReadAck) Kind() MsgKind       { return KindReadAck }
func (*Recover) Kind() MsgKind       { return KindRecover }
func (*RecoverReply) Kind() MsgKind  { return KindRecoverReply }

// Part implements Message.
func (m *Commit) Part() uint32        { return m.Partition }
func (m *CommitAck) Part() uint32     { return m.Partition }
func (m *EpochStart) Part() uint32    { return m.Partition }
func (m *Fenced) Part() uint32        { return m.Partition }
func (m *PosRequest) Part() uint32    { return m.Partition }
func (m *PosReply) Part() uint32      { return m.Partition }
func (m *Fetch) Part() uint32         { return m.Partition }
func (m *FetchReply) Part() uint32    { return m.Partition }
func (m *SnapshotReply) Part() uint32 { return m.Partition }
func (m *Forward) Part() uint32       { return m.Partition }
func (m *ForwardReply) Part() uint32  { return m.Partition }
func (m *Heartbeat) Part() uint32     { return m.Partition }
func (m *Voters) Part() uint32        { return m.Partition }
func (m *ReadProbe) Part() uint32     { return m.Partition }
func (m *ReadAck) Part() uint32       { return m.Partition }
func (m *Recover) Part() uint32       { return m.Partition }
func (m *RecoverReply) Part() uint32  { return m.Partition }

// NewMessage returns a zero message of kind k for a decoder to fill, or nil
// for an unknown kind.
func NewMessage(k MsgKind) Message {
	switch k {
	case KindCommit:
		return new(Commit)
	case KindCommitAck:
		return new(CommitAck)
	case KindEpochStart:
		return new(EpochStart)
	case KindFenced:
		return new(Fenced)
	case KindPosRequest:
		return new(PosRequest)
	case KindPosReply:
		return new(PosReply)
	case KindFetch:
		return new(Fetch)
	case KindFetchReply:
		return new(FetchReply)
	case KindSnapshotReply:
		return new(SnapshotReply)
	case KindForward:
		return new(Forward)
	case KindForwardReply:
		return new(ForwardReply)
	case KindHeartbeat:
		return new(Heartbeat)
	case KindVoters:
		return new(Voters)
	case KindReadProbe:
		return new(ReadProbe)
	case KindReadAck:
		return new(ReadAck)
	case KindRecover:
		return new(Recover)
	case KindRecoverReply:
		return new(RecoverReply)
	}
	return nil
}
