package partition

import (
	"errors"
	"testing"
	"time"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// beginTurn asks node id for key's turn and returns the turn's token.
func (n *network) beginTurn(id string, p int, key string) (uint64, error) {
	n.t.Helper()
	n.token++
	nd := n.nodes[id]
	err := nd.e.Propose(Request{Partition: p, Key: key, Token: n.token, Wait: WaitAck, Turn: TurnBegin})
	n.collect(nd)
	return n.token, err
}

// endTurn ends turn on node id, committing key=value first unless value
// is empty, and returns the end's token.
func (n *network) endTurn(id string, p int, turn uint64, key, value string) (uint64, error) {
	n.t.Helper()
	n.token++
	nd := n.nodes[id]
	req := Request{Partition: p, Key: key, Token: n.token, Wait: WaitAck, Turn: TurnEnd, TurnID: turn}
	if value != "" {
		req.Type, req.Value = wire.RecordUpdate, val(value)
		n.record(id, req)
	}
	err := nd.e.Propose(req)
	n.collect(nd)
	return n.token, err
}

// granted reports whether node id has answered token without error.
func granted(nd *node, tok uint64) bool {
	c, ok := nd.done[tok]
	return ok && c.Err == nil
}

// TestTurnHoldsItsKey: while a key's turn is held, writes to the key (and
// to paths inside it) wait; other keys commit at once; the turn's record
// commits first, then the writes that waited, in arrival order.
func TestTurnHoldsItsKey(t *testing.T) {
	n := newNetwork(t, 1, []string{"a"})
	a := n.nodes["a"]
	turn, err := n.beginTurn("a", 0, "k")
	if err != nil || !granted(a, turn) {
		t.Fatalf("begin: %v %+v", err, a.done[turn])
	}
	w1, _ := n.propose("a", 0, "k", "w1", WaitAck)
	w2, _ := n.propose("a", 0, "k.x", "w2", WaitAck)
	other, _ := n.propose("a", 0, "other", "o", WaitAck)
	if _, ok := a.done[w1]; ok {
		t.Fatal("a write to the held key committed during the turn")
	}
	if _, ok := a.done[w2]; ok {
		t.Fatal("a write inside the held key committed during the turn")
	}
	if !granted(a, other) {
		t.Fatalf("a write to another key waited: %+v", a.done[other])
	}
	end, err := n.endTurn("a", 0, turn, "k", "turn")
	if err != nil {
		t.Fatal(err)
	}
	ce, c1, c2 := mustDone(t, a, end), mustDone(t, a, w1), mustDone(t, a, w2)
	if ce.Err != nil || c1.Err != nil || c2.Err != nil {
		t.Fatalf("end %+v, w1 %+v, w2 %+v", ce, c1, c2)
	}
	if !(ce.Position.Offset < c1.Position.Offset && c1.Position.Offset < c2.Position.Offset) {
		t.Fatalf("order: end at %d, w1 at %d, w2 at %d", ce.Position.Offset, c1.Position.Offset, c2.Position.Offset)
	}
	if a.st.kv[0]["k"] != "w1" {
		t.Fatalf("k = %q, want w1", a.st.kv[0]["k"])
	}
	if len(a.e.parts[0].turns) != 0 {
		t.Fatal("the turn is still held")
	}
}

// TestTurnsTakeTheirOrder: a turn asked while another is held waits with
// the writes, in arrival order: what arrived after it waits for it too.
func TestTurnsTakeTheirOrder(t *testing.T) {
	n := newNetwork(t, 1, []string{"a"})
	a := n.nodes["a"]
	t1, _ := n.beginTurn("a", 0, "k")
	before, _ := n.propose("a", 0, "k", "before", WaitAck)
	t2, _ := n.beginTurn("a", 0, "k")
	after, _ := n.propose("a", 0, "k", "after", WaitAck)
	if _, ok := a.done[t2]; ok {
		t.Fatal("a second turn of one key granted while the first is held")
	}
	if _, err := n.endTurn("a", 0, t1, "k", ""); err != nil {
		t.Fatal(err)
	}
	if !granted(a, before) || !granted(a, t2) {
		t.Fatalf("after the first turn: before %+v, second turn %+v", a.done[before], a.done[t2])
	}
	if _, ok := a.done[after]; ok {
		t.Fatal("a write that arrived after the second turn ran during it")
	}
	// The second turn saw the write before it applied.
	if got := a.st.kv[0]["k"]; got != "before" {
		t.Fatalf("the second turn sees k = %q, want before", got)
	}
	if _, err := n.endTurn("a", 0, t2, "k", "second"); err != nil {
		t.Fatal(err)
	}
	if !granted(a, after) || a.st.kv[0]["k"] != "after" {
		t.Fatalf("after the second turn: %+v, k = %q", a.done[after], a.st.kv[0]["k"])
	}
}

// TestTurnEndsWithItsEpoch: a turn begun by an owner that loses the
// partition ends; what waited behind it fails definite, and the holder's
// record is refused, even once the node owns the partition again in a
// later epoch (rule 15: a handler's record commits in the epoch its turn
// began in, or never).
func TestTurnEndsWithItsEpoch(t *testing.T) {
	ids := []string{"a", "b", "c"}
	// The turn outlives the test's settling, so that only the epoch can
	// end it.
	n := newNetwork(t, 32, ids, WithWriteTimeout(time.Hour))
	p := n.movingPartition(ids, "a", "b")
	n.settle()
	a := n.nodes["a"]
	turn, _ := n.beginTurn("a", p, "k")
	if !granted(a, turn) {
		t.Fatalf("begin: %+v", a.done[turn])
	}
	waiting, _ := n.propose("c", p, "k", "forwarded", WaitMajority)
	n.deliverAll()
	if _, ok := n.nodes["c"].done[waiting]; ok {
		t.Fatal("a forwarded write to the held key completed during the turn")
	}
	// b takes the partition over; a learns of the newer epoch.
	n.setMap([]string{"b", "c"}, "b", "c")
	for i := 0; i < 40 && a.e.parts[p].active; i++ {
		n.deliverAll()
		n.tick(250 * time.Millisecond)
	}
	if a.e.parts[p].active {
		t.Fatal("a was never fenced")
	}
	if a.e.parts[p].turns != nil {
		t.Fatal("a still holds the turn of a partition it no longer owns")
	}
	n.setMap(ids, ids...)
	n.settle()
	c := mustDone(t, n.nodes["c"], waiting)
	if c.Err == nil {
		// The write went to the new owner on a retry of the caller's
		// own: here nothing retries, so it must have failed.
		t.Fatalf("the waiting write: %+v", c)
	}
	if !errs.Definite(c.Err) {
		t.Fatalf("the waiting write failed indefinite: %v", c.Err)
	}
	if !a.e.parts[p].active {
		t.Fatal("a does not own the partition again")
	}
	end, err := n.endTurn("a", p, turn, "k", "late")
	if err == nil {
		err = mustDone(t, a, end).Err
	}
	if !errors.Is(err, ErrTurnEnded) || !errs.Definite(err) {
		t.Fatalf("the old turn's record: %v, want ErrTurnEnded", err)
	}
	for _, id := range ids {
		if v := n.nodes[id].st.kv[p]["k"]; v == "late" {
			t.Fatalf("%s holds the old turn's record", id)
		}
	}
	n.converged()
}

// TestTurnEndsAtItsDeadline: a holder that never ends its turn holds the
// key only until the turn's deadline; then the waiting writes run, and its
// late record is refused.
func TestTurnEndsAtItsDeadline(t *testing.T) {
	n := newNetwork(t, 1, []string{"a"})
	a := n.nodes["a"]
	n.token++
	turn := n.token
	if err := a.e.Propose(Request{Key: "k", Token: turn, Wait: WaitAck, Turn: TurnBegin, Deadline: n.now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	n.collect(a)
	w, _ := n.propose("a", 0, "k", "w", WaitAck)
	n.tick(500 * time.Millisecond)
	if _, ok := a.done[w]; ok {
		t.Fatal("the write ran before the turn's deadline")
	}
	n.tick(600 * time.Millisecond)
	if !granted(a, w) {
		t.Fatalf("the write after the turn's deadline: %+v", a.done[w])
	}
	if _, err := n.endTurn("a", 0, turn, "k", "late"); !errors.Is(err, ErrTurnEnded) {
		t.Fatalf("a record after the turn's deadline: %v", err)
	}
	if a.st.kv[0]["k"] != "w" {
		t.Fatalf("k = %q", a.st.kv[0]["k"])
	}
}

// TestTurnQueueBounded: a key's queue holds TurnQueueMax writes; the next
// is refused, definite, with ResourceExhausted.
func TestTurnQueueBounded(t *testing.T) {
	n := newNetwork(t, 1, []string{"a"}, WithTurnQueueMax(2))
	turn, _ := n.beginTurn("a", 0, "k")
	for i := range 2 {
		if _, err := n.propose("a", 0, "k", string(rune('0'+i)), WaitAck); err != nil {
			t.Fatal(err)
		}
	}
	_, err := n.propose("a", 0, "k", "x", WaitAck)
	if !errors.Is(err, ErrTurnQueueFull) || errs.CodeOf(err) != errs.ResourceExhausted || !errs.Definite(err) {
		t.Fatalf("the third waiting write: %v", err)
	}
	if _, err := n.endTurn("a", 0, turn, "k", ""); err != nil {
		t.Fatal(err)
	}
	if got := n.nodes["a"].st.kv[0]["k"]; got != "1" {
		t.Fatalf("k = %q, want the last admitted write", got)
	}
}

// TestTurnOnlyOnTheOwner: a turn is never forwarded.
func TestTurnOnlyOnTheOwner(t *testing.T) {
	n := newNetwork(t, 8, []string{"a", "b"})
	n.settle()
	p := 0
	for ; p < 8 && n.owner(p) != "a"; p++ {
	}
	if _, err := n.beginTurn("b", p, "k"); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("a turn asked of a non-owner: %v", err)
	}
	if _, err := n.endTurn("b", p, 1, "k", "v"); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("a record ended at a non-owner: %v", err)
	}
}

// TestTurnWaitsForTheSync: a turn asked of an owner still syncing is
// granted once its epoch starts, after the writes queued before it.
func TestTurnWaitsForTheSync(t *testing.T) {
	n, p := joinNetwork(t)
	n.setMap([]string{"a", "b", "c"}, "a", "b", "c")
	c := n.nodes["c"]
	if c.e.parts[p].active {
		t.Fatal("c active before its sync")
	}
	w, _ := n.propose("c", p, "k", "queued", WaitAck)
	turn, err := n.beginTurn("c", p, "k")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40 && !granted(c, turn); i++ {
		n.deliverAll()
		n.tick(250 * time.Millisecond)
	}
	if !granted(c, w) || !granted(c, turn) {
		t.Fatalf("after the sync: write %+v, turn %+v", c.done[w], c.done[turn])
	}
	if c.st.kv[p]["k"] != "queued" {
		t.Fatalf("the turn sees k = %q", c.st.kv[p]["k"])
	}
	if _, err := n.endTurn("c", p, turn, "k", "turn"); err != nil {
		t.Fatal(err)
	}
	n.settle()
	n.converged()
}
