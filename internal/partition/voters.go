package partition

import (
	"slices"
	"strings"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/ring"
)

// Voter is one server of the cluster's configuration: the servers whose
// majority makes a quorum (rule 9) and acknowledges a Majority write (rule
// 5). A server joins the configuration the first time any node sees it in
// a map, and leaves it only by an operator's Forget. Nothing ages out, so
// a minority cut off for any length of time still counts the servers it
// cannot reach, and never decides that it is the whole cluster.
//
// A graceful leave does not remove a server either. One removal is always
// safe: a majority of the configuration less one server still meets every
// majority of the configuration a write was acked under. Two removals in a
// row are not, unless every write acked before the first has since been
// acked by a majority of the smaller configuration: the fault suite lost a
// Majority write when two of five servers left within three seconds while
// a third holding it was cut off. Until configuration changes carry that
// proof (raft's joint consensus, per partition), removal is the operator's
// explicit act.
//
// Inc is the server's incarnation (its process's start stamp): a newer
// incarnation replaces an older one's entry, so a forgotten server that
// comes back is a voter again; within one incarnation, Left wins.
type Voter struct {
	ID   string `msgpack:"i"`
	Inc  uint64 `msgpack:"n"`
	Left bool   `msgpack:"l"`
	// Guess marks an entry a node took from its own map while the cluster
	// formed, before the server announced itself: it counts, but never
	// replaces what a node knows, and the server's announcement replaces it.
	Guess bool `msgpack:"g,omitempty"`
}

// newer reports whether v should replace cur in the configuration.
func (v Voter) newer(cur Voter) bool {
	return v.Inc > cur.Inc || (v.Inc == cur.Inc && v.Left && !cur.Left)
}

// ErrForgetLive: Forget named a server this node sees alive; only a server
// that is gone for good may be removed by hand.
var ErrForgetLive = errs.New(errs.FailedPrecondition, "cannot forget a live server")

// mergeVoter adds v to the configuration if it is news, and reports whether
// it was.
func (e *Engine) mergeVoter(v Voter) bool {
	if v.ID == "" {
		return false
	}
	cur, ok := e.voters[v.ID]
	if ok && !v.newer(cur) {
		return false
	}
	e.voters[v.ID] = v
	e.votersChanged()
	e.quorumKnown = false
	return true
}

// mapVoter notes server s of a map of n servers. Before this node has
// heard the configuration from any peer (a cluster forming), the servers
// of its map, itself included, are taken as voters, as guesses: they
// count, but never replace what a peer knows, and each server confirms its
// own entry once it has caught up (maybeTakeVote). Once it has heard the
// configuration, a server new to it is a learner until it has caught up
// and announces itself: adding servers from maps then would let two empty
// newcomers, or two restarted servers that each saw the other in its map,
// make a majority without the data (raft's learners, for the same
// reason). A newer incarnation of a voter never takes the voter's place
// from a map: it restarted with nothing. A node given seeds (WithJoining)
// alone in its map takes nothing from it: a server restarted while cut off
// from the rest must not take itself for a new cluster of one.
func (e *Engine) mapVoter(s ring.Member, n int) {
	if s.ID == e.id {
		e.inc = s.Incarnation
		if e.continues != 0 {
			e.continueVote(s.Incarnation)
		}
	} else if e.liveInc[s.ID] != s.Incarnation {
		e.liveInc[s.ID] = s.Incarnation
		e.quorumKnown = false
	}
	if e.heardConfig || (n == 1 && e.cfg.joining) || e.formed() {
		// A formed cluster's newcomers are learners, whether this node
		// heard the configuration or founded it: a founder alone that
		// guessed a server of its map took another cluster's server for
		// one of its own (rule 9, cluster identity).
		return
	}
	if n == 1 && s.ID == e.id && !e.cfg.joining && e.knowsOnlyItself() {
		// Alone without seeds, knowing no other server: this server
		// founds a cluster, and names it before it syncs anything (rule
		// 9, cluster identity). One that guessed others while its
		// cluster formed and is now cut off from them founds nothing.
		e.mintCluster()
	}
	// A node given seeds takes its own entry from a peer's list: it may be
	// a restarted server, whose empty copy must not count until it has
	// caught up (maybeTakeVote).
	if _, ok := e.voters[s.ID]; !ok && !(s.ID == e.id && e.cfg.joining) {
		e.mergeVoter(Voter{ID: s.ID, Inc: s.Incarnation, Guess: true})
	}
}

// maybeTakeVote makes this server a confirmed voter once its copy of every
// partition has caught up with its owner's epoch: a server that restarted
// (its entry holds an older incarnation), one that joined a formed cluster
// (no entry), or one whose entry is a guess (a cluster forming). From then
// on its copy holds every write a majority acknowledged before (the
// owner's log has them, and it fetched that log as the owner told of it
// after it started), so its promises may stand for a vote. The entry
// spreads with the next heartbeats.
func (e *Engine) maybeTakeVote() {
	v, ok := e.voters[e.id]
	if e.cfg.client || e.inc == 0 || (ok && v.Inc > e.inc) || (ok && v.Inc == e.inc && (v.Left || !v.Guess)) {
		e.recovered = nil
		return
	}
	if !e.recoveredPromises() {
		return
	}
	for _, pt := range e.parts {
		if !pt.active && !(pt.started && pt.logEpoch == pt.accepted && pt.accepted.Term > 0 &&
			len(pt.gap) == 0 && pt.log.last() >= pt.knownLast) {
			return
		}
	}
	e.voters[e.id] = Voter{ID: e.id, Inc: e.inc}
	e.votersChanged()
	e.quorumKnown = false
	e.mintCluster() // the first vote of a forming cluster names it
}

// recoveredPromises reports whether this server, about to take its vote,
// has learned back the promises it may have made in an earlier life, and
// asks for them (Recover, once per probe interval) while it has not.
//
// A server that restarts with nothing has forgotten the epochs it accepted
// and the writes it acked. If it voted once caught up with whichever owner
// it reaches, that owner may be one a newer epoch has deposed, which it
// had promised before (the newer owner cut off from both): the two would
// make a majority that confirms stale reads and acks writes the newer
// history replaces on heal. So it first hears the epoch every partition
// has accepted from enough voters, min(majority, present − 1) of the
// others, that at least one answers from every majority it could have
// been part of (every set that acked a Majority write, and every sync's
// promises, which meet every such set), and adopts the highest: its
// catching up then ends in an epoch at least as new as any it promised.
// (Viewstamped Replication recovers a replica the same way.) A cluster
// still forming (no confirmed voter) has promised nothing yet; whether it
// has formed is a peer's word, so a server with peers waits for the
// configuration from one (it comes with the first heartbeats).
func (e *Engine) recoveredPromises() bool {
	if !e.heardConfig {
		return e.m != nil && len(e.m.Members()) == 1 && !e.cfg.joining
	}
	if !e.formed() {
		return true
	}
	others := e.present()
	if v, ok := e.voters[e.id]; ok && !v.Left {
		others--
	}
	need := min(e.majority(), others)
	n := 0
	for id, inc := range e.recovered {
		if v, ok := e.voters[id]; ok && id != e.id && !v.Left && v.Inc == inc {
			n++
		}
	}
	if n >= need {
		return true
	}
	if e.m != nil && (e.recoverSent.IsZero() || e.now.Sub(e.recoverSent) >= e.cfg.probeInterval) {
		e.recoverSent = e.now
		for _, s := range e.m.Members() {
			if s.ID != e.id && e.recovered[s.ID] != s.Incarnation {
				e.send(s.ID, &Recover{})
			}
		}
	}
	return false
}

// answerRecover tells a recovering server the epoch this server has
// accepted in every partition.
func (e *Engine) answerRecover(from string) {
	acc := make([]Epoch, len(e.parts))
	for i, pt := range e.parts {
		acc[i] = pt.accepted
	}
	e.send(from, &RecoverReply{Inc: e.inc, Accepted: acc})
}

// stepRecoverReply adopts the epochs a server reports, and notes that it
// answered (see recoveredPromises).
func (e *Engine) stepRecoverReply(from string, m *RecoverReply) error {
	if e.cfg.client {
		return nil
	}
	if len(m.Accepted) != len(e.parts) {
		return errs.Errorf(errs.InvalidArgument, "recover reply for %d partitions, not %d", len(m.Accepted), len(e.parts))
	}
	for i, ep := range m.Accepted {
		if ep.Term > 0 {
			e.adopt(e.parts[i], ep)
			e.markDirty(e.parts[i])
		}
	}
	if e.recovered == nil {
		e.recovered = map[string]uint64{}
	}
	e.recovered[from] = m.Inc
	return nil
}

// mergeVoters merges a configuration peer from sent (in a [Voters]
// message or a [PosReply]). Once the peer's cluster has formed (its list
// has confirmed entries), guesses it does not know of are dropped. What
// this node does not know is added. A
// confirmed entry replaces a guess; a guess replaces nothing, except that
// an older incarnation of this node itself, which a peer remembers,
// replaces its own guess: it has restarted, and does not count until it
// has caught up. Only a server itself moves its confirmed entry to a newer
// incarnation (it took its vote back): a peer that restarted and saw
// another server's new incarnation in its map must not spread it. A
// removal with a newer incarnation is taken from anyone (Forget).
func (e *Engine) mergeVoters(from string, vs []Voter) {
	if len(vs) > 0 {
		if e.heardLists == nil {
			e.heardLists = map[string][]Voter{}
		}
		e.heardLists[from] = vs
		if !e.heardConfig {
			e.heardConfig = slices.ContainsFunc(vs, Voter.confirmed) || e.heardEveryGuess()
		}
	}
	if slices.ContainsFunc(vs, Voter.confirmed) {
		// The peer's cluster has formed: a guess it does not know of is a
		// newcomer (this node, joining late, among them), a learner until
		// it has caught up.
		for id, cur := range e.voters {
			if cur.Guess && !slices.ContainsFunc(vs, func(v Voter) bool { return v.ID == id }) {
				delete(e.voters, id)
				e.votersChanged()
				e.quorumKnown = false
			}
		}
	}
	formed := e.formed()
	for _, v := range vs {
		cur, ok := e.voters[v.ID]
		var take bool
		switch {
		case !ok:
			// A guess about a server this formed cluster does not know is
			// a newcomer's: a learner. A guess about this node itself is
			// never taken: a newcomer's map may show this node's new
			// incarnation, and a restarted node would count its empty
			// copy (the fault suite saw it, seed 595); it takes its own
			// entry from a confirmed one, or takes its vote once caught up.
			take = (!v.Guess || !formed) && !(v.Guess && v.ID == e.id)
		case v.ID == e.id && cur.Guess && v.Inc < cur.Inc:
			take = true // a peer remembers an earlier life of this node
		case v.Guess:
		case cur.Guess:
			take = true
		case v.ID != from && v.Inc > cur.Inc && !v.Left:
			// A newer life of another server is its own word to spread. A
			// removal is not: Forget through a node that had no entry for
			// the server covers every life up to that node's clock.
		default:
			e.mergeVoter(v)
		}
		if take && cur != v {
			e.voters[v.ID] = v
			e.votersChanged()
			e.quorumKnown = false
		}
	}
}

// heardEveryGuess reports whether every other server of this node's map
// has sent its list, none of them a formed cluster's: the cluster is
// forming, and the guesses stand for the configuration. One peer's guesses
// are not the configuration: a server restarted at the moment another
// joined guesses only the servers its map holds, and the two, taking each
// other's word, made a cluster of their own that halved its quorum and
// synced on the restarted one's empty promise while the formed cluster's
// survivor, in both maps, had not yet been heard (fault suite seed 2280).
// Waiting for every server in the map lets the survivor's list, formed,
// arrive first.
//
// A node given seeds also waits until its map holds every seed: a server
// restarted while cut off from the formed cluster, with a newcomer on its
// side, heard every server of its map (the newcomer) and the two formed a
// cluster of their own, whose empty history, in higher terms, replaced
// the formed cluster's Majority writes at the heal (fault suite seed
// 8374). Its seeds are the cluster it belongs to. With WithExpect, the
// map must hold that many servers instead (the operator's count of the
// new cluster, whatever found them).
func (e *Engine) heardEveryGuess() bool {
	if e.m == nil || len(e.m.Members()) < 2 {
		return false
	}
	if e.cfg.expect > 0 {
		if len(e.m.Members()) < e.cfg.expect {
			return false
		}
	} else if e.cfg.joining && len(e.unseenSeeds) > 0 {
		return false
	}
	for _, s := range e.m.Members() {
		if s.ID != e.id && len(e.heardLists[s.ID]) == 0 {
			return false
		}
	}
	return true
}

// Forget removes a server that is gone for good (its machine is lost, it
// will never restart with its ID) from the configuration, as an operator
// asks. It refuses a server this node sees alive. The change spreads to the
// other servers at once.
//
// A server this node has no entry for is forgotten too, in every life that
// started before this node's clock now (an incarnation is its process's
// start time): this node may have been cut off while the server joined and
// took its vote, and its peers, which list it, must drop it when they hear
// the removal. In the fault suite a retired server forgotten through such
// a node came back into the configuration from the peers at the heal
// (seed 2286). A later life of the server, started after the removal,
// joins as a new server does.
func (e *Engine) Forget(id string) error {
	if id == "" {
		return errs.New(errs.InvalidArgument, "forget: empty server ID")
	}
	cur, ok := e.voters[id]
	switch {
	case e.alive[id] && !(ok && cur.Left):
		return ErrForgetLive
	case !ok:
		cur = Voter{ID: id, Inc: uint64(max(e.now.UnixNano(), 0))}
	}
	e.mergeVoter(Voter{ID: id, Inc: cur.Inc, Left: true})
	// Spread it now, not with the next heartbeats: a change only this
	// node holds dies with it.
	if e.m != nil && !e.cfg.client {
		vs := e.votersMsg()
		for _, s := range e.m.Members() {
			if s.ID != e.id {
				e.send(s.ID, vs)
			}
		}
	}
	return nil
}

// Forgotten reports how many voters of the configuration (this node
// included) are known to hold the removal of every server in ids, and how
// many make a majority of the configuration: once a majority holds a
// removal, any majority that decides, and any node that restarts, hears of
// it. Servers that must go together (two of three crashed: the survivor
// alone is no majority of the three, nor of the two left after one
// removal) are forgotten in one call. A second Forget of the same server
// is not an error; it spreads the removal again.
func (e *Engine) Forgotten(ids ...string) (have, need int) {
	need = e.majority()
	for _, id := range ids {
		if cur, ok := e.voters[id]; !ok || !cur.Left {
			return 0, need
		}
	}
	if e.isVoter(e.id) {
		have++
	}
	for from, vs := range e.heardLists {
		if from == e.id || !e.isVoter(from) {
			continue
		}
		all := true
		for _, id := range ids {
			cur := e.voters[id]
			if !slices.ContainsFunc(vs, func(v Voter) bool { return v.ID == id && v.Left && v.Inc >= cur.Inc }) {
				all = false
				break
			}
		}
		if all {
			have++
		}
	}
	return have, need
}

// Voting reports whether this node's promises and acks count: a server of
// the configuration in the incarnation that holds its vote (false for a
// restarted or newly joined server that has not caught up yet).
func (e *Engine) Voting() bool { return !e.cfg.client && e.isVoter(e.id) }

// formed reports whether this node knows a confirmed entry: its cluster
// has formed, and servers new to it are learners.
func (e *Engine) formed() bool {
	for _, v := range e.voters {
		if v.confirmed() {
			return true
		}
	}
	return false
}

// confirmed reports whether v is a server's own word that it votes: not a
// guess, and not a removal. A removal says nothing about whether the
// cluster has formed: an operator may forget a server through a node of a
// cluster still forming, and its peers, taking the removal for a formed
// configuration, dropped every guess it did not list (each node lists the
// others, never itself), until no configuration held any server and no
// partition had an owner again (fault suite seed 10142,
// TestForgetDuringFormationKeepsTheGuesses).
func (v Voter) confirmed() bool { return !v.Guess && !v.Left }

// promiseQuorum is how many voters' promises a sync needs: a majority of
// the configuration (with a fixed quorum, that number). Half of an even
// configuration would meet every majority of that configuration (Flexible
// Paxos), but not every majority of the one before it: a server that
// joins takes its vote while an owner that has not heard of it yet acks
// writes with a majority of the smaller configuration, and three of six
// (the newcomer among them) can miss three of the five that acked (the
// fault suite lost Majority writes across a join, seed 589;
// TestJoinedVoterKeepsMajoritiesMeeting). Majorities of a configuration
// and of one with a server more or less always meet, which is what lets
// the configuration change one server at a time.
func (e *Engine) promiseQuorum() int {
	if e.cfg.quorum > 0 {
		return e.cfg.quorum
	}
	return e.majority()
}

// Voters returns the configuration, sorted by ID, left servers included.
func (e *Engine) Voters() []Voter {
	vs := make([]Voter, 0, len(e.voters))
	for _, v := range e.voters {
		vs = append(vs, v)
	}
	slices.SortFunc(vs, func(a, b Voter) int { return strings.Compare(a.ID, b.ID) })
	return vs
}

// votes reports whether a promise or ack that another server, id, sent
// as incarnation inc counts: inc is the incarnation that holds id's vote.
// The sender's own word is checked, not the map's, which may still show a
// restarted server's previous incarnation while its new, empty process
// already answers. One map lookup: checkWaits asks per ack.
func (e *Engine) votes(id string, inc uint64) bool {
	v, ok := e.voters[id]
	return ok && !v.Left && v.Inc == inc
}

// isVoter reports whether id's promises and acks count: a server of the
// configuration that has not been forgotten, in the incarnation that holds
// its vote (a restarted server's do not count until it takes the vote).
func (e *Engine) isVoter(id string) bool {
	v, ok := e.voters[id]
	if !ok || v.Left {
		return false
	}
	if id == e.id {
		return v.Inc == e.inc
	}
	inc, ok := e.liveInc[id]
	return !ok || inc == v.Inc
}

// present is the number of voters that have not left.
func (e *Engine) present() int {
	if e.votersPresent < 0 {
		n := 0
		for _, v := range e.voters {
			if !v.Left {
				n++
			}
		}
		e.votersPresent = n
	}
	return e.votersPresent
}

// majority is a majority of the configuration: the servers whose acks make
// a Majority write, and whose promises let a sync start an epoch. Any two
// majorities of one configuration share a server, which is what rule 5's
// proof needs.
func (e *Engine) majority() int { return e.present()/2 + 1 }
