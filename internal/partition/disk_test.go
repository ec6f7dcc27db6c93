package partition

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// testDisk is a durable store as the engine's driver keeps it: per
// partition a snapshot, the entries after it and the meta; and the
// configuration. It copies what it is given, as a store does.
type testDisk struct {
	snaps   []*Snapshot
	entries [][]Entry
	metas   []*PartMeta
	config  *Config
}

func newTestDisk(parts int) *testDisk {
	return &testDisk{snaps: make([]*Snapshot, parts), entries: make([][]Entry, parts), metas: make([]*PartMeta, parts)}
}

func (d *testDisk) write(t testing.TB, rd Ready) {
	t.Helper()
	for _, w := range rd.Durable {
		if w.Err != nil {
			t.Fatalf("partition %d: %v", w.Partition, w.Err)
		}
		p := w.Partition
		if s := w.Snapshot; s != nil {
			d.snaps[p] = &Snapshot{Base: s.Base, BaseEpoch: s.BaseEpoch, Runs: slices.Clone(s.Runs), State: bytes.Clone(s.State)}
			d.entries[p] = d.entries[p][:0]
		}
		for _, e := range w.Entries {
			want := d.last(p) + 1
			if e.Offset != want {
				t.Fatalf("partition %d: the engine hands the disk offset %d after %d", p, e.Offset, want-1)
			}
			e.Key, e.Value = strings.Clone(e.Key), bytes.Clone(e.Value)
			d.entries[p] = append(d.entries[p], e)
		}
		if w.Meta != nil {
			m := *w.Meta
			d.metas[p] = &m
		}
	}
	if rd.Config != nil {
		c := *rd.Config
		c.Voters = slices.Clone(c.Voters)
		d.config = &c
	}
}

func (d *testDisk) last(p int) uint64 {
	if n := len(d.entries[p]); n > 0 {
		return d.entries[p][n-1].Offset
	}
	if d.snaps[p] != nil {
		return d.snaps[p].Base
	}
	return 0
}

// check asserts that the disk holds the copy as the engine has it after a
// Ready: its last offset, and meta equal to the engine's.
func (d *testDisk) check(e *Engine, pt *part) error {
	if d == nil {
		return nil
	}
	if last := d.last(pt.p); last != pt.log.last() {
		return fmt.Errorf("the disk holds offsets to %d, the log to %d", last, pt.log.last())
	}
	m := pt.meta()
	if dm := d.metas[pt.p]; (dm == nil && m != PartMeta{}) || (dm != nil && *dm != m) {
		return fmt.Errorf("the disk's meta %+v, the engine's %+v", dm, m)
	}
	bound := e.cfg.historyBytes
	if s := d.snaps[pt.p]; s != nil {
		bound = max(bound, len(s.State))
	}
	if n := diskEntryBytes(d.entries[pt.p]); n > bound+roundBytes {
		return fmt.Errorf("the disk holds %d bytes of entries past its snapshot, the bound is %d", n, bound)
	}
	return nil
}

// roundBytes bounds the entry bytes one Ready can add to a partition in
// these tests, beyond the bound the disk's tail is held to.
const roundBytes = 64 << 10

// restartDurable restarts server id from its disk, as a new incarnation:
// its engine is built from nothing but what the disk holds.
func (n *network) restartDurable(id string) *node {
	n.t.Helper()
	old := n.nodes[id]
	if old.disk == nil {
		n.t.Fatalf("%s has no disk", id)
	}
	if n.inc == nil {
		n.inc = map[string]uint64{}
	}
	n.inc[id] = max(n.inc[id], 1) + 1
	nd := n.add(id, old.client)
	nd.disk = old.disk
	for p := range n.parts {
		ents := append([]Entry(nil), old.disk.entries[p]...)
		if err := nd.e.Restore(n.parts, p, old.disk.snaps[p], ents, old.disk.metas[p]); err != nil {
			n.t.Fatalf("%s: restore partition %d: %v", id, p, err)
		}
	}
	if c := old.disk.config; c != nil {
		if err := nd.e.RestoreConfig(*c); err != nil {
			n.t.Fatal(err)
		}
	}
	// The restored state is the disk's.
	for p := range n.parts {
		if !maps.Equal(nd.st.kv[p], old.st.kv[p]) && old.disk.last(p) == old.e.parts[p].log.last() {
			n.t.Fatalf("%s partition %d: restored state %v, it had %v", id, p, nd.st.kv[p], old.st.kv[p])
		}
	}
	return nd
}

// TestDiskFollowsTheEngine: with WithDurable, after every Ready the disk
// a driver keeps from it holds each copy's last offset and meta (checked by
// the network after each step), through writes, a split, owner changes
// and catch-up by snapshot; and the disk's tail stays bounded.
func TestDiskFollowsTheEngine(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 4, ids, WithDurable(), WithHistoryMax(8), WithHistoryBytes(400), WithFetchMax(4))
	n.settle()
	for i := range 100 {
		id := ids[i%3]
		if _, err := n.propose(id, i%4, fmt.Sprintf("k%d", i%7), fmt.Sprint(i), WaitMajority); err != nil {
			t.Fatal(err)
		}
		if i == 40 {
			n.isolate([]string{"c"}, []string{"a", "b"})
			n.setMap([]string{"a", "b"}, "a", "b")
		}
		if i == 70 {
			n.heal()
			n.setMap(ids, ids...)
		}
		n.deliverAll()
		n.tick(100 * time.Millisecond)
	}
	n.settle()
	n.converged()
	for _, id := range ids {
		for p := range n.parts {
			if n.nodes[id].disk.snaps[p] == nil {
				t.Fatalf("%s partition %d: no snapshot on disk after %d writes with a history of 400 bytes", id, p, 100/4)
			}
		}
	}
}

// TestRestoredStateGoesToDiskAsIs: a durable server that catches up by
// snapshot writes the state it restored to its disk (the reply's bytes, not
// an encoding of its copy made again), and restarted from that disk at once
// it holds the same state in every partition.
func TestRestoredStateGoesToDiskAsIs(t *testing.T) {
	const parts = 6
	n := newNetwork(t, parts, []string{"a", "b"}, WithDurable(), WithHistoryMax(4))
	n.settle()
	for p := range parts {
		for i := range 10 {
			_, _ = n.propose(n.owner(p), p, fmt.Sprint("k", i), fmt.Sprint(p, "-", i), WaitAck)
		}
	}
	n.deliverAll()
	d := n.add("d", false)
	d.disk = newTestDisk(n.parts)
	n.setMap([]string{"a", "b", "d"}, "a", "b", "d")
	for range 50 {
		n.deliverAll()
		if n.caughtUp("d") {
			break
		}
		n.tick(100 * time.Millisecond)
	}
	if !n.caughtUp("d") {
		t.Fatalf("d did not catch up: %s", n.statusLine())
	}
	restored := 0
	for p := range parts {
		if len(kinds(d.events, p, EventRestored)) > 0 {
			restored++
			if d.disk.snaps[p] == nil {
				t.Fatalf("partition %d was restored, and the disk has no snapshot", p)
			}
		}
	}
	if restored == 0 {
		t.Fatal("d restored no partition from a snapshot: the test did not reach the case")
	}
	// restartDurable fails the test if a restored state differs.
	nd := n.restartDurable("d")
	for p := range parts {
		if !maps.Equal(nd.st.kv[p], d.st.kv[p]) {
			t.Fatalf("partition %d after the restart: %v, before: %v", p, nd.st.kv[p], d.st.kv[p])
		}
	}
}

// TestDurableRestartKeepsTheVote (docs/storage.md rule 4): a server that
// restarts from its disk is the voter it was: it holds every write it
// acked and every epoch it promised, so its new incarnation votes at once,
// and the cluster goes on with it while another server is down. Without
// its disk (TestRestartedServerVotesOnlyOnceCaughtUp) it would wait.
func TestDurableRestartKeepsTheVote(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 4, ids, WithDurable())
	n.settle()
	for i := range 20 {
		if _, err := n.propose(ids[i%3], i%4, fmt.Sprintf("k%d", i), "v", WaitMajority); err != nil {
			t.Fatal(err)
		}
		n.deliverAll()
	}
	// c goes down for good; b restarts from its disk. a and b are a
	// majority of three only if b's new incarnation votes.
	n.crash("c")
	b := n.restartDurable("b")
	n.setMap([]string{"a", "b"}, "a", "b")
	n.settle()
	if !b.e.Voting() || !n.nodes["a"].e.isVoter("b") {
		t.Fatalf("b restarted from its disk does not vote: %+v", n.nodes["a"].e.Voters())
	}
	for p := range n.parts {
		if n.owner(p) == "" {
			t.Fatalf("partition %d has no owner with a and b up: %s", p, n.statusLine())
		}
	}
	for i := range 20 {
		if got := b.st.kv[i%4][fmt.Sprintf("k%d", i)]; got != "v" {
			t.Fatalf("b lost k%d across its restart", i)
		}
	}
	tok, err := n.propose("b", 0, "after", "x", WaitMajority)
	if err != nil {
		t.Fatal(err)
	}
	n.deliverAll()
	if c := mustDone(t, b, tok); c.Err != nil {
		t.Fatalf("a Majority write with a and b up: %v", c.Err)
	}
}

// TestWholeClusterRestartsFromDisk: every server restarts from its disk
// at once; the cluster forms again with the configuration it had (no
// server founds a new one), and every Majority-acked write is there.
func TestWholeClusterRestartsFromDisk(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 4, ids, WithDurable(), WithHistoryMax(8), WithHistoryBytes(200))
	n.settle()
	var acked []string
	for i := range 60 {
		tok, err := n.propose(ids[i%3], i%4, fmt.Sprintf("k%d", i), "v", WaitMajority)
		if err != nil {
			t.Fatal(err)
		}
		n.deliverAll()
		if c, ok := n.nodes[ids[i%3]].done[tok]; ok && c.Err == nil {
			acked = append(acked, fmt.Sprintf("%d/k%d", i%4, i))
		}
	}
	if len(acked) < 50 {
		t.Fatalf("only %d of 60 writes acked before the restart", len(acked))
	}
	n.queue = nil // the crash takes every message in flight
	for _, id := range ids {
		n.restartDurable(id)
	}
	n.setMap(ids, ids...)
	n.settle()
	n.converged()
	for _, id := range ids {
		if !n.nodes[id].e.Voting() {
			t.Fatalf("%s does not vote after the restart: %+v", id, n.nodes[id].e.Voters())
		}
		for _, k := range acked {
			var p int
			var key string
			fmt.Sscanf(k, "%d/%s", &p, &key)
			if n.nodes[id].st.kv[p][key] != "v" {
				t.Fatalf("%s lost the acked write %s", id, k)
			}
		}
	}
}

// TestARestartDoesNotTakeItsPredecessorsReplies: a server forwards a
// write to its owner and restarts from its disk before the owner's reply
// comes. The reply, sent to the server's id, reaches the new incarnation
// (a peer sends to whichever process holds the id now), which must not
// take it for the answer to a forward of its own: with ids counted from 1
// in every incarnation it did, and told a caller its write had committed
// when the owner had not seen it. FuzzSchedules found the same collision
// in fetch ids (a reply entries from the wrong offset).
func TestARestartDoesNotTakeItsPredecessorsReplies(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 4, ids, WithDurable())
	n.settle()
	p := slices.IndexFunc([]int{0, 1, 2, 3}, func(p int) bool { return n.owner(p) != "b" })
	owner := n.owner(p)
	if _, err := n.propose("b", p, "k", "old", WaitMajority); err != nil {
		t.Fatal(err)
	}
	staleReply := func(env envelope) bool {
		_, ok := env.msg.(*ForwardReply)
		return ok && env.to == "b"
	}
	n.deliverWhere(func(env envelope) bool { return !staleReply(env) })
	if !slices.ContainsFunc(n.queue, staleReply) {
		t.Fatalf("the owner %s sent b no reply to its forward", owner)
	}
	b := n.restartDurable("b")
	n.setMap(ids, ids...)
	tok, err := n.propose("b", p, "k", "new", WaitMajority)
	if err != nil {
		t.Fatal(err)
	}
	// The old reply arrives before the new forward is even delivered.
	n.deliver(slices.IndexFunc(n.queue, staleReply))
	if c, ok := b.done[tok]; ok {
		t.Fatalf("the new incarnation's write completed by its predecessor's reply: %+v", c)
	}
	n.deliverAll()
	if c := mustDone(t, b, tok); c.Err != nil {
		t.Fatalf("the new write: %v", c.Err)
	}
	if got := b.st.kv[p]["k"]; got != "new" {
		t.Fatalf("k is %q, want new", got)
	}
}
