package partition

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// syncState is a would-be owner's sync (rule 4): it has proposed epoch,
// collects positions (each reply a promise to refuse older epochs), then
// fetches from the best one (target) before starting the epoch.
type syncState struct {
	epoch     Epoch
	started   time.Time
	replies   []reply
	asked     map[string]time.Time // when each server was last asked
	writers   []string             // previous writers; each is waited for while alive
	target    string
	targetPos Position
}

type reply struct {
	from string
	pos  Position
	inc  uint64 // the incarnation that answered
}

func (s *syncState) has(self, id string) bool {
	return id == self || slices.ContainsFunc(s.replies, func(r reply) bool { return r.from == id })
}

// maybeStartSync starts a sync if the ring names this node owner and it may
// take the partition: it has quorum (rule 9: a minority starts no epoch, so
// it cannot fence the majority when the split heals) and is not backing
// off from a rival's epoch.
//
// A node given seeds starts none before a peer has told it the
// configuration: its map alone may hold only some of the servers, and a
// majority of those is no majority of the cluster. The fault suite lost a
// Majority write when a server restarted at a heal, saw one peer, and
// synced with that peer's promise alone (seed 2220).
func (e *Engine) maybeStartSync(pt *part) {
	if e.cfg.client || pt.active || pt.sync != nil || e.ownerOf(pt.p) != e.id ||
		(e.cfg.joining && !e.heardConfig) ||
		!e.hasQuorum() || e.now.Before(pt.backoff) || e.now.Before(e.settleUntil) {
		return
	}
	e.startSync(pt)
}

// startSync proposes a new epoch, one term above any this node has heard
// of, and asks every live server for its position.
func (e *Engine) startSync(pt *part) {
	var writers []string
	if pt.sync != nil {
		writers = pt.sync.writers
	}
	for _, w := range []string{pt.prevOwner, pt.accepted.Owner, pt.logEpoch.Owner} {
		if w != "" && w != e.id && !slices.Contains(writers, w) {
			writers = append(writers, w)
		}
	}
	// Above every term of a cluster this node gave up, too (rule 9).
	term := max(pt.accepted.Term, pt.logEpoch.Term, e.termFloor) + 1
	if e.heardConfig || !e.cluster.IsZero() {
		// A node keeps nothing across a restart, so it may not remember
		// the terms its previous life used, and an epoch it started then
		// may still sit on copies with its entries. Its incarnation (its
		// start time, larger than any earlier life's) is a floor above all
		// of them, so no two lives of one node start the same epoch. Not
		// for a node of a cluster still forming that has not heard from a
		// peer: it has no name yet, and its epochs must not outrank the
		// formed cluster's should it meet one. A server that founds a
		// cluster alone names it first, and epochs of another cluster
		// are refused (rule 9, cluster identity).
		term = max(term, e.inc)
	}
	ep := Epoch{Term: term, Owner: e.id}
	pt.accepted, pt.started, pt.knownLast = ep, false, 0
	e.touch(pt)
	clear(pt.gap)
	// The sync fetches from its target as soon as it has one: an empty
	// reply from the previous owner does not hold it back.
	pt.fetch, pt.fetchIdle = fetchState{}, time.Time{}
	s := &syncState{
		epoch:   ep,
		started: e.now,
		asked:   map[string]time.Time{},
		writers: writers,
	}
	pt.sync = s
	// Every live server: the sync needs promises from a majority of the
	// configuration, and the first to answer may be any of them.
	for _, m := range e.m.Members() {
		e.ask(pt, m.ID)
	}
	for _, w := range s.writers {
		e.ask(pt, w)
	}
	e.checkSync(pt)
}

// ask sends server id the sync's position request, unless it has answered
// or was asked less than a fetch retry ago. A server that had declared
// this node dead ignores the request until its map shows this node alive
// again (rule 9): asked once, a restarted owner's sync waited out its
// whole timeout for those servers, about 2 of the 3 s it took to take its
// partitions back (tickPart asks again).
func (e *Engine) ask(pt *part, id string) {
	s := pt.sync
	if id == e.id || !e.alive[id] || s.has(e.id, id) {
		return
	}
	if at, ok := s.asked[id]; ok && e.now.Sub(at) < e.cfg.fetchRetry {
		return
	}
	s.asked[id] = e.now
	e.send(id, &PosRequest{Partition: uint32(pt.p), Epoch: s.epoch})
}

func (e *Engine) stepPosReply(pt *part, from string, m *PosReply) {
	s := pt.sync
	if s == nil || m.Epoch != s.epoch || s.target != "" || s.has(e.id, from) {
		return
	}
	s.replies = append(s.replies, reply{from: from, pos: m.Position, inc: m.Inc})
	// Servers this node never saw (it joined while they were down) count
	// toward the majority too (rule 9).
	e.mergeVoters(from, m.Voters)
	// A writer this node did not know of (the previous owner in the
	// cluster's history, not just in this node's maps) is waited for too.
	if w := m.Position.Epoch.Owner; w != "" && w != e.id && !slices.Contains(s.writers, w) {
		s.writers = append(s.writers, w)
		e.ask(pt, w)
	}
	e.checkSync(pt)
}

// syncReady reports whether the positions collected satisfy rule 4:
// promises from a quorum of the configuration's servers (replies, not map
// entries: a node cut off from the majority may still count enough
// servers in its map before failure detection removes them, but it cannot
// reach them), and every previous writer that is alive. A Majority write
// was acked by a majority of the configuration, which shares a server
// with any quorum of promises, so the best position collected includes it
// (rule 5).
func (e *Engine) syncReady(pt *part) bool {
	s := pt.sync
	n := 0
	if e.isVoter(e.id) {
		n++
	}
	for _, r := range s.replies {
		if e.votes(r.from, r.inc) {
			n++
		}
	}
	if n < e.promiseQuorum() {
		return false
	}
	for _, w := range s.writers {
		if e.alive[w] && !s.has(e.id, w) {
			return false
		}
	}
	return true
}

// checkSync moves a sync on: pick the best position once enough have
// answered, fetch up to it, then start the epoch.
func (e *Engine) checkSync(pt *part) {
	s := pt.sync
	if s == nil {
		return
	}
	if s.target == "" {
		if !e.syncReady(pt) {
			return
		}
		best, pos := e.id, pt.position()
		for _, r := range s.replies {
			if c := r.pos.Compare(pos); c > 0 || (c == 0 && best != e.id && r.from < best) {
				best, pos = r.from, r.pos
			}
		}
		if best == e.id {
			e.startEpoch(pt)
			return
		}
		s.target, s.targetPos = best, pos
	}
	if pt.position().Compare(s.targetPos) >= 0 {
		e.startEpoch(pt)
		return
	}
	e.maybeFetch(pt)
}

// startEpoch makes the synced node the owner: its log up to now is the
// partition's history (rule 6 for every copy), and queued writes commit.
func (e *Engine) startEpoch(pt *part) {
	s := pt.sync
	pt.sync = nil
	start := pt.log.last()
	pt.continued = pt.logEpoch
	pt.logEpoch, pt.logStart, pt.started = s.epoch, start, true
	e.touch(pt)
	pt.startPrev = pt.log.lastEpoch()
	pt.active = true
	pt.sent = start
	pt.knownLast = start
	clear(pt.gap)
	pt.fetch = fetchState{}
	pt.peers = make(map[string]*peer, len(e.copies))
	pt.readAcks = nil
	es := &EpochStart{Partition: uint32(pt.p), Epoch: s.epoch, Start: start, PrevEpoch: pt.startPrev, Last: start}
	for _, c := range e.copies {
		pt.peers[c] = &peer{probed: e.now}
		e.send(c, es)
	}
	e.event(Event{Kind: EventOwnershipGained, Partition: pt.p, Epoch: s.epoch, Took: e.now.Sub(s.started)})
	q := pt.queue
	pt.queue = nil
	for _, w := range q {
		if err := e.write(pt, &w.write, w.origin); err != nil {
			e.complete(pt, w.origin, Position{}, err)
		}
	}
}

// commit assigns the next offset to a write and applies it (rule 1: only
// the epoch's owner gets here).
func (e *Engine) commit(pt *part, w *write, o origin) error {
	if w.typ == wire.RecordBatch {
		if done, err := e.dedup(pt, w, o); done {
			return err
		}
	}
	k, voters := 0, false
	switch w.wait {
	case WaitReplicas:
		k = w.k
		if k > len(pt.group)-1 {
			return ErrReplicas
		}
	case WaitMajority:
		// A majority of the configuration, this node included: the same
		// servers whose promises a sync needs, so the two always meet
		// (rule 5), whichever servers the ring makes replicas.
		k, voters = e.majority()-1, true
		if !e.isVoter(e.id) {
			k++
		}
	}
	ent := Entry{Epoch: pt.accepted, Offset: pt.log.last() + 1, Type: w.typ, Key: w.key, Value: w.value}
	ca, oneStep := e.st.(CheckApplier)
	var err error
	if oneStep {
		err = ca.CheckApply(pt.p, ent)
	} else {
		err = e.st.Check(pt.p, ent)
	}
	if err != nil {
		if errs.CodeOf(err) == errs.Unknown {
			err = errs.Errorf(errs.InvalidArgument, "%w", err)
		}
		return err
	}
	// From here on, the log's copy: the event outlives the write's value,
	// which may sit in a receive buffer.
	ent = pt.log.append(ent, e.cfg.historyMax, e.cfg.historyBytes)
	e.touch(pt)
	if !oneStep {
		e.st.Apply(pt.p, ent)
	}
	e.event(Event{Kind: EventCommitted, Partition: pt.p, Entry: ent})
	e.markDirty(pt)
	pos := ent.Position()
	switch {
	case !o.wants:
	case w.wait == WaitAck || k == 0:
		e.complete(pt, o, pos, nil)
	default:
		pt.waits = append(pt.waits, wait{pos: pos, k: k, voters: voters, origin: o, deadline: time.Unix(0, w.deadline)})
	}
	return nil
}

func (e *Engine) stepAck(pt *part, from string, m *CommitAck) {
	if pt.accepted.Less(m.Position.Epoch) {
		e.adopt(pt, m.Position.Epoch)
		return
	}
	if !pt.active {
		return
	}
	pr := pt.peers[from]
	if pr == nil {
		pr = &peer{}
		pt.peers[from] = pr
	}
	if pr.inc != m.Inc {
		// A restarted copy: what its previous life acked is not its word.
		pr.pos, pr.inc, pr.at = m.Position, m.Inc, e.now
	} else if m.Position.Compare(pr.pos) > 0 {
		pr.pos, pr.at = m.Position, e.now
	}
	e.checkWaits(pt)
}

// checkWaits completes writes that enough replicas of the current group
// have applied in this epoch.
func (e *Engine) checkWaits(pt *part) {
	if len(pt.waits) == 0 {
		return
	}
	// The voters' offsets in this epoch, highest first, found once per
	// call (an ack may complete many writes): a Majority write of offset o
	// needing k acks is done once the k-th highest is at least o.
	offs := e.voterOffs[:0]
	if slices.ContainsFunc(pt.waits, func(w wait) bool { return w.voters }) {
		for id, pr := range pt.peers {
			if pr.pos.Epoch == pt.accepted && e.votes(id, pr.inc) {
				offs = append(offs, pr.pos.Offset)
			}
		}
		slices.SortFunc(offs, func(a, b uint64) int { return cmp.Compare(b, a) })
	}
	e.voterOffs = offs
	kept := pt.waits[:0]
	for _, w := range pt.waits {
		n := 0
		if w.voters {
			if w.k == 0 || (w.k <= len(offs) && offs[w.k-1] >= w.pos.Offset) {
				n = w.k
			}
		} else {
			for _, r := range pt.group[1:] {
				if pr := pt.peers[r]; pr != nil && pr.pos.Epoch == pt.accepted && pr.pos.Offset >= w.pos.Offset {
					n++
				}
			}
		}
		if n >= w.k {
			if w.dup {
				e.completeDuplicate(pt, w.origin, w.first, w.reply)
			} else {
				e.complete(pt, w.origin, w.pos, nil)
			}
		} else {
			kept = append(kept, w)
		}
	}
	clear(pt.waits[len(kept):])
	pt.waits = kept
}

func (e *Engine) expireWaits(pt *part) {
	kept := pt.waits[:0]
	for _, w := range pt.waits {
		if e.now.Before(w.deadline) {
			kept = append(kept, w)
		} else {
			e.complete(pt, w.origin, Position{}, ErrTimeout)
		}
	}
	clear(pt.waits[len(kept):])
	pt.waits = kept
}

// probe re-sends EpochStart to copies whose acked position trails and has
// not moved for a probe interval (rule 7: the owner detects lag itself).
// A copy whose server restarted since it last acked (the map shows a new
// incarnation) holds nothing of what it acked: it trails. Without that, a
// restarted copy that missed the announcement on the map change waited
// for good, the owner taking it for caught up (fault suite seed 5328).
//
// A caught-up copy gets the EpochStart again once per lease: one that has
// accepted a newer epoch answers Fenced. An owner paused past failure
// detection resumed with its lease refreshed by messages that arrived
// during the pause; with nothing to write, nothing else told it that the
// others had taken its partitions over meanwhile, and it stayed owner in
// its old epoch while they held the newer one (fault suite seed 11981).
func (e *Engine) probe(pt *part) {
	last := pt.log.last()
	var es *EpochStart
	for _, c := range e.copies {
		pr := pt.peers[c]
		if pr == nil { // a copy that joined since the epoch started
			pr = &peer{}
			pt.peers[c] = pr
		}
		if inc, ok := e.liveInc[c]; ok && pr.inc != 0 && pr.inc != inc {
			pr.pos, pr.inc, pr.checked = Position{}, inc, 0
		}
		caughtUp := pr.pos.Epoch == pt.accepted && pr.pos.Offset >= last
		if caughtUp {
			if e.now.Sub(pr.probed) < e.lease() {
				continue
			}
		} else if e.now.Sub(pr.probed) < e.cfg.probeInterval {
			continue
		}
		moved := !caughtUp && pr.pos.Epoch == pt.accepted && pr.pos.Offset > pr.checked && !pr.probed.IsZero()
		pr.probed, pr.checked = e.now, pr.pos.Offset
		if moved {
			continue // behind but catching up
		}
		if es == nil {
			es = &EpochStart{Partition: uint32(pt.p), Epoch: pt.accepted, Start: pt.logStart, PrevEpoch: pt.startPrev, Last: last}
		}
		e.send(c, es)
	}
}

// stepDown ends this node's epoch as writer: waiting writes fail, because
// whether they survive is no longer this node's to say. They were
// committed here, so the error is indefinite whatever the reason (no
// quorum, the ring moved, a rival's epoch): rule 2.
func (e *Engine) stepDown(pt *part) {
	pt.active = false
	e.endTurns(pt, ErrNotOwner)
	e.endReads(pt, ErrOwnershipLost, false)
	for _, w := range pt.waits {
		e.complete(pt, w.origin, Position{}, ErrOwnershipLost)
	}
	pt.waits = nil
	pt.peers = nil
	e.event(Event{Kind: EventOwnershipLost, Partition: pt.p, Epoch: pt.accepted})
}

func (e *Engine) failQueue(pt *part, err error) {
	for _, q := range pt.queue {
		e.complete(pt, q.origin, Position{}, err)
	}
	pt.queue = nil
}

// syncWhy describes what a partition this node owns by its map waits for
// before it becomes its owner (Status.Why).
func (e *Engine) syncWhy(pt *part) string {
	s := pt.sync
	if s == nil {
		switch {
		case e.cfg.joining && !e.heardConfig && len(e.unseenSeeds) > 0:
			return "no configuration heard from a peer yet; seeds not seen: " + strings.Join(e.unseenSeeds, ", ")
		case e.cfg.joining && !e.heardConfig:
			return "no configuration heard from a peer yet"
		case !e.hasQuorum():
			return "no quorum"
		case e.now.Before(pt.backoff):
			return fmt.Sprintf("backing off from %v for %v", pt.accepted, pt.backoff.Sub(e.now).Round(time.Millisecond))
		case e.now.Before(e.settleUntil):
			return fmt.Sprintf("settling for %v after a server left", e.settleUntil.Sub(e.now).Round(time.Millisecond))
		}
		return "starting a sync"
	}
	n, voters := 0, []string{}
	if e.isVoter(e.id) {
		n++
	}
	for _, r := range s.replies {
		if e.votes(r.from, r.inc) {
			n++
			voters = append(voters, r.from)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sync of %v for %v: %d of %d promises (%s)", s.epoch, e.now.Sub(s.started).Round(time.Millisecond), n, e.promiseQuorum(), strings.Join(voters, ","))
	var missing []string
	for _, w := range s.writers {
		if e.alive[w] && !s.has(e.id, w) {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(&b, "; waiting for writers %s", strings.Join(missing, ","))
	}
	if s.target != "" {
		fmt.Fprintf(&b, "; fetching up to %v from %s, at %v", s.targetPos, s.target, pt.position())
	}
	return b.String()
}
