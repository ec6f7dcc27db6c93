package partition

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/ring"
)

// holdForward takes the forward from one node to another out of the
// network's queue, as a paused owner's socket holds it.
func holdForward(t *testing.T, n *network, from, to string) envelope {
	t.Helper()
	for i, env := range n.queue {
		if _, ok := env.msg.(*Forward); ok && env.from == from && env.to == to {
			n.queue = slices.Delete(n.queue, i, i+1)
			return env
		}
	}
	t.Fatalf("no forward from %s to %s in flight", from, to)
	return envelope{}
}

// otherServer returns a server of ids other than not.
func otherServer(ids []string, not string) string {
	for _, id := range ids {
		if id != not {
			return id
		}
	}
	return ""
}

// TestHeldForwardIsNotCommittedInALaterEpoch (rule 1): the paused-owner
// case. A write forwarded to the owner sits in its socket while it is
// paused; the others take the partition over and commit newer Majority
// writes; the owner comes back and takes the partition again in a new
// epoch; only then does it read the write. It must refuse it (the write
// was sent under an epoch that ended), not commit it on top of the newer
// writes. The forwarder, meanwhile, does not answer its caller before the
// write's deadline, though the owner left its map: the write could still
// have been committed until then.
func TestHeldForwardIsNotCommittedInALaterEpoch(t *testing.T) {
	ids := []string{"a", "b", "c"}
	// A long write timeout: this test is about the epoch, not the deadline.
	n := newNetwork(t, 8, ids, WithWriteTimeout(time.Hour))
	n.settle()
	const p = 0
	o := n.owner(p)
	f := otherServer(ids, o)
	tok, err := n.propose(f, p, "k", "held", WaitMajority)
	if err != nil {
		t.Fatal(err)
	}
	held := holdForward(t, n, f, o)
	heldEpoch := held.msg.(*Forward).Epoch

	others := slices.DeleteFunc(slices.Clone(ids), func(s string) bool { return s == o })
	n.isolate([]string{o}, others)
	n.setMap(others, others...)
	n.settle()
	no := ""
	for _, id := range others {
		if n.nodes[id].e.parts[p].active {
			no = id
		}
	}
	if no == "" {
		t.Fatalf("nobody took partition %d over: %s", p, n.statusLine())
	}
	newer, err := n.propose(no, p, "k", "newer", WaitMajority)
	if err != nil {
		t.Fatal(err)
	}
	n.deliverAll()
	if c := mustDone(t, n.nodes[no], newer); c.Err != nil {
		t.Fatal(c.Err)
	}
	if c, ok := n.nodes[f].done[tok]; ok {
		t.Fatalf("the forwarder answered %+v before the write's deadline; the paused owner could still commit it", c)
	}

	n.heal()
	n.setMap(ids, ids...)
	n.settle()
	if pt := n.nodes[o].e.parts[p]; !pt.active || !heldEpoch.Less(pt.accepted) {
		t.Fatalf("%s should own partition %d again in a later epoch than %v: %s", o, p, heldEpoch, n.statusLine())
	}
	n.queue = append(n.queue, held)
	n.settle()
	n.converged()
	for _, id := range ids {
		if v := n.nodes[id].st.kv[p]["k"]; v != "newer" {
			t.Fatalf("%s holds k=%q: the held write came back over a newer Majority write", id, v)
		}
	}
	c := mustDone(t, n.nodes[f], tok)
	if !errors.Is(c.Err, ErrEpochChanged) || errs.CodeOf(c.Err) != errs.Unavailable {
		t.Fatalf("the held write ended with %+v, want the definite epoch-changed refusal", c)
	}
}

// TestExpiredForwardIsNotCommitted (rule 1): the forwarder answers its
// caller at the write's deadline; a forward that reaches the owner after
// that (or within the clock-skew margin of it) is refused, never
// committed.
func TestExpiredForwardIsNotCommitted(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids)
	n.settle()
	const p = 0
	o := n.owner(p)
	f := otherServer(ids, o)
	tok, err := n.propose(f, p, "k", "late", WaitAck)
	if err != nil {
		t.Fatal(err)
	}
	held := holdForward(t, n, f, o)
	// The cluster carries on (heartbeats keep the owner's lease): up to
	// the deadline, no answer; at the deadline, the indefinite timeout.
	deadline := n.now.Add(DefaultWriteTimeout)
	for n.now.Add(DefaultClockSkew).Before(deadline) {
		n.deliverAll()
		n.tick(DefaultClockSkew)
		if c, ok := n.nodes[f].done[tok]; ok && n.now.Before(deadline) {
			t.Fatalf("answered %+v before the deadline", c)
		}
	}
	n.tick(DefaultClockSkew)
	c := mustDone(t, n.nodes[f], tok)
	if !errors.Is(c.Err, ErrTimeout) || errs.CodeOf(c.Err) != errs.DeadlineExceeded {
		t.Fatalf("the forwarder answered %+v, want the indefinite timeout", c)
	}
	if !n.nodes[o].e.parts[p].active {
		t.Fatalf("%s lost partition %d while the cluster was whole: %s", o, p, n.statusLine())
	}
	n.queue = append(n.queue, held)
	n.settle()
	n.converged()
	for _, id := range ids {
		if v, ok := n.nodes[id].st.kv[p]["k"]; ok {
			t.Fatalf("%s holds k=%q: a write was committed after its caller was answered", id, v)
		}
	}
}

// TestForwardWithinTheSkewMarginIsRefused (rule 1): an owner whose clock
// may be ahead of the forwarder's by up to the skew margin refuses a write
// whose deadline is that close.
func TestForwardWithinTheSkewMarginIsRefused(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids)
	n.settle()
	const p = 0
	o := n.owner(p)
	f := otherServer(ids, o)
	n.token++
	err := n.nodes[f].e.Propose(Request{Partition: p, Type: 2, Key: "k", Value: val("v"), Token: n.token, Wait: WaitAck,
		Deadline: n.now.Add(DefaultClockSkew / 2)})
	if err != nil {
		t.Fatal(err)
	}
	tok := n.token
	n.collect(n.nodes[f])
	n.deliverAll()
	c := mustDone(t, n.nodes[f], tok)
	if !errors.Is(c.Err, ErrExpired) {
		t.Fatalf("a write due within the skew margin ended with %+v", c)
	}
	if _, ok := n.nodes[o].st.kv[p]["k"]; ok {
		t.Fatal("the owner committed a write due within the skew margin")
	}
}

// TestMinorityNeverWrites (rule 3): however long a split lasts, the side
// without a majority of the configuration refuses writes and starts no
// epoch, so on heal it cannot replace the majority's history. (With a
// quorum counted over a window of recent server counts, the engine once
// let a node cut off for longer than the window write again, and its
// history won on heal.)
func TestMinorityNeverWrites(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids)
	n.settle()
	minor, major := []string{"c"}, []string{"a", "b"}
	n.isolate(minor, major)
	n.setMap(minor, minor...)
	n.setMap(major, major...)
	for range 24 {
		n.tick(time.Hour)
		n.deliverAll()
	}
	n.settle()
	for p := range 8 {
		if n.nodes["c"].e.parts[p].active {
			t.Fatalf("c owns partition %d after a day alone", p)
		}
		if _, err := n.propose("c", p, "k", "minority", WaitAck); !errors.Is(err, ErrNoQuorum) {
			t.Fatalf("c, alone for a day, answered %v to a write, want no quorum", err)
		}
		o := ""
		for _, id := range major {
			if n.nodes[id].e.parts[p].active {
				o = id
			}
		}
		tok, err := n.propose(o, p, "k", "majority", WaitMajority)
		if err != nil {
			t.Fatalf("partition %d on the majority side: %v", p, err)
		}
		n.deliverAll()
		if c := mustDone(t, n.nodes[o], tok); c.Err != nil {
			t.Fatal(c.Err)
		}
	}
	n.heal()
	n.setMap(ids, ids...)
	n.settle()
	n.converged()
	for p := range 8 {
		if v := n.nodes["c"].st.kv[p]["k"]; v != "majority" {
			t.Fatalf("partition %d: k=%q after the heal", p, v)
		}
	}
}

// TestForgetShrinksTheConfiguration (rule 3): the configuration shrinks
// only by an explicit change. The survivor of two servers that crashed (or
// left) refuses writes however long it waits, until an operator forgets
// them; then it writes alone.
func TestForgetShrinksTheConfiguration(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 4, ids)
	n.settle()
	n.crash("b")
	n.crash("c")
	n.setMap([]string{"a"}, "a")
	n.tick(24 * time.Hour)
	n.settle()
	if _, err := n.propose("a", 0, "k", "v", WaitMajority); !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("after two crashes the survivor answered %v, want no quorum", err)
	}
	if err := n.nodes["a"].e.Forget("a"); !errors.Is(err, ErrForgetLive) {
		t.Fatalf("forgetting itself: %v", err)
	}
	for _, id := range []string{"b", "c"} {
		if err := n.nodes["a"].e.Forget(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.nodes["a"].e.Forget("b"); err != nil {
		t.Fatalf("forgetting twice (which spreads the removal again): %v", err)
	}
	if err := n.nodes["a"].e.Forget("zz"); err != nil {
		t.Fatalf("forgetting a server this node never knew (a peer may list it): %v", err)
	}
	n.settle()
	tok, err := n.propose("a", 0, "k", "v", WaitMajority)
	if err != nil {
		t.Fatalf("after forgetting the crashed servers: %v", err)
	}
	n.deliverAll()
	if c := mustDone(t, n.nodes["a"], tok); c.Err != nil {
		t.Fatal(c.Err)
	}
}

// TestNewcomerLearnsTheConfiguration (rule 3): a server that joins the
// minority side of a split never saw the servers on the other side; it
// learns them from the configuration its peers send, and so does not take
// the minority for the whole cluster. It is a learner until it has caught
// up (after the heal), then a voter everyone counts.
func TestNewcomerLearnsTheConfiguration(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids)
	n.settle()
	n.isolate([]string{"a", "d"}, []string{"b", "c"})
	n.add("d", false)
	n.setMap([]string{"a"}, "a")
	n.setMap([]string{"b", "c"}, "b", "c")
	n.setMap([]string{"a", "d"}, "a", "d")
	n.settle()
	// d learned a, b and c from a; it is a learner itself until it has
	// caught up, which it cannot do on this side.
	if got := n.nodes["d"].e.Voters(); len(got) != 3 || n.nodes["d"].e.isVoter("d") {
		t.Fatalf("d knows the configuration %+v (counting itself: %v), want a, b and c", got, n.nodes["d"].e.isVoter("d"))
	}
	for p := range 8 {
		if n.nodes["d"].e.parts[p].active || n.nodes["a"].e.parts[p].active {
			t.Fatalf("partition %d is owned on the minority side: %s", p, n.statusLine())
		}
	}
	n.heal()
	n.setMap([]string{"a", "b", "c", "d"}, "a", "b", "c", "d")
	n.settle()
	n.converged()
	for _, id := range []string{"a", "b", "c", "d"} {
		if got := len(n.nodes[id].e.Voters()); got != 4 || !n.nodes[id].e.isVoter("d") {
			t.Fatalf("%s: after the heal d caught up and should be a voter: %+v", id, n.nodes[id].e.Voters())
		}
	}
}

// TestForwardUnderThePreviousEpochCommits (rule 11): a client that has not
// yet heard of a new owner's epoch forwards a write tagged with the epoch
// the new owner continued. The new owner commits it, even when that epoch
// wrote nothing (its start is not the epoch of any entry): the fault suite
// found every write refused with "epoch changed" after an owner came back
// from a pause, because the check compared against the last entry's epoch.
func TestForwardUnderThePreviousEpochCommits(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids)
	n.add("cl", true)
	n.setMap(ids, "a", "b", "c", "cl")
	n.settle()
	const p = 0
	o := n.owner(p)
	old := n.nodes["cl"].e.parts[p].accepted
	if old.Owner != o {
		t.Fatalf("the client accepted %v, want %s's epoch", old, o)
	}
	rest := slices.DeleteFunc(slices.Clone(ids), func(s string) bool { return s == o })
	n.crash(o)
	// Nothing of the new owner's epoch reaches the client.
	n.isolate([]string{"cl"}, rest)
	n.setMap(rest, append(slices.Clone(rest), "cl")...)
	n.settle()
	n.heal()
	x := n.owner(p)
	if x == "" || x == o {
		t.Fatalf("nobody took partition %d over: %s", p, n.statusLine())
	}
	if got := n.nodes["cl"].e.parts[p].accepted; got != old {
		t.Fatalf("the client learned of %v; the test needs it to know only %v", got, old)
	}
	tok, err := n.propose("cl", p, "k", "v", WaitAck)
	if err != nil {
		t.Fatal(err)
	}
	n.deliverWhere(func(e envelope) bool {
		_, fwd := e.msg.(*Forward)
		_, rep := e.msg.(*ForwardReply)
		return fwd || rep
	})
	if c := mustDone(t, n.nodes["cl"], tok); c.Err != nil {
		t.Fatalf("a write tagged with the epoch the owner continued: %v", c.Err)
	}
}

// proposeRead proposes a read at node id and returns its token.
func proposeRead(n *network, id string, p int) (uint64, error) {
	n.t.Helper()
	n.token++
	nd := n.nodes[id]
	err := nd.e.ProposeRead(ReadRequest{Partition: p, Token: n.token})
	n.collect(nd)
	return n.token, err
}

// TestReadConfirmedByAMajority (rule 13): a read on the owner completes
// only once a majority of the configuration answered a probe sent after
// it arrived, at the position the read saw.
func TestReadConfirmedByAMajority(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids)
	n.settle()
	const p = 0
	o := n.owner(p)
	w, _ := n.propose(o, p, "k", "v", WaitAck)
	tok, err := proposeRead(n, o, p)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := n.nodes[o].done[tok]; ok {
		t.Fatalf("the read completed (%+v) before any server confirmed it", c)
	}
	n.deliverAll()
	if c := mustDone(t, n.nodes[o], w); c.Err != nil {
		t.Fatal(c.Err)
	}
	c := mustDone(t, n.nodes[o], tok)
	if c.Err != nil || c.Position.Offset != mustDone(t, n.nodes[o], w).Position.Offset {
		t.Fatalf("read: %+v, want it confirmed at the write's offset", c)
	}
	other := otherServer(ids, o)
	if _, err := proposeRead(n, other, p); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("a read on a non-owner: %v", err)
	}
}

// TestDeposedOwnerReadNeverCompletes (rule 13): the paused-owner case for
// reads. An owner paused past failure detection still holds its epoch
// when it resumes; the others have taken the partition over and committed
// a newer Majority write. A read on the old owner must not complete with
// what it holds. (Answering GET from the local state, as the node once
// did, returned the value from before the pause for as long as the old
// owner kept its map.)
func TestDeposedOwnerReadNeverCompletes(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids)
	n.settle()
	const p = 0
	o := n.owner(p)
	before, _ := n.propose(o, p, "k", "before", WaitMajority)
	n.deliverAll()
	if c := mustDone(t, n.nodes[o], before); c.Err != nil {
		t.Fatal(c.Err)
	}
	// A read before the pause leaves the others' confirmations behind; they
	// must not count for a read that arrives later.
	first, _ := proposeRead(n, o, p)
	n.deliverAll()
	if c := mustDone(t, n.nodes[o], first); c.Err != nil {
		t.Fatal(c.Err)
	}
	others := pauseOwner(t, n, ids, o, p)
	// o resumes with its old map and epoch and takes a read at once, before
	// any tick; the others see it again.
	n.heal()
	n.setMap(ids, others...)
	if !n.nodes[o].e.parts[p].active {
		t.Fatal("the test needs the old owner still active when it resumes")
	}
	tok, err := proposeRead(n, o, p)
	if err == nil {
		n.settle()
		if c := mustDone(t, n.nodes[o], tok); c.Err == nil {
			t.Fatalf("the deposed owner confirmed a read at %+v, before the newer Majority write", c.Position)
		}
	}
}

// setMapInc is setMap with incarnations: a server restarted with nothing
// comes back with a new one.
func (n *network) setMapInc(members []string, inc map[string]uint64, on ...string) {
	n.t.Helper()
	ms := make([]ring.Member, len(members))
	for i, id := range members {
		ms[i] = ring.Member{ID: id, Incarnation: max(inc[id], 1)}
	}
	m, err := n.ring.Build(ms)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, id := range on {
		if nd := n.nodes[id]; !nd.dead {
			if err := nd.e.SetMap(m, nil); err != nil {
				n.t.Fatal(err)
			}
			n.collect(nd)
		}
	}
}

// TestRestartedServerVotesOnlyOnceCaughtUp (rule 9): a server that
// restarts with nothing (no disk) is not the voter it was. A Majority
// write acked by the owner and one replica, then that replica restarts
// empty while the owner is cut off: the restarted replica and the third
// server must not make a majority and start an epoch without the write
// (the fault suite lost Majority writes this way when a killed server
// came back with its ID). Once the owner is back, the write survives, and
// the restarted server takes its vote again when it has caught up.
func TestRestartedServerVotesOnlyOnceCaughtUp(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids)
	n.settle()
	const p = 0
	o, reps := groupOf(n.buildMap(ids), p)
	r := reps[0]
	third := reps[1]
	tok, _ := n.propose(o, p, "k", "acked", WaitMajority)
	n.dropWhere(func(e envelope) bool { _, ok := e.msg.(*Commit); return ok && e.to == third })
	n.deliverAll()
	if c := mustDone(t, n.nodes[o], tok); c.Err != nil {
		t.Fatal(c.Err)
	}
	if _, ok := n.nodes[third].st.kv[p]["k"]; ok {
		t.Fatal("the test needs the third server without the write")
	}

	// The replica restarts empty while the owner is cut off.
	n.isolate([]string{o}, []string{r, third})
	n.add(r, false)
	inc := map[string]uint64{r: 2}
	n.setMapInc([]string{r, third}, inc, r, third)
	n.settle()
	for _, id := range []string{r, third} {
		if n.nodes[id].e.parts[p].active {
			t.Fatalf("%s took partition %d over with the restarted replica's vote: %s", id, p, n.statusLine())
		}
	}
	if n.nodes[r].e.isVoter(r) || n.nodes[third].e.isVoter(r) {
		t.Fatal("the restarted replica counts as a voter before catching up")
	}

	n.heal()
	n.setMapInc(ids, inc, ids...)
	n.settle()
	n.converged()
	for _, id := range ids {
		if v := n.nodes[id].st.kv[p]["k"]; v != "acked" {
			t.Fatalf("%s holds k=%q after the owner came back, want the Majority write", id, v)
		}
	}
	for _, id := range ids {
		if !n.nodes[id].e.isVoter(r) {
			t.Fatalf("%s does not count the restarted replica once it caught up: %+v", id, n.nodes[id].e.Voters())
		}
	}
}

// TestJoiningNodeAloneFoundsNothing (rule 9): a server given seeds that
// finds itself alone (its seeds cut off, say just after a restart) waits
// for its peers. Founding a cluster of one, it would start epochs that
// compete with the real cluster's when they meet; the fault suite saw a
// restarted server do that and its empty epochs replace every other
// server's history. A server with no seeds founds a cluster, as before.
func TestJoiningNodeAloneFoundsNothing(t *testing.T) {
	for _, joining := range []bool{true, false} {
		var opts []Option
		if joining {
			opts = append(opts, WithJoining())
		}
		n := newNetwork(t, 4, []string{"x"}, opts...)
		n.settle()
		active := 0
		for p := range 4 {
			if n.nodes["x"].e.parts[p].active {
				active++
			}
		}
		if joining && active != 0 {
			t.Fatalf("a joining server alone owns %d partitions", active)
		}
		if !joining && active != 4 {
			t.Fatalf("a founding server alone owns %d of 4 partitions", active)
		}
	}
}

// TestOnlyAServerMovesItsOwnIncarnation (rule 9): a peer that restarted
// may have learned another server's new incarnation from its map; what it
// sends must not make the others count that server, empty, as the voter
// it was. Only the server itself moves its entry forward, once caught up.
func TestOnlyAServerMovesItsOwnIncarnation(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 4, ids)
	n.settle()
	a := n.nodes["a"].e
	before := a.voters["c"]
	if err := a.Step("b", n.nodes["b"].e.Cluster(), &Voters{List: []Voter{{ID: "c", Inc: before.Inc + 5}}}); err != nil {
		t.Fatal(err)
	}
	if got := a.voters["c"]; got != before {
		t.Fatalf("b moved c's entry to %+v", got)
	}
	if err := a.Step("c", n.nodes["c"].e.Cluster(), &Voters{List: []Voter{{ID: "c", Inc: before.Inc + 5}}}); err != nil {
		t.Fatal(err)
	}
	if got := a.voters["c"]; got.Inc != before.Inc+5 {
		t.Fatalf("c's own announcement left its entry at %+v", got)
	}
}

// TestStartedEpochIsNotPromisedAgain (rule 4): a restarted server does not
// remember the epochs its previous life started; proposing one again, it
// is refused by every copy that saw it start, and proposes a higher one.
// (Promising it again would let two different histories share an epoch.)
func TestStartedEpochIsNotPromisedAgain(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 4, ids)
	n.settle()
	const p = 0
	o := n.owner(p)
	c := otherServer(ids, o)
	ep := n.nodes[c].e.parts[p].accepted
	if ep.Owner != o || !n.nodes[c].e.parts[p].started {
		t.Fatalf("%s has not started %s's epoch: %+v", c, o, ep)
	}
	n.queue = nil
	if err := n.nodes[c].e.Step(o, n.nodes[o].e.Cluster(), &PosRequest{Partition: p, Epoch: ep}); err != nil {
		t.Fatal(err)
	}
	n.collect(n.nodes[c])
	for _, env := range n.queue {
		if r, ok := env.msg.(*PosReply); ok && env.to == o {
			t.Fatalf("%s promised the epoch it had seen start again: %+v", c, r)
		}
	}
	if i := slices.IndexFunc(n.queue, func(e envelope) bool { f, ok := e.msg.(*Fenced); return ok && e.to == o && f.Epoch == ep }); i < 0 {
		t.Fatalf("no refusal sent: %+v", n.queue)
	}
}

// TestEvenConfigurationWaitsForAMajority (rule 4): with four voters, one
// dead and one restarted (a learner until it catches up), two can answer.
// Two promises would meet every three acks of this configuration, but not
// every two of the three servers before one joined
// (TestJoinedVoterKeepsMajoritiesMeeting), so a sync needs three, and the
// partitions the dead and the restarted servers owned wait for an owner:
// writes to them are refused, nothing is lost. Once an operator forgets
// the dead server, a majority of the three left syncs, the restarted
// server catches up and, having heard from both others what it may have
// promised (rule 9, TestRestartedServerLearnsItsPromisesBack), takes its
// vote back.
func TestEvenConfigurationWaitsForAMajority(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	n := newNetwork(t, 8, ids)
	n.settle()
	for p := range 8 {
		o := n.owner(p)
		tok, _ := n.propose(o, p, "k", "v", WaitMajority)
		n.deliverAll()
		if c := mustDone(t, n.nodes[o], tok); c.Err != nil {
			t.Fatal(c.Err)
		}
	}
	n.crash("d")
	n.add("c", false) // restarted with nothing
	inc := map[string]uint64{"c": 2}
	live := []string{"a", "b", "c"}
	n.setMapInc(live, inc, live...)
	n.settle()
	orphans := 0
	for p := range 8 {
		switch o := n.owner(p); o {
		case "":
			orphans++
		case "c":
			t.Fatalf("the restarted server owns partition %d before it votes: %s", p, n.statusLine())
		}
	}
	if orphans == 0 {
		t.Fatalf("every partition has an owner with two of four voters: %s", n.statusLine())
	}
	if n.nodes["a"].e.isVoter("c") {
		t.Fatal("the restarted server voted without hearing from three others")
	}
	for _, id := range live {
		if err := n.nodes[id].e.Forget("d"); err != nil {
			t.Fatal(err)
		}
	}
	n.settle()
	for p := range 8 {
		if n.owner(p) == "" {
			t.Fatalf("partition %d has no owner once the dead server is forgotten: %s", p, n.statusLine())
		}
		if v := n.nodes["c"].st.kv[p]["k"]; v != "v" {
			t.Fatalf("the restarted server holds k=%q in partition %d", v, p)
		}
	}
	if !n.nodes["a"].e.isVoter("c") {
		t.Fatalf("the restarted server never took its vote back: %+v", n.nodes["a"].e.Voters())
	}
}

// TestRestartedServerLearnsItsPromisesBack (rule 9): a server that
// restarts with nothing has forgotten the epochs it promised and the
// writes it acked. Caught up with an owner that is itself behind (one that
// kept its lease through a one-sided failure detection while a newer owner,
// for which the restarted server had acked a Majority write, took over),
// it must not vote: with that owner it would make a majority that confirms
// reads without the write and acks writes that the newer history replaces
// on heal. The fault suite saw the stale read (seed 2). A restarted server
// votes only once it has heard the epochs accepted by enough voters to
// learn back every one it may have promised, and accepted them itself.
func TestRestartedServerLearnsItsPromisesBack(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 1, ids)
	n.settle()
	const p = 0
	o := n.owner(p)
	others := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == o })
	o2, _ := groupOf(n.buildMap(others), p)
	w := others[0]
	if w == o2 {
		w = others[1]
	}
	tok, _ := n.propose(o, p, "k", "v1", WaitMajority)
	n.deliverAll()
	if err := mustDone(t, n.nodes[o], tok).Err; err != nil {
		t.Fatal(err)
	}

	// o2 declares o dead and takes the partition with w's promise; w still
	// sees o, so o keeps its lease and its epoch. v2 is acked at Majority.
	// o's re-announcements of its epoch to w are lost (w would fence it:
	// rule 7); safety must not rest on them arriving.
	n.lose = func(e envelope) bool {
		_, ok := e.msg.(*EpochStart)
		return ok && e.from == o && e.to == w
	}
	n.isolate([]string{o}, []string{o2})
	n.setMap(others, o2)
	n.settle()
	if n.owner(p) != o2 && !n.nodes[o2].e.parts[p].active {
		t.Fatalf("o2 did not take the partition: %s", n.statusLine())
	}
	tok, _ = n.propose(o2, p, "k", "v2", WaitMajority)
	n.deliverAll()
	if err := mustDone(t, n.nodes[o2], tok).Err; err != nil {
		t.Fatal(err)
	}
	if !n.nodes[o].e.parts[p].active {
		t.Fatalf("the test needs the old owner still active: %s", n.statusLine())
	}
	n.lose = nil

	// w restarts empty, and o2 is cut off from it too. w catches up with o.
	n.isolate([]string{o2}, []string{w})
	n.add(w, false)
	inc := map[string]uint64{w: 2}
	n.setMapInc(ids, inc, o, w)
	n.propose(o, p, "other", "x", WaitAck)
	n.settle()
	if n.nodes[w].e.isVoter(w) || n.nodes[o].e.isVoter(w) {
		t.Fatalf("the restarted server votes after catching up with the deposed owner alone: %s", n.statusLine())
	}
	if rt, err := proposeRead(n, o, p); err == nil {
		n.settle()
		if c := mustDone(t, n.nodes[o], rt); c.Err == nil {
			t.Fatalf("the deposed owner confirmed a read without the Majority write v2 at %+v", c.Position)
		}
	}
	if tok, err := n.propose(o, p, "k", "v3", WaitMajority); err == nil {
		n.settle()
		if c := mustDone(t, n.nodes[o], tok); c.Err == nil {
			t.Fatal("the deposed owner got a Majority ack with the restarted server's vote")
		}
	}

	// Once o2 is back, v2 stands everywhere and w votes again.
	n.heal()
	n.setMapInc(ids, inc, ids...)
	n.settle()
	n.converged()
	for _, id := range ids {
		if v := n.nodes[id].st.kv[p]["k"]; v != "v2" {
			t.Fatalf("%s holds k=%q, want the Majority write v2", id, v)
		}
		if !n.nodes[id].e.isVoter(w) {
			t.Fatalf("%s does not count the restarted server once it recovered: %+v", id, n.nodes[id].e.Voters())
		}
	}
}

// TestRestartedServerCountsItselfOnlyOnceListed (rule 9): a server given
// seeds that restarts and sees its peers in its map does not count its own
// empty copy as a vote before a peer has told it the configuration; the
// peers' word (its earlier incarnation) makes it a learner. The fault
// suite's servers reported themselves voting moments after a restart, so
// the suite's wait for restarted servers to catch up before the next
// process fault let two of three servers lose their memory at once.
func TestRestartedServerCountsItselfOnlyOnceListed(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 4, ids, WithJoining())
	n.settle()
	if !n.nodes["c"].e.Voting() {
		t.Fatal("c does not vote before the restart")
	}
	n.add("c", false)
	inc := map[string]uint64{"c": 2}
	n.setMapInc(ids, inc, "c")
	if n.nodes["c"].e.Voting() {
		t.Fatal("the restarted server counts itself before a peer listed it")
	}
	n.setMapInc(ids, inc, ids...)
	n.deliverAll()
	n.tick(250 * time.Millisecond)
	n.deliverAll()
	if n.nodes["c"].e.isVoter("c") && !n.nodes["c"].e.parts[0].started {
		t.Fatal("the restarted server votes before catching up")
	}
	n.settle()
	if !n.nodes["c"].e.Voting() || !n.nodes["a"].e.isVoter("c") {
		t.Fatalf("the restarted server never took its vote back: %+v", n.nodes["a"].e.Voters())
	}
}

// TestForgetIsConfirmedByAMajority (rule 9): a removal is sent to every
// server at once, and counts as held once a majority of the configuration
// has sent it back. The fault suite lost a removal that the one server
// that made it held when it was stopped 250 ms later, before its next
// heartbeat; the forgotten server then blocked a restarted server's
// recovery for good.
func TestForgetIsConfirmedByAMajority(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	n := newNetwork(t, 4, ids)
	n.settle()
	n.crash("d")
	live := []string{"a", "b", "c"}
	n.setMap(live, live...)
	n.settle()
	a := n.nodes["a"].e
	if err := a.Forget("d"); err != nil {
		t.Fatal(err)
	}
	if have, need := a.Forgotten("d"); have != 1 || need != 2 {
		t.Fatalf("before any peer answered: %d of %d", have, need)
	}
	n.collect(n.nodes["a"])
	sent := 0
	for _, env := range n.queue {
		if v, ok := env.msg.(*Voters); ok && env.from == "a" && slices.ContainsFunc(v.List, func(v Voter) bool { return v.ID == "d" && v.Left }) {
			sent++
		}
	}
	if sent != 2 {
		t.Fatalf("the removal went to %d servers at once, want 2", sent)
	}
	n.deliverAll()
	n.tick(250 * time.Millisecond)
	n.deliverAll()
	if have, need := a.Forgotten("d"); have < need {
		t.Fatalf("after the peers' heartbeats: %d of %d", have, need)
	}
}

// TestRepliesCountOnlyFromTheVotingIncarnation (rule 9): gossip may still
// show a restarted server's previous incarnation in a peer's map while the
// new, empty process already answers on the data plane. Its promises and
// acks must not count as the vote its previous life held: the fault suite
// lost Majority writes when a server left, came back empty at once, and a
// peer whose map still showed the old incarnation synced with its promise
// and an empty position (seed 1006). Every promise, ack and read ack names
// the incarnation that sent it, and counts only if that incarnation holds
// the vote.
func TestRepliesCountOnlyFromTheVotingIncarnation(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 1, ids)
	n.settle()
	const p = 0
	o := n.owner(p)
	others := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == o })
	// third owns the partition once o is gone.
	third, _ := groupOf(n.buildMap(others), p)
	r := others[0]
	if r == third {
		r = others[1]
	}
	tok, _ := n.propose(o, p, "k", "acked", WaitMajority)
	n.dropWhere(func(e envelope) bool { _, ok := e.msg.(*Commit); return ok && e.to == third })
	n.deliverAll()
	if c := mustDone(t, n.nodes[o], tok); c.Err != nil {
		t.Fatal(c.Err)
	}
	if _, ok := n.nodes[third].st.kv[p]["k"]; ok {
		t.Fatal("the test needs the third server without the write")
	}

	// o is cut off; r restarts empty, but third's map still shows r's
	// previous incarnation.
	n.isolate([]string{o}, []string{r, third})
	n.add(r, false)
	n.setMapInc([]string{r, third}, map[string]uint64{r: 2}, r)
	n.setMapInc([]string{r, third}, nil, third)
	n.settle()
	if ow := n.owner(p); ow != "" {
		t.Fatalf("%s took the partition with the restarted server's empty promise: %s", ow, n.statusLine())
	}

	n.heal()
	n.setMapInc(ids, map[string]uint64{r: 2}, ids...)
	n.settle()
	n.converged()
	for _, id := range ids {
		if v := n.nodes[id].st.kv[p]["k"]; v != "acked" {
			t.Fatalf("%s holds k=%q, want the Majority write", id, v)
		}
	}
}

// TestRestartedServerIgnoresAGuessAboutItself (rule 9): a server that
// joins at the moment another restarts takes the servers of its map as
// guesses, the restarted one's new incarnation among them, and sends them
// on. The restarted server must not take that guess about itself and count
// its empty copy: the fault suite saw a restarted server report voting
// within 300 ms, the harness then let two more servers lose their memory,
// and three of five ended without a vote (seed 595).
func TestRestartedServerIgnoresAGuessAboutItself(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 4, ids, WithJoining())
	n.settle()
	n.add("c", false)
	n.setMapInc(append(slices.Clone(ids), "d"), map[string]uint64{"c": 2}, "c")
	guesses := []Voter{{ID: "a", Inc: 1, Guess: true}, {ID: "b", Inc: 1, Guess: true}, {ID: "c", Inc: 2, Guess: true}, {ID: "d", Inc: 1, Guess: true}}
	if err := n.nodes["c"].e.Step("d", ClusterID{}, &Voters{List: guesses}); err != nil {
		t.Fatal(err)
	}
	if n.nodes["c"].e.Voting() {
		t.Fatalf("the restarted server counts itself from a newcomer's guess: %+v", n.nodes["c"].e.Voters())
	}
}

// TestJoiningNodeSyncsOnlyOnceItKnowsTheConfiguration (rule 9): a server
// given seeds that restarts and sees only some of its peers must not take
// a majority of its map for a majority of the cluster. The fault suite lost
// a Majority write when a server restarted at a heal, saw one of two
// peers, and synced with that peer's promise alone (seed 2220).
func TestJoiningNodeSyncsOnlyOnceItKnowsTheConfiguration(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids, WithJoining())
	n.settle()
	n.crash("c")
	n.add("a", false)
	inc := map[string]uint64{"a": 2}
	n.setMapInc([]string{"a", "b"}, inc, "a")
	// a hears nothing from b yet: no configuration.
	n.isolate([]string{"a"}, []string{"b"})
	n.tick(time.Second)
	for p := range 8 {
		if pt := n.nodes["a"].e.parts[p]; pt.sync != nil || pt.active {
			t.Fatalf("the restarted server started a sync on its map alone (partition %d): %s", p, n.statusLine())
		}
	}
}

// TestJoiningNodeTakesNoConfigurationFromGuesses (rule 9): a peer's
// guesses are not the configuration. A server restarted at the moment a
// new one joins, while one server is cut off and the other not yet heard
// from, sends the newcomer its guesses (its map: the newcomer and the
// survivor); the newcomer must not take them for the configuration, halve
// the quorum over two guessed voters and sync with the restarted server's
// empty promise alone. The fault suite lost Majority writes this way
// (seed 2280: the newcomer synced in 5 ms and the survivor then dropped
// its history).
func TestJoiningNodeTakesNoConfigurationFromGuesses(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids, WithJoining())
	n.settle()
	after := n.buildMap([]string{"b", "c", "d"})
	p := -1
	for q := range 8 {
		if o, _ := after.Owner(q); o.ID == "d" {
			p = q
			break
		}
	}
	if p < 0 {
		t.Fatal("no partition for d")
	}
	tok, err := n.propose(n.owner(p), p, "k", "acked", WaitMajority)
	if err != nil {
		t.Fatal(err)
	}
	n.settle()
	owner := n.owner(p)
	if c, ok := n.nodes[owner].done[tok]; !ok || c.Err != nil {
		t.Fatalf("write not acked: %+v", c)
	}
	n.add("c", false)
	n.add("d", false)
	n.isolate([]string{"a"}, []string{"b", "c", "d"})
	n.setMapInc([]string{"b", "c", "d"}, map[string]uint64{"c": 2}, "c", "d")
	n.isolate([]string{"b"}, []string{"c", "d"})
	for range 8 {
		n.deliverAll()
		n.tick(250 * time.Millisecond)
	}
	if pt := n.nodes["d"].e.parts[p]; pt.sync != nil && len(pt.sync.replies) > 0 || pt.active {
		t.Errorf("the newcomer synced partition %d on a restarted server's guesses: %s", p, n.statusLine())
	}
	n.heal()
	n.setMapInc([]string{"a", "b", "c", "d"}, map[string]uint64{"c": 2}, "a", "b", "c", "d")
	n.settle()
	n.converged()
}

// TestForgetReachesAServerThisNodeNeverHeardVote (rule 9): an operator
// forgets a retired server through a node that was cut off while the
// server joined and took its vote, so the node has no entry for it. The
// removal must still hold: once the cut heals, the peers that list the
// server must not hand it back as a voter. In the fault suite the forget
// answered "not a server of the configuration" through such a node, the
// peers kept the retired server, and with four voters, one of them gone,
// a restarted server could never recover its promises (seed 2286).
func TestForgetReachesAServerThisNodeNeverHeardVote(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 4, ids)
	n.settle()
	n.add("d", false)
	n.isolate([]string{"b"}, []string{"a", "c", "d"})
	n.setMap([]string{"a", "c", "d"}, "a", "c", "d")
	n.settle()
	if !n.nodes["d"].e.Voting() {
		t.Fatalf("d did not take its vote: %+v", n.nodes["d"].e.Voters())
	}
	if n.nodes["b"].e.isVoter("d") {
		t.Fatal("b heard d's vote through the cut")
	}
	n.crash("d")
	n.setMap(ids, ids...)
	b := n.nodes["b"].e
	if err := b.Forget("d"); err != nil {
		t.Fatalf("forgetting a retired server through a node that never heard its vote: %v", err)
	}
	n.heal()
	n.settle()
	for _, id := range ids {
		if n.nodes[id].e.isVoter("d") {
			t.Fatalf("%s still counts the forgotten server: %+v", id, n.nodes[id].e.Voters())
		}
	}
	if have, need := b.Forgotten("d"); have < need {
		t.Fatalf("the removal is not confirmed: %d of %d", have, need)
	}
}

// TestJoinedVoterKeepsMajoritiesMeeting (rules 4 and 9): a server that
// joins takes its vote once caught up, and an owner that has not heard of
// it yet acks a Majority write with three of the five servers it knows.
// Promises from a majority of the six meet every three of the five; half
// of the six (three, Flexible Paxos for an even configuration) need not:
// the newcomer and the two servers that missed the write, with a
// restarted server completing the live count, would start an epoch
// without it. The fault suite lost Majority writes across a join
// (seed 589).
func TestJoinedVoterKeepsMajoritiesMeeting(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e"}
	n := newNetwork(t, 1, ids)
	n.settle()
	n.add("f", false)
	all := append(slices.Clone(ids), "f")
	n.setMap(all, all...)
	n.settle()
	if !n.nodes["f"].e.Voting() {
		t.Fatalf("the newcomer did not take its vote: %+v", n.nodes["f"].e.Voters())
	}
	o := n.owner(0)
	var ackers, others []string
	for _, id := range all {
		switch {
		case id == o || id == "f":
		case len(ackers) < 2:
			ackers = append(ackers, id)
		default:
			others = append(others, id)
		}
	}
	// The owner has not heard of the newcomer's vote yet.
	oe := n.nodes[o].e
	delete(oe.voters, "f")
	oe.votersPresent, oe.quorumKnown = -1, false
	tok, err := n.propose(o, 0, "k", "acked", WaitMajority)
	if err != nil {
		t.Fatal(err)
	}
	n.dropWhere(func(env envelope) bool { return env.from == o && !slices.Contains(ackers, env.to) })
	n.deliverWhere(func(env envelope) bool {
		_, commit := env.msg.(*Commit)
		_, ack := env.msg.(*CommitAck)
		return (commit && env.from == o) || (ack && env.to == o)
	})
	if c := mustDone(t, n.nodes[o], tok); c.Err != nil {
		t.Fatalf("the write was not acked: %v", c.Err)
	}
	// The owner and its two ackers are cut off; one of the ackers
	// restarts on the other side, empty, so that side counts four live
	// servers: the newcomer, the two that missed the write, the restarted.
	cut := []string{o, ackers[0]}
	rest := []string{ackers[1], others[0], others[1], "f"}
	n.isolate(cut, rest)
	n.add(ackers[1], false)
	n.setMapInc(rest, map[string]uint64{ackers[1]: 2}, rest...)
	for range 40 {
		n.deliverAll()
		n.tick(250 * time.Millisecond)
	}
	for _, id := range rest {
		if pt := n.nodes[id].e.parts[0]; pt.active {
			t.Errorf("%s started %v at %v without the Majority write: %s", id, pt.accepted, pt.position(), n.statusLine())
		}
	}
	n.heal()
	n.setMapInc(all, map[string]uint64{ackers[1]: 2}, all...)
	n.settle()
	n.converged()
}

// TestOwnerProbesARestartedCopy (rule 7): a copy that restarts keeps
// nothing and waits to hear that the owner's epoch started before it
// fetches. If the owner's announcement on the map change is lost (the
// restarted process's connection was not up yet), the owner's lag probe
// must find it: what the copy's previous life acked is not its position.
// In the fault suite a restarted server stayed 5 keys behind for a minute
// after the heal, never voting (seed 5328).
func TestOwnerProbesARestartedCopy(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 4, ids)
	n.settle()
	for p := range 4 {
		o := n.owner(p)
		if _, err := n.propose(o, p, "k", "v", WaitMajority); err != nil {
			t.Fatal(err)
		}
	}
	n.settle()
	n.add("c", false)
	inc := map[string]uint64{"c": 2}
	n.setMapInc(ids, inc, ids...)
	// Every epoch announcement to the restarted copy is lost.
	n.dropWhere(func(env envelope) bool { _, es := env.msg.(*EpochStart); return es && env.to == "c" })
	n.settle()
	for p := range 4 {
		if v := n.nodes["c"].st.kv[p]["k"]; v != "v" {
			t.Fatalf("the restarted copy holds k=%q in partition %d: %s", v, p, n.statusLine())
		}
	}
	if !n.nodes["c"].e.Voting() {
		t.Fatalf("the restarted copy never took its vote back: %+v", n.nodes["c"].e.Voters())
	}
}

// TestRestartedServerFormsNothingBeforeItSeesItsSeeds (rule 9): a server
// restarted while cut off from the formed cluster, together with a server
// joining for the first time, sees only the newcomer. Each takes the
// other's guesses for the configuration unless something tells it that a
// cluster exists beyond its map: the two formed a cluster of their own,
// took every partition in terms above the formed cluster's, and at the
// heal their empty history replaced the formed cluster's Majority writes
// (fault suite seed 8374). Their seeds tell them: a server given seeds
// forms a new cluster only once its map holds every one of them, and a
// joining server that has not heard the configuration promises nothing.
func TestRestartedServerFormsNothingBeforeItSeesItsSeeds(t *testing.T) {
	// The newcomer was given every server as a seed, or only the restarted
	// one: then it sees its seeds, and only the restarted server's refusal
	// to promise keeps the two from forming.
	for name, dUnseen := range map[string][]string{"all seeds": {"b", "c"}, "one seed": nil} {
		t.Run(name, func(t *testing.T) {
			ids := []string{"a", "b", "c"}
			n := newNetwork(t, 8, ids, WithJoining())
			n.settle()
			var toks []uint64
			for p := range 8 {
				tok, err := n.propose(n.owner(p), p, fmt.Sprint("k", p), "acked", WaitMajority)
				if err != nil {
					t.Fatal(err)
				}
				toks = append(toks, tok)
			}
			n.settle()
			for p, tok := range toks {
				if c, ok := n.nodes[n.owner(p)].done[tok]; !ok || c.Err != nil {
					t.Fatalf("partition %d: write not acked: %+v", p, c)
				}
			}
			n.add("a", false).e.SetUnseenSeeds([]string{"b", "c"})
			n.add("d", false).e.SetUnseenSeeds(dUnseen)
			n.isolate([]string{"a", "d"}, []string{"b", "c"})
			n.setMapInc([]string{"a", "d"}, map[string]uint64{"a": 2}, "a", "d")
			n.setMapInc([]string{"b", "c"}, nil, "b", "c")
			n.settle()
			for _, id := range []string{"a", "d"} {
				for p, pt := range n.nodes[id].e.parts {
					if pt.active {
						t.Fatalf("%s, cut off from every seed, owns partition %d:\n%s", id, p, n.statusLine())
					}
				}
			}
			n.heal()
			for _, id := range []string{"a", "d"} {
				n.nodes[id].e.SetUnseenSeeds(nil)
			}
			n.setMapInc([]string{"a", "b", "c", "d"}, map[string]uint64{"a": 2}, "a", "b", "c", "d")
			n.settle()
			n.converged()
		})
	}
}

// TestForgetDuringFormationKeepsTheGuesses (rule 9): a removal is not a
// formed cluster's word. Three servers forming (each guessing the others,
// none yet voting) were split before any took its vote; an operator
// forgot a spare through one of them, whose list then held the spare's
// removal beside its guesses. Its peers took the removal for a formed
// configuration and dropped every guess it did not list (each node lists
// the others, never itself): every server was dropped from every
// configuration, and no partition ever had an owner again (fault suite
// seed 10142).
func TestForgetDuringFormationKeepsTheGuesses(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids, WithJoining())
	n.isolate([]string{"a"}, []string{"b", "c"})
	for range 8 {
		n.deliverAll()
		n.tick(250 * time.Millisecond)
	}
	require.False(t, n.nodes["b"].e.Voting(), "b took its vote with a cut off")
	if err := n.nodes["c"].e.Forget("d"); err != nil {
		t.Fatal(err)
	}
	n.heal()
	n.settle()
	for _, id := range ids {
		if !n.nodes[id].e.Voting() {
			t.Fatalf("%s is not voting after the heal; its configuration: %+v", id, n.nodes[id].e.Voters())
		}
	}
	n.converged()
}

// TestIdleDeposedOwnerLearnsTheNewerEpoch (rule 7): an owner paused past
// failure detection resumes with its epoch, and messages that arrived
// during the pause refresh its lease before its first tick, so it does
// not step down. The others took the partition over meanwhile, then gave
// it back by the map. With no write or read on the partition, nothing
// told the old owner of the newer epoch: it stayed "owner" in its old
// epoch, the others in the newer one, for good (fault suite seed 11981,
// servers-disagree a minute after the heal). An owner re-announces its
// epoch to every copy once per lease, caught up or not, and a copy that
// accepted a newer one fences it.
func TestIdleDeposedOwnerLearnsTheNewerEpoch(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids)
	n.settle()
	const p = 0
	o := n.owner(p)
	before, _ := n.propose(o, p, "k", "before", WaitMajority)
	n.deliverAll()
	if c := mustDone(t, n.nodes[o], before); c.Err != nil {
		t.Fatal(c.Err)
	}
	others := pauseOwner(t, n, ids, o, p)
	// o resumes: what its peers sent while it was paused arrives before
	// its first tick, so its lease holds.
	n.heal()
	n.setMap(ids, others...)
	for _, id := range others {
		n.nodes[id].e.Tick(n.now)
		n.collect(n.nodes[id])
	}
	// As the driver does: the clock first, then the messages.
	n.nodes[o].e.Clock(n.now)
	n.deliverWhere(func(e envelope) bool { return e.to == o })
	n.nodes[o].e.Tick(n.now)
	n.collect(n.nodes[o])
	if !n.nodes[o].e.parts[p].active {
		t.Fatal("the test needs the old owner still active when it resumes")
	}
	n.settle()
	n.converged()
}

// pauseOwner pauses owner o of partition p (no tick reaches it, and it is
// cut off) while the others, whose map drops it, take p over and commit a
// newer Majority write; it returns the others.
func pauseOwner(t *testing.T, n *network, ids []string, o string, p int) []string {
	t.Helper()
	others := slices.DeleteFunc(slices.Clone(ids), func(s string) bool { return s == o })
	n.isolate([]string{o}, others)
	n.setMap(others, others...)
	for range 40 { // o is paused: no tick reaches it
		n.deliverAll()
		n.now = n.now.Add(250 * time.Millisecond)
		for _, id := range others {
			n.nodes[id].e.Tick(n.now)
			n.collect(n.nodes[id])
		}
	}
	x := ""
	for _, id := range others {
		if n.nodes[id].e.parts[p].active {
			x = id
		}
	}
	if x == "" {
		t.Fatalf("nobody took partition %d over: %s", p, n.statusLine())
	}
	after, _ := n.propose(x, p, "k", "after", WaitMajority)
	n.deliverAll()
	if c := mustDone(t, n.nodes[x], after); c.Err != nil {
		t.Fatal(c.Err)
	}
	return others
}

// TestNoQuorumSaysWhatToDo: a write or read refused for want of quorum
// says what the server sees, what writes need and what the operator can
// do about it (the survivor of two servers that left answered "no quorum"
// and nothing more). The error is still ErrNoQuorum, coded Unavailable,
// and its message still starts with "no quorum".
func TestNoQuorumSaysWhatToDo(t *testing.T) {
	const parts = 4
	ids := []string{"a", "b", "c"}
	ownedBy := func(t *testing.T, n *network, id string, members []string) int {
		t.Helper()
		m := n.buildMap(members)
		for p := range parts {
			if o, _ := m.Owner(p); o.ID == id {
				return p
			}
		}
		t.Fatalf("%s owns nothing in a map of %v", id, members)
		return 0
	}
	refused := func(t *testing.T, n *network, p int, want string) {
		t.Helper()
		_, err := n.propose("a", p, "k", "v", WaitAck)
		require.ErrorIs(t, err, ErrNoQuorum)
		require.Equal(t, errs.Unavailable, errs.CodeOf(err))
		require.Equal(t, want, err.Error())
		n.token++
		err = n.nodes["a"].e.ProposeRead(ReadRequest{Partition: p, Token: n.token})
		require.ErrorIs(t, err, ErrNoQuorum, "a read")
		require.Equal(t, want, err.Error(), "a read")
	}

	t.Run("two of three gone", func(t *testing.T) {
		n := newNetwork(t, parts, ids)
		n.settle()
		n.crash("b")
		n.crash("c")
		n.setMap([]string{"a"}, "a")
		n.settle()
		refused(t, n, 0, `fero: unavailable: no quorum: server a sees 1 of the 3 servers of its configuration alive, and writes need 2 (a majority); b, c are not: if gone for good, remove them from the configuration with "fero forget b c" (Resource.Forget); if only stopped or cut off, bring them back instead`)
	})
	t.Run("cut off", func(t *testing.T) {
		n := newNetwork(t, parts, ids)
		n.settle()
		n.isolate([]string{"a"}, []string{"b", "c"})
		n.tick(4 * time.Second) // past the lease: a hears nobody, and its map still lists b and c
		refused(t, n, ownedBy(t, n, "a", ids), "fero: unavailable: no quorum: server a has heard from 1 of its 3 live servers within its lease (3s), and writes need 2 (a majority): it may be cut off from the others")
	})
	t.Run("fixed quorum", func(t *testing.T) {
		n := newNetwork(t, parts, ids, WithQuorum(3))
		n.settle()
		n.crash("c")
		n.setMap([]string{"a", "b"}, "a", "b")
		n.settle()
		refused(t, n, ownedBy(t, n, "a", []string{"a", "b"}), "fero: unavailable: no quorum: server a sees 2 live servers, and writes need 3 (the fixed quorum): start servers, or lower the fixed quorum (WithQuorum, fero serve --quorum)")
	})
}
