package partition

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Cluster identity (docs/engine.md rule 9). A server without seeds founds
// a cluster whenever its map holds only itself; restarted with nothing
// while cut off from the cluster it belonged to, it cannot tell, and its
// cluster of one took its vote. Naming every formed cluster lets the two
// tell each other apart when they meet, and the one founded by the
// restarted server gives way.

// ClusterID names a formed cluster: the server whose vote formed it and
// that server's incarnation then. The zero value names none (a client, or
// a server that has not heard from a formed cluster yet).
type ClusterID struct {
	Founder string `msgpack:"f"`
	Inc     uint64 `msgpack:"n"`
}

// IsZero reports whether c names no cluster.
func (c ClusterID) IsZero() bool { return c.Founder == "" }

// Compare orders names by the founder's incarnation, then ID: two names of
// one cluster (servers that took their votes at the same time) converge on
// the lower.
func (c ClusterID) Compare(o ClusterID) int {
	if r := cmp.Compare(c.Inc, o.Inc); r != 0 {
		return r
	}
	return strings.Compare(c.Founder, o.Founder)
}

func (c ClusterID) String() string {
	if c.IsZero() {
		return "none"
	}
	return fmt.Sprintf("%s@%s", c.Founder, time.Unix(0, int64(c.Inc)).UTC().Format("2006-01-02T15:04:05.000Z"))
}

// Cluster returns the name of this node's cluster (zero before it has
// formed or heard from one).
func (e *Engine) Cluster() ClusterID { return e.cluster }

// Foreign returns the servers this node refused messages from because
// they belong to another cluster, with that cluster's name, as last heard.
func (e *Engine) Foreign() map[string]ClusterID {
	out := make(map[string]ClusterID, len(e.foreign))
	for id, c := range e.foreign {
		out[id] = c
	}
	return out
}

// Yields counts the times this node's cluster gave way to another.
func (e *Engine) Yields() uint64 { return e.yields }

// setCluster names this node's cluster.
func (e *Engine) setCluster(c ClusterID) {
	if e.cluster != c {
		e.cluster = c
		e.votersChanged() // the disk keeps it with the configuration
	}
}

// mintCluster names the cluster, if this node has no name: it is forming
// it, alone or as the first of a forming cluster to vote. The name is the
// configuration's earliest-started server (this one, alone): the servers
// of one forming cluster hold the same guesses, so each that votes first
// names it alike.
func (e *Engine) mintCluster() {
	if !e.cluster.IsZero() || e.cfg.client || e.inc == 0 {
		return
	}
	c := ClusterID{Founder: e.id, Inc: e.inc}
	for _, v := range e.voters {
		if !v.Left && v.Inc != 0 && (ClusterID{Founder: v.ID, Inc: v.Inc}).Compare(c) < 0 {
			c = ClusterID{Founder: v.ID, Inc: v.Inc}
		}
	}
	e.setCluster(c)
}

// admit decides whether a message from server from, sent in cluster c, is
// stepped. A node with no name takes the first it hears; a client keeps
// none and takes every message (its copy follows whichever epoch is
// highest, and what it sends changes no server's history). From a server
// of another cluster only the configuration list is taken, to compare the
// two (meet).
func (e *Engine) admit(from string, c ClusterID, msg Message) bool {
	if c == e.cluster {
		// Every message of a batch comes here: the common case costs a
		// comparison and no map lookup.
		if len(e.foreign) > 0 {
			delete(e.foreign, from)
		}
		return true
	}
	if c.IsZero() || e.cfg.client {
		return true
	}
	if _, kin := e.kin[c]; kin {
		return true
	}
	if e.cluster.IsZero() {
		e.setCluster(c)
		return true
	}
	if v, ok := msg.(*Voters); ok {
		switch e.meet(c, v) {
		case meetYield:
			e.yieldTo(c)
			delete(e.foreign, from)
			return true
		case meetSame:
			// Its servers take the lowest name when they hear this
			// node's list; meanwhile every name is this cluster's.
			e.addKin(c)
			e.addKin(e.cluster)
			for _, k := range v.Kin {
				e.addKin(k)
			}
			if c.Compare(e.cluster) < 0 {
				e.setCluster(c)
			}
			delete(e.foreign, from)
			return true
		case meetApart:
			e.noteForeign(from, c)
		}
	}
	return false
}

// noteForeign records that server from belongs to cluster c, another
// cluster that shares no server with this one (meet's rule 5).
func (e *Engine) noteForeign(from string, c ClusterID) {
	if cur, ok := e.foreign[from]; !ok || cur != c {
		if e.foreign == nil {
			e.foreign = map[string]ClusterID{}
		}
		e.foreign[from] = c
		e.foreignVer++
	}
}

// ForeignVersion changes whenever a server of another cluster is first
// refused, or names a new cluster: the driver logs it.
func (e *Engine) ForeignVersion() uint64 { return e.foreignVer }

type meeting uint8

const (
	meetRefuse meeting = iota // the other gives way (rule 2): wait for it
	meetYield                 // this cluster gives way (rules 1 and 4)
	meetSame                  // one cluster (rule 3)
	meetApart                 // two clusters that stay apart (rule 5)
)

// addKin notes another name of this cluster.
func (e *Engine) addKin(c ClusterID) {
	if _, ok := e.kin[c]; ok || c.IsZero() {
		return
	}
	if e.kin == nil {
		e.kin = map[ClusterID]struct{}{}
	}
	e.kin[c] = struct{}{}
	e.votersChanged() // the disk keeps them with the configuration
}

// kinList returns the other names of this cluster, sorted.
func (e *Engine) kinList() []ClusterID {
	if len(e.kin) == 0 {
		return nil
	}
	out := make([]ClusterID, 0, len(e.kin))
	for k := range e.kin {
		if k != e.cluster {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, ClusterID.Compare)
	return out
}

// votersMsg is the configuration list a server sends its peers.
func (e *Engine) votersMsg() *Voters {
	return &Voters{List: e.Voters(), Empty: e.foundedAloneEmpty(), Kin: e.kinList()}
}

// meet compares this node's cluster with cluster c, whose configuration
// list m is (rule 9, cluster identity).
func (e *Engine) meet(c ClusterID, m *Voters) meeting {
	mine, vs, empty := e.cluster, m.List, m.Empty
	// 0. The other knows this cluster's name as one of its own, or this
	// node knows its name so: one forming cluster that two servers named
	// at once (a server restarted meanwhile took the name that lost).
	if slices.Contains(m.Kin, mine) {
		return meetSame
	}
	if _, ok := e.kin[c]; ok {
		return meetSame
	}
	// 1. The other cluster holds an earlier life of this cluster's
	// founder (its vote, or its guess while forming: a founder killed
	// before it confirmed its vote is only a guess in its peers' lists):
	// this cluster was founded by a server that had restarted with
	// nothing. 2. The reverse: the other gives way. Should both hold,
	// neither gives way (both would drop everything).
	mineEarlier := slices.ContainsFunc(vs, func(v Voter) bool {
		return v.ID == mine.Founder && !v.Left && v.Inc < mine.Inc
	})
	v, ok := e.voters[c.Founder]
	theirsEarlier := ok && !v.Left && v.Inc < c.Inc
	switch {
	case mineEarlier && !theirsEarlier:
		return meetYield
	case theirsEarlier && !mineEarlier:
		return meetRefuse
	case mineEarlier:
		return meetApart
	}
	// 3. Each list holds the other's founder in the life that named it:
	// servers of one forming cluster that took their votes at the same
	// time, each naming it. (A server's map alone does not make it one
	// of a cluster: a seedless server found just after it named its own
	// guessed the server that found it.) A founder forgotten since
	// counts: a server that had not yet heard the removal of a seed lost
	// before the cluster formed named the cluster after it, while the
	// others, which had, named it after another (FuzzSchedules, servers
	// given seeds: the two names refused each other for good).
	// A removal counts for every life it covers: forgotten through a
	// server that had no entry for it, the founder's removal carries
	// that server's clock as its incarnation (Forget).
	if v, ok := e.voters[c.Founder]; ok && namedIn(v, c.Inc) {
		for _, v := range vs {
			if v.ID == mine.Founder && namedIn(v, mine.Inc) {
				return meetSame
			}
		}
	}
	// 4. A server that founded its cluster alone and holds nothing gives
	// way, unless the other is such a server too with a higher name (two
	// seedless servers that found each other: the later gives way).
	if e.foundedAloneEmpty() && !(empty && mine.Compare(c) < 0) {
		return meetYield
	}
	if empty {
		return meetRefuse // it gives way
	}
	return meetApart
}

// namedIn reports whether configuration entry v holds its server in
// the life inc, or a removal of that life (rule 9, cluster identity, 3).
func namedIn(v Voter, inc uint64) bool {
	return v.Inc == inc || (v.Left && v.Inc > inc)
}

// knowsOnlyItself reports whether the configuration holds no server but
// this one.
func (e *Engine) knowsOnlyItself() bool {
	for id := range e.voters {
		if id != e.id {
			return false
		}
	}
	return true
}

// foundedAloneEmpty reports whether this server named its cluster, no
// other server has taken its vote in it, and it holds nothing: a seedless
// server that a peer found just after it started (rule 9, cluster
// identity, 4).
func (e *Engine) foundedAloneEmpty() bool {
	if e.cluster != (ClusterID{Founder: e.id, Inc: e.inc}) || !e.holdsNothing() {
		return false
	}
	for id, v := range e.voters {
		if id != e.id && v.confirmed() {
			return false
		}
	}
	return true
}

// holdsNothing reports whether no partition's copy has ever held an entry.
func (e *Engine) holdsNothing() bool {
	for _, pt := range e.parts {
		if pt.log.last() != 0 {
			return false
		}
	}
	return true
}

// yieldTo gives this node's cluster up for c: every partition's copy is
// dropped (its entries reported dropped, its state emptied), the
// configuration forgotten, and the node catches up with c as a learner
// once it merges c's list. What this round would have sent belongs to the
// cluster given up and is not sent.
func (e *Engine) yieldTo(c ClusterID) {
	e.rd.Messages = e.rd.Messages[:0]
	for _, pt := range e.parts {
		e.wipe(pt)
	}
	clear(e.voters)
	e.votersChanged()
	e.quorumKnown = false
	e.heardConfig = false
	e.heardLists = nil
	e.recovered = nil
	e.continues = 0
	e.cluster = c
	e.kin = nil
	e.yields++
}

// wipe drops a partition's copy: it gave way with its cluster.
func (e *Engine) wipe(pt *part) {
	if pt.active {
		e.stepDown(pt)
	}
	e.failQueue(pt, ErrNotOwner)
	e.endReads(pt, ErrOwnershipLost, false)
	pt.sync = nil
	e.termFloor = max(e.termFloor, pt.accepted.Term, pt.logEpoch.Term)
	for o := pt.log.last(); o > pt.log.base; o-- {
		e.event(Event{Kind: EventDropped, Partition: pt.p, Entry: pt.log.at(o)})
	}
	// A State must accept an empty snapshot (State.Restore); if it did
	// not, its old state would outlive the copy, so say so loudly.
	if err := e.st.Restore(pt.p, nil); err != nil {
		panic(fmt.Sprintf("partition: State.Restore(%d, nil) failed: %v", pt.p, err))
	}
	e.dropRestore(pt)
	pt.log.reset(0, Epoch{}, nil)
	pt.accepted, pt.started, pt.knownLast = Epoch{}, false, 0
	pt.logEpoch, pt.logStart, pt.continued, pt.startPrev = Epoch{}, 0, Epoch{}, Epoch{}
	clear(pt.gap)
	pt.fetch = fetchState{}
	pt.backoff = time.Time{}
	pt.durReset = true
	e.touch(pt)
	e.event(Event{Kind: EventRestored, Partition: pt.p})
	pt.ackDirty = true
	e.markDirty(pt)
}
