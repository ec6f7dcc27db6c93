// Package partition owns the partition engine: the deterministic state
// machine that decides, for every partition of one resource on one node,
// who writes, in what order every copy applies, and how copies catch up
// and converge. It implements docs/engine.md; the invariants there are its
// specification.
//
// The engine does no I/O, starts no goroutines and reads no clock (the
// shape of etcd-io/raft's RawNode). A driver (internal/node) owns one
// [Engine] per resource and, on one goroutine, feeds it inputs:
//
//   - [Engine.SetMap] when membership changes (the ring map, plus the live
//     client members, which the map leaves out),
//   - [Engine.Step] for each message a peer sent,
//   - [Engine.Tick] with the current time, a few times a second,
//   - [Engine.Propose] for each local write,
//
// and after each batch of inputs drains the output:
//
//	rd := e.Ready()
//	send rd.Messages (each to Envelope.To), publish rd.Events (the change
//	feed: committed, applied, dropped, restored, ownership), hand
//	rd.Completions to waiting callers
//	e.Advance()
//
// The engine applies entries to the local [State] itself, synchronously,
// so the state always matches the log and a snapshot is always exactly at
// the log's last offset.
//
// # How a write flows
//
// A write proposed on a non-owner goes one hop to the owner by the local
// map ([Forward]); a forwarded write that lands on a non-owner is refused
// with [ErrNotOwner] and that node's view of the owner, never forwarded
// again. The owner gives the write the next offset in its epoch, applies
// it, and at the next Ready batches everything new into one [Commit] per
// partition, shared by every copy (every other server and every client).
// Copies apply in offset order, buffer what arrives early (bounded), fetch
// what is missing, and report their position with one [CommitAck] per
// Ready, which completes writes waiting for k replicas and lets the owner
// see a copy that stops advancing ([EpochStart] is re-sent to it). A
// client, whose acks count for no write, reports once per Tick instead.
//
// # Decisions beyond docs/engine.md
//
// Positions. A copy's position is (the epoch whose history its log is a
// prefix of, its last offset). A copy takes epoch E as its log epoch only
// once it holds E's start, as if the epoch start were an entry (raft's
// no-op, without spending an offset). A syncing owner compares positions
// this way, not by the epoch of the last entry: comparing last entries
// would let a log holding an old, never-acked suffix win over a log that
// holds a newer epoch's start (raft's "figure 8"). A copy's position never
// moves backwards; replies from a staler node are ignored.
//
// Promises. Answering a [PosRequest] is a promise (Paxos' prepare): the copy
// accepts nothing from a lower epoch afterwards. Rule 4 alone does not
// stop the old owner from getting a write majority-acked after the new
// owner read the positions, and rule 6 would then truncate that write.
//
// Whom a sync waits for. A would-be owner asks every live server and
// waits for promises from a quorum of the configuration ([Voter]) and from
// every previous writer it hears of (its previous map's owner, the owners
// of the epochs copies report) while alive. Majority writes are acked by a
// majority of the same configuration, so any quorum of promises meets
// them (rule 5); an earlier design read a majority of every replica group
// the partition had had instead, which an owner cut off with one replica
// could defeat.
//
// Quorum. Quorum is a majority of the configuration: every server that
// joined and has not been removed by [Engine.Forget]
// ([WithQuorum] fixes it instead). Nothing ages out, so a minority never
// takes itself for the whole cluster, however long a split lasts. Servers
// exchange the configuration with heartbeats ([Voters]) and in position
// replies, so a newcomer on the minority side learns of the servers beyond
// it. Below quorum an owner steps down and no sync starts: a minority
// refuses writes with [ErrNoQuorum]. Writes it committed before it noticed
// the split (acked to the owner alone) are dropped on heal with dropped
// events.
//
// Deadlines. Every write carries a deadline (the caller's, or
// WriteTimeout); nothing commits it later, and a forwarded write only while
// its deadline is more than ClockSkew away. A forwarded write carries the
// epoch its sender knew and commits only in that epoch or the one that
// continued it. A forwarding node answers its caller without the owner's
// word only at the deadline. So a write takes effect before its caller is
// answered, or never (docs/engine.md, rule 11).
//
// Catch-up and truncation. There is no separate snapshot request: a
// [Fetch] describes the asker's log (its base and epoch runs), the server
// finds where the two histories part, and answers with entries
// ([FetchReply]) or, when the asker is behind the history cap or holds
// entries the history lacks, with a [SnapshotReply] at its own last offset.
// A copy drops an uncommitted suffix (rule 6) by restoring that snapshot,
// because a State cannot undo an applied entry; the dropped events come
// from the copy's log. When the histories part below the server's kept
// history the dropped events are best effort (entries already trimmed on
// the copy are not reported).
//
// Stale owners. An owner re-announces its epoch to every copy on each map
// change, so one whose epoch was superseded while maps disagreed hears
// [Fenced] and syncs again instead of serving a stale history. A node the
// ring names owner that yields to a live rival's epoch waits FenceBackoff
// before it tries again; while two maps disagree for long, the two may
// take turns, until membership converges.
//
// Waiting. Propose returns refusals at once (invalid, no quorum, no owner,
// sync queue full, expired); only accepted writes that wait for something
// produce a [Completion]. WaitReplicas counts acks from replicas of the
// current group in the current epoch (more than the group has fails with
// [ErrReplicas]); WaitMajority is a majority of the configuration, owner
// included. Every wait is bounded by the write's deadline; an owner that
// loses the partition fails its waiting writes with [ErrOwnershipLost]
// (the write may still survive). Errors are definite (Unavailable and the
// refusals before commit: the write never takes effect) or indefinite
// (DeadlineExceeded, Aborted: it may have, before the answer).
//
// History. Each partition keeps at most HistoryMax entries (default
// 10,000; the original kept all of them forever).
//
// Wire. Messages are plain structs with msgpack tags; [MsgKind] and
// [NewMessage] let the driver tag and decode them. An epoch is {Term,
// Owner}, which wire.RecordHeader's single Epoch integer cannot carry, so
// entries travel as [Entry] structs.
package partition
