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
}

// newer reports whether v should replace cur in the configuration.
func (v Voter) newer(cur Voter) bool {
	return v.Inc > cur.Inc || (v.Inc == cur.Inc && v.Left && !cur.Left)
}

// ErrNotVoter: Forget named a server that is not in the configuration.
var ErrNotVoter = errs.New(errs.NotFound, "not a server of the configuration")

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
	e.votersPresent = -1
	e.quorumKnown = false
	return true
}

// mapVoter notes server s of a map of n servers. Before this node has
// heard the configuration from any peer (a cluster forming), the servers
// of its map are taken as voters, as guesses: they count, but are not
// spread, and a peer's word replaces them. Once it has heard the
// configuration, a server new to it is a learner until it has caught up
// and announces itself (maybeTakeVote): adding servers from maps then
// would let two empty newcomers, or two restarted servers that each saw
// the other in its map, make a majority without the data (raft's
// learners, for the same reason). A newer incarnation of a voter never
// takes the voter's place from a map: it restarted with nothing. This node
// takes itself as a voter from its map only when it is alone and founds
// the cluster (not [WithJoining]): in a cluster it learns its own entry
// from its peers, so a restarted node does not count its empty copy as the
// vote it had, and a server restarted while cut off from the rest does not
// take itself for a new cluster of one.
func (e *Engine) mapVoter(s ring.Member, n int) {
	if s.ID == e.id {
		e.inc = s.Incarnation
		if _, ok := e.voters[s.ID]; !ok && n == 1 && !e.cfg.joining && !e.heardConfig {
			e.mergeVoter(Voter{ID: s.ID, Inc: s.Incarnation})
			e.guess[s.ID] = true
		}
		return
	}
	if e.liveInc[s.ID] != s.Incarnation {
		e.liveInc[s.ID] = s.Incarnation
		e.quorumKnown = false
	}
	if _, ok := e.voters[s.ID]; !ok && !e.heardConfig {
		e.mergeVoter(Voter{ID: s.ID, Inc: s.Incarnation})
		e.guess[s.ID] = true
	}
}

// maybeTakeVote makes this server a confirmed voter once its copy of every
// partition has caught up with its owner's epoch: a server that restarted
// (its entry holds an older incarnation), one that joined an existing
// cluster (no entry), or one whose entry is its own guess (a cluster
// forming). From then on its copy holds every write a majority
// acknowledged before (the owner's log has them, and it fetched that log
// as the owner told of it after it started), so its promises may stand
// for a vote. The entry spreads with the next heartbeats.
func (e *Engine) maybeTakeVote() {
	v, ok := e.voters[e.id]
	if e.cfg.client || e.inc == 0 || (ok && v.Inc >= e.inc && !e.guess[e.id]) || (ok && v.Left && v.Inc >= e.inc) {
		return
	}
	for _, pt := range e.parts {
		if !pt.active && !(pt.started && pt.logEpoch == pt.accepted && pt.accepted.Term > 0 &&
			len(pt.gap) == 0 && pt.log.last() >= pt.knownLast) {
			return
		}
	}
	e.voters[e.id] = Voter{ID: e.id, Inc: e.inc}
	delete(e.guess, e.id)
	e.votersPresent = -1
	e.quorumKnown = false
}

// mergeVoters merges a configuration peer from sent (in a [Voters]
// message or a [PosReply]): news is added, and replaces a guess. Only a
// server itself may move its entry to a newer incarnation (it took its
// vote back): a peer that restarted and saw another server's new
// incarnation in its map must not spread it.
func (e *Engine) mergeVoters(from string, vs []Voter) {
	if len(vs) > 0 {
		e.heardConfig = true
	}
	for _, v := range vs {
		cur, ok := e.voters[v.ID]
		switch {
		case !ok || e.guess[v.ID]:
			delete(e.guess, v.ID)
			if !ok || cur != v {
				e.voters[v.ID] = v
				e.votersPresent = -1
				e.quorumKnown = false
			}
		case v.ID != from && v.Inc > cur.Inc:
		default:
			e.mergeVoter(v)
		}
	}
}

// Forget removes a server that is gone for good (its machine is lost, it
// will never restart with its ID) from the configuration, as an operator
// asks. It refuses a server this node sees alive. The change spreads to the
// other servers with the next heartbeats.
func (e *Engine) Forget(id string) error {
	cur, ok := e.voters[id]
	switch {
	case !ok || cur.Left:
		return ErrNotVoter
	case e.alive[id]:
		return ErrForgetLive
	}
	e.mergeVoter(Voter{ID: id, Inc: cur.Inc, Left: true})
	return nil
}

// Voters returns the configuration, sorted by ID, left servers included.
func (e *Engine) Voters() []Voter { return e.votersWhere(func(string) bool { return true }) }

// confirmed is the configuration without this node's guesses: what it
// sends its peers.
func (e *Engine) confirmed() []Voter {
	return e.votersWhere(func(id string) bool { return !e.guess[id] })
}

func (e *Engine) votersWhere(keep func(string) bool) []Voter {
	vs := make([]Voter, 0, len(e.voters))
	for id, v := range e.voters {
		if keep(id) {
			vs = append(vs, v)
		}
	}
	slices.SortFunc(vs, func(a, b Voter) int { return strings.Compare(a.ID, b.ID) })
	return vs
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
