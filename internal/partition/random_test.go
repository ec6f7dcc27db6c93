package partition

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// chaos drives a network through a random schedule of writes, deliveries
// in any order, drops, duplicates, splits with per-side maps, stale maps,
// a crash and a join. The network checks the invariants after every step;
// at the end the cluster heals and must converge with every
// majority-acked write kept.
type chaos struct {
	n       *network
	rng     interface{ IntN(int) int }
	servers []string
	crashed string // the server crashed for good, if any
	forgot  bool   // an operator has forgotten it
	// clientRestarts counts the client's restarts with nothing.
	clientRestarts int
	// emptied: a server restarted with nothing (restartEmpty). With a
	// crash as well, a Majority write held by the two could be lost: two
	// faults in a replica group of three, beyond what it tolerates.
	emptied bool
	joined  bool
	// seeded: every node was given the first five servers as seeds (a
	// fresh cluster forms only once it sees them all); otherwise none
	// was, as the quick start's servers.
	seeded bool
	// accepted are the proposals that asked for a completion and were not
	// refused at once: each must complete, within the write timeout.
	accepted []proposed
	// sent are the writes with a writer, by token, until answered.
	sent map[uint64]Request
}

type proposed struct {
	node  string
	token uint64
}

// onceRequest makes req a write of node id's writer (rule 16): the retry
// of one of its writes that failed indefinite, if it has one, else a new
// sequence.
func (c *chaos) onceRequest(id string, req Request) Request {
	n := c.n
	if c.sent == nil {
		c.sent = map[uint64]Request{}
	}
	for _, tok := range slices.Sorted(maps.Keys(c.sent)) {
		first := c.sent[tok]
		if first.Writer != "w"+id {
			continue
		}
		done, ok := n.nodes[id].done[tok]
		if !ok {
			continue
		}
		delete(c.sent, tok)
		if done.Err != nil && !errs.Definite(done.Err) {
			retry := first
			retry.Token, retry.Wait, retry.K = req.Token, req.Wait, req.K
			c.sent[req.Token] = retry
			return retry
		}
	}
	b, err := msgpack.Marshal(onceBatch{W: "w" + id, S: req.Token, V: fmt.Sprint(req.Token)})
	if err != nil {
		n.t.Fatal(err)
	}
	req.Type, req.Value, req.Writer, req.Seq = wire.RecordBatch, b, "w"+id, req.Token
	c.sent[req.Token] = req
	return req
}

func newChaos(t testing.TB, seed uint64) *chaos {
	servers := []string{"s0", "s1", "s2", "s3", "s4"}
	opts := []Option{WithHistoryMax(16), WithFetchMax(4), WithGapBufferMax(8)}
	if seed%4 == 3 {
		// Durable servers: the crash is a restart from disk (restart);
		// a small history in bytes makes the disk take snapshots.
		opts = append(opts, WithDurable(), WithHistoryBytes(200))
	}
	if seed%4 == 1 {
		// A history of two and tiny messages: copies behind catch up by
		// snapshots, which go in pieces of a few keys (with the default
		// history of 16, no schedule ever sent a snapshot).
		opts = append(opts, WithHistoryMax(2), WithMaxEntry(16), WithMaxMessage(48))
	}
	// Two schedules in five run the configuration operators are told to
	// run: every node given every server as a seed. (Not seeds 295 and
	// 263, whose kept inputs found the fetch loops without seeds.)
	seeded := seed%5 == 1 || seed%5 == 4
	if seeded {
		opts = append(opts, WithJoining())
	}
	n := newNetwork(t, 4, servers, opts...)
	if seeded {
		n.seeds = slices.Clone(servers)
	}
	n.add("x", true)
	n.setMap(servers, append(slices.Clone(servers), "x")...)
	n.roundTrip, n.shared = seed%3 == 1, seed%3 == 2
	return &chaos{n: n, rng: newRand(seed), servers: servers, seeded: seeded}
}

func (c *chaos) live() []string {
	var out []string
	for _, id := range c.n.ids() {
		if !c.n.nodes[id].dead {
			out = append(out, id)
		}
	}
	return out
}

func (c *chaos) liveServers() []string {
	return slices.DeleteFunc(slices.Clone(c.servers), func(id string) bool { return c.n.nodes[id].dead })
}

func (c *chaos) pick(ids []string) string { return ids[c.rng.IntN(len(ids))] }

// op performs one random operation chosen by r in [0, 100).
func (c *chaos) op(r int) {
	n := c.n
	switch {
	case r < 35:
		if len(n.queue) > 0 {
			n.deliver(c.rng.IntN(len(n.queue)))
		}
	case r < 45:
		if len(n.queue) > 0 {
			n.deliver(0)
		}
	case r < 62:
		id := c.pick(c.live())
		waits := []Wait{WaitNone, WaitAck, WaitMajority, WaitReplicas}
		w := waits[c.rng.IntN(len(waits))]
		n.token++
		nd := n.nodes[id]
		req := Request{
			Partition: c.rng.IntN(n.parts), Type: 2, Key: fmt.Sprintf("k%d", c.rng.IntN(6)),
			Value: val(fmt.Sprint(n.token)), Token: n.token, Wait: w, K: 1,
		}
		if n.token%3 == 0 && w != WaitNone {
			// Every third write names its writer (rule 16), and sends
			// again, as its caller would, one of the node's that failed
			// indefinite; not drawing on the schedule's randomness keeps
			// every seed's schedule as it was.
			req = c.onceRequest(id, req)
		}
		n.record(id, req)
		err := nd.e.Propose(req)
		if err == nil && w != WaitNone {
			c.accepted = append(c.accepted, proposed{node: id, token: n.token})
		}
		n.collect(nd)
	case r < 67:
		if len(n.queue) > 0 {
			i := c.rng.IntN(len(n.queue))
			n.queue = slices.Delete(n.queue, i, i+1)
		}
	case r < 72:
		if len(n.queue) > 0 {
			n.queue = append(n.queue, n.queue[c.rng.IntN(len(n.queue))])
		}
	case r < 87:
		n.tick(time.Duration(100+c.rng.IntN(400)) * time.Millisecond)
	case r < 90: // split in two, each side's map its own servers
		live := c.live()
		var a, b []string
		for _, id := range live {
			if c.rng.IntN(2) == 0 {
				a = append(a, id)
			} else {
				b = append(b, id)
			}
		}
		n.heal()
		n.isolate(a, b)
		for _, side := range [][]string{a, b} {
			srv := slices.DeleteFunc(slices.Clone(side), func(id string) bool { return n.nodes[id].client })
			n.setMap(srv, side...)
		}
	case r < 94:
		n.heal()
		n.setMap(c.liveServers(), c.live()...)
	case r < 97: // one node's map goes stale or wrong
		live := c.liveServers()
		sub := slices.DeleteFunc(slices.Clone(live), func(string) bool { return c.rng.IntN(3) == 0 })
		if len(sub) > 0 {
			n.setMap(sub, c.pick(c.live()))
		}
	case r < 98 && c.n.nodes["s0"].disk != nil && c.rng.IntN(4) == 0:
		c.restartEmpty() // its disk lost, or replaced
	case r < 98 && c.n.nodes["s0"].disk != nil:
		c.restart()
	case r < 98 && c.rng.IntN(2) == 0:
		c.restartEmpty()
	case r < 98:
		switch {
		case c.crashed == "" && !c.emptied && len(c.liveServers()) > 3:
			c.crashed = c.pick(c.liveServers())
			n.crash(c.crashed)
			n.setMap(c.liveServers(), c.live()...)
		case c.crashed != "" && !c.forgot && (c.seeded || c.formed()):
			// An operator forgets the crashed server through any server
			// (fero forget), whatever that server's map says: at any
			// time when the servers were given seeds, and without seeds
			// once the cluster has formed. (Seedless servers split while
			// they formed can form two clusters whose majorities may not
			// meet, which rule 3 may then take for one: docs/engine.md,
			// "Known open". Servers given seeds form nothing before they
			// see every seed.)
			c.forget()
		}
	default:
		if !c.joined {
			c.joined = true
			n.add("s5", false)
			c.servers = append(c.servers, "s5")
			n.setMap(c.liveServers(), c.live()...)
		}
	}
}

// forget has an operator forget the crashed server through any live
// server (fero forget).
func (c *chaos) forget() {
	n := c.n
	c.forgot = true
	nd := n.nodes[c.pick(c.liveServers())]
	if err := nd.e.Forget(c.crashed); err != nil {
		n.t.Fatalf("%s forgetting %s: %v", nd.id, c.crashed, err)
	}
	n.collect(nd)
	if n.seeds != nil {
		// And drops it from every node's seeds: servers given seeds form
		// a cluster only once they see every one, so one lost before
		// they formed would hold them for good.
		n.dropSeed(c.crashed)
	}
}

// restart restarts servers from their disks: one, or now and then all of
// them at once (a power cut), taking the messages they had not yet read.
//
// Only once every live server has confirmed its vote: a server restarted while the cluster
// still forms is a learner whose guessed entry names its previous
// incarnation, disk or not (rule 9), and with enough of them the forming
// cluster waits for good (a limit the restart from disk does not lift). So
// a restart during formation heals the network and lets it form first.
func (c *chaos) restart() {
	n := c.n
	if !c.formed() {
		return
	}
	ids := []string{c.pick(c.liveServers())}
	if c.rng.IntN(4) == 0 {
		ids = c.liveServers()
	}
	for _, id := range ids {
		n.queue = slices.DeleteFunc(n.queue, func(e envelope) bool { return e.to == id })
		n.restartDurable(id)
		// Its callers lost their connection with the process.
		c.accepted = slices.DeleteFunc(c.accepted, func(p proposed) bool { return p.node == id })
	}
	n.setMap(c.liveServers(), c.live()...)
}

// formed reports whether every live server votes in its current
// incarnation; if not, it heals the network and runs until they do, and
// reports whether they then do.
func (c *chaos) formed() bool {
	n := c.n
	formed := func() bool {
		for _, id := range c.liveServers() {
			e := n.nodes[id].e
			if v, ok := e.voters[id]; !ok || !v.confirmed() || v.Inc != e.inc {
				return false
			}
		}
		return true
	}
	if formed() {
		return true
	}
	n.heal()
	n.setMap(c.liveServers(), c.live()...)
	n.settle()
	return formed()
}

// restartEmpty restarts a server with nothing, as a process killed and
// started again under its id without a data directory (or with a new
// disk): a new incarnation with an empty copy, which is a learner until it
// has caught up (rule 9).
// Only while every live server votes, so that one server at a time is
// without its copy (two at once in one replica group is a loss beyond
// what the group tolerates), and never in a schedule with a crash.
//
// Or, one time in three, the client restarts: it owns nothing and holds
// no vote, so it may, any time; its copy catches up from the owners.
func (c *chaos) restartEmpty() {
	n := c.n
	if n.inc == nil {
		n.inc = map[string]uint64{}
	}
	if c.rng.IntN(3) == 0 {
		n.queue = slices.DeleteFunc(n.queue, func(e envelope) bool { return e.to == "x" })
		n.inc["x"] = max(n.inc["x"], 1) + 1 // a new process: ids above the old one's
		n.add("x", true)
		c.accepted = slices.DeleteFunc(c.accepted, func(p proposed) bool { return p.node == "x" })
		c.clientRestarts++
		n.setMap(c.liveServers(), c.live()...)
		return
	}
	if c.crashed != "" || !c.formed() {
		return
	}
	id := c.pick(c.liveServers())
	n.queue = slices.DeleteFunc(n.queue, func(e envelope) bool { return e.to == id })
	n.inc[id] = max(n.inc[id], 1) + 1
	n.add(id, false)
	c.accepted = slices.DeleteFunc(c.accepted, func(p proposed) bool { return p.node == id })
	c.emptied = true
	n.setMap(c.liveServers(), c.live()...)
}

func (c *chaos) finish() {
	if c.seeded && c.crashed != "" && !c.forgot {
		// Servers given seeds that lost one before they formed wait for
		// it for good ("seeds not seen" in fero status): the operator
		// forgets it and drops it from the seeds.
		c.forget()
	}
	c.n.heal()
	c.n.setMap(c.liveServers(), c.live()...)
	c.n.settle()
	if c.crashed != "" {
		// A previous replica group that lost its majority to the crash
		// blocks its partition's sync until the departed member ages out
		// of the quorum window (the price of rule 5 across splits).
		for range 35 {
			c.n.deliverAll()
			c.n.tick(10 * time.Second)
		}
		c.n.settle()
	}
	c.n.converged()
	// Every accepted proposal on a node still up has completed once the
	// write timeout has passed (the node's waiter table relies on it).
	c.n.tick(DefaultWriteTimeout + time.Second)
	c.n.deliverAll()
	for _, pr := range c.accepted {
		if nd := c.n.nodes[pr.node]; !nd.dead {
			if _, ok := nd.done[pr.token]; !ok {
				c.n.t.Fatalf("proposal %d on %s never completed", pr.token, pr.node)
			}
		}
	}
}

func TestRandomSchedules(t *testing.T) {
	seeds := uint64(60)
	if testing.Short() {
		seeds = 10
	}
	// Seeds that found a fault beyond the first ones, kept: 1349 (servers
	// given seeds) named one cluster twice after a forget
	// (TestForgottenFounderNamesOneCluster).
	list := make([]uint64, 0, seeds+1)
	for s := range seeds {
		list = append(list, s)
	}
	for _, seed := range append(list, 1349) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			c := newChaos(t, seed)
			c.n.waits = map[uint64]Wait{}
			for range 500 {
				c.op(c.rng.IntN(100))
			}
			c.finish()
		})
	}
}

// FuzzSchedules reads a schedule from the fuzzer's bytes: each byte picks
// one operation, as in TestRandomSchedules.
func FuzzSchedules(f *testing.F) {
	f.Add(uint64(1), []byte{50, 0, 0, 50, 80, 80, 88, 60, 0, 0, 92, 10})
	f.Add(uint64(2), []byte{60, 61, 62, 63, 97, 5, 5, 5, 85, 85, 99, 70, 70, 0, 0})
	f.Add(uint64(3), []byte{89, 60, 60, 30, 30, 30, 95, 86, 86, 66, 71, 93, 20})
	f.Fuzz(func(t *testing.T, seed uint64, ops []byte) {
		// Long schedules are TestRandomSchedules' job (500 operations per
		// seed); here each input stays short, so a fuzz pass has a bounded
		// cost (inputs near 2,000 operations took a minute each).
		if len(ops) > 300 {
			return
		}
		c := newChaos(t, seed)
		c.n.waits = map[uint64]Wait{}
		for _, b := range ops {
			c.op(int(b) % 100)
		}
		c.finish()
	})
}
