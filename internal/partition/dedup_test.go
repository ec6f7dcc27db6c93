package partition

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// onceBatch is the test state's record of a write with a writer: its
// value, and a verb's reply.
type onceBatch struct {
	W string `msgpack:"w"`
	S uint64 `msgpack:"s"`
	V string `msgpack:"v"`
	R string `msgpack:"r"`
}

func (b onceBatch) id() string { return fmt.Sprint(b.W, "/", b.S) }

type testOutcome struct {
	Offset uint64 `msgpack:"o"`
	Reply  string `msgpack:"r"`
}

var _ Deduper = (*testState)(nil)

func (s *testState) WriterOf(e Entry) (string, uint64) {
	if e.Type != wire.RecordBatch {
		return "", 0
	}
	var b onceBatch
	if msgpack.Unmarshal(e.Value, &b) != nil {
		return "", 0
	}
	return b.W, b.S
}

func (s *testState) Outcome(p int, writer string, seq uint64) (uint64, []byte, DedupStatus) {
	o, ok := s.done[p][onceBatch{W: writer, S: seq}.id()]
	if !ok {
		return 0, nil, DedupNew
	}
	return o.Offset, []byte(o.Reply), DedupDone
}

// proposeOnce submits, at node id, key=value as writer's write seq.
func (n *network) proposeOnce(id string, p int, key, value, writer string, seq uint64, w Wait) (uint64, error) {
	n.t.Helper()
	n.token++
	nd := n.nodes[id]
	b, err := msgpack.Marshal(onceBatch{W: writer, S: seq, V: value})
	if err != nil {
		n.t.Fatal(err)
	}
	req := Request{Partition: p, Type: wire.RecordBatch, Key: key, Value: b, Token: n.token, Wait: w, Writer: writer, Seq: seq}
	err = nd.e.Propose(req)
	n.collect(nd)
	return n.token, err
}

// commitsOf counts the records committed anywhere that carry writer's seq.
func (n *network) commitsOf(writer string, seq uint64) int {
	count := 0
	for _, rec := range n.commits {
		var b onceBatch
		if rec.ent.Type == wire.RecordBatch && msgpack.Unmarshal(rec.ent.Value, &b) == nil && b.W == writer && b.S == seq {
			count++
		}
	}
	return count
}

// TestDuplicateGetsTheFirstOutcome: a write sent again with its writer's
// sequence is answered with the first commit's position, not committed
// again.
func TestDuplicateGetsTheFirstOutcome(t *testing.T) {
	n := newNetwork(t, 1, []string{"a"})
	a := n.nodes["a"]
	first, _ := n.proposeOnce("a", 0, "k", "v1", "w", 1, WaitAck)
	c1 := mustDone(t, a, first)
	must(t, c1.Err == nil && !c1.Duplicate, "first: %+v", c1)
	again, _ := n.proposeOnce("a", 0, "k", "v1", "w", 1, WaitAck)
	c2 := mustDone(t, a, again)
	must(t, c2.Err == nil && c2.Duplicate && c2.Position == c1.Position, "again: %+v, first at %+v", c2, c1.Position)
	must(t, n.commitsOf("w", 1) == 1, "committed %d times", n.commitsOf("w", 1))
	// Another sequence of the same writer is a new write.
	next, _ := n.proposeOnce("a", 0, "k", "v2", "w", 2, WaitAck)
	must(t, !mustDone(t, a, next).Duplicate && a.st.kv[0]["k"] == "v2", "the next write")
}

// TestRetryAfterOwnershipLostAppliesOnce: a Majority write the owner
// committed, then lost the partition before the acks, fails indefinite
// (Aborted); its caller sends it again to the new owner, which synced it
// and answers it as a duplicate. Without a writer (as every write was
// before), the retry commits a second time: a Push pushed twice.
func TestRetryAfterOwnershipLostAppliesOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writer string
	}{{"writer", "w"}, {"no writer", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			ids := []string{"a", "b", "c"}
			n := newNetwork(t, 32, ids)
			p := n.movingPartition(ids, "a", "b")
			n.settle()
			// b and c apply the write, but their acks to a are lost.
			tok, _ := n.proposeOnce("a", p, "k", "pushed", tc.writer, 1, WaitMajority)
			n.deliverWhere(func(e envelope) bool { return e.from == "a" })
			n.dropWhere(func(e envelope) bool { return e.to == "a" })
			n.setMap([]string{"b", "c"}, "b", "c")
			for i := 0; i < 40 && n.nodes["a"].e.parts[p].active; i++ {
				n.deliverAll()
				n.tick(250 * time.Millisecond)
			}
			c := mustDone(t, n.nodes["a"], tok)
			must(t, errors.Is(c.Err, ErrOwnershipLost) && !errs.Definite(c.Err), "the first attempt: %+v", c)
			for i := 0; i < 40 && n.owner(p) != "b"; i++ {
				n.deliverAll()
				n.tick(250 * time.Millisecond)
			}
			retry, err := n.proposeOnce("b", p, "k", "pushed", tc.writer, 1, WaitMajority)
			must(t, err == nil, "retry: %v", err)
			n.settle()
			rc := mustDone(t, n.nodes["b"], retry)
			must(t, rc.Err == nil, "retry: %+v", rc)
			if tc.writer == "" {
				must(t, n.commitsOf("", 1) == 2, "without a writer the retry commits again (%d commits)", n.commitsOf("", 1))
				return
			}
			must(t, rc.Duplicate, "the retry was committed again: %+v", rc)
			must(t, n.commitsOf("w", 1) == 1, "committed %d times", n.commitsOf("w", 1))
		})
	}
}

// TestForwardFailsFastWhenItsOwnerLeaves: a forwarded write whose caller
// retries (it names a writer) fails at once, indefinite, when its owner
// leaves the node's map; one whose caller does not waits for its deadline
// (rule 11).
func TestForwardFailsFastWhenItsOwnerLeaves(t *testing.T) {
	n := newNetwork(t, 8, []string{"a", "b"})
	n.add("x", true)
	n.setMap([]string{"a", "b"}, "a", "b", "x")
	n.settle()
	p := 0
	for ; p < 8 && n.owner(p) != "a"; p++ {
	}
	x := n.nodes["x"]
	retried, _ := n.proposeOnce("x", p, "k", "v", "w", 1, WaitAck)
	plain, _ := n.propose("x", p, "k2", "v", WaitAck)
	n.crash("a")
	n.setMap([]string{"b"}, "b", "x")
	c, ok := x.done[retried]
	must(t, ok && errors.Is(c.Err, ErrOwnerGone) && !errs.Definite(c.Err), "the retried write: %+v (answered %v)", c, ok)
	_, ok = x.done[plain]
	must(t, !ok, "a write whose caller does not retry was answered before its deadline")
}

// TestForwardFailsFastWhenItsConnectionBreaks: when the connection to a
// forward's owner breaks (the owner still in the map), a forward whose
// caller retries fails at once, indefinite; one whose caller does not, and
// one to another owner, keep waiting (rule 1).
func TestForwardFailsFastWhenItsConnectionBreaks(t *testing.T) {
	n := newNetwork(t, 8, []string{"a", "b"})
	n.add("x", true)
	n.setMap([]string{"a", "b"}, "a", "b", "x")
	n.settle()
	pa, pb := -1, -1
	for p := 0; p < 8; p++ {
		switch {
		case n.owner(p) == "a" && pa < 0:
			pa = p
		case n.owner(p) == "b" && pb < 0:
			pb = p
		}
	}
	must(t, pa >= 0 && pb >= 0, "no partition owned by each server")
	x := n.nodes["x"]
	retried, _ := n.proposeOnce("x", pa, "k", "v", "w", 1, WaitAck)
	plain, _ := n.propose("x", pa, "k2", "v", WaitAck)
	other, _ := n.proposeOnce("x", pb, "k3", "v", "w", 2, WaitAck)
	n.queue = nil // the forwards are lost with the connection
	x.e.ConnectionLost("a")
	n.collect(x)
	c, ok := x.done[retried]
	must(t, ok && errors.Is(c.Err, ErrForwardLost) && !errs.Definite(c.Err), "the retried write: %+v (answered %v)", c, ok)
	_, ok = x.done[plain]
	must(t, !ok, "a write whose caller does not retry was answered before its deadline")
	_, ok = x.done[other]
	must(t, !ok, "a write forwarded to another owner was answered")
}

// TestVerbRetryGetsItsFirstReply: a turn asked again for a verb call whose
// record was committed is answered with the call's reply, without a turn.
func TestVerbRetryGetsItsFirstReply(t *testing.T) {
	n := newNetwork(t, 1, []string{"a"})
	a := n.nodes["a"]
	begin := func() uint64 {
		n.token++
		if err := a.e.Propose(Request{Key: "k", Token: n.token, Wait: WaitAck, Turn: TurnBegin, Writer: "w", Seq: 7}); err != nil {
			t.Fatal(err)
		}
		n.collect(a)
		return n.token
	}
	turn := begin()
	must(t, granted(a, turn) && !a.done[turn].Duplicate, "first begin: %+v", a.done[turn])
	b, _ := msgpack.Marshal(onceBatch{W: "w", S: 7, V: "v", R: "the reply"})
	n.token++
	if err := a.e.Propose(Request{Key: "k", Token: n.token, Wait: WaitAck, Turn: TurnEnd, TurnID: turn, Type: wire.RecordBatch, Value: b}); err != nil {
		t.Fatal(err)
	}
	n.collect(a)
	again := begin()
	c := mustDone(t, a, again)
	must(t, c.Err == nil && c.Duplicate && string(c.Reply) == "the reply", "the retried call: %+v", c)
	must(t, len(a.e.parts[0].turns) == 0, "a duplicate took the turn")
}

func must(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Fatalf(format, args...)
	}
}

// TestTurnRecordCommittedMeanwhile: a verb's record whose call was
// committed by an earlier attempt while this attempt's turn was held (the
// earlier one synced from the old owner) is not committed again; the
// turn's end answers with the earlier record's reply.
func TestTurnRecordCommittedMeanwhile(t *testing.T) {
	n := newNetwork(t, 1, []string{"a"})
	a := n.nodes["a"]
	n.token++
	turn := n.token
	if err := a.e.Propose(Request{Key: "k", Token: turn, Wait: WaitAck, Turn: TurnBegin, Writer: "w", Seq: 7}); err != nil {
		t.Fatal(err)
	}
	n.collect(a)
	must(t, granted(a, turn), "begin: %+v", a.done[turn])
	// The earlier attempt's record (another key of the partition, so it
	// does not wait for the turn).
	first, _ := msgpack.Marshal(onceBatch{W: "w", S: 7, V: "v1", R: "first"})
	n.token++
	if err := a.e.Propose(Request{Key: "k2", Token: n.token, Wait: WaitAck, Type: wire.RecordBatch, Value: first}); err != nil {
		t.Fatal(err)
	}
	n.collect(a)
	second, _ := msgpack.Marshal(onceBatch{W: "w", S: 7, V: "v2", R: "second"})
	n.token++
	end := n.token
	if err := a.e.Propose(Request{Key: "k", Token: end, Wait: WaitAck, Turn: TurnEnd, TurnID: turn, Type: wire.RecordBatch, Value: second}); err != nil {
		t.Fatal(err)
	}
	n.collect(a)
	c := mustDone(t, a, end)
	must(t, c.Err == nil && c.Duplicate && string(c.Reply) == "first", "the end: %+v", c)
	must(t, n.commitsOf("w", 7) == 1, "committed %d times", n.commitsOf("w", 7))
	must(t, len(a.e.parts[0].turns) == 0, "the turn was not passed on")
}
