package partition

import (
	"bytes"
	"slices"
	"strings"
	"time"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// part is one partition's state on this node. Every node keeps a copy of
// every partition; the owner side (active, sync, peers, waits, queue) is
// used only while the ring names this node owner.
type part struct {
	p int

	// accepted is the highest epoch this node has accepted or promised to;
	// nothing from a lower epoch is accepted again (rule 3). started says
	// whether accepted's owner has begun writing in it (a promise made to a
	// syncing owner does not start the epoch).
	accepted Epoch
	started  bool
	// The log is a prefix of logEpoch's history, and holds at least that
	// epoch's start (logStart). position() = (logEpoch, last offset) is
	// what a syncing owner compares copies by; it never decreases.
	logEpoch Epoch
	logStart uint64
	log      entryLog

	gap map[uint64]Entry // entries of accepted past a gap (rule 7)
	// gapStale is set when the log advanced other than entry by entry
	// through drain or an in-order commit (a fetch or a snapshot), so the
	// gap may hold entries the log has passed.
	gapStale  bool
	knownLast uint64     // last offset accepted's owner told of
	fetch     fetchState // the one outstanding fetch, if any
	// fetchIdle: no fetch before this time. A reply that left the copy
	// where it was (its server had nothing past it, or is behind it) is
	// not asked again at once: a client and an owner restarted with
	// nothing traded empty fetches and replies without end, with no
	// clock tick between them (FuzzSchedules).
	fetchIdle time.Time
	restore   restoring // a snapshot arriving in pieces, if any
	ackDirty  bool
	dirty     bool

	// Durability (WithDurable, durable.go): what the disk has seen.
	durDirty bool     // in Engine.durDirty
	durReset bool     // the log was replaced by a snapshot since the last Ready, or SnapshotDisk asked for one
	durOff   uint64   // the last offset handed to the driver
	durMeta  PartMeta // the meta handed to the driver
	durBytes int      // bytes of the entries on disk past its snapshot (diskEntryBytes)
	durSnap  int      // bytes of the state in its last snapshot on disk
	// durState is the state a snapshot reply restored this round, at
	// offset durStateAt: the disk's snapshot takes it as it is rather than
	// encoding the state again (durable.go). Held until the next Ready.
	durState   []byte
	durStateAt uint64

	// Owner side.
	active    bool
	startPrev Epoch  // epoch of the entry at logStart, for EpochStart
	continued Epoch  // the log epoch this owner's epoch continued (rule 11)
	reads     []read // reads waiting for confirmation (rule 13)
	readSeq   uint64 // the probe the newest read waits for
	readSent  uint64 // the last probe sent
	readAcks  map[string]readAck
	sent      uint64 // last offset put in a Commit message
	peers     map[string]*peer
	waits     []wait
	sync      *syncState
	queue     []queued
	backoff   time.Time // no sync before this, after yielding to a rival
	// turns are the keys whose turn is held, by turn key (turns.go); nil
	// while none is.
	turns map[string]*turn

	group     []string // owner and replicas by the current map
	prevOwner string   // the owner by the map before the last owner change
}

func (pt *part) position() Position { return Position{Epoch: pt.logEpoch, Offset: pt.log.last()} }

// restoring is a snapshot a copy restores piece by piece (ChunkedState):
// from which server, its name there, the next piece, and the copy's
// position and base when it began (it must not move meanwhile).
type restoring struct {
	snap uint64
	from string
	next uint32
	pos  Position
	base uint64
}

type fetchState struct {
	id   uint64
	to   string
	sent time.Time
	pos  Position // the asker's position when it sent the fetch
	base uint64
	// retry, when set, is when to ask again after a Busy reply.
	retry time.Time
}

type write struct {
	typ   wire.RecordType
	key   string
	value []byte
	wait  Wait
	k     int
	// epoch is the epoch a forwarded write was sent under (zero for a
	// local write, or a sender that knew none); deadline is when its
	// caller may be answered without the owner's word, in Unix
	// nanoseconds (rule 1).
	epoch    Epoch
	deadline int64
	// turn and turnID: a turn's begin or end (turns.go).
	turn   TurnOp
	turnID uint64
	// writer and seq: a turn's begin's caller, for its verb's outcome
	// (dedup.go).
	writer string
	seq    uint64
}

type queued struct {
	write
	origin origin
}

type wait struct {
	pos Position
	k   int
	// voters: count acks from every server of the configuration (a
	// Majority write), not only the replica group's.
	voters   bool
	origin   origin
	deadline time.Time
	// dup: a duplicate (dedup.go), answered at first with reply once its
	// first commit is as durable as asked.
	dup   bool
	first Position
	reply []byte
}

// peer is what an owner knows of one copy.
type peer struct {
	pos     Position  // last acked
	at      time.Time // when pos last moved (for Status.LagSeconds)
	inc     uint64    // the incarnation that sent the last ack
	checked uint64    // acked offset at the last probe check
	probed  time.Time // last probe check
}

// adopt accepts epoch ep if it is higher than accepted. An owner or a
// syncing node that adopts another node's epoch yields (rule 3).
func (e *Engine) adopt(pt *part, ep Epoch) {
	if !pt.accepted.Less(ep) {
		return
	}
	if pt.active || pt.sync != nil {
		if pt.active {
			e.stepDown(pt)
		}
		pt.sync = nil
		e.event(Event{Kind: EventFenced, Partition: pt.p, Epoch: ep})
	}
	pt.accepted = ep
	pt.started = false
	pt.knownLast = 0
	e.touch(pt)
	clear(pt.gap)
	pt.fetch, pt.fetchIdle = fetchState{}, time.Time{} // a new epoch: ask anew
	e.dropRestore(pt)
	if _, seen := e.seen[ep.Owner]; ep.Owner != e.id && (e.alive[ep.Owner] || !seen) {
		// Let a live rival finish; a dead one is no reason to wait. A rival
		// no map of ours has named yet has just joined and our map lags:
		// re-taking the partition now would sync only with the members we
		// know and drop what the newcomer committed.
		pt.backoff = e.now.Add(e.cfg.fenceBackoff)
	}
}

// apply appends ent (offset last+1) to the log and the state of a copy.
func (e *Engine) apply(pt *part, ent Entry) {
	// From here on, the log's copy: the event outlives the message.
	ent = pt.log.append(ent, e.cfg.historyMax, e.cfg.historyBytes)
	e.st.Apply(pt.p, ent)
	e.touch(pt)
	if pt.logEpoch.Less(ent.Epoch) {
		// An entry of a newer epoch means this log now holds that epoch's
		// start (it is the offset before the epoch's first entry).
		pt.logEpoch, pt.logStart = ent.Epoch, ent.Offset-1
	}
	e.event(Event{Kind: EventApplied, Partition: pt.p, Entry: ent})
	pt.ackDirty = true
}

func validEntries(es []Entry, from uint64) error {
	for i := range es {
		switch {
		case es[i].Offset != from+uint64(i):
			return errs.Errorf(errs.InvalidArgument, "entry offset %d, want %d", es[i].Offset, from+uint64(i))
		case es[i].Type < wire.RecordAdd || es[i].Type > wire.RecordBatch:
			return errs.Errorf(errs.InvalidArgument, "unknown record type %d", es[i].Type)
		case i > 0 && es[i].Epoch.Less(es[i-1].Epoch):
			return errs.New(errs.InvalidArgument, "entry epochs go backwards")
		}
	}
	return nil
}

func (e *Engine) stepCommit(pt *part, from string, m *Commit) error {
	if len(m.Entries) == 0 {
		return nil
	}
	ep := m.Entries[0].Epoch
	if err := validEntries(m.Entries, m.Entries[0].Offset); err != nil {
		return err
	}
	if ep.Owner != from || m.Entries[len(m.Entries)-1].Epoch != ep || m.Entries[0].Offset == 0 {
		return errs.New(errs.InvalidArgument, "commit batch not from its epoch's owner, or mixing epochs")
	}
	if ep.Less(pt.accepted) {
		e.send(from, &Fenced{Partition: uint32(pt.p), Epoch: pt.accepted})
		return nil
	}
	e.adopt(pt, ep)
	if pt.active {
		return nil
	}
	pt.started = true
	e.touch(pt)
	pt.knownLast = max(pt.knownLast, m.Entries[len(m.Entries)-1].Offset)
	for _, ent := range m.Entries {
		n := pt.log.last()
		switch {
		case ent.Offset <= n: // duplicate
		case ent.Offset == n+1 && pt.logEpoch == ep:
			e.apply(pt, ent)
			if len(pt.gap) > 0 {
				delete(pt.gap, ent.Offset)
			}
		default:
			e.buffer(pt, ent)
		}
	}
	e.drain(pt)
	pt.ackDirty = true
	e.maybeFetch(pt)
	return nil
}

// buffer keeps an entry of the accepted epoch that cannot be applied yet;
// when the buffer is full the entry is left to the fetch.
func (e *Engine) buffer(pt *part, ent Entry) {
	if len(pt.gap) >= e.cfg.gapMax {
		return
	}
	if pt.gap == nil {
		pt.gap = make(map[uint64]Entry)
	}
	// Held past this step: a copy of its own, not the message's bytes
	// (see Decoder.DecodeShared).
	ent.Key, ent.Value = strings.Clone(ent.Key), bytes.Clone(ent.Value)
	pt.gap[ent.Offset] = ent
}

// drain applies buffered entries that have become next in order.
func (e *Engine) drain(pt *part) {
	if len(pt.gap) == 0 {
		return
	}
	for pt.logEpoch == pt.accepted {
		ent, ok := pt.gap[pt.log.last()+1]
		if !ok {
			break
		}
		delete(pt.gap, ent.Offset)
		e.apply(pt, ent)
	}
	if !pt.gapStale {
		return // every entry the log passed was deleted on the way
	}
	pt.gapStale = false
	n := pt.log.last()
	for o := range pt.gap {
		if o <= n {
			delete(pt.gap, o)
		}
	}
}

func (e *Engine) stepEpochStart(pt *part, from string, m *EpochStart) {
	if m.Epoch.Owner != from {
		return
	}
	if m.Epoch.Less(pt.accepted) {
		e.send(from, &Fenced{Partition: uint32(pt.p), Epoch: pt.accepted})
		return
	}
	e.adopt(pt, m.Epoch)
	if pt.active {
		return
	}
	pt.started = true
	e.touch(pt)
	pt.knownLast = max(pt.knownLast, m.Last)
	if pt.logEpoch != m.Epoch && pt.log.last() == m.Start {
		if ep, ok := pt.log.epochAt(m.Start); ok && ep == m.PrevEpoch {
			// Same history up to the start: aligned without a round trip.
			pt.logEpoch, pt.logStart = m.Epoch, m.Start
		}
	}
	// Otherwise the copy is behind, or holds entries past the start that
	// the new history does not (rule 6): the fetch sorts out which.
	e.drain(pt)
	pt.ackDirty = true
	e.maybeFetch(pt)
}

func (e *Engine) stepPosRequest(pt *part, from string, m *PosRequest) {
	if m.Epoch.Owner != from {
		return
	}
	// An epoch this copy has seen start cannot be proposed again by a
	// sync, except by a restarted node that forgot it used it: refusing
	// makes that node propose a higher one.
	if m.Epoch.Less(pt.accepted) || (m.Epoch == pt.accepted && pt.started) {
		e.send(from, &Fenced{Partition: uint32(pt.p), Epoch: pt.accepted})
		return
	}
	// A node given seeds that has not heard the configuration promises
	// nothing: it may be a restarted server cut off from its cluster, and
	// its empty copy's promise let a newcomer that saw only it form a
	// cluster of two (fault suite seed 8374). The sync waits for it.
	if e.cfg.joining && !e.heardConfig {
		return
	}
	e.adopt(pt, m.Epoch)
	e.send(from, &PosReply{Partition: uint32(pt.p), Epoch: m.Epoch, Position: pt.position(), Oldest: pt.log.base + 1, Inc: e.inc, Voters: e.Voters()})
}

// maybeFetch asks for what the copy lacks: during sync, from the node with
// the best position; otherwise from the accepted epoch's owner when the
// copy is not aligned with it, has a gap, or was told of later entries.
func (e *Engine) maybeFetch(pt *part) {
	if pt.fetch.id != 0 || pt.active || e.now.Before(pt.fetchIdle) {
		return
	}
	var to string
	switch {
	case pt.sync != nil:
		if pt.sync.target == "" || pt.position().Compare(pt.sync.targetPos) >= 0 {
			return
		}
		to = pt.sync.target
	case pt.started && pt.accepted.Owner != e.id && e.alive[pt.accepted.Owner] &&
		(pt.logEpoch != pt.accepted || len(pt.gap) > 0 || pt.knownLast > pt.log.last()):
		to = pt.accepted.Owner
	default:
		return
	}
	e.fetchFrom(pt, to)
}

// fetchFrom sends a fetch for what the copy lacks to node to, or for the
// next piece of the snapshot it is restoring from to.
func (e *Engine) fetchFrom(pt *part, to string) {
	r := pt.restore
	if r.snap != 0 && (r.from != to || r.pos != pt.position() || r.base != pt.log.base) {
		e.dropRestore(pt) // the copy moved, or asks another server
		r = restoring{}
	}
	e.nextID++
	pt.fetch = fetchState{id: e.nextID, to: to, sent: e.now, pos: pt.position(), base: pt.log.base}
	e.send(to, &Fetch{
		Partition: uint32(pt.p), ID: e.nextID, From: pt.log.last() + 1, Max: uint32(e.cfg.fetchMax),
		Base: pt.log.base, BaseEpoch: pt.log.baseEpoch, Runs: slices.Clone(pt.log.runs),
		Snap: r.snap, Chunk: r.next,
	})
}

// serveFetch answers a fetch from this node's log, whatever its role.
func (e *Engine) serveFetch(pt *part, from string, m *Fetch) error {
	if m.From == 0 || m.From-1 < m.Base {
		return errs.New(errs.InvalidArgument, "fetch from before its own base")
	}
	if m.Snap != 0 && e.sendPiece(pt, from, m) {
		return nil
	}
	// A fetch for a partition ends the snapshot in flight to the asker for
	// it: the asker restored it (or lost it and asks again).
	e.releaseSnapshot(from, pt.p)
	cLast := m.From - 1
	a, lo, hi, found := pt.log.agreement(m)
	var truncate uint64
	switch {
	case found && a == cLast && cLast >= pt.log.base:
		n := uint64(max(1, min(int(m.Max), e.cfg.fetchMax)))
		to := min(pt.log.last(), cLast+n)
		if to > cLast {
			to = pt.log.fit(cLast+1, to, e.cfg.maxMessage)
		}
		var es []Entry
		if to > cLast {
			es = pt.log.appendRange(make([]Entry, 0, to-cLast), cLast+1, to)
		}
		e.send(from, &FetchReply{Partition: uint32(pt.p), ID: m.ID, Position: pt.position(), Start: pt.logStart, Entries: es})
		return nil
	case found:
		// The asker holds entries past a that this history lacks, or
		// (a == cLast) agrees but is behind the history cap.
		truncate = a
	case m.Base > pt.log.last():
		// The asker's base is past this log: nothing to give.
		e.send(from, &FetchReply{Partition: uint32(pt.p), ID: m.ID, Position: pt.position(), Start: pt.logStart})
		return nil
	case lo > hi:
		// Every entry the asker holds is older than the epochs this log
		// remembers: none can be checked, so none is kept (rule 8).
		truncate = m.Base
	default:
		truncate = max(lo, 1) - 1 // differs wherever both logs can be compared
	}
	if !e.takeSnapshotSlot(from, pt.p) {
		e.waitForSlot(from, m)
		e.send(from, &FetchReply{Partition: uint32(pt.p), ID: m.ID, Position: pt.position(), Start: pt.logStart, Busy: true})
		return nil
	}
	var pieces [][]byte
	var err error
	if cs, ok := e.st.(ChunkedState); ok {
		pieces, err = cs.SnapshotChunks(pt.p, e.cfg.maxMessage)
		if err == nil && len(pieces) == 0 {
			err = errs.New(errs.Internal, "no piece")
		}
	} else {
		var state []byte
		state, err = e.st.Snapshot(pt.p)
		pieces = [][]byte{state}
	}
	if err != nil {
		e.releaseSnapshot(from, pt.p)
		return errs.Errorf(errs.Internal, "snapshot of partition %d: %w", pt.p, err)
	}
	r := &SnapshotReply{
		Partition: uint32(pt.p), ID: m.ID, Position: pt.position(), Start: pt.logStart,
		OffsetEpoch: pt.log.lastEpoch(), TruncateTo: truncate, State: pieces[0],
		Runs: slices.Clone(pt.log.runs),
	}
	if len(pieces) > 1 {
		e.nextSnap++
		r.Snap, r.More = e.nextSnap, true
		e.keepPieces(from, pt.p, &snapStream{id: e.nextSnap, pieces: pieces, reply: *r})
	}
	e.send(from, r)
	return nil
}

// fetchReplyUsable checks that a reply answers the outstanding fetch, comes
// from a history at least as new as this copy's, and that the copy has not
// moved since asking. It clears the outstanding fetch when it matches.
func (e *Engine) fetchReplyUsable(pt *part, from string, id uint64, pos Position) bool {
	f := pt.fetch
	if f.id == 0 || id != f.id || from != f.to {
		return false
	}
	pt.fetch = fetchState{}
	return pos.Compare(pt.position()) >= 0 && pt.position() == f.pos && pt.log.base == f.base
}

func (e *Engine) stepFetchReply(pt *part, from string, m *FetchReply) error {
	if m.Busy {
		// The server sends as many snapshots to this node as it allows;
		// the fetch stays outstanding and goes again shortly (tickPart).
		if f := &pt.fetch; f.id != 0 && m.ID == f.id && from == f.to {
			f.retry = e.now.Add(e.cfg.fetchRetry / busyRetry)
			e.catchUp.Busy++
		}
		return nil
	}
	answered := pt.fetch.id != 0 && m.ID == pt.fetch.id && from == pt.fetch.to
	if !e.fetchReplyUsable(pt, from, m.ID, m.Position) {
		if answered && m.Position.Compare(pt.position()) < 0 {
			pt.fetchIdle = e.now.Add(e.cfg.fetchRetry / busyRetry) // its server is behind this copy
		}
		e.maybeFetch(pt)
		return nil
	}
	if err := validEntries(m.Entries, pt.log.last()+1); err != nil {
		return err
	}
	if len(m.Entries) > 0 && m.Position.Epoch.Less(m.Entries[len(m.Entries)-1].Epoch) {
		return errs.New(errs.InvalidArgument, "fetch reply entries newer than its position")
	}
	before := pt.position()
	e.adopt(pt, m.Position.Epoch)
	for _, ent := range m.Entries {
		e.apply(pt, ent)
	}
	if len(m.Entries) == 0 && m.Position.Compare(before) <= 0 {
		pt.fetchIdle = e.now.Add(e.cfg.fetchRetry / busyRetry) // its server has nothing past this copy
	}
	e.afterCatchUp(pt, m.Position, m.Start)
	return nil
}

func (e *Engine) stepSnapshotReply(pt *part, from string, m *SnapshotReply) {
	f := pt.fetch
	e.catchUp.Pieces++
	e.catchUp.PieceBytes += uint64(len(m.State))
	answered := f.id != 0 && m.ID == f.id && from == f.to
	if !e.fetchReplyUsable(pt, from, m.ID, m.Position) {
		e.catchUp.Stale++
		if answered && m.Position.Compare(pt.position()) < 0 {
			pt.fetchIdle = e.now.Add(e.cfg.fetchRetry / busyRetry) // its server is behind this copy
		}
		e.maybeFetch(pt)
		return
	}
	before := pt.position()
	if m.Snap != 0 {
		done, ok := e.stagePiece(pt, from, m, f)
		if !ok {
			pt.fetch = f // keep it outstanding: the fetch retry asks again
			return
		}
		if !done {
			e.fetchFrom(pt, from) // the next piece
			return
		}
	} else if err := e.st.Restore(pt.p, m.State); err != nil {
		pt.fetch = f // keep it outstanding: the fetch retry asks again
		return
	} else if e.cfg.durable {
		// A state Restore took is one the disk's load can restore: the
		// snapshot for the disk is these bytes. They may alias the
		// receive buffer (DecodeShared), which stays as it is; the next
		// Ready hands them to the driver and lets go of them.
		pt.durState, pt.durStateAt = m.State, m.Position.Offset
	}
	e.adopt(pt, m.Position.Epoch)
	// Newest first: the order that undoes them.
	for o := pt.log.last(); o > max(m.TruncateTo, pt.log.base); o-- {
		e.event(Event{Kind: EventDropped, Partition: pt.p, Entry: pt.log.at(o)})
	}
	pt.log.reset(m.Position.Offset, m.OffsetEpoch, m.Runs)
	pt.logEpoch, pt.logStart = m.Position.Epoch, m.Start
	pt.durReset = true
	e.touch(pt)
	e.event(Event{Kind: EventRestored, Partition: pt.p, Position: m.Position})
	e.catchUp.Restored++
	pt.ackDirty = true
	if m.Position.Compare(before) <= 0 {
		// A snapshot that brought the copy no further (its server has
		// nothing past it, restarted empty, say): asking again at once
		// would be answered the same, without end (FuzzSchedules, in
		// make test's short pass). The next fetch, after the hold, lets
		// the server's snapshot slot go.
		pt.fetchIdle = e.now.Add(e.cfg.fetchRetry / busyRetry)
	}
	e.afterCatchUp(pt, m.Position, m.Start)
	if pt.fetch.id == 0 && !e.now.Before(pt.fetchIdle) {
		// Tell the server the snapshot arrived, so that it sends the next
		// (MaxSnapshotsInFlight): a fetch, for whatever came after it.
		e.fetchFrom(pt, from)
	}
}

// afterCatchUp finishes a fetch or snapshot reply from a server at pos
// whose epoch started at start.
func (e *Engine) afterCatchUp(pt *part, pos Position, start uint64) {
	pt.gapStale = true
	e.touch(pt)
	if pt.logEpoch.Less(pos.Epoch) && pt.log.last() >= start {
		pt.logEpoch, pt.logStart = pos.Epoch, start
	}
	if pos.Epoch == pt.accepted && pt.accepted.Owner != e.id {
		pt.started = true
		pt.knownLast = max(pt.knownLast, pos.Offset)
	}
	e.drain(pt)
	pt.ackDirty = true
	e.checkSync(pt)
	e.maybeFetch(pt)
}
