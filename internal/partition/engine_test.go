package partition

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/wire"
)

func kinds(evs []Event, p int, k EventKind) []Event {
	var out []Event
	for _, ev := range evs {
		if ev.Partition == p && ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

func groupOf(m *ring.Map, p int) (owner string, replicas []string) {
	o, _ := m.Owner(p)
	for _, r := range m.Replicas(p) {
		replicas = append(replicas, r.ID)
	}
	return o.ID, replicas
}

func isMsg[T Message](to string) func(envelope) bool {
	return func(e envelope) bool {
		_, ok := e.msg.(T)
		return ok && (to == "" || e.to == to)
	}
}

func mustDone(t *testing.T, nd *node, tok uint64) Completion {
	t.Helper()
	c, ok := nd.done[tok]
	if !ok {
		t.Fatalf("%s: no completion for token %d", nd.id, tok)
	}
	return c
}

func TestSingleNodeCommit(t *testing.T) {
	n := newNetwork(t, 1, []string{"a"})
	a := n.nodes["a"]
	if s := a.e.Status(0); s.Role != RoleOwner || s.Accepted != (Epoch{1, "a"}) {
		t.Fatalf("status after map: %+v", s)
	}
	if a.e.HasReady() {
		t.Fatal("ready with nothing to do")
	}
	if err := a.e.Propose(Request{Type: 2, Key: "k", Value: val("v0")}); err != nil {
		t.Fatal(err)
	}
	if !a.e.HasReady() {
		t.Fatal("not ready after a commit")
	}
	n.collect(a)
	tok, err := n.propose("a", 0, "k", "v1", WaitAck)
	if err != nil {
		t.Fatal(err)
	}
	if c := mustDone(t, a, tok); c.Err != nil || c.Position != (Position{Epoch{1, "a"}, 2}) {
		t.Fatalf("completion %+v", c)
	}
	tok, _ = n.propose("a", 0, "k", "v2", WaitMajority) // a group of one is its own majority
	if c := mustDone(t, a, tok); c.Err != nil || c.Position.Offset != 3 {
		t.Fatalf("completion %+v", c)
	}
	if got := a.st.kv[0]["k"]; got != "v2" {
		t.Fatalf("state %q", got)
	}
	evs := kinds(a.events, 0, EventCommitted)
	if len(evs) != 3 || evs[2].Entry.Offset != 3 {
		t.Fatalf("committed events %+v", evs)
	}
	if len(kinds(a.events, 0, EventOwnershipGained)) != 1 {
		t.Fatal("no ownership event")
	}
	if len(n.queue) != 0 {
		t.Fatalf("a single node sent %d messages", len(n.queue))
	}
}

func TestSteadyReplication(t *testing.T) {
	n := newNetwork(t, 4, []string{"a", "b", "c"})
	n.settle()
	var toks []uint64
	for p := range 4 {
		owner := n.owner(p)
		for i := range 10 {
			tok, err := n.propose(owner, p, "k"+string(rune('a'+i)), "v", WaitMajority)
			if err != nil {
				t.Fatal(err)
			}
			toks = append(toks, tok)
		}
	}
	n.deliverAll()
	for _, tok := range toks {
		found := false
		for _, nd := range n.nodes {
			if c, ok := nd.done[tok]; ok {
				found = true
				if c.Err != nil {
					t.Fatalf("write %d: %v", tok, c.Err)
				}
			}
		}
		if !found {
			t.Fatalf("write %d never completed", tok)
		}
	}
	n.converged()
	for p := range 4 {
		for _, id := range n.ids() {
			if got := n.nodes[id].e.Status(p).Position.Offset; got != 10 {
				t.Fatalf("%s partition %d at %d", id, p, got)
			}
		}
	}
}

func TestGapThenFetch(t *testing.T) {
	n := newNetwork(t, 1, []string{"a", "b", "c"})
	n.settle()
	owner := n.owner(0)
	c := n.ids()[0]
	if c == owner {
		c = n.ids()[1]
	}
	for i := range 3 {
		if _, err := n.propose(owner, 0, "k", string(rune('1'+i)), WaitAck); err != nil {
			t.Fatal(err)
		}
	}
	// Lose the first commit to c, deliver the other two: c buffers them and
	// asks the owner for what it lacks.
	commits := slices.Collect(func(yield func(int) bool) {
		for i, e := range n.queue {
			if _, ok := e.msg.(*Commit); ok && e.to == c && !yield(i) {
				return
			}
		}
	})
	if len(commits) != 3 {
		t.Fatalf("%d commits queued for %s", len(commits), c)
	}
	first := n.queue[commits[0]]
	n.queue = slices.Delete(n.queue, commits[0], commits[0]+1)
	n.deliverWhere(isMsg[*Commit](c))
	st := n.nodes[c].e.Status(0)
	if st.Gap != 2 || st.Position.Offset != 0 {
		t.Fatalf("status after gap: %+v", st)
	}
	if !slices.ContainsFunc(n.queue, isMsg[*Fetch](owner)) {
		t.Fatal("no fetch for the gap")
	}
	n.deliverAll()
	if st := n.nodes[c].e.Status(0); st.Gap != 0 || st.Position.Offset != 3 || n.nodes[c].st.kv[0]["k"] != "3" {
		t.Fatalf("after fetch: %+v %v", st, n.nodes[c].st.kv[0])
	}
	// The lost commit arriving late is a duplicate.
	n.step(first)
	n.converged()
}

func TestDuplicateDelivery(t *testing.T) {
	n := newNetwork(t, 2, []string{"a", "b", "c"})
	for round := range 20 {
		for p := range 2 {
			if o := n.owner(p); o != "" {
				_, _ = n.propose(o, p, "k", string(rune('a'+round)), WaitMajority)
			}
		}
		// Deliver every message twice, the copy right after the original.
		for len(n.queue) > 0 {
			env := n.queue[0]
			n.deliver(0)
			n.step(env)
		}
		n.tick(300 * time.Millisecond)
	}
	n.settle()
	n.converged()
}

func TestReordering(t *testing.T) {
	for seed := range uint64(8) {
		rng := newRand(seed)
		n := newNetwork(t, 2, []string{"a", "b", "c"})
		n.roundTrip, n.shared = seed%3 == 0, seed%3 == 1
		for i := range 300 {
			if i%10 == 0 {
				p := rng.IntN(2)
				if o := n.owner(p); o != "" {
					_, _ = n.propose(o, p, "k"+string(rune('a'+rng.IntN(5))), "v", WaitMajority)
				}
			}
			if len(n.queue) > 0 {
				n.deliver(rng.IntN(len(n.queue))) // any order
			}
			if i%25 == 0 {
				n.tick(200 * time.Millisecond)
			}
		}
		n.settle()
		n.converged()
	}
}

// joinNetwork returns a settled two-node network and a partition that the
// third node, c, takes over when it joins.
func joinNetwork(t *testing.T) (*network, int) {
	n := newNetwork(t, 16, []string{"a", "b"})
	n.add("c", false)
	full := n.buildMap([]string{"a", "b", "c"})
	for p := range 16 {
		if o, _ := full.Owner(p); o.ID == "c" {
			n.settle()
			return n, p
		}
	}
	t.Fatal("c owns nothing")
	return nil, 0
}

func TestOwnerChangeOnJoin(t *testing.T) {
	n, p := joinNetwork(t)
	prev := n.owner(p)
	for i := range 5 {
		if _, err := n.propose(prev, p, "k"+string(rune('0'+i)), "old", WaitMajority); err != nil {
			t.Fatal(err)
		}
	}
	n.deliverAll()
	n.setMap([]string{"a", "b", "c"}, "a", "b", "c")
	c := n.nodes["c"]
	if s := c.e.Status(p); s.Role != RoleSyncing {
		t.Fatalf("c: %+v", s)
	}
	if n.nodes[prev].e.parts[p].active {
		t.Fatal("previous owner still active after the map moved the partition")
	}
	// Writes at the new owner and at the previous one (forwarded) wait
	// for the sync.
	t1, err := n.propose("c", p, "new1", "x", WaitAck)
	if err != nil {
		t.Fatal(err)
	}
	t2, _ := n.propose(prev, p, "new2", "y", WaitAck)
	n.deliverWhere(isMsg[*Forward]("c"))
	if s := c.e.Status(p); s.Queued != 2 || len(kinds(c.events, p, EventCommitted)) != 0 {
		t.Fatalf("before sync: %+v", s)
	}
	// The sync must ask the previous owner.
	if !slices.ContainsFunc(n.queue, isMsg[*PosRequest](prev)) {
		t.Fatal("no position request to the previous owner")
	}
	n.deliverAll()
	if s := c.e.Status(p); s.Role != RoleOwner || s.Queued != 0 {
		t.Fatalf("after sync: %+v", s)
	}
	// Synced first: the old writes are in c's state, and the queued writes
	// follow them.
	for i := range 5 {
		if c.st.kv[p]["k"+string(rune('0'+i))] != "old" {
			t.Fatalf("c lacks old write %d: %v", i, c.st.kv[p])
		}
	}
	if cp := mustDone(t, c, t1); cp.Err != nil || cp.Position.Offset != 6 || cp.Position.Epoch.Owner != "c" {
		t.Fatalf("queued write: %+v", cp)
	}
	if cp := mustDone(t, n.nodes[prev], t2); cp.Err != nil || cp.Position.Offset != 7 {
		t.Fatalf("forwarded queued write: %+v", cp)
	}
	evs := c.events
	gained := slices.IndexFunc(evs, func(e Event) bool { return e.Kind == EventOwnershipGained && e.Partition == p })
	committed := slices.IndexFunc(evs, func(e Event) bool { return e.Kind == EventCommitted && e.Partition == p })
	if gained < 0 || committed < gained {
		t.Fatalf("committed (%d) before ownership (%d)", committed, gained)
	}
	n.settle()
	n.converged()
}

// crashSetup finds, in a four-node cluster, a partition whose owner o has
// replicas r1, r2 and follower f, such that after o dies the new owner is
// not f.
func crashSetup(t *testing.T, opts ...Option) (n *network, p int, o, f string) {
	ids := []string{"a", "b", "c", "d"}
	n = newNetwork(t, 32, ids, opts...)
	for p = range 32 {
		o, reps := groupOf(n.buildMap(ids), p)
		f = ""
		for _, id := range ids {
			if id != o && !slices.Contains(reps, id) {
				f = id
			}
		}
		rest := slices.DeleteFunc(slices.Clone(ids), func(s string) bool { return s == o })
		if no, _ := groupOf(n.buildMap(rest), p); no != f {
			n.settle()
			return n, p, o, f
		}
	}
	t.Fatal("no suitable partition")
	return
}

func TestOwnerCrash(t *testing.T) {
	// A quorum of 2 lets the new owner sync without the follower, whose
	// replies are dropped below: the case rule 6 is for.
	n, p, o, f := crashSetup(t, WithQuorum(2))
	durable, _ := n.propose(o, p, "durable", "1", WaitMajority)
	n.deliverAll()
	if c := mustDone(t, n.nodes[o], durable); c.Err != nil {
		t.Fatal(c.Err)
	}
	// A write that reaches only the follower: acked by the owner alone.
	lost, _ := n.propose(o, p, "lost", "2", WaitAck)
	n.dropWhere(func(e envelope) bool { _, ok := e.msg.(*Commit); return ok && e.to != f })
	n.deliverAll()
	if c := mustDone(t, n.nodes[o], lost); c.Err != nil {
		t.Fatal(c.Err)
	}
	if n.nodes[f].st.kv[p]["lost"] != "2" {
		t.Fatal("follower did not get the write")
	}
	n.crash(o)
	rest := slices.DeleteFunc(n.ids(), func(s string) bool { return s == o })
	n.setMap(rest, rest...)
	// The follower's position never reaches the new owner: it syncs from the
	// majority of the group, which lacks the write.
	n.dropWhere(isMsg[*PosReply](""))
	for len(n.queue) > 0 {
		n.dropWhere(func(e envelope) bool { _, ok := e.msg.(*PosReply); return ok && e.from == f })
		n.deliver(0)
	}
	n.settle()
	n.converged()
	for _, id := range rest {
		st := n.nodes[id].st.kv[p]
		if st["durable"] != "1" {
			t.Fatalf("%s lost the majority-acked write", id)
		}
		if _, ok := st["lost"]; ok {
			t.Fatalf("%s kept a write its history dropped", id)
		}
	}
	dropped := kinds(n.nodes[f].events, p, EventDropped)
	if len(dropped) != 1 || dropped[0].Entry.Key != "lost" {
		t.Fatalf("follower dropped events: %+v", dropped)
	}
}

func TestOwnerCrashMajorityWriteSurvives(t *testing.T) {
	n, p, o, _ := crashSetup(t)
	_, reps := groupOf(n.nodes[o].e.m, p)
	// Acked by the owner and its two replicas only: a majority of the four
	// servers.
	tok, _ := n.propose(o, p, "k", "v", WaitMajority)
	n.dropWhere(func(e envelope) bool { _, ok := e.msg.(*Commit); return ok && !slices.Contains(reps, e.to) })
	n.deliverAll()
	if c := mustDone(t, n.nodes[o], tok); c.Err != nil {
		t.Fatal(c.Err)
	}
	n.crash(o)
	rest := slices.DeleteFunc(n.ids(), func(s string) bool { return s == o })
	n.setMap(rest, rest...)
	n.settle()
	n.converged()
	for _, id := range rest {
		if n.nodes[id].st.kv[p]["k"] != "v" {
			t.Fatalf("%s lost a majority-acked write", id)
		}
	}
}

func TestConcurrentOwnersFenced(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 32, ids)
	p := n.movingPartition(ids, "a", "b")
	n.settle()
	_, _ = n.propose("a", p, "k", "a1", WaitMajority)
	n.deliverAll()
	// b wrongly believes a is dead and takes the partition while a still
	// owns it by its own map.
	n.setMap([]string{"b", "c"}, "b")
	n.deliverAll()
	if !n.nodes["b"].e.parts[p].active || !n.nodes["a"].e.parts[p].active {
		t.Fatal("want both to believe they own the partition")
	}
	// a's next write is refused by the copies that accepted b's epoch, and
	// a yields.
	tok, _ := n.propose("a", p, "k", "a2", WaitMajority)
	n.deliverAll()
	if n.nodes["a"].e.parts[p].active {
		t.Fatal("a still active after being fenced")
	}
	if c := mustDone(t, n.nodes["a"], tok); !errors.Is(c.Err, ErrOwnershipLost) {
		t.Fatalf("fenced write: %+v", c)
	}
	if len(kinds(n.nodes["a"].events, p, EventFenced)) == 0 {
		t.Fatal("no fenced event")
	}
	if got := n.owner(p); got != "b" {
		t.Fatalf("owner %q, want b", got)
	}
	tb, _ := n.propose("b", p, "k", "b1", WaitMajority)
	n.deliverAll()
	if c := mustDone(t, n.nodes["b"], tb); c.Err != nil {
		t.Fatal(c.Err)
	}
	// Maps converge: a takes the partition back, with b's write.
	n.setMap(ids, ids...)
	n.settle()
	n.converged()
	if got := n.owner(p); got != "a" {
		t.Fatalf("owner %q after the maps agree, want a", got)
	}
	if v := n.nodes["c"].st.kv[p]["k"]; v != "b1" {
		t.Fatalf("k = %q, want b1", v)
	}
}

func TestHistoryCapSnapshotCatchUp(t *testing.T) {
	n := newNetwork(t, 4, []string{"a", "b", "c"}, WithHistoryMax(8), WithFetchMax(3))
	n.settle()
	owned := map[int]string{}
	for p := range 4 {
		owned[p] = n.owner(p)
	}
	// c falls far behind.
	n.isolate([]string{"c"}, []string{"a", "b"})
	for p := range 4 {
		for i := range 30 {
			_, _ = n.propose(n.owner(p), p, "k"+string(rune('a'+i%7)), string(rune('A'+i)), WaitAck)
		}
	}
	n.deliverAll()
	n.heal()
	// d joins late.
	n.add("d", false)
	n.setMap([]string{"a", "b", "c", "d"}, "a", "b", "c", "d")
	n.settle()
	n.converged()
	for _, id := range []string{"c", "d"} {
		nd := n.nodes[id]
		for p := range 4 {
			if owned[p] == id {
				continue // c wrote these itself while cut off
			}
			if len(kinds(nd.events, p, EventRestored)) == 0 {
				t.Fatalf("%s partition %d caught up without a snapshot", id, p)
			}
			for _, ev := range kinds(nd.events, p, EventApplied) {
				if ev.Entry.Offset <= 30-8 {
					t.Fatalf("%s replayed trimmed offset %d", id, ev.Entry.Offset)
				}
			}
		}
	}
}

func TestMinoritySide(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids)
	n.settle()
	var pa []int // partitions a owns
	for p := range 8 {
		if n.owner(p) == "a" {
			pa = append(pa, p)
		}
	}
	if len(pa) == 0 {
		t.Fatal("a owns nothing")
	}
	n.isolate([]string{"a"}, []string{"b", "c"})
	// Before failure detection a still owns its partitions: a write acked
	// by a alone is accepted, and will be dropped.
	lost, _ := n.propose("a", pa[0], "lost", "x", WaitAck)
	if c := mustDone(t, n.nodes["a"], lost); c.Err != nil {
		t.Fatal(c.Err)
	}
	n.setMap([]string{"a"}, "a")
	n.setMap([]string{"b", "c"}, "b", "c")
	n.tick(time.Second)
	for p := range 8 {
		if s := n.nodes["a"].e.Status(p); s.Role != RoleSyncing {
			t.Fatalf("a without quorum: %+v", s)
		}
	}
	for p := range 8 {
		if _, err := n.propose("a", p, "m", "x", WaitAck); !errors.Is(err, ErrNoQuorum) || errs.CodeOf(err) != errs.Unavailable {
			t.Fatalf("minority write to %d: %v", p, err)
		}
	}
	n.settle()
	var toks []uint64
	for p := range 8 {
		o := n.owner(p)
		if o != "b" && o != "c" {
			t.Fatalf("partition %d owner %q on the majority side", p, o)
		}
		tok, err := n.propose(o, p, "maj", "y", WaitMajority)
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, tok)
	}
	n.deliverAll()
	for _, tok := range toks {
		ok := false
		for _, id := range []string{"b", "c"} {
			if c, found := n.nodes[id].done[tok]; found && c.Err == nil {
				ok = true
			}
		}
		if !ok {
			t.Fatalf("majority write %d not acked", tok)
		}
	}
	n.heal()
	n.setMap(ids, ids...)
	n.settle()
	n.converged()
	for p := range 8 {
		if n.nodes["a"].st.kv[p]["maj"] != "y" {
			t.Fatalf("a lacks partition %d's majority write", p)
		}
	}
	if _, ok := n.nodes["a"].st.kv[pa[0]]["lost"]; ok {
		t.Fatal("the minority's write survived")
	}
	if d := kinds(n.nodes["a"].events, pa[0], EventDropped); len(d) != 1 || d[0].Entry.Key != "lost" {
		t.Fatalf("dropped events on a: %+v", d)
	}
}

func TestForward(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids)
	n.settle()
	p, via := 0, ""
	owner := n.owner(p)
	for _, id := range ids {
		if id != owner {
			via = id
			break
		}
	}
	tok, err := n.propose(via, p, "k", "v", WaitAck)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(n.queue, func(e envelope) bool { f, ok := e.msg.(*Forward); return ok && e.to == owner && f.Hops == 1 }) {
		t.Fatal("no forward to the owner")
	}
	n.deliverAll()
	if c := mustDone(t, n.nodes[via], tok); c.Err != nil || c.Position.Epoch.Owner != owner || c.Position.Offset != 1 {
		t.Fatalf("forwarded write: %+v", c)
	}
	// via's map is stale and names third as owner; third knows better and
	// refuses instead of forwarding again.
	third := ""
	for _, id := range ids {
		if id != owner && id != via {
			third = id
		}
	}
	stale := n.buildMap([]string{via, third})
	q := -1
	for x := range 8 {
		if o, _ := stale.Owner(x); o.ID == third && n.owner(x) == owner {
			q = x
			break
		}
	}
	if q < 0 {
		t.Skip("no partition for the stale map")
	}
	if err := n.nodes[via].e.SetMap(stale, nil); err != nil {
		t.Fatal(err)
	}
	n.collect(n.nodes[via])
	n.queue = nil
	tok, _ = n.propose(via, q, "k2", "v", WaitAck)
	n.deliverWhere(isMsg[*Forward](third))
	if slices.ContainsFunc(n.queue, isMsg[*Forward]("")) {
		t.Fatal("a forwarded write was forwarded again")
	}
	n.deliverAll()
	c := mustDone(t, n.nodes[via], tok)
	if !errors.Is(c.Err, ErrNotOwner) || c.Owner != owner {
		t.Fatalf("second hop: %+v", c)
	}
}

func TestKReplicaDial(t *testing.T) {
	n := newNetwork(t, 1, []string{"a", "b", "c"})
	n.settle()
	o := n.owner(0)
	_, reps := groupOf(n.nodes[o].e.m, 0)
	tok, err := n.propose(o, 0, "k", "v", WaitReplicas)
	_ = tok
	if err != nil {
		t.Fatal(err)
	}
	n.token++
	tok = n.token
	if err := n.nodes[o].e.Propose(Request{Partition: 0, Type: 2, Key: "k", Value: val("v"), Token: tok, Wait: WaitReplicas, K: 2}); err != nil {
		t.Fatal(err)
	}
	n.collect(n.nodes[o])
	n.deliverWhere(func(e envelope) bool { return e.to == reps[0] || e.from == reps[0] })
	if _, ok := n.nodes[o].done[tok]; ok {
		t.Fatal("k=2 write completed after one replica ack")
	}
	n.deliverAll()
	if c := mustDone(t, n.nodes[o], tok); c.Err != nil || c.Position.Offset != 2 {
		t.Fatalf("k=2: %+v", c)
	}
	err = n.nodes[o].e.Propose(Request{Partition: 0, Type: 2, Key: "k", Value: val("v"), Token: 99, Wait: WaitReplicas, K: 3})
	if !errors.Is(err, ErrReplicas) || errs.CodeOf(err) != errs.FailedPrecondition {
		t.Fatalf("k=3 of two replicas: %v", err)
	}
}

func TestSyncQueueBounded(t *testing.T) {
	n, p := joinNetwork(t)
	n.nodes["c"].e.cfg.queueMax = 2
	n.setMap([]string{"a", "b", "c"}, "a", "b", "c")
	for i := range 2 {
		if _, err := n.propose("c", p, "k", string(rune('0'+i)), WaitAck); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.propose("c", p, "k", "x", WaitAck); !errors.Is(err, ErrSyncQueueFull) {
		t.Fatalf("third queued write: %v", err)
	}
	n.settle()
	n.converged()
}

func TestSyncQueueTimeout(t *testing.T) {
	n, p := joinNetwork(t)
	n.isolate([]string{"c"}, []string{"a", "b"}) // the sync cannot finish
	n.setMap([]string{"a", "b", "c"}, "a", "b", "c")
	tok, _ := n.propose("c", p, "k", "v", WaitAck)
	for range 11 {
		n.tick(time.Second)
	}
	// Never committed: a definite error (rule 2).
	if c := mustDone(t, n.nodes["c"], tok); !errors.Is(c.Err, ErrExpired) || errs.CodeOf(c.Err) != errs.Unavailable {
		t.Fatalf("queued write: %+v", c)
	}
	n.heal()
	n.settle()
	n.converged()
}

func TestClientGetsEveryCommit(t *testing.T) {
	n := newNetwork(t, 4, []string{"a", "b"})
	n.add("x", true)
	n.setMap([]string{"a", "b"}, "a", "b", "x")
	n.settle()
	for p := range 4 {
		tok, err := n.propose("x", p, "k", "v", WaitAck)
		if err != nil {
			t.Fatal(err)
		}
		n.deliverAll()
		if c := mustDone(t, n.nodes["x"], tok); c.Err != nil {
			t.Fatal(c.Err)
		}
		if s := n.nodes["x"].e.Status(p); s.Role != RoleClient || s.Position.Offset != 1 {
			t.Fatalf("client status %+v", s)
		}
	}
	n.converged()
}

// A client's acks count for no write: it reports its position to the
// owner once per tick, not after every commit it applies, while a server
// copy acks at once.
func TestClientAcksOncePerTick(t *testing.T) {
	n := newNetwork(t, 1, []string{"a", "b"})
	n.add("x", true)
	n.setMap([]string{"a", "b"}, "a", "b", "x")
	n.settle()
	owner := n.owner(0)
	copyOf := "a"
	if owner == "a" {
		copyOf = "b"
	}
	acksFrom := func(id string) int {
		k := 0
		for _, env := range n.queue {
			if _, ok := env.msg.(*CommitAck); ok && env.from == id {
				k++
			}
		}
		return k
	}
	for i := range 3 {
		if _, err := n.propose(owner, 0, "k", "v"+strconv.Itoa(i), WaitAck); err != nil {
			t.Fatal(err)
		}
		n.deliverWhere(isMsg[*Commit]("x"))
		n.deliverWhere(isMsg[*Commit](copyOf))
		if k := acksFrom("x"); k != 0 {
			t.Fatalf("the client acked %d times before a tick", k)
		}
		if k := acksFrom(copyOf); k != i+1 {
			t.Fatalf("the server copy sent %d acks after %d commits", k, i+1)
		}
	}
	n.tick(time.Millisecond)
	if k := acksFrom("x"); k != 1 {
		t.Fatalf("the client sent %d acks at the tick, want 1", k)
	}
	if s := n.nodes["x"].e.Status(0); s.Position.Offset != 3 {
		t.Fatalf("client status %+v", s)
	}
	// The owner, not having heard from its copies at that tick, probed
	// them; the client answers the probe at the next tick, then falls
	// quiet.
	for range 2 {
		n.deliverAll()
		n.tick(time.Millisecond)
	}
	if k := acksFrom("x"); k != 0 {
		t.Fatalf("the client acked again (%d) with nothing new", k)
	}
	n.converged()
}

func TestOptionsValidated(t *testing.T) {
	for _, o := range []Option{WithHistoryMax(0), WithFetchMax(0), WithGapBufferMax(-1), WithQuorum(-1), WithSyncTimeout(0)} {
		if _, err := New("a", newTestState(1), o); errs.CodeOf(err) != errs.InvalidArgument {
			t.Fatalf("option accepted: %v", err)
		}
	}
	if _, err := New("", newTestState(1)); err == nil {
		t.Fatal("empty id accepted")
	}
}

func TestMalformedMessagesRefused(t *testing.T) {
	n := newNetwork(t, 1, []string{"a", "b"})
	n.settle()
	b := n.nodes["b"].e
	bad := []Message{
		&Commit{Partition: 7},
		&Commit{Entries: []Entry{{Epoch: Epoch{9, "x"}, Offset: 1, Type: 2}}}, // not from its owner
		&Commit{Entries: []Entry{{Epoch: Epoch{9, "a"}, Offset: 1, Type: 9}}},
		&Fetch{From: 0},
		&Forward{Type: 2, Value: []byte{0xc1}, Hops: 1},
	}
	for _, m := range bad {
		if err := b.Step("a", ClusterID{}, m); errs.CodeOf(err) != errs.InvalidArgument {
			t.Fatalf("%T accepted: %v", m, err)
		}
	}
	n.collect(n.nodes["b"])
	n.settle()
	n.converged()
}

func TestMessagesRoundTrip(t *testing.T) {
	n := newNetwork(t, 4, []string{"a", "b", "c"}, WithHistoryMax(4))
	n.roundTrip = true
	n.settle()
	for i := range 20 {
		p := i % 4
		_, _ = n.propose(n.ids()[i%3], p, "k", "v", WaitMajority)
	}
	n.add("d", false)
	n.setMap([]string{"a", "b", "c", "d"}, "a", "b", "c", "d")
	n.settle()
	n.converged()
}

// A copy that answered a syncing owner's position request has promised to
// refuse older epochs: the old owner cannot get a write majority-acked
// behind the new owner's back (which the new owner's start would then
// truncate).
func TestPositionReplyIsAPromise(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 32, ids)
	full, bc := n.buildMap(ids), n.buildMap([]string{"b", "c"})
	p := -1
	for q := range 32 {
		if o, _ := full.Owner(q); o.ID == "a" {
			if o2, _ := bc.Owner(q); o2.ID == "b" {
				p = q
				break
			}
		}
	}
	if p < 0 {
		t.Fatal("no suitable partition")
	}
	n.settle()
	n.setMap([]string{"b", "c"}, "b")
	// c answers b's request; the answer is held back.
	n.deliverWhere(isMsg[*PosRequest]("c"))
	held := n.queue
	n.queue = nil
	tok, _ := n.propose("a", p, "k", "late", WaitMajority)
	n.deliverAll()
	if c, ok := n.nodes["a"].done[tok]; ok && c.Err == nil {
		t.Fatalf("old owner's write acked by a majority after the promise: %+v", c)
	}
	if _, ok := n.nodes["c"].st.kv[p]["k"]; ok {
		t.Fatal("c applied a write from the epoch it promised to refuse")
	}
	n.queue = append(n.queue, held...)
	n.deliverAll()
	n.setMap(ids, ids...)
	n.settle()
	n.converged()
}

// A new owner waits for the previous owner while it is alive: it may hold
// writes acked to their callers but not yet on any replica.
func TestSyncWaitsForLivePreviousOwner(t *testing.T) {
	n, p := joinNetwork(t)
	prev := n.owner(p)
	other := "a"
	if prev == "a" {
		other = "b"
	}
	tok, _ := n.propose(prev, p, "k", "acked", WaitAck)
	n.queue = nil // the commit reaches nobody
	if c := mustDone(t, n.nodes[prev], tok); c.Err != nil {
		t.Fatal(c.Err)
	}
	n.setMap([]string{"a", "b", "c"}, "a", "b", "c")
	// The other replica answers first; c and it are a majority of the new
	// group, but the previous owner has not answered yet.
	n.deliverWhere(func(e envelope) bool { return e.to == other || e.from == other })
	if s := n.nodes["c"].e.Status(p); s.Role != RoleSyncing {
		t.Fatalf("c started without the previous owner: %+v", s)
	}
	n.deliverAll()
	n.settle()
	n.converged()
	if n.nodes["c"].st.kv[p]["k"] != "acked" {
		t.Fatal("the previous owner's write was lost")
	}
}

// TestCutOffOwnerGetsNoMajority (rule 4): an owner cut off with one of its
// replicas still holds its lease for a moment, and its replica acks what
// it commits. Those two are a majority of the replica group but not of the
// cluster: the write must not be reported Majority-acked, because the
// other side takes the partition over without it. (Counting acks against
// the replica group, as the engine once did, completes the write here and
// loses it on heal.) The other side keeps writing meanwhile.
func TestCutOffOwnerGetsNoMajority(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e"}
	n := newNetwork(t, 32, ids)
	n.settle()
	full := n.buildMap(ids)
	const p = 0
	o, reps := groupOf(full, p)
	side := []string{o, reps[0]}
	rest := slices.DeleteFunc(slices.Clone(ids), func(s string) bool { return slices.Contains(side, s) })
	n.isolate(side, rest)
	tok, err := n.propose(o, p, "k", "minority", WaitMajority)
	if err != nil {
		t.Fatal(err)
	}
	n.deliverAll()
	if _, ok := n.nodes[o].done[tok]; ok {
		t.Fatal("a write acked by two of five servers completed as Majority")
	}
	n.setMap(side, side...)
	n.setMap(rest, rest...)
	n.settle()
	if c := mustDone(t, n.nodes[o], tok); !errors.Is(c.Err, ErrOwnershipLost) || errs.CodeOf(c.Err) != errs.Aborted {
		t.Fatalf("the cut-off owner's write ended with %+v, want ownership lost (indefinite)", c)
	}
	no, _ := groupOf(n.buildMap(rest), p)
	if s := n.nodes[no].e.Status(p); s.Role != RoleOwner {
		t.Fatalf("partition %d: %s did not take over on the majority side: %+v", p, no, s)
	}
	tok, err = n.propose(no, p, "k", "majority", WaitMajority)
	if err != nil {
		t.Fatal(err)
	}
	n.deliverAll()
	if c := mustDone(t, n.nodes[no], tok); c.Err != nil {
		t.Fatal(c.Err)
	}
	n.heal()
	n.setMap(ids, ids...)
	n.settle()
	n.converged()
	for _, id := range ids {
		if v := n.nodes[id].st.kv[p]["k"]; v != "majority" {
			t.Fatalf("%s holds k=%q after the heal, want the Majority-acked write", id, v)
		}
	}
}

// TestStateRefusesWrite: a write the state cannot apply is refused to its
// caller, locally or forwarded, and nothing is committed anywhere.
func TestStateRefusesWrite(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids)
	n.settle()
	p := 0
	owner := n.owner(p)
	via := ""
	for _, id := range ids {
		if id != owner {
			via = id
			break
		}
	}
	before := n.nodes[owner].e.Status(p)

	// On the owner: Propose itself refuses.
	_, err := n.propose(owner, p, invalidPrefix+"x", "v", WaitAck)
	if errs.CodeOf(err) != errs.FailedPrecondition {
		t.Fatalf("local refusal: got %v", err)
	}
	// Forwarded: the completion carries the state's code and message.
	tok, err := n.propose(via, p, invalidPrefix+"y", "v", WaitAck)
	if err != nil {
		t.Fatal(err)
	}
	n.deliverAll()
	c := mustDone(t, n.nodes[via], tok)
	if errs.CodeOf(c.Err) != errs.FailedPrecondition || !strings.Contains(c.Err.Error(), "refused by the state") {
		t.Fatalf("forwarded refusal: %+v", c)
	}
	n.deliverAll()
	if after := n.nodes[owner].e.Status(p); after.Position != before.Position {
		t.Fatalf("refused writes were committed: %+v → %+v", before.Position, after.Position)
	}
	// A valid write still goes through afterwards.
	tok, err = n.propose(via, p, "k", "v", WaitAck)
	if err != nil {
		t.Fatal(err)
	}
	n.deliverAll()
	if c := mustDone(t, n.nodes[via], tok); c.Err != nil {
		t.Fatalf("valid write after refusals: %+v", c)
	}
}

// TestStaleMapYieldsToUnknownOwner: a node whose map lags (it has not
// heard of a newcomer yet) is fenced by the newcomer's epoch. It must back
// off as from any live rival, not re-take the partition at once: its sync
// would ask only the members its stale map knows and drop what the
// newcomer committed. (Seen in internal/node's cluster test: owner-acked
// writes lost right after a join.)
func TestStaleMapYieldsToUnknownOwner(t *testing.T) {
	const parts = 32
	n := newNetwork(t, parts, []string{"a", "b"})
	n.settle()
	n.add("c", false)
	full, stale := n.buildMap([]string{"a", "b", "c"}), n.buildMap([]string{"a", "b"})
	p := -1
	for x := 0; x < parts; x++ {
		o, _ := full.Owner(x)
		s, _ := stale.Owner(x)
		if o.ID == "c" && s.ID == "b" {
			p = x
			break
		}
	}
	if p < 0 {
		t.Fatal("no partition moves from b to c; pick other IDs")
	}
	n.setMap([]string{"a", "b", "c"}, "a", "c") // b has not heard of c yet
	for i := 0; i < 40 && !n.nodes["c"].e.parts[p].active; i++ {
		n.deliverAll()
		n.tick(10 * time.Millisecond)
	}
	if !n.nodes["c"].e.parts[p].active {
		t.Fatalf("c never took partition %d: %s", p, n.statusLine())
	}
	tok, err := n.propose("c", p, "k", "v", WaitAck)
	if err != nil {
		t.Fatal(err)
	}
	mustDone(t, n.nodes["c"], tok)
	// The write's commit messages are lost: only c holds it.
	n.dropWhere(func(e envelope) bool { _, ok := e.msg.(*Commit); return ok })
	// Time passes, less than the fence backoff, before b's map catches up.
	for i := 0; i < 5; i++ {
		n.deliverAll()
		n.tick(100 * time.Millisecond)
	}
	n.setMap([]string{"a", "b", "c"}, "b")
	n.settle()
	for _, id := range []string{"a", "b", "c"} {
		if got := n.nodes[id].st.kv[p]["k"]; got != "v" {
			t.Errorf("%s lost c's acked write on partition %d (has %q)", id, p, got)
		}
	}
}

// TestMessagesBoundedInBytes: commits and fetch replies split where their
// entries would pass the message bound, and a write larger than the entry
// bound is refused before it is committed.
func TestMessagesBoundedInBytes(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 1, ids, WithMaxEntry(200), WithMaxMessage(1000))
	n.settle()
	owner := n.owner(0)
	big := strings.Repeat("x", 150)
	for i := range 20 {
		if _, err := n.propose(owner, 0, "k"+strconv.Itoa(i), big, WaitNone); err != nil {
			t.Fatal(err)
		}
	}
	copyID := ids[0]
	if copyID == owner {
		copyID = ids[1]
	}
	var sizes []int
	for _, env := range n.queue {
		if c, ok := env.msg.(*Commit); ok && env.to == copyID {
			bytes := 0
			for _, e := range c.Entries {
				bytes += len(e.Key) + len(e.Value) + len(e.Epoch.Owner) + entryOverhead
			}
			if bytes > 1000 && len(c.Entries) > 1 {
				t.Fatalf("a commit of %d entries carries %d bytes, over the bound", len(c.Entries), bytes)
			}
			sizes = append(sizes, len(c.Entries))
		}
	}
	if len(sizes) < 2 {
		t.Fatalf("20 entries of ~200 bytes went out in %v commits; want them split", sizes)
	}
	n.deliverAll()
	n.converged()

	_, err := n.propose(owner, 0, "huge", strings.Repeat("y", 300), WaitAck)
	if errs.CodeOf(err) != errs.InvalidArgument || !strings.Contains(err.Error(), "exceeds the limit of 200") {
		t.Fatalf("oversized write: %v", err)
	}
}

// TestMinorityPairRegainsOwnership: five servers split 3 | 2, where the
// two on the minority side are the owner of a partition and one of its
// replicas. The majority side takes the partition over and commits
// majority-acked writes. When the split heals, the old owner is owner
// again by the map; what it and its fellow minority replica know is stale,
// and their two positions alone make a majority of the new replica group.
// The sync must still find the majority side's writes.
func TestMinorityPairRegainsOwnership(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e"}
	const parts = 16
	// The configuration keeps the minority from writing however long the
	// split lasts (rule 9).
	n := newNetwork(t, parts, ids)
	n.settle()
	full := n.buildMap(ids)
	p, owner, mate := -1, "", ""
	for x := range parts {
		o, _ := full.Owner(x)
		rs := full.Replicas(x)
		if len(rs) == 2 {
			p, owner, mate = x, o.ID, rs[0].ID
			break
		}
	}
	if p < 0 {
		t.Fatal("no partition with two replicas")
	}
	minor := []string{owner, mate}
	var major []string
	for _, id := range ids {
		if !slices.Contains(minor, id) {
			major = append(major, id)
		}
	}
	for i := range 2 {
		tok, err := n.propose(owner, p, "k"+strconv.Itoa(i), "before", WaitMajority)
		if err != nil {
			t.Fatal(err)
		}
		n.deliverAll()
		if c := mustDone(t, n.nodes[owner], tok); c.Err != nil {
			t.Fatal(c.Err)
		}
	}

	n.isolate(minor, major)
	n.setMap(major, major...)
	n.setMap(minor, minor...)
	// Two of the partition's previous group are on the other side; the
	// majority side's promises are a quorum of the configuration, which
	// meets every Majority write (rule 4), so it takes the partition.
	n.settle()
	x := n.owner(p)
	if !slices.Contains(major, x) {
		t.Fatalf("partition %d owned by %q during the split", p, x)
	}
	for i := range 2 {
		tok, err := n.propose(x, p, "k"+strconv.Itoa(i), "during", WaitMajority)
		if err != nil {
			t.Fatal(err)
		}
		n.deliverAll()
		if c := mustDone(t, n.nodes[x], tok); c.Err != nil {
			t.Fatal(c.Err)
		}
	}

	n.heal()
	n.setMap(ids, ids...)
	n.settle()
	n.converged()
	if o := n.owner(p); o != owner {
		t.Fatalf("after the heal partition %d is owned by %q, want %q", p, o, owner)
	}
	for _, id := range ids {
		for i := range 2 {
			if v := n.nodes[id].st.kv[p]["k"+strconv.Itoa(i)]; v != "during" {
				t.Errorf("%s: k%d = %q: a majority-acked write was lost", id, i, v)
			}
		}
	}
}

// TestCutOffNodeStartsNoEpoch: a node cut off from the majority whose map
// still lists one server of the other side (failure detection has not
// removed it yet) counts a quorum of servers in its map, but cannot reach
// them: it must not start an epoch.
func TestCutOffNodeStartsNoEpoch(t *testing.T) { cutOffSide(t, true) }

// cutOffSide splits five servers 3 | 2 while d and e, cut off, still list
// c (not dead yet in their eyes), with the data plane between the sides
// cut (isolate) or open; d and e must start no epoch, and the majority
// side must adopt none of theirs.
func cutOffSide(t *testing.T, isolate bool) {
	ids := []string{"a", "b", "c", "d", "e"}
	const parts = 16
	n := newNetwork(t, parts, ids)
	n.settle()
	minor, major := []string{"d", "e"}, []string{"a", "b", "c"}
	if isolate {
		n.isolate(minor, major)
	}
	n.setMap(major, major...)
	stale := []string{"c", "d", "e"} // c is not dead yet in d's and e's eyes
	n.setMap(stale, minor...)
	n.settle()
	m := n.buildMap(stale)
	for p := range parts {
		o, _ := m.Owner(p)
		if o.ID == "c" {
			continue
		}
		if st := n.nodes[o.ID].e.Status(p); st.Role == RoleOwner {
			t.Fatalf("%s started an epoch for partition %d while cut off: %+v", o.ID, p, st)
		}
		if _, err := n.propose(o.ID, p, "k", "v", WaitAck); errs.CodeOf(err) != errs.Unavailable && err != nil {
			t.Fatalf("write on the cut-off side: %v", err)
		}
		for _, id := range major {
			if acc := n.nodes[id].e.Status(p).Accepted; acc.Owner == "d" || acc.Owner == "e" {
				t.Fatalf("%s adopted %v of partition %d from the cut-off side", id, acc, p)
			}
		}
	}
}

// TestSettleDelay: after a server leaves the map, no sync starts until the
// settle delay has passed.
func TestSettleDelay(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids, WithSettleDelay(3*time.Second))
	n.settle()
	n.crash("a")
	rest := []string{"b", "c"}
	n.setMap(rest, rest...)
	n.deliverAll()
	n.tick(time.Second)
	n.deliverAll()
	m := n.buildMap(rest)
	for p := range 8 {
		o, _ := m.Owner(p)
		if st := n.nodes[o.ID].e.Status(p); st.Role == RoleOwner && st.Accepted.Owner == o.ID && st.Accepted.Term > 1 {
			t.Fatalf("partition %d: %s took over 1s after the map changed: %+v", p, o.ID, st)
		}
	}
	n.settle()
	for p := range 8 {
		if n.owner(p) == "" {
			t.Fatalf("partition %d has no owner after the settle delay", p)
		}
	}
}

// TestCutOffNodeGetsNoPromise: as TestCutOffNodeStartsNoEpoch, but with
// the data plane open: c, which has declared d and e dead, must neither
// answer their position requests nor adopt their epochs; otherwise d and e
// count c's answers toward a quorum of three (c's replies even renew their
// lease on it) and take partitions the majority side owns, dropping its
// majority-acked writes when the split heals.
func TestCutOffNodeGetsNoPromise(t *testing.T) { cutOffSide(t, false) }

// TestWarmCoversAWindow checks what Warm hands the state, and how many
// messages it says it covered.
func TestWarmCoversAWindow(t *testing.T) {
	n := newNetwork(t, 4, []string{"a"})
	a := n.nodes["a"]
	ep := a.e.Status(0).Accepted
	commit := func(p int, keys ...string) *Commit {
		c := &Commit{Partition: uint32(p)}
		for i, k := range keys {
			c.Entries = append(c.Entries, Entry{Epoch: ep, Offset: uint64(i + 1), Type: wire.RecordUpdate, Key: k})
		}
		return c
	}
	msgs := []Message{
		commit(0, "k0", "k1", "k2"),
		&Forward{Partition: 1, Key: "f"},
		&Heartbeat{Partition: 2},
		commit(3, "k3", "k4"),
		&Forward{Partition: 9, Key: "out of range"},
	}
	for _, c := range []struct {
		window  int
		covered int
		warmed  []string
	}{
		{window: 1, covered: 1, warmed: []string{"0/k0", "0/k1", "0/k2"}}, // the first message whole, though it holds more
		{window: 4, covered: 2, warmed: []string{"0/k0", "0/k1", "0/k2", "1/f"}},
		{window: 5, covered: 3, warmed: []string{"0/k0", "0/k1", "0/k2", "1/f"}}, // a heartbeat counts, and has no key
		{window: 100, covered: 5, warmed: []string{"0/k0", "0/k1", "0/k2", "1/f", "3/k3", "3/k4"}},
	} {
		a.st.warmed = nil
		if got := a.e.Warm(msgs, c.window); got != c.covered {
			t.Errorf("window %d: covered %d messages, want %d", c.window, got, c.covered)
		}
		if !slices.Equal(a.st.warmed, c.warmed) {
			t.Errorf("window %d: warmed %v, want %v", c.window, a.st.warmed, c.warmed)
		}
	}
	if got := a.e.Warm(nil, 4); got != 0 {
		t.Errorf("no messages: covered %d", got)
	}
	if a.e.HasReady() {
		t.Error("Warm left the engine something to do")
	}

	// A write this node commits is warmed; one it forwards is not.
	a.st.warmed = nil
	a.e.WarmRequest(0, "mine")
	a.e.WarmRequest(7, "out of range")
	a.e.WarmRequests()
	a.e.WarmRequests() // the queue was emptied
	if want := []string{"0/mine"}; !slices.Equal(a.st.warmed, want) {
		t.Errorf("requests warmed %v, want %v", a.st.warmed, want)
	}
	c := n.add("c", true)
	n.setMap([]string{"a"}, "a", "c")
	c.st.warmed = nil
	c.e.WarmRequest(0, "forwarded")
	c.e.WarmRequests()
	if len(c.st.warmed) != 0 {
		t.Errorf("a client warmed %v", c.st.warmed)
	}
}

// A copy holding an entry from a cut-off owner's epoch, whose server has
// since trimmed past that offset, must still learn that the entry is not
// in the partition's history: the snapshot that catches it up drops it
// with an event (rule 8). Before the log kept its epoch runs across
// trimming, the server could not compare and the copy's entry was
// replaced by the snapshot without one.
func TestSnapshotCatchUpChecksTrimmedHistory(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids, WithHistoryMax(8), WithFetchMax(3))
	n.add("d", true)
	n.setMap(ids, "a", "b", "c", "d")
	n.settle()
	var pa []int // partitions a owns
	for p := range 8 {
		if n.owner(p) == "a" {
			pa = append(pa, p)
		}
	}
	if len(pa) == 0 {
		t.Fatal("a owns nothing")
	}
	p := pa[0]
	n.isolate([]string{"a", "d"}, []string{"b", "c"})
	// Before failure detection a still owns p: its ack reaches d, on its
	// side of the split.
	for _, key := range []string{"lost", "lost2"} {
		lost, _ := n.propose("a", p, key, "x", WaitAck)
		n.deliverAll()
		if c := mustDone(t, n.nodes["a"], lost); c.Err != nil {
			t.Fatal(c.Err)
		}
	}
	if n.nodes["d"].st.kv[p]["lost2"] != "x" {
		t.Fatal("the client on a's side did not apply a's write")
	}
	n.setMap([]string{"a"}, "a", "d")
	n.setMap([]string{"b", "c"}, "b", "c")
	n.settle()
	// The majority side writes far past the history cap.
	for i := range 30 {
		if _, err := n.propose(n.owner(p), p, "k"+string(rune('a'+i%5)), "y", WaitMajority); err != nil {
			t.Fatal(err)
		}
		n.deliverAll()
	}
	n.heal()
	n.setMap(ids, "a", "b", "c", "d")
	n.settle()
	n.converged()
	for _, id := range []string{"a", "d"} {
		nd := n.nodes[id]
		if _, ok := nd.st.kv[p]["lost"]; ok {
			t.Fatalf("%s kept the cut-off owner's write", id)
		}
		if len(kinds(nd.events, p, EventRestored)) == 0 {
			t.Fatalf("%s caught up without a snapshot: the test did not reach the history cap", id)
		}
		// Newest first, the order that undoes them.
		if d := kinds(nd.events, p, EventDropped); len(d) != 2 || d[0].Entry.Key != "lost2" || d[1].Entry.Key != "lost" {
			t.Fatalf("dropped events on %s: %+v", id, d)
		}
	}
}

// joinFarBehind makes a network of servers a and b whose every partition
// is past the history cap, and adds server d, which catches up only by
// snapshots.
func joinFarBehind(t *testing.T, parts int) *network {
	n := newNetwork(t, parts, []string{"a", "b"}, WithHistoryMax(4))
	n.settle()
	for p := range parts {
		for i := range 10 {
			_, _ = n.propose(n.owner(p), p, fmt.Sprint("k", i), fmt.Sprint(i), WaitAck)
		}
	}
	n.deliverAll()
	n.add("d", false)
	n.setMap([]string{"a", "b", "d"}, "a", "b", "d")
	return n
}

// TestSnapshotsInFlightAreBounded: a server joining a resource whose every
// partition is past the history cap gets snapshots from each server at
// most MaxSnapshotsInFlight at a time; the rest are answered Busy and asked
// again, and it catches up in every partition. (Sent all at once, the
// snapshots of 1 GB of state were one burst that kept a joining server
// from ever catching up.)
func TestSnapshotsInFlightAreBounded(t *testing.T) {
	const parts = 24
	n := joinFarBehind(t, parts)

	// Deliver one message at a time; no server ever has more than the
	// bound of snapshots to d in the queue.
	busy := 0
	for steps := 0; len(n.queue) > 0 && steps < 1_000_000; steps++ {
		queued := map[string]int{}
		for _, env := range n.queue {
			if _, ok := env.msg.(*SnapshotReply); ok && env.to == "d" {
				queued[env.from]++
				if queued[env.from] > MaxSnapshotsInFlight {
					t.Fatalf("%s has %d snapshots queued to d", env.from, queued[env.from])
				}
			}
		}
		if m, ok := n.queue[0].msg.(*FetchReply); ok && n.queue[0].to == "d" && m.Busy {
			busy++
		}
		n.deliver(0)
		if len(n.queue) == 0 {
			n.tick(100 * time.Millisecond)
		}
		if n.caughtUp("d") {
			break
		}
	}
	n.settle()
	n.converged()
	if busy == 0 {
		t.Fatal("no fetch was answered Busy: the test did not reach the bound")
	}
	for p := range parts {
		if len(kinds(n.nodes["d"].events, p, EventRestored)) == 0 && n.owner(p) != "d" {
			t.Fatalf("d caught up in partition %d without a snapshot", p)
		}
	}
}

// TestWaitingFetchTakesAFreedSlot: a fetch answered Busy waits at the
// server, and takes the first slot that frees, so a joining server catches
// up in every partition without a tick (the copy's retry) between
// snapshots. Before, each slot stood idle until the copy asked again,
// which the node's 100 ms tick rounds up: about half of a 1 GB join.
func TestWaitingFetchTakesAFreedSlot(t *testing.T) {
	const parts = 24
	n := joinFarBehind(t, parts)
	busy := 0
	for steps := 0; len(n.queue) > 0 && steps < 1_000_000; steps++ {
		if m, ok := n.queue[0].msg.(*FetchReply); ok && n.queue[0].to == "d" && m.Busy {
			busy++
		}
		n.deliver(0)
	}
	if busy == 0 {
		t.Fatal("no fetch was answered Busy: the test did not reach the bound")
	}
	if !n.caughtUp("d") {
		t.Fatalf("d has not caught up without a tick: %s", n.statusLine())
	}
}

// caughtUp reports whether id's copy of every partition is at the owner's
// position.
func (n *network) caughtUp(id string) bool {
	for p := range n.parts {
		o := n.owner(p)
		if o == "" || n.nodes[id].e.parts[p].position() != n.nodes[o].e.parts[p].position() {
			return false
		}
	}
	return true
}

// TestLargeSnapshotGoesInPieces (rule 8): a partition larger than a
// message reaches a copy far behind in pieces, none larger than the
// message bound (give or take one key), asked for one by one; a lost piece
// is asked for again, and the copy swaps the state in only with the last.
func TestLargeSnapshotGoesInPieces(t *testing.T) {
	n := newNetwork(t, 2, []string{"a", "b"}, WithHistoryMax(4), WithMaxEntry(64), WithMaxMessage(256))
	n.settle()
	for i := range 200 {
		_, _ = n.propose(n.owner(0), 0, fmt.Sprintf("key%03d", i), fmt.Sprintf("value %d", i), WaitAck)
		n.deliverAll()
	}
	n.add("d", false)
	n.setMap([]string{"a", "b", "d"}, "a", "b", "d")
	pieces, lost := 0, false
	for steps := 0; steps < 1_000_000 && !n.caughtUp("d"); steps++ {
		if len(n.queue) == 0 {
			n.tick(100 * time.Millisecond)
			continue
		}
		env := n.queue[0]
		if m, ok := env.msg.(*SnapshotReply); ok && env.to == "d" && m.Partition == 0 {
			if m.Snap == 0 {
				t.Fatalf("a snapshot of 200 keys in one message of %d bytes", len(m.State))
			}
			if len(m.State) > 256+64 {
				t.Fatalf("a piece of %d bytes", len(m.State))
			}
			pieces++
			if m.Chunk == 3 && !lost {
				lost = true
				n.queue = n.queue[1:] // lost on the way: the fetch retry asks again
				continue
			}
			if m.More && len(n.nodes["d"].st.kv[0]) > 0 {
				t.Fatal("d shows part of the snapshot before its last piece")
			}
		}
		n.deliver(0)
	}
	n.settle()
	n.converged()
	if pieces < 20 || !lost {
		t.Fatalf("%d pieces, one lost: %v", pieces, lost)
	}
	if got := len(n.nodes["d"].st.kv[0]); got != 200 {
		t.Fatalf("d holds %d keys of 200", got)
	}
}

// TestSyncAsksAgain: a server that had declared the new owner dead ignores
// its position request until its map shows the owner alive again (rule
// 9). The owner asks the servers that have not answered again after a
// fetch retry, so its sync completes in that first epoch instead of
// waiting out the sync timeout: a restarted owner took about 3 s to take
// its partitions back, 2 of them waiting.
func TestSyncAsksAgain(t *testing.T) {
	n, p := joinNetwork(t)
	n.setMap([]string{"a", "b", "c"}, "a", "b", "c")
	c := n.nodes["c"]
	first := c.e.parts[p].sync
	if first == nil {
		t.Fatalf("c is not syncing partition %d: %s", p, n.statusLine())
	}
	if dropped := n.dropWhere(func(e envelope) bool { _, ok := e.msg.(*PosRequest); return ok && e.from == "c" }); dropped == 0 {
		t.Fatal("no position request to drop")
	}
	for range 8 { // 800 ms: past the fetch retry, well inside the sync timeout
		n.deliverAll()
		n.tick(100 * time.Millisecond)
	}
	n.deliverAll()
	if s := c.e.Status(p); s.Role != RoleOwner || s.Accepted != first.epoch {
		t.Fatalf("c after 800 ms: %v in %v, want owner in its first proposal %v", s.Role, s.Accepted, first.epoch)
	}
}

// TestOwnerReportsReplicationLag: an owner's Status says how far its
// slowest copy's acks trail its log, and for how long they have not
// moved; once the acks arrive, no lag.
func TestOwnerReportsReplicationLag(t *testing.T) {
	n := newNetwork(t, 4, []string{"a", "b", "c"})
	n.settle()
	p := 1
	owner := n.owner(p)
	slow := "a"
	for _, id := range n.ids() {
		if id != owner {
			slow = id
			break
		}
	}
	if s := n.nodes[owner].e.Status(p); s.Lag != 0 || s.LagSeconds != 0 {
		t.Fatalf("lag before any write: %+v", s)
	}
	for i := range 5 {
		_, _ = n.propose(owner, p, fmt.Sprintf("k%d", i), "v", WaitAck)
	}
	// Everything but the slow copy's acks.
	n.deliverWhere(func(e envelope) bool {
		_, ack := e.msg.(*CommitAck)
		return !(ack && e.from == slow)
	})
	n.tick(2 * time.Second)
	n.deliverWhere(func(e envelope) bool {
		_, ack := e.msg.(*CommitAck)
		return !(ack && e.from == slow)
	})
	s := n.nodes[owner].e.Status(p)
	if s.Lag != 5 {
		t.Fatalf("lag with %s's acks held: %d offsets, want 5 (%+v)", slow, s.Lag, s)
	}
	if s.LagSeconds < 2 {
		t.Fatalf("lag seconds with %s's acks held: %v, want at least the 2 s that passed", slow, s.LagSeconds)
	}
	n.deliverAll()
	if s := n.nodes[owner].e.Status(p); s.Lag != 0 || s.LagSeconds != 0 {
		t.Fatalf("lag once every ack arrived: %+v", s)
	}
}
