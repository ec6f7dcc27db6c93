package partition

import (
	"testing"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// An attached client (it proved a token, not the cluster secret) may
// send its writes, fetches and acks of the accepted epoch; every other
// message, each of which would make the owner adopt a forged epoch or
// take a forged entry, is refused and changes nothing.
func TestStepLimited(t *testing.T) {
	ids := []string{"a", "b", "c"}
	n := newNetwork(t, 8, ids)
	n.settle()
	const p = 0
	o := n.owner(p)
	e := n.nodes[o].e
	ep := e.parts[p].accepted
	higher := Epoch{Term: ep.Term + 100, Owner: "~x"}
	for _, m := range []Message{
		&Commit{Partition: p, Entries: []Entry{{Epoch: higher, Offset: 1, Type: wire.RecordAdd, Key: "k", Value: val("forged")}}},
		&EpochStart{Partition: p, Epoch: higher, Start: 1},
		&Fenced{Partition: p, Epoch: higher},
		&CommitAck{Partition: p, Position: Position{Epoch: higher, Offset: 1}},
		&PosRequest{Partition: p, Epoch: higher},
		&ReadProbe{Partition: p, Epoch: higher, Seq: 1},
		&Voters{Partition: p, List: []Voter{{ID: "~x"}}},
		&Recover{},
	} {
		if err := e.StepLimited("~x", m); errs.CodeOf(err) != errs.PermissionDenied {
			t.Fatalf("%T from an attached client: %v, want permission denied", m, err)
		}
	}
	if pt := e.parts[p]; pt.accepted != ep || !pt.active {
		t.Fatalf("after the refused messages: accepted %v active %v, want %v active", pt.accepted, pt.active, ep)
	}
	n.deliverAll()

	// Its own write, and an ack of the accepted epoch, are taken.
	if err := e.StepLimited("~x", &CommitAck{Partition: p, Position: Position{Epoch: ep}}); err != nil {
		t.Fatal(err)
	}
	if err := e.StepLimited("~x", &Forward{Partition: p, ID: 1, Hops: 1, Type: wire.RecordAdd, Key: "k", Value: val("mine"), Wait: WaitAck, Epoch: ep,
		Deadline: n.now.Add(10 * DefaultClockSkew).UnixNano()}); err != nil {
		t.Fatal(err)
	}
	n.collect(n.nodes[o])
	n.deliverWhere(func(env envelope) bool { return env.to != "~x" }) // the commit's round, the replicas' acks
	n.collect(n.nodes[o])
	replied := n.dropWhere(func(env envelope) bool {
		r, ok := env.msg.(*ForwardReply)
		return ok && env.to == "~x" && r.Position.Epoch == ep && r.Code == 0
	})
	if replied != 1 {
		t.Fatalf("%d replies to the attached client's write, want 1", replied)
	}
	n.deliverAll()
	for _, id := range ids {
		if v := n.nodes[id].st.kv[p]["k"]; v != "mine" {
			t.Fatalf("%s holds %q for k, want the attached client's write", id, v)
		}
	}
}
