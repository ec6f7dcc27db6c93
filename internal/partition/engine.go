package partition

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/seqtab"
	"github.com/fero-go/fero/internal/wire"
)

// Errors the engine reports, in completions, forward replies and from
// Propose. They are coded (see internal/errs), so errors.Is matches them
// after they have crossed the wire.
var (
	// ErrNoQuorum: this node sees fewer live servers than the quorum; it
	// refuses writes so that the other side of a split can keep them (rule 9).
	ErrNoQuorum = errs.New(errs.Unavailable, "no quorum")
	// ErrNotOwner: the node that received a forwarded write does not own the
	// partition by its map; the completion's Owner is its view (rule 10).
	ErrNotOwner = errs.New(errs.Unavailable, "not owner, ring changing")
	// ErrNoOwner: the map has no server member to own the partition.
	ErrNoOwner = errs.New(errs.Unavailable, "no server owns the partition")
	// ErrSyncQueueFull: the owner is syncing and its bounded queue is full.
	ErrSyncQueueFull = errs.New(errs.Unavailable, "sync queue full")
	// ErrOwnershipLost: the owner committed the write, then stopped owning
	// the partition before the write was acknowledged as asked; the write
	// may or may not survive. Indefinite (Aborted).
	ErrOwnershipLost = errs.New(errs.Aborted, "ownership lost before the write was acknowledged")
	// ErrTimeout: the write's deadline passed while it waited for replica
	// acks or for a forwarded write's reply; it may have been committed,
	// but no node commits it any more. Indefinite (DeadlineExceeded).
	ErrTimeout = errs.New(errs.DeadlineExceeded, "write timed out in the partition engine")
	// ErrExpired: the write's deadline passed (less the clock-skew margin)
	// before any node committed it; it never will be. Definite.
	ErrExpired = errs.New(errs.Unavailable, "write deadline passed before it was committed")
	// ErrEpochChanged: a forwarded write reached its owner in an epoch
	// other than the one it was sent under (or the one continuing it); it
	// was not committed. Definite: retry.
	ErrEpochChanged = errs.New(errs.Unavailable, "partition epoch changed since the write was sent")
	// ErrReplicas: the write asks for more replica acks than the replica
	// group has.
	ErrReplicas = errs.New(errs.FailedPrecondition, "more replica acks asked than the replica group has")
	// ErrNoMap: the engine has not been given a ring map yet; retry.
	ErrNoMap = errs.New(errs.Unavailable, "no ring map yet")
)

// Engine is one node's partition state machine for one resource. It is
// not safe for concurrent use: one driver goroutine calls it.
type Engine struct {
	cfg config
	id  string
	st  State
	// dd is st as a Deduper, when it is one (exactly-once, dedup.go).
	dd  Deduper
	now time.Time

	m      *ring.Map
	alive  map[string]bool      // live servers by the current map
	seen   map[string]time.Time // servers: when last seen alive
	copies []string             // live servers and clients but this node, sorted
	parts  []*part

	voters        map[string]Voter   // the configuration (rule 9), left servers included
	votersPresent int                // voters that have not left; -1 when unknown
	liveInc       map[string]uint64  // servers: the incarnation the map last showed
	inc           uint64             // this node's incarnation, by its map
	heardConfig   bool               // a peer has sent this node the configuration
	recovered     map[string]uint64  // voters that answered Recover, by the incarnation they answered in
	heardLists    map[string][]Voter // servers: the configuration each last sent (Forgotten)
	unseenSeeds   []string           // seeds no member of the map answers at (SetUnseenSeeds)
	recoverSent   time.Time          // when Recover last went out
	voterOffs     []uint64           // checkWaits' scratch

	settleUntil time.Time            // no sync starts before (a server just left)
	heard       map[string]time.Time // servers: when a message last came from each
	beat        time.Time            // when this node last sent heartbeats

	nextID uint64                  // the last fetch id
	fwd    seqtab.Table[forwarded] // by forward id; deadlines grow with ids

	dirty []int
	rd    Ready

	// Durability (WithDurable, durable.go).
	durDirty  []int  // partitions whose copy changed since the last Ready
	configVer uint64 // counts changes to voters
	dur       struct {
		configVer uint64
		heard     bool
		inc       uint64
	} // what the last Ready's Config said
	continues uint64 // RestoreConfig's incarnation, whose vote this node continues

	snapsOut map[string][]snapOut      // snapshots in flight to each peer (snapshots.go)
	snapWait map[string][]waitingFetch // fetches answered Busy, by peer (snapshots.go)
	nextSnap uint64                    // the last snapshot sent in pieces

	quorumOK, quorumKnown bool // hasQuorum's answer, while known

	// Cluster identity (cluster.go).
	cluster    ClusterID              // this node's cluster; zero before it forms or hears one
	kin        map[ClusterID]struct{} // other names of this cluster (servers that voted at once)
	foreign    map[string]ClusterID   // servers of other clusters refused, by ID
	foreignVer uint64                 // changes when foreign gains a server or a name
	yields     uint64                 // times this node's cluster gave way
	catchUp    CatchUp                // what this copy's catching up took
	termFloor  uint64                 // the highest term a cluster it gave up used

	out chunks // the messages sent per write or per round

	heardFrom string // the sender whose message Step last noted in heard, until the clock or the map moves

	warmParts []int    // Warm's entries, by partition
	warmKeys  []string // and by key
	warmed    uint64   // the sum of what Warm loaded, kept so its loads stay
}

// forwarded is a write this node sent to an owner and waits to hear about,
// until the write's deadline: only then may it answer its caller without
// the owner's word (rule 1).
type forwarded struct {
	token     uint64
	partition int
	to        string
	deadline  time.Time
	// retried: its caller sends it again, with its writer's sequence, on
	// an indefinite failure (dedup.go).
	retried bool
}

// origin is who waits for a write: the local caller (node "") or a
// forwarding node's request id. wants is false for fire and forget.
type origin struct {
	node  string
	id    uint64
	token uint64
	wants bool
}

// New returns an engine for the node id, keeping st in step with the log.
// The engine does nothing until the first SetMap.
func New(id string, st State, opts ...Option) (*Engine, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.expect > 1 {
		cfg.joining = true // never founds a cluster alone
	}
	if id == "" {
		return nil, fmt.Errorf("%w: empty node id", ErrInvalidOption)
	}
	if st == nil {
		return nil, fmt.Errorf("%w: nil State", ErrInvalidOption)
	}
	dd, _ := st.(Deduper)
	e := &Engine{
		cfg:   cfg,
		id:    id,
		st:    st,
		dd:    dd,
		alive: map[string]bool{}, heard: map[string]time.Time{},
		seen: map[string]time.Time{}, voters: map[string]Voter{}, votersPresent: -1, liveInc: map[string]uint64{},
		nextID: cfg.firstID, nextSnap: cfg.firstID,
	}
	e.fwd.StartAfter(cfg.firstID)
	return e, nil
}

// ID returns the node id.
func (e *Engine) ID() string { return e.id }

// SetMap installs the ring map the node now believes in, with the live
// client members (clients are not in the map but receive every commit).
// The partition count must not change.
func (e *Engine) SetMap(m *ring.Map, clients []string) error {
	if m == nil {
		return errs.New(errs.InvalidArgument, "nil ring map")
	}
	if e.parts != nil && m.Partitions() != len(e.parts) {
		return errs.Errorf(errs.InvalidArgument, "ring map has %d partitions, engine has %d", m.Partitions(), len(e.parts))
	}
	if err := e.initParts(m.Partitions()); err != nil {
		return errs.Errorf(errs.InvalidArgument, "%w", err)
	}
	prev := e.m
	e.m = m
	e.quorumKnown = false
	e.heardFrom = ""
	if prev != nil && e.cfg.settle > 0 {
		for _, s := range prev.Members() {
			if !inMap(m, s.ID) {
				// A server left: wait out the detector before any new
				// epoch, and drop syncs under way, which counted it.
				e.settleUntil = e.now.Add(e.cfg.settle)
				for _, pt := range e.parts {
					pt.sync = nil
				}
				break
			}
		}
	}
	clear(e.alive)
	e.copies = e.copies[:0]
	for _, s := range m.Members() {
		if !inMap(prev, s.ID) {
			e.heard[s.ID] = e.now // a server new to the map: its lease starts now
		}
		e.alive[s.ID] = true
		e.seen[s.ID] = e.now
		e.mapVoter(s, len(m.Members()))
		if s.ID != e.id {
			e.copies = append(e.copies, s.ID)
		}
	}
	for _, c := range clients {
		if c != e.id && !e.alive[c] {
			e.copies = append(e.copies, c)
		}
	}
	slices.Sort(e.copies)
	e.copies = slices.Compact(e.copies)
	for peer := range e.snapsOut {
		if _, ok := slices.BinarySearch(e.copies, peer); !ok {
			delete(e.snapsOut, peer)
		}
	}
	for peer := range e.snapWait {
		if _, ok := slices.BinarySearch(e.copies, peer); !ok {
			delete(e.snapWait, peer)
		}
	}

	changed := prev == nil || prev.Version() != m.Version()
	for _, pt := range e.parts {
		e.remap(pt, prev)
		if pt.active && changed {
			// Re-announce the epoch: a copy that accepted a newer one while
			// the maps disagreed answers Fenced, and this node yields
			// instead of serving a stale history as owner.
			es := &EpochStart{Partition: uint32(pt.p), Epoch: pt.accepted, Start: pt.logStart, PrevEpoch: pt.startPrev, Last: pt.log.last()}
			for _, c := range e.copies {
				e.send(c, es)
			}
		}
	}
	// Forwards to a server that left the map keep waiting until their
	// deadline: the write may still sit in that server's socket, and it
	// could commit it up to the deadline (rule 1). All but those whose
	// caller will send them again with their writer's sequence: they fail
	// now, indefinite, and the retry goes to the new owner, where it
	// applies once (rule 16; fail fast).
	if prev != nil {
		for id, f := range e.fwd.All() {
			if f.retried && !inMap(m, f.to) {
				e.fwd.Take(id)
				e.rd.Completions = append(e.rd.Completions, Completion{Token: f.token, Partition: f.partition, Err: ErrOwnerGone})
			}
		}
	}
	return nil
}

// ErrOwnerGone fails a forwarded write whose owner left the map before it
// answered: it may have committed it, so the error is indefinite; its
// caller sends it again with the same sequence (rule 16).
var ErrOwnerGone = errs.New(errs.Aborted, "the owner left the cluster with the write in flight")

// ConnectionLost tells the engine that the connection to node id broke,
// or could not be made: a forward sent to it may have been lost on the
// way, or its answer may be. The forwards to id whose caller sends them
// again with their writer's sequence fail now with ErrForwardLost,
// indefinite, and the retry goes out at once (rule 16; fail fast). The
// rest wait for their deadline, as before: such a write may still reach
// the owner and commit until then (rule 1), and its caller has no other
// way to learn which.
func (e *Engine) ConnectionLost(id string) {
	for fid, f := range e.fwd.All() {
		if f.retried && f.to == id {
			e.fwd.Take(fid)
			e.rd.Completions = append(e.rd.Completions, Completion{Token: f.token, Partition: f.partition, Err: ErrForwardLost})
		}
	}
}

// Forwards returns how many writes this node forwarded that still wait
// for their owner's answer.
func (e *Engine) Forwards() int { return e.fwd.Len() }

// ErrForwardLost fails a forwarded write whose connection to its owner
// broke before the owner answered: the owner may have committed it, so the
// error is indefinite; its caller sends it again with the same sequence
// (rule 16).
var ErrForwardLost = errs.New(errs.Aborted, "the connection to the owner broke with the write in flight")

// remap applies a new map to one partition.
func (e *Engine) remap(pt *part, prev *ring.Map) {
	oldOwner := ""
	if prev != nil {
		if o, ok := prev.Owner(pt.p); ok {
			oldOwner = o.ID
		}
	}
	owner := e.ownerOf(pt.p)
	if prev != nil && oldOwner != owner {
		pt.prevOwner = oldOwner
	}
	group := make([]string, 0, 1+len(pt.group))
	if owner != "" {
		group = append(group, owner)
		for _, r := range e.m.Replicas(pt.p) {
			group = append(group, r.ID)
		}
	}
	pt.group = group
	if pt.active && !e.hasQuorum() {
		// Without quorum the other side may take the partition (rule 9);
		// holding on to the epoch would serve a history that may be stale
		// when the split heals. Sync again once quorum is back.
		e.stepDown(pt)
	}
	if owner != e.id || e.cfg.client {
		if pt.active {
			e.stepDown(pt)
		}
		pt.sync = nil
		e.failQueue(pt, ErrNotOwner)
		return
	}
	switch {
	case pt.sync != nil:
		if pt.sync.target != "" && !e.alive[pt.sync.target] {
			e.startSync(pt)
			return
		}
		e.checkSync(pt)
	case !pt.active:
		e.maybeStartSync(pt)
	}
}

func (e *Engine) ownerOf(p int) string {
	if e.m == nil {
		return ""
	}
	o, ok := e.m.Owner(p)
	if !ok {
		return ""
	}
	return o.ID
}

// quorum returns the live servers needed to accept writes (rule 9): a
// majority of the configuration, or the operator's fixed number.
func (e *Engine) quorum() int {
	if e.cfg.quorum > 0 {
		return e.cfg.quorum
	}
	return e.majority()
}

func (e *Engine) hasQuorum() bool {
	if !e.quorumKnown {
		// Cached until the clock, the map or a server's reachability
		// changes: the owner asks on every write.
		e.quorumOK, e.quorumKnown = len(e.m.Members()) >= e.quorum() && e.reachesQuorum(), true
	}
	return e.quorumOK
}

// noQuorum is the error for a write or read refused for want of quorum:
// ErrNoQuorum (errs.Wrapf: errors.Is matches it here, and across the wire
// the code and the leading "no quorum" stay) with what this node sees,
// what writes need, and what the operator can do. Without it, the
// survivor of two servers that left answered every write "no quorum" and
// nothing more.
func (e *Engine) noQuorum() error {
	q := e.quorum()
	var up, down []string
	for _, v := range e.voters {
		switch {
		case v.Left:
		case e.alive[v.ID] || v.ID == e.id:
			up = append(up, v.ID)
		default:
			down = append(down, v.ID)
		}
	}
	slices.Sort(down)
	need := fmt.Sprintf("writes need %d (a majority)", q)
	if e.cfg.quorum > 0 {
		need = fmt.Sprintf("writes need %d (the fixed quorum)", q)
	}
	live := len(e.m.Members())
	switch {
	case live >= q:
		// Enough servers in the map, but not heard from within the lease.
		return errs.Wrapf(ErrNoQuorum, "server %s has heard from %d of its %d live servers within its lease (%v), and %s: it may be cut off from the others",
			e.id, e.heardServers(), live, e.lease(), need)
	case e.cfg.quorum > 0:
		return errs.Wrapf(ErrNoQuorum, "server %s sees %d live servers, and %s: start servers, or lower the fixed quorum (WithQuorum, fero serve --quorum)",
			e.id, live, need)
	}
	msg := fmt.Sprintf("server %s sees %d of the %d servers of its configuration alive, and %s", e.id, len(up), len(up)+len(down), need)
	switch {
	case len(down) > 8:
		msg += fmt.Sprintf(`; %d servers of its configuration are not (fero status lists them): remove those gone for good from the configuration with "fero forget ID..." (Resource.Forget), and bring back those only stopped or cut off`, len(down))
	case len(down) > 0:
		verb := "are"
		if len(down) == 1 {
			verb = "is"
		}
		msg += fmt.Sprintf(`; %s %s not: if gone for good, remove them from the configuration with "fero forget %s" (Resource.Forget); if only stopped or cut off, bring them back instead`,
			strings.Join(down, ", "), verb, strings.Join(down, " "))
	}
	return errs.Wrapf(ErrNoQuorum, "%s", msg)
}

// heardServers counts the live servers, this node included, that this
// node has heard from within the lease.
func (e *Engine) heardServers() int {
	n := 1
	for id := range e.alive {
		if id != e.id && e.now.Sub(e.heard[id]) <= e.lease() {
			n++
		}
	}
	return n
}

// reachesQuorum reports whether this node has heard, within the lease,
// from enough servers (itself included) to make a quorum: a node cut off
// from the majority whose map still lists servers of the other side stops
// writing once the lease runs out.
func (e *Engine) reachesQuorum() bool { return e.heardServers() >= e.quorum() }

// declaredDead reports whether id is a server this node has seen alive
// but whose failure gossip has since declared: Step gives it no promise
// and adopts none of its epochs. Such a node may be cut off on a minority side
// that still reaches this one over the data plane; it still counts this
// node among its live servers until its own detector catches up, so a
// promise from here could complete a quorum it does not have (rule 9).
// A node never seen (one joining) is answered: it is not yet in the map.
func (e *Engine) declaredDead(id string) bool {
	_, seen := e.seen[id]
	return seen && !e.alive[id]
}

// lease is how long a server's last message counts as reaching it: three
// heartbeat intervals.
func (e *Engine) lease() time.Duration { return 3 * e.cfg.probeInterval }

// Tick advances the engine's clock: timeouts, retries and lag probes
// fire from here. now must not go backwards.
func (e *Engine) Tick(now time.Time) {
	e.now = now
	e.quorumKnown = false
	e.heardFrom = ""
	if e.m == nil {
		return
	}
	for id := range e.alive {
		e.seen[id] = now
	}
	if !e.cfg.client && now.Sub(e.beat) >= e.cfg.probeInterval {
		e.beat = now
		vs := e.votersMsg()
		for _, s := range e.m.Members() {
			if s.ID != e.id {
				e.send(s.ID, &Heartbeat{})
				e.send(s.ID, vs)
			}
		}
	}
	e.maybeTakeVote()
	if !e.reachesQuorum() {
		for _, pt := range e.parts {
			if pt.active {
				// Cut off from the majority: the other side will take the
				// partition once it has declared this node dead (rule 9).
				e.stepDown(pt)
			}
		}
	}
	for _, pt := range e.parts {
		e.tickPart(pt)
	}
	e.serveAllWaiting() // slots in flight too long have expired
	// Most deadlines grow with ids (a write's is at most the write timeout
	// away), so the expired forwards are mostly the oldest; one with a
	// shorter deadline behind a longer one is answered late here, but its
	// caller's own context has answered it already.
	for id, f, ok := e.fwd.Oldest(); ok && !now.Before(f.deadline); id, f, ok = e.fwd.Oldest() {
		e.fwd.Take(id)
		e.rd.Completions = append(e.rd.Completions, Completion{Token: f.token, Partition: f.partition, Err: ErrTimeout})
	}
}

// Clock moves the engine's clock forward without a tick's work; the driver
// calls it at the start of each round, so the deadline and lease checks of
// a write never read a clock that stood still while the process was
// paused. now must not go backwards (an earlier time is ignored).
func (e *Engine) Clock(now time.Time) {
	if now.After(e.now) {
		e.now = now
		e.quorumKnown = false
		e.heardFrom = ""
	}
}

func (e *Engine) tickPart(pt *part) {
	if pt.active {
		e.probe(pt)
		e.expireWaits(pt)
		e.expireTurns(pt)
		e.endReads(pt, ErrTimeout, true)
	}
	if e.cfg.client {
		e.sendAck(pt)
	}
	if len(pt.queue) > 0 {
		kept := pt.queue[:0]
		for _, q := range pt.queue {
			if !e.expired(&q.write, q.origin) {
				kept = append(kept, q)
			} else {
				e.complete(pt, q.origin, Position{}, ErrExpired)
			}
		}
		clear(pt.queue[len(kept):])
		pt.queue = kept
	}
	switch {
	case pt.sync != nil && e.now.Sub(pt.sync.started) >= e.cfg.syncTimeout:
		if e.hasQuorum() && !e.now.Before(e.settleUntil) {
			e.startSync(pt) // start over with a new term
		} else {
			pt.sync = nil
		}
	case pt.sync == nil && !pt.active:
		e.maybeStartSync(pt)
	case pt.sync != nil && pt.sync.target == "":
		// Still gathering promises: ask the servers that have not
		// answered again (ask paces it).
		for _, m := range e.m.Members() {
			e.ask(pt, m.ID)
		}
	}
	if f := &pt.fetch; f.id != 0 && (e.now.Sub(f.sent) >= e.cfg.fetchRetry || (!f.retry.IsZero() && !e.now.Before(f.retry))) {
		if f.retry.IsZero() {
			e.catchUp.Retries++ // unanswered (a Busy reply set f.retry)
		}
		pt.fetch = fetchState{}
	}
	e.maybeFetch(pt)
	e.markDirty(pt)
}

// Propose submits a local write. It returns an error when the write is
// refused at once (invalid, no quorum, no owner, sync queue full);
// otherwise the outcome, if req.Wait asks for one, arrives as a Completion
// in a later Ready.
func (e *Engine) Propose(req Request) error {
	if e.m == nil {
		return ErrNoMap
	}
	if why := e.Forming(); why != "" {
		return errs.Wrapf(ErrNotFormed, "%s", why)
	}
	if req.Turn == TurnNone {
		if err := e.validate(req.Partition, req.Type, req.Value, req.Wait, req.K); err != nil {
			return err
		}
	} else if err := e.validateTurn(&req); err != nil {
		return err
	}
	if n := len(req.Key) + len(req.Value); n > e.cfg.maxEntry {
		return errs.Errorf(errs.InvalidArgument, "write of %d bytes (key and value) exceeds the limit of %d", n, e.cfg.maxEntry)
	}
	pt := e.parts[req.Partition]
	o := origin{token: req.Token, wants: req.Wait != WaitNone}
	// Every write has a deadline, NoWait ones too: no node commits it
	// later (rule 1).
	deadline := e.now.Add(e.cfg.writeTimeout)
	if !req.Deadline.IsZero() && req.Deadline.Before(deadline) {
		deadline = req.Deadline
	}
	if !e.now.Before(deadline) {
		return ErrExpired
	}
	w := write{typ: req.Type, key: req.Key, value: req.Value, wait: req.Wait, k: req.K, deadline: deadline.UnixNano(), turn: req.Turn, turnID: req.TurnID, writer: req.Writer, seq: req.Seq}
	owner := e.ownerOf(pt.p)
	if owner == "" {
		return ErrNoOwner
	}
	if req.Turn != TurnNone && (owner != e.id || e.cfg.client) {
		return ErrNotOwner // a turn is the owner's; its caller goes there
	}
	if owner != e.id || e.cfg.client {
		// One hop to the owner by this node's map (rule 10).
		var id uint64
		if o.wants {
			id = e.fwd.Add(forwarded{token: req.Token, partition: pt.p, to: owner, deadline: deadline, retried: req.Writer != ""})
		}
		f := take(&e.out.forwards)
		*f = Forward{Partition: uint32(pt.p), ID: id, Hops: 1, Type: w.typ, Key: w.key, Value: w.value, Wait: w.wait, K: uint8(w.k),
			Epoch: pt.accepted, Deadline: w.deadline, Trace: req.Trace}
		e.send(owner, f)
		return nil
	}
	return e.write(pt, &w, o)
}

// validateTurn checks a turn's begin or end.
func (e *Engine) validateTurn(req *Request) error {
	switch {
	case req.Turn > TurnEnd:
		return errs.Errorf(errs.InvalidArgument, "unknown turn operation %d", req.Turn)
	case req.Wait == WaitNone:
		return errs.New(errs.InvalidArgument, "a turn's begin or end waits at least for the owner's answer")
	case req.Turn == TurnBegin && req.Type != 0, req.Type == 0 && len(req.Value) != 0:
		return errs.New(errs.InvalidArgument, "a turn's begin carries no record, and an end without a record no value")
	case req.Type == 0:
		if req.Partition < 0 || req.Partition >= len(e.parts) {
			return errs.Errorf(errs.InvalidArgument, "partition %d out of range [0, %d)", req.Partition, len(e.parts))
		}
		return nil
	}
	return e.validate(req.Partition, req.Type, req.Value, req.Wait, req.K)
}

// expired reports whether w's deadline has passed for committing it. A
// write forwarded from another node is held to its deadline less the
// clock-skew margin: the sender answers its caller at the deadline by its
// own clock, and the commit must come before that (rule 1).
func (e *Engine) expired(w *write, o origin) bool {
	now := e.now.UnixNano()
	if o.node != "" {
		now += int64(e.cfg.clockSkew)
	}
	return now >= w.deadline
}

func (e *Engine) validate(p int, typ wire.RecordType, value []byte, wait Wait, k int) error {
	switch {
	case p < 0 || p >= len(e.parts):
		return errs.Errorf(errs.InvalidArgument, "partition %d out of range [0, %d)", p, len(e.parts))
	case typ < wire.RecordAdd || typ > wire.RecordBatch:
		return errs.Errorf(errs.InvalidArgument, "unknown record type %d", typ)
	case typ == wire.RecordRemove && len(value) != 0:
		return errs.New(errs.InvalidArgument, "a remove carries no value")
	case wait > WaitMajority:
		return errs.Errorf(errs.InvalidArgument, "unknown wait %d", wait)
	case wait == WaitReplicas && (k < 0 || k > ring.MaxReplicas):
		return errs.Errorf(errs.InvalidArgument, "replica count %d not in [0, %d]", k, ring.MaxReplicas)
	}
	if typ != wire.RecordRemove {
		if err := wire.ValidateValue(value); err != nil {
			return errs.Errorf(errs.InvalidArgument, "invalid value: %w", err)
		}
	}
	return nil
}

// write handles a write on the node its map names owner: commit it, queue
// it while syncing, or refuse it.
func (e *Engine) write(pt *part, w *write, o origin) error {
	if w.turn == TurnEnd {
		// Whatever else holds, the turn is passed on (turns.go).
		if !pt.active {
			return ErrTurnEnded
		}
		return e.writeTurn(pt, w, o)
	}
	if why := e.Forming(); why != "" {
		// Queued, it would wait out its deadline for a cluster that may
		// not form: refused at once, with why (issue 43).
		return errs.Wrapf(ErrNotFormed, "%s", why)
	}
	if !e.hasQuorum() {
		return e.noQuorum()
	}
	if e.expired(w, o) {
		return ErrExpired
	}
	if pt.active {
		// A forwarded write commits only in the epoch it was sent under,
		// or in the one that continued that epoch's history: a write sent
		// to an owner that was paused past its tenure is refused, not
		// committed in the owner's next epoch (rule 1).
		if w.epoch != (Epoch{}) && w.epoch != pt.accepted && w.epoch != pt.continued {
			return ErrEpochChanged
		}
		if pt.turns != nil || w.turn != TurnNone {
			return e.writeTurn(pt, w, o)
		}
		return e.commit(pt, w, o)
	}
	if len(pt.queue) >= e.cfg.queueMax {
		return ErrSyncQueueFull
	}
	// Held past this step: a copy of its own, not a message's bytes (see
	// Decoder.DecodeShared).
	q := queued{write: *w, origin: o}
	q.key, q.value = strings.Clone(w.key), bytes.Clone(w.value)
	pt.queue = append(pt.queue, q)
	if pt.sync == nil {
		e.maybeStartSync(pt)
	}
	return nil
}

// Step hands the engine a message from node from, sent in cluster c (the
// sender's Ready.Cluster). It returns an error for a malformed message
// (which the driver may count or log); nothing changes then. A message
// from a server of another cluster is not stepped (rule 9, cluster
// identity).
func (e *Engine) Step(from string, c ClusterID, msg Message) error {
	if e.m == nil {
		return ErrNoMap
	}
	if msg == nil {
		return errs.New(errs.InvalidArgument, "nil message")
	}
	if int64(msg.Part()) >= int64(len(e.parts)) {
		return errs.Errorf(errs.InvalidArgument, "partition %d out of range [0, %d)", msg.Part(), len(e.parts))
	}
	if !e.admit(from, c, msg) {
		return nil // a server of another cluster (rule 9, cluster identity)
	}
	if from != e.heardFrom { // a batch's messages all come from one node: look once
		e.heardFrom = from
		if e.alive[from] {
			if h, ok := e.heard[from]; !ok || h != e.now {
				if !ok || e.now.Sub(h) > e.lease() {
					e.quorumKnown = false // a server this node had not reached
				}
				e.heard[from] = e.now
			}
		}
	}
	switch m := msg.(type) {
	case *Heartbeat:
		return nil
	case *Voters:
		if !e.cfg.client {
			e.mergeVoters(from, m.List)
		}
		return nil
	case *Recover:
		if !e.cfg.client {
			e.answerRecover(from)
		}
		return nil
	case *RecoverReply:
		return e.stepRecoverReply(from, m)
	case *PosRequest, *EpochStart, *Commit, *CommitAck, *Fenced, *ReadProbe, *ReadAck:
		if e.declaredDead(from) {
			return nil // no promise to it, none of its epochs adopted (rule 9)
		}
	}
	pt := e.parts[msg.Part()]
	var err error
	switch m := msg.(type) {
	case *Commit:
		err = e.stepCommit(pt, from, m)
	case *CommitAck:
		e.stepAck(pt, from, m)
	case *EpochStart:
		e.stepEpochStart(pt, from, m)
	case *Fenced:
		if pt.sync != nil && m.Epoch == pt.sync.epoch {
			// The epoch this node proposed was started before, by its
			// previous life: propose a higher one.
			pt.sync = nil
		}
		e.adopt(pt, m.Epoch)
		e.maybeStartSync(pt)
	case *PosRequest:
		e.stepPosRequest(pt, from, m)
	case *PosReply:
		e.stepPosReply(pt, from, m)
	case *Fetch:
		err = e.serveFetch(pt, from, m)
		// The fetch may have ended a snapshot in flight to its asker.
		e.serveWaiting(from)
	case *FetchReply:
		err = e.stepFetchReply(pt, from, m)
	case *SnapshotReply:
		e.stepSnapshotReply(pt, from, m)
	case *Forward:
		err = e.stepForward(pt, from, m)
	case *ForwardReply:
		e.stepForwardReply(from, m)
	case *ReadProbe:
		e.stepReadProbe(pt, from, m)
	case *ReadAck:
		e.stepReadAck(pt, from, m)
	default:
		return errs.Errorf(errs.InvalidArgument, "unknown message %T", msg)
	}
	e.markDirty(pt)
	return err
}

// StepLimited steps a message from an attached client: a client node
// that proved a client token, not the cluster secret (docs/engine.md,
// "Attached clients"). It may send what a client sends for itself: its
// writes (Forward), fetches of a partition's log (Fetch), and acks of
// the epoch this node has accepted (CommitAck). Anything else, and an
// ack naming another epoch (an ack of a newer one would fence this
// node's), is refused and changes nothing. It carries no cluster name.
func (e *Engine) StepLimited(from string, msg Message) error {
	switch m := msg.(type) {
	case *Forward, *Fetch:
	case *CommitAck:
		if e.m != nil && int64(m.Partition) < int64(len(e.parts)) && m.Position.Epoch != e.parts[m.Partition].accepted {
			return errs.Errorf(errs.PermissionDenied, "an attached client's ack of epoch %v, not the accepted one", m.Position.Epoch)
		}
	default:
		return errs.Errorf(errs.PermissionDenied, "an attached client may not send %T", msg)
	}
	return e.Step(from, ClusterID{}, msg)
}

func (e *Engine) stepForward(pt *part, from string, m *Forward) error {
	if err := e.validate(pt.p, m.Type, m.Value, m.Wait, int(m.K)); err != nil {
		return err
	}
	if m.Hops < 1 {
		return errs.New(errs.InvalidArgument, "forward with hop count 0")
	}
	o := origin{node: from, id: m.ID, wants: m.ID != 0}
	owner := e.ownerOf(pt.p)
	if owner != e.id || e.cfg.client {
		// Never a second hop: the caller retries with fresher routing.
		e.complete(pt, o, Position{}, ErrNotOwner)
		return nil
	}
	w := write{typ: m.Type, key: m.Key, value: m.Value, wait: m.Wait, k: int(m.K), epoch: m.Epoch, deadline: m.Deadline}
	if err := e.write(pt, &w, o); err != nil {
		e.complete(pt, o, Position{}, err)
	}
	return nil
}

func (e *Engine) stepForwardReply(from string, m *ForwardReply) {
	f, ok := e.fwd.Get(m.ID)
	if !ok || f.to != from {
		return // timed out already, or not ours
	}
	e.fwd.Take(m.ID)
	c := Completion{Token: f.token, Partition: f.partition, Position: m.Position}
	if m.Code != 0 {
		c.Position = Position{}
		c.Err = errs.FromWire(m.Code, m.Msg, m.Details)
		c.Owner = m.Owner
	}
	e.rd.Completions = append(e.rd.Completions, c)
}

// complete ends a write for whoever waits for it.
func (e *Engine) complete(pt *part, o origin, pos Position, err error) {
	if !o.wants {
		return
	}
	var owner string
	if err != nil {
		pos = Position{}
		owner = e.ownerOf(pt.p)
	}
	if o.node == "" {
		e.rd.Completions = append(e.rd.Completions, Completion{Token: o.token, Partition: pt.p, Position: pos, Err: err, Owner: owner})
		return
	}
	r := take(&e.out.replies)
	*r = ForwardReply{Partition: uint32(pt.p), ID: o.id, Position: pos, Owner: owner}
	if err != nil {
		r.Code, r.Msg, r.Details = uint32(errs.CodeOf(err)), errs.MessageOf(err), errs.DetailsOf(err)
	}
	e.send(o.node, r)
}

func (e *Engine) send(to string, m Message) {
	e.rd.Messages = append(e.rd.Messages, Envelope{To: to, Msg: m})
}

func (e *Engine) event(ev Event) { e.rd.Events = append(e.rd.Events, ev) }

func (e *Engine) markDirty(pt *part) {
	if !pt.dirty {
		pt.dirty = true
		e.dirty = append(e.dirty, pt.p)
	}
}

// Pending returns how many messages, events and completions the engine
// holds for the next Ready; a driver that steps many inputs per round
// bounds the round with it.
func (e *Engine) Pending() int {
	return len(e.rd.Messages) + len(e.rd.Events) + len(e.rd.Completions)
}

// HasReady reports whether Ready would return anything.
func (e *Engine) HasReady() bool {
	if len(e.rd.Messages) > 0 || len(e.rd.Events) > 0 || len(e.rd.Completions) > 0 || e.durablePending() {
		return true
	}
	for _, p := range e.dirty {
		if pt := e.parts[p]; (pt.active && (pt.sent < pt.log.last() || pt.readSeq > pt.readSent)) || (pt.ackDirty && !e.cfg.client && e.ackTarget(pt) != "") {
			return true
		}
	}
	return false
}

// Ready returns what the engine has for the driver since the last Advance:
// it batches the entries each owned partition committed into one Commit
// per partition (sent to every copy) and each copy's progress into one
// CommitAck. The driver sends the messages, publishes the events and
// completions, then calls Advance.
func (e *Engine) Ready() Ready {
	for _, p := range e.dirty {
		pt := e.parts[p]
		pt.dirty = false
		for pt.active && pt.sent < pt.log.last() {
			from := max(pt.sent, pt.log.base) + 1
			to := pt.log.fit(from, pt.log.last(), e.cfg.maxMessage)
			c := take(&e.out.commits)
			*c = Commit{Partition: uint32(p), Entries: pt.log.appendRange(e.out.entrySlice(int(to - from + 1))[:0], from, to)}
			for _, id := range e.copies {
				e.send(id, c)
			}
			pt.sent = to
		}
		e.sendReadProbe(pt)
		if !e.cfg.client {
			e.sendAck(pt)
		}
	}
	e.dirty = e.dirty[:0]
	e.durableReady()
	if !e.cfg.client {
		e.rd.Cluster = e.cluster
	}
	return e.rd
}

// sendAck reports the copy's position to its owner, if it moved since the
// last report. A server reports at every Ready: writes waiting for k
// replicas count its acks. A client's acks count for no write, only for
// the owner's lag detection (probe), so a client reports once per tick:
// its acks then cost the owner nothing per round, and an unloaded client
// sends nothing between a reply and its next request.
func (e *Engine) sendAck(pt *part) {
	if !pt.ackDirty {
		return
	}
	pt.ackDirty = false
	if to := e.ackTarget(pt); to != "" {
		a := take(&e.out.acks)
		*a = CommitAck{Partition: uint32(pt.p), Position: pt.position(), Inc: e.inc}
		e.send(to, a)
	}
}

// Advance releases the last Ready's slices and messages for reuse: a
// driver keeps no message of a Ready past its Advance.
func (e *Engine) Advance() {
	clear(e.rd.Messages)
	clear(e.rd.Events)
	clear(e.rd.Completions)
	e.rd.Messages = e.rd.Messages[:0]
	e.rd.Events = e.rd.Events[:0]
	e.rd.Completions = e.rd.Completions[:0]
	clear(e.rd.Durable)
	e.rd.Durable = e.rd.Durable[:0]
	e.rd.Config = nil
	e.out.reset(engineKeep)
}

// ackTarget is the node a copy reports its position to: the owner of the
// epoch it accepted, once that epoch has started.
func (e *Engine) ackTarget(pt *part) string {
	if pt.active || !pt.started || pt.accepted.Owner == e.id || !e.alive[pt.accepted.Owner] {
		return ""
	}
	return pt.accepted.Owner
}

// inMap reports whether server id is a member of m (false for a nil m).
func inMap(m *ring.Map, id string) bool {
	return m != nil && slices.ContainsFunc(m.Members(), func(x ring.Member) bool { return x.ID == id })
}

// SetJoining changes [WithJoining]; the driver sets it once it knows
// whether the node was given seeds.
func (e *Engine) SetJoining(joining bool) { e.cfg.joining = joining }

// SetExpect changes [WithExpect]; the driver sets it with SetJoining.
func (e *Engine) SetExpect(n int) {
	e.cfg.expect = max(n, 0)
	if n > 1 {
		e.cfg.joining = true // never founds a cluster alone
	}
}

// ErrNotFormed: the node has not heard a formed cluster's configuration
// and cannot form one yet (too few servers, or seeds not seen); it takes
// no writes until it can. Definite: nothing was written.
var ErrNotFormed = errs.New(errs.Unavailable, "cluster not formed")

// Forming reports, for a node that has heard no formed cluster's
// configuration, why it cannot form one yet: the servers its map holds
// against what it needs (WithExpect, or every seed). Empty when it has
// heard the configuration, is not joining, or can form as soon as the
// servers of its map have exchanged their lists.
func (e *Engine) Forming() string {
	if !e.AwaitingConfig() || e.m == nil {
		return ""
	}
	n := len(e.m.Members())
	switch {
	case e.cfg.expect > 0 && n < e.cfg.expect:
		return fmt.Sprintf("this server sees %d of the %d servers a new cluster needs (--expect): %s",
			n, e.cfg.expect, memberIDs(e.m))
	case e.cfg.expect == 0 && len(e.unseenSeeds) > 0:
		return "a new cluster forms once every seed is seen; seeds not seen: " + strings.Join(e.unseenSeeds, ", ")
	case e.cfg.expect == 0 && n < 2:
		return "this server sees no other server, and a server given seeds founds no cluster alone"
	}
	return ""
}

func memberIDs(m *ring.Map) string {
	ids := make([]string, 0, len(m.Members()))
	for _, s := range m.Members() {
		ids = append(ids, s.ID)
	}
	return strings.Join(ids, ", ")
}

// SetUnseenSeeds tells the engine which of the seeds the node was given no
// server of its current map answers at; the driver sets it with each map.
// A node given seeds forms a new cluster only once it has seen every one
// of them (rule 9).
func (e *Engine) SetUnseenSeeds(seeds []string) { e.unseenSeeds = seeds }

// AwaitingConfig reports whether this node, given seeds, has not yet heard
// the configuration: it starts no sync and promises nothing (rule 9).
func (e *Engine) AwaitingConfig() bool { return !e.cfg.client && e.cfg.joining && !e.heardConfig }

// SetSettleDelay changes the settle delay (see [WithSettleDelay]); the
// driver sets it from gossip's detection time for the cluster's size.
func (e *Engine) SetSettleDelay(d time.Duration) { e.cfg.settle = max(d, 0) }

// Partitions returns the partition count (0 before the first SetMap).
func (e *Engine) Partitions() int { return len(e.parts) }

// Status describes partition p.
func (e *Engine) Status(p int) Status {
	pt := e.parts[p]
	s := Status{
		Partition: p,
		Accepted:  pt.accepted,
		Position:  pt.position(),
		Oldest:    pt.log.base + 1,
		Gap:       len(pt.gap),
		Queued:    len(pt.queue),
		Waiting:   len(pt.waits),
	}
	switch {
	case e.cfg.client:
		s.Role = RoleClient
	case pt.active:
		s.Role = RoleOwner
		s.Lag, s.LagSeconds = e.lag(pt)
	case e.ownerOf(p) == e.id:
		s.Role = RoleSyncing
		s.Why = e.syncWhy(pt)
	case slices.Contains(pt.group, e.id):
		s.Role = RoleReplica
	}
	return s
}

// lag returns, for a partition this node owns, how far its slowest live
// copy's acks trail the log's last offset, and for how long that copy's
// acks have not moved while it trails. A copy that has acked nothing in
// this epoch counts from the epoch's start.
func (e *Engine) lag(pt *part) (offsets uint64, seconds float64) {
	last := pt.log.last()
	for _, id := range e.copies {
		pr := pt.peers[id]
		acked, at := pt.logStart, time.Time{}
		if pr != nil && pr.pos.Epoch == pt.accepted {
			acked, at = pr.pos.Offset, pr.at
		}
		if acked >= last {
			continue
		}
		if d := last - acked; d > offsets {
			offsets, seconds = d, 0
			if !at.IsZero() {
				seconds = e.now.Sub(at).Seconds()
			}
		}
	}
	return offsets, seconds
}

// Map returns the map the engine routes by (nil before the first SetMap).
func (e *Engine) Map() *ring.Map { return e.m }

// Warmer is a State that can load ahead, changing nothing, the memory that
// applying entries will touch (see [Engine.Warm]).
type Warmer interface {
	// Warm loads what changes to keys[i] in partitions parts[i] will touch
	// first, and returns a value computed from what it loaded, which the
	// engine keeps so that the loads cannot be optimized away. The engine
	// calls it from its driver, as it calls Apply.
	Warm(parts []int, keys []string) uint64
}

// WarmWindow is about how many entries to warm at a time: enough for the
// processor to overlap their loads, few enough that what the first one
// loaded is still in cache when it is stepped.
const WarmWindow = 128

// Warm loads, changing nothing, the memory that stepping the first
// messages of msgs will touch: each partition's log tail, and the state's
// memory for each entry's key. It stops once it has covered window
// entries, and returns how many messages it covered (at least one, unless
// msgs is empty); the caller steps those, then warms the next.
//
// It pays because a busy node's caches go cold between two writes to one
// partition, and stepping an entry makes its loads one after another (the
// partition, then its log, then the log's tail; the key's slot, then its
// cell), waiting out each miss in turn. Warm makes the first load of every
// entry, then the second, and so on, so the misses of many entries overlap.
func (e *Engine) Warm(msgs []Message, window int) int {
	entries, n := 0, 0
	for _, m := range msgs {
		if n > 0 && entries >= window {
			break
		}
		n++
		p := int(m.Part())
		if p >= len(e.parts) {
			continue
		}
		switch m := m.(type) {
		case *Commit:
			for i := range m.Entries {
				e.warmParts = append(e.warmParts, p)
				e.warmKeys = append(e.warmKeys, m.Entries[i].Key)
			}
			entries += len(m.Entries)
		case *Forward:
			e.warmParts = append(e.warmParts, p)
			e.warmKeys = append(e.warmKeys, m.Key)
			entries++
		default:
			entries++
		}
	}
	e.warm()
	return n
}

// WarmRequest queues a write about to be proposed for the next
// WarmRequests; it queues nothing unless this node commits the write.
func (e *Engine) WarmRequest(p int, key string) {
	if p < 0 || p >= len(e.parts) || e.cfg.client || e.ownerOf(p) != e.id {
		return
	}
	e.warmParts = append(e.warmParts, p)
	e.warmKeys = append(e.warmKeys, key)
}

// WarmRequests warms the writes queued by WarmRequest, as Warm does
// messages.
func (e *Engine) WarmRequests() { e.warm() }

// warm loads what the queued entries will touch, and empties the queue.
func (e *Engine) warm() {
	ps := e.warmParts
	if len(ps) == 0 {
		return
	}
	defer func() {
		clear(e.warmKeys) // the keys may alias a received batch
		e.warmParts, e.warmKeys = ps[:0], e.warmKeys[:0]
	}()
	var sink uint64
	// Each pass's loads are independent of each other; each needs the
	// pass before it.
	for _, p := range ps {
		sink += uint64(e.parts[p].log.n)
	}
	for _, p := range ps {
		sink += e.parts[p].log.warmSlot()
	}
	for _, p := range ps {
		sink += e.parts[p].log.warmTail()
	}
	if w, ok := e.st.(Warmer); ok {
		sink += w.Warm(ps, e.warmKeys)
	}
	e.warmed += sink
}
