package partition

import (
	"slices"
	"testing"
)

// ownerAmong returns the node of ids that owns partition p, or "".
func (n *network) ownerAmong(p int, ids ...string) string {
	for _, id := range ids {
		if nd := n.nodes[id]; !nd.dead && nd.e.parts[p].active {
			return id
		}
	}
	return ""
}

// foundCluster starts server a alone without seeds (it founds the cluster
// and names it a@1), then servers given seeds join it.
func foundCluster(t *testing.T, parts int, joiners ...string) *network {
	t.Helper()
	n := newNetwork(t, parts, []string{"a"})
	n.settle()
	if got, want := n.nodes["a"].e.Cluster(), (ClusterID{Founder: "a", Inc: 1}); got != want {
		t.Fatalf("a founded %v, want %v", got, want)
	}
	for _, id := range joiners {
		n.add(id, false, WithJoining())
	}
	ids := append([]string{"a"}, joiners...)
	n.setMap(ids, ids...)
	n.settle()
	for _, id := range ids {
		e := n.nodes[id].e
		if !e.Voting() || e.Cluster() != (ClusterID{Founder: "a", Inc: 1}) {
			t.Fatalf("%s: voting %v in %v after the join\n%s", id, e.Voting(), e.Cluster(), n.statusLine())
		}
	}
	return n
}

// TestRestartedFounderGivesWay (rule 9, cluster identity): the server that
// founded the cluster without seeds restarts with nothing while cut off
// from the others. Alone, it founds a cluster of its own and acks writes
// in it; the others go on writing. At the heal its cluster gives way:
// every Majority write of the real cluster stands on every server, the
// lone cluster's writes are dropped (with events), and the founder catches
// up and votes again. Before clusters had names, the others took the
// founder's new vote for its own word and counted its empty copy, and the
// lone history could win partitions at the heal.
func TestRestartedFounderGivesWay(t *testing.T) {
	const parts = 8
	n := foundCluster(t, parts, "b", "c")
	ids := []string{"a", "b", "c"}
	for p := range parts {
		tok, _ := n.propose(n.owner(p), p, "k", "before", WaitMajority)
		n.settle()
		if c := mustDone(t, n.nodes[n.ownerAmong(p, ids...)], tok); c.Err != nil {
			t.Fatalf("partition %d: %v", p, c.Err)
		}
	}

	// a restarts with nothing, cut off from b and c.
	n.isolate([]string{"a"}, []string{"b", "c"})
	n.queue = slices.DeleteFunc(n.queue, func(e envelope) bool { return e.to == "a" })
	n.add("a", false)
	inc := map[string]uint64{"a": 2}
	n.setMapInc([]string{"a"}, inc, "a")
	n.setMapInc([]string{"b", "c"}, inc, "b", "c")
	n.settle()
	a := n.nodes["a"]
	if got := a.e.Cluster(); got != (ClusterID{Founder: "a", Inc: 2}) {
		t.Fatalf("the restarted founder alone named its cluster %v", got)
	}
	lone := len(n.durable)
	for p := range parts {
		if !a.e.parts[p].active {
			t.Fatalf("the lone founder does not own partition %d: %s", p, n.statusLine())
		}
		tok, _ := n.propose("a", p, "k", "lone", WaitMajority)
		n.deliverAll()
		if c := mustDone(t, a, tok); c.Err != nil {
			t.Fatalf("partition %d: the lone founder refused a write: %v", p, c.Err)
		}
	}
	// Acked by a cluster of one, a minority of the real one: these are
	// the writes that give way.
	n.durable = n.durable[:lone]
	for p := range parts {
		o := n.ownerAmong(p, "b", "c")
		if o == "" {
			t.Fatalf("b and c do not own partition %d: %s", p, n.statusLine())
		}
		tok, _ := n.propose(o, p, "k", "after", WaitMajority)
		n.settle()
		if c := mustDone(t, n.nodes[o], tok); c.Err != nil {
			t.Fatalf("partition %d: %v", p, c.Err)
		}
	}

	n.heal()
	n.setMapInc(ids, inc, ids...)
	n.settle()
	n.converged()
	for _, id := range ids {
		e := n.nodes[id].e
		for p := range parts {
			if v := n.nodes[id].st.kv[p]["k"]; v != "after" {
				t.Fatalf("%s: partition %d holds k=%q, want the real cluster's Majority write", id, p, v)
			}
		}
		if e.Cluster() != (ClusterID{Founder: "a", Inc: 1}) || len(e.Foreign()) != 0 {
			t.Fatalf("%s: cluster %v, foreign %v after the heal", id, e.Cluster(), e.Foreign())
		}
		if !e.isVoter("a") {
			t.Fatalf("%s does not count a once it caught up: %+v", id, e.Voters())
		}
	}
	if a.e.Yields() != 1 {
		t.Fatalf("a gave way %d times, want 1", a.e.Yields())
	}
	dropped := 0
	for _, ev := range a.events {
		if ev.Kind == EventDropped && ev.Entry.Epoch.Owner == "a" && string(ev.Entry.Value) == string(val("lone")) {
			dropped++
		}
	}
	if dropped != parts {
		t.Fatalf("a reported %d of its %d lone writes dropped", dropped, parts)
	}
}

// TestIndependentClustersStayApart (rule 9, cluster identity): two servers
// that each founded a cluster without seeds, wrote to it, and then meet
// never shared a server: neither history may replace the other's. Each
// refuses the other's messages and names it, and both keep their data.
func TestIndependentClustersStayApart(t *testing.T) {
	const parts = 4
	n := newNetwork(t, parts, []string{"a"})
	n.add("d", false)
	n.inc = map[string]uint64{"d": 2}
	n.setMap([]string{"d"}, "d")
	n.settle()
	for _, id := range []string{"a", "d"} {
		for p := range parts {
			tok, _ := n.propose(id, p, "k", id, WaitMajority)
			n.settle()
			if c := mustDone(t, n.nodes[id], tok); c.Err != nil {
				t.Fatalf("%s partition %d: %v", id, p, c.Err)
			}
		}
	}
	n.setMap([]string{"a", "d"}, "a", "d")
	n.settle()
	for _, id := range []string{"a", "d"} {
		e := n.nodes[id].e
		other := map[string]string{"a": "d", "d": "a"}[id]
		if _, ok := e.Foreign()[other]; !ok || e.Yields() != 0 {
			t.Fatalf("%s: foreign %v, yields %d: want %s refused", id, e.Foreign(), e.Yields(), other)
		}
		for p := range parts {
			if v := n.nodes[id].st.kv[p]["k"]; v != id {
				t.Fatalf("%s: partition %d holds k=%q, want its own cluster's write", id, p, v)
			}
		}
		if e.isVoter(other) {
			t.Fatalf("%s counts %s, a server of another cluster: %+v", id, other, e.Voters())
		}
	}
}

// TestEmptyFounderJoins (rule 9, cluster identity): a server without seeds
// names a cluster as soon as it finds itself alone; when a peer finds it
// just after, holding nothing, it gives way and joins, whether the peer's
// cluster holds data or is just as new (then the later name gives way).
func TestEmptyFounderJoins(t *testing.T) {
	const parts = 4
	for _, written := range []bool{true, false} {
		n := newNetwork(t, parts, []string{"a"})
		n.settle()
		if written {
			for p := range parts {
				tok, _ := n.propose("a", p, "k", "a", WaitMajority)
				n.settle()
				if c := mustDone(t, n.nodes["a"], tok); c.Err != nil {
					t.Fatal(c.Err)
				}
			}
		}
		n.add("d", false)
		n.inc = map[string]uint64{"d": 2}
		n.setMap([]string{"d"}, "d")
		n.deliverAll()
		if got := n.nodes["d"].e.Cluster(); got != (ClusterID{Founder: "d", Inc: 2}) {
			t.Fatalf("d alone named %v", got)
		}
		n.setMap([]string{"a", "d"}, "a", "d")
		n.settle()
		n.converged()
		for _, id := range []string{"a", "d"} {
			e := n.nodes[id].e
			if e.Cluster() != (ClusterID{Founder: "a", Inc: 1}) || !e.isVoter("a") || !e.isVoter("d") {
				t.Fatalf("written=%v %s: cluster %v, voters %+v\n%s", written, id, e.Cluster(), e.Voters(), n.statusLine())
			}
			if written {
				for p := range parts {
					if v := n.nodes[id].st.kv[p]["k"]; v != "a" {
						t.Fatalf("%s: partition %d holds k=%q", id, p, v)
					}
				}
			}
		}
	}
}

// TestStaleNameConverges (rule 9, cluster identity, rule 0): a server
// that took one of a forming cluster's names before its servers agreed on
// the lowest (restarted at that moment, it heard first from a server that
// had not changed yet) takes the name agreed on when a server lists its
// name among the cluster's others. In the fault suite such a server, the
// restarted founder of the lowest name, listed neither founder in its
// configuration, took every other server for another cluster's and never
// caught up (seed 14150).
func TestStaleNameConverges(t *testing.T) {
	n := newNetwork(t, 4, []string{"x", "y"}, WithJoining())
	x := n.nodes["x"].e
	agreed, lost := ClusterID{Founder: "a", Inc: 1}, ClusterID{Founder: "y", Inc: 1}
	x.setCluster(lost)
	vs := &Voters{List: []Voter{{ID: "y", Inc: 1}}}
	if err := x.Step("y", agreed, vs); err != nil {
		t.Fatal(err)
	}
	if _, ok := x.Foreign()["y"]; !ok || x.Cluster() != lost {
		t.Fatalf("without kin: cluster %v, foreign %v; want y refused", x.Cluster(), x.Foreign())
	}
	vs.Kin = []ClusterID{lost}
	if err := x.Step("y", agreed, vs); err != nil {
		t.Fatal(err)
	}
	if x.Cluster() != agreed || len(x.Foreign()) > 0 || x.Yields() != 0 {
		t.Fatalf("cluster %v (want %v), foreign %v, yields %d", x.Cluster(), agreed, x.Foreign(), x.Yields())
	}
	if _, ok := x.kin[lost]; !ok {
		t.Fatal("the lost name is not kept as the cluster's")
	}
}

// TestForgottenFounderNamesOneCluster (rule 9, cluster identity, 3):
// servers given each other as seeds lose one, a, before they form. The
// operator forgets a and gives every server seeds without it. A server
// that had not heard the removal when it took its vote named the cluster
// after a, the configuration's earliest-started server as it knew it; the
// others, which had, named it after b. Both names are the one cluster's:
// each list holds the other's founder in the life that named it, a
// forgotten since. Before, the two names refused each other for good and
// the late server kept its first epochs (TestRandomSchedules' seed 1349,
// servers given seeds).
func TestForgottenFounderNamesOneCluster(t *testing.T) {
	byA, byB := ClusterID{Founder: "a", Inc: 1}, ClusterID{Founder: "b", Inc: 1}
	list := func(aLeft bool) []Voter {
		return []Voter{{ID: "a", Inc: 1, Left: aLeft}, {ID: "b", Inc: 1}, {ID: "c", Inc: 1}, {ID: "d", Inc: 1}}
	}
	// Forgotten through a server that never had a's entry (one that
	// joined after a was lost): the removal covers every life up to the
	// time of the forget (Forget), not a's life 1 alone.
	forgotLater := func() []Voter {
		return []Voter{{ID: "a", Inc: 1_000_005_360_000_000, Left: true}, {ID: "b", Inc: 1}, {ID: "c", Inc: 1}, {ID: "d", Inc: 1}}
	}
	for _, tc := range []struct {
		name        string
		mine, heard ClusterID
		myList      []Voter // this server's configuration
		theirList   []Voter
	}{
		{"the forgetting side hears the late name", byB, byA, list(true), list(false)},
		{"the late side hears the forgetting name", byA, byB, list(false), list(true)},
		{"forgotten by a newcomer: the forgetting side hears the late name", byB, byA, forgotLater(), list(false)},
		{"forgotten by a newcomer: the late side hears the forgetting name", byA, byB, list(false), forgotLater()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNetwork(t, 4, []string{"c", "d"}, WithJoining())
			x := n.nodes["c"].e
			for _, v := range tc.myList {
				x.voters[v.ID] = v
			}
			x.setCluster(tc.mine)
			if err := x.Step("d", tc.heard, &Voters{List: tc.theirList}); err != nil {
				t.Fatal(err)
			}
			if x.Cluster() != byA || len(x.Foreign()) > 0 || x.Yields() != 0 {
				t.Fatalf("cluster %v (want %v, the lower), foreign %v, yields %d", x.Cluster(), byA, x.Foreign(), x.Yields())
			}
			if _, ok := x.kin[byB]; !ok {
				t.Fatalf("%v is not kept as the cluster's other name", byB)
			}
		})
	}
}
