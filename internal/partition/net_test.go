package partition

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/wire"
)

// testState is a State that checks what the engine asks of it: entries
// arrive in offset order, one at a time, with no holes.
type testState struct {
	kv      []map[string]string
	applied []uint64
	// done is, per partition, the outcome of each "writer/seq" a batch
	// committed (dedup_test.go): the offset and the reply.
	done   []map[string]testOutcome
	staged map[int]*snapshot // restores arriving in pieces
	bad    []string
	warmed []string // "partition/key" of each key Warm was asked to load
}

func (s *testState) Warm(parts []int, keys []string) uint64 {
	if len(parts) != len(keys) {
		s.bad = append(s.bad, fmt.Sprintf("warm: %d partitions for %d keys", len(parts), len(keys)))
	}
	for i := range min(len(parts), len(keys)) {
		s.warmed = append(s.warmed, fmt.Sprintf("%d/%s", parts[i], keys[i]))
	}
	return uint64(len(keys))
}

type snapshot struct {
	Offset uint64                 `msgpack:"o"`
	KV     map[string]string      `msgpack:"kv"`
	Done   map[string]testOutcome `msgpack:"d"`
}

func newTestState(parts int) *testState {
	s := &testState{kv: make([]map[string]string, parts), applied: make([]uint64, parts), done: make([]map[string]testOutcome, parts)}
	for p := range s.kv {
		s.kv[p] = map[string]string{}
		s.done[p] = map[string]testOutcome{}
	}
	return s
}

// invalidPrefix marks keys the test state refuses, standing in for the
// changes a real state cannot apply.
const invalidPrefix = "invalid/"

func (s *testState) Check(p int, e Entry) error {
	if strings.HasPrefix(e.Key, invalidPrefix) {
		return errs.Errorf(errs.FailedPrecondition, "key %q refused by the state", e.Key)
	}
	return nil
}

func (s *testState) Apply(p int, e Entry) {
	if e.Offset != s.applied[p]+1 {
		s.bad = append(s.bad, fmt.Sprintf("partition %d: applied offset %d after %d", p, e.Offset, s.applied[p]))
	}
	s.applied[p] = e.Offset
	switch e.Type {
	case wire.RecordBatch:
		var b onceBatch
		if err := msgpack.Unmarshal(e.Value, &b); err != nil {
			s.bad = append(s.bad, fmt.Sprintf("partition %d: batch: %v", p, err))
		}
		s.kv[p][e.Key] = b.V
		if _, ok := s.done[p][b.id()]; ok {
			// Rule 16: a writer's sequence is in a history once.
			s.bad = append(s.bad, fmt.Sprintf("partition %d: %s applied twice (offset %d)", p, b.id(), e.Offset))
		} else if b.W != "" {
			s.done[p][b.id()] = testOutcome{Offset: e.Offset, Reply: b.R}
		}
	case wire.RecordRemove:
		delete(s.kv[p], e.Key)
	default:
		var v string
		if err := msgpack.Unmarshal(e.Value, &v); err != nil {
			s.bad = append(s.bad, fmt.Sprintf("partition %d: value: %v", p, err))
		}
		s.kv[p][e.Key] = v
	}
}

func (s *testState) Snapshot(p int) ([]byte, error) {
	return msgpack.Marshal(snapshot{Offset: s.applied[p], KV: s.kv[p], Done: s.done[p]})
}

func (s *testState) Restore(p int, b []byte) error {
	var sn snapshot
	if len(b) == 0 {
		s.kv[p], s.applied[p], s.done[p] = map[string]string{}, 0, map[string]testOutcome{}
		return nil
	}
	if err := msgpack.Unmarshal(b, &sn); err != nil {
		return err
	}
	if sn.KV == nil {
		sn.KV = map[string]string{}
	}
	if sn.Done == nil {
		sn.Done = map[string]testOutcome{}
	}
	s.kv[p], s.applied[p], s.done[p] = sn.KV, sn.Offset, sn.Done
	return nil
}

// SnapshotChunks splits the partition's keys, in order, into pieces of
// about max bytes.
func (s *testState) SnapshotChunks(p, max int) ([][]byte, error) {
	keys := slices.Sorted(maps.Keys(s.kv[p]))
	var pieces [][]byte
	for len(keys) > 0 || pieces == nil {
		sn := snapshot{Offset: s.applied[p], KV: map[string]string{}}
		if pieces == nil {
			sn.Done = s.done[p] // the outcomes go with the first piece
		}
		size := 16
		for len(keys) > 0 && (len(sn.KV) == 0 || size+len(keys[0])+len(s.kv[p][keys[0]])+8 <= max) {
			sn.KV[keys[0]] = s.kv[p][keys[0]]
			size += len(keys[0]) + len(s.kv[p][keys[0]]) + 8
			keys = keys[1:]
		}
		b, err := msgpack.Marshal(sn)
		if err != nil {
			return nil, err
		}
		pieces = append(pieces, b)
	}
	return pieces, nil
}

func (s *testState) StageChunk(p int, piece []byte, first bool) error {
	var sn snapshot
	if err := msgpack.Unmarshal(piece, &sn); err != nil {
		return err
	}
	if s.staged == nil {
		s.staged = map[int]*snapshot{}
	}
	st := s.staged[p]
	if first || st == nil {
		st = &snapshot{Offset: sn.Offset, KV: map[string]string{}, Done: sn.Done}
		s.staged[p] = st
	}
	if sn.Offset != st.Offset {
		return fmt.Errorf("a piece at offset %d of a snapshot at %d", sn.Offset, st.Offset)
	}
	for k, v := range sn.KV {
		if _, dup := st.KV[k]; dup {
			return fmt.Errorf("key %q in two pieces", k)
		}
		st.KV[k] = v
	}
	return nil
}

func (s *testState) RestoreStaged(p int) error {
	st := s.staged[p]
	if st == nil {
		return fmt.Errorf("partition %d: nothing staged", p)
	}
	delete(s.staged, p)
	if st.Done == nil {
		st.Done = map[string]testOutcome{}
	}
	s.kv[p], s.applied[p], s.done[p] = st.KV, st.Offset, st.Done
	return nil
}

func (s *testState) DropStaged(p int) { delete(s.staged, p) }

func val(s string) []byte {
	b, err := msgpack.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

// heldCopy copies a message the engine sent for holding past the Ready's
// Advance, which zeroes the engine's own (chunks.reset). Keys and values
// alias the log or the proposer's request, which do not change.
func heldCopy(m Message) Message {
	switch m := m.(type) {
	case *Commit:
		c := *m
		c.Entries = slices.Clone(m.Entries)
		return &c
	case *CommitAck:
		c := *m
		return &c
	case *Forward:
		c := *m
		return &c
	case *ForwardReply:
		c := *m
		return &c
	}
	return m
}

type envelope struct {
	from, to string
	cluster  ClusterID // the sender's (Ready.Cluster)
	msg      Message
}

type node struct {
	id     string
	e      *Engine
	st     *testState
	client bool
	dead   bool

	done     map[uint64]Completion
	events   []Event
	accepted []Epoch
	pos      []Position
	yields   uint64 // the engine's Yields when accepted and pos were noted

	// disk is what the node's driver would have on disk (WithDurable):
	// every Ready's durable part, applied as a store would.
	disk *testDisk
}

type commitKey struct {
	p      int
	epoch  Epoch
	offset uint64
}

type commitRec struct {
	ent  Entry
	prev Epoch // epoch of the entry before it in the owner's log
	ok   bool  // prev is known
}

// network is an in-memory cluster of engines with a message queue that a
// test delivers from in any order, dropping, duplicating or cutting links.
// It checks the engine's invariants after every step.
type network struct {
	t         testing.TB
	ring      *ring.Ring
	parts     int
	opts      []Option
	nodes     map[string]*node
	queue     []envelope
	cut       map[[2]string]bool
	now       time.Time
	roundTrip bool
	// shared sends each message through the wire codec, decodes it with
	// DecodeShared and scribbles over the bytes once it is stepped: an
	// engine that kept any of them would commit or apply 0xff bytes.
	shared  bool
	token   uint64
	commits map[commitKey]commitRec
	durable []commitKey // writes acked by a majority of their group
	waits   map[uint64]Wait
	steps   int
	// lose, when set, drops the messages it matches at delivery: a link
	// that loses one kind of message (the fault suite's loss and one-way
	// faults do).
	lose func(envelope) bool
	// inc is each server's incarnation in the maps setMap builds (1 when
	// unset); restartDurable raises it.
	inc map[string]uint64
	// seeds, when set, are the servers every node was given as seeds (the
	// configuration docs/engine.md tells operators to run): each map
	// setMap gives a node comes with the seeds it lacks, as a driver
	// passes them (SetUnseenSeeds). The nodes need WithJoining.
	seeds []string
	// proposals is every write proposed through propose (or written
	// down with record): a completion of one must name a position that
	// holds that very write, never another one's (a false ack).
	proposals map[uint64]proposal
}

// proposal is a write as its node proposed it.
type proposal struct {
	node  string
	req   Request
	value []byte // req.Value's bytes as proposed
}

func newNetwork(t testing.TB, parts int, ids []string, opts ...Option) *network {
	t.Helper()
	r, err := ring.New(ring.WithPartitions(parts), ring.WithReplicas(2), ring.WithVNodes(16))
	if err != nil {
		t.Fatal(err)
	}
	n := &network{
		t: t, ring: r, parts: parts, opts: opts,
		nodes: map[string]*node{}, cut: map[[2]string]bool{},
		now: time.Unix(1_000_000, 0), commits: map[commitKey]commitRec{},
	}
	for _, id := range ids {
		n.add(id, false)
	}
	n.setMap(ids, ids...)
	return n
}

// add creates a node (not yet in anyone's map).
func (n *network) add(id string, client bool, opts ...Option) *node {
	st := newTestState(n.parts)
	o := slices.Clone(n.opts)
	if client {
		o = append(o, WithClient())
	}
	// As a driver does: ids above those of the node's earlier
	// incarnations (restartDurable raises inc).
	o = append(o, WithFirstID(max(n.inc[id], 1)<<40))
	e, err := New(id, st, append(o, opts...)...)
	if err != nil {
		n.t.Fatal(err)
	}
	e.Tick(n.now)
	nd := &node{id: id, e: e, st: st, client: client, done: map[uint64]Completion{}}
	if e.cfg.durable {
		nd.disk = newTestDisk(n.parts)
	}
	n.nodes[id] = nd
	return nd
}

func (n *network) ids() []string { return slices.Sorted(maps.Keys(n.nodes)) }

func (n *network) buildMap(members []string) *ring.Map {
	ms := make([]ring.Member, len(members))
	for i, id := range members {
		ms[i] = ring.Member{ID: id, Incarnation: max(n.inc[id], 1)}
	}
	m, err := n.ring.Build(ms)
	if err != nil {
		n.t.Fatal(err)
	}
	return m
}

// movingPartition returns a partition that servers ids' map gives to a,
// and the map of ids without a gives to b.
func (n *network) movingPartition(ids []string, a, b string) int {
	n.t.Helper()
	full, rest := n.buildMap(ids), n.buildMap(slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == a }))
	for p := range n.parts {
		o, _ := full.Owner(p)
		o2, _ := rest.Owner(p)
		if o.ID == a && o2.ID == b {
			return p
		}
	}
	n.t.Fatal("no suitable partition")
	return -1
}

// setMap gives nodes on the map of servers members, with every live client
// member of the network.
func (n *network) setMap(members []string, on ...string) {
	n.t.Helper()
	m := n.buildMap(members)
	var clients []string
	for _, id := range n.ids() {
		if nd := n.nodes[id]; nd.client && !nd.dead {
			clients = append(clients, id)
		}
	}
	for _, id := range on {
		nd := n.nodes[id]
		if nd.dead {
			continue
		}
		if n.seeds != nil {
			nd.e.SetUnseenSeeds(slices.DeleteFunc(slices.Clone(n.seeds), func(s string) bool {
				return s == id || slices.Contains(members, s)
			}))
		}
		if err := nd.e.SetMap(m, clients); err != nil {
			n.t.Fatal(err)
		}
		n.collect(nd)
	}
}

func (n *network) collect(nd *node) {
	n.t.Helper()
	rd := nd.e.Ready()
	if nd.disk != nil {
		// Durable before anything leaves the node (docs/storage.md).
		nd.disk.write(n.t, rd)
	}
	for _, env := range rd.Messages {
		// The engine reuses its messages after Advance (Ready): what the
		// network holds longer is a copy, as the node's batch bytes are.
		n.queue = append(n.queue, envelope{from: nd.id, to: env.To, cluster: rd.Cluster, msg: heldCopy(env.Msg)})
	}
	for _, ev := range rd.Events {
		nd.events = append(nd.events, ev)
		if ev.Kind == EventCommitted {
			n.recordCommit(nd, ev)
		}
	}
	for _, c := range rd.Completions {
		nd.done[c.Token] = c
		k := commitKey{p: c.Partition, epoch: c.Position.Epoch, offset: c.Position.Offset}
		w, proposed := n.proposals[c.Token]
		if proposed && c.Err == nil && c.Position.Offset != 0 && c.Position.Epoch == (Epoch{}) {
			// A duplicate whose first commit the owner's log no longer
			// holds names its offset only (forwarded, it is not marked
			// Duplicate): its commit is the one of the write at that
			// offset, in the latest epoch that has one (an earlier
			// attempt may have been committed there and dropped).
			for ck, cr := range n.commits {
				if ck.p == c.Partition && ck.offset == c.Position.Offset && cr.ent.Key == w.req.Key &&
					bytes.Equal(cr.ent.Value, w.value) && k.epoch.Less(ck.epoch) {
					k = ck
				}
			}
		}
		if proposed && w.node == nd.id && c.Err == nil && c.Position.Offset != 0 {
			// The position a caller is told is its own write's.
			rec, ok := n.commits[k]
			switch {
			case !ok:
				n.t.Fatalf("%s: write %d completed at %+v, where no owner has committed", nd.id, c.Token, k)
			case c.Partition != w.req.Partition || rec.ent.Key != w.req.Key || !bytes.Equal(rec.ent.Value, w.value):
				n.t.Fatalf("%s: write %d (%s=%q in partition %d) completed at %+v, which holds another write: %s=%q",
					nd.id, c.Token, w.req.Key, w.value, w.req.Partition, k, rec.ent.Key, rec.ent.Value)
			}
		}
		if c.Err == nil && c.Position.Offset != 0 {
			if w, ok := n.waits[c.Token]; ok && w == WaitMajority {
				n.durable = append(n.durable, k)
			}
		}
	}
	nd.e.Advance()
	n.steps++
	n.checkNode(nd) // only nd's state can have changed
}

func (n *network) recordCommit(nd *node, ev Event) {
	k := commitKey{p: ev.Partition, epoch: ev.Entry.Epoch, offset: ev.Entry.Offset}
	if ev.Entry.Epoch.Owner != nd.id {
		n.t.Fatalf("%s committed in %v, an epoch it does not own", nd.id, ev.Entry.Epoch)
	}
	if old, ok := n.commits[k]; ok {
		n.t.Fatalf("two commits at %+v: %+v and %+v", k, old.ent, ev.Entry)
	}
	if n.shared && (strings.IndexByte(ev.Entry.Key, 0xff) >= 0 || bytes.IndexByte(ev.Entry.Value, 0xff) >= 0) {
		n.t.Fatalf("%s committed bytes of a message stepped before: %q = %q", nd.id, ev.Entry.Key, ev.Entry.Value)
	}
	ent := ev.Entry
	ent.Key, ent.Value = strings.Clone(ent.Key), bytes.Clone(ent.Value) // the log may reuse its blocks
	rec := commitRec{ent: ent}
	rec.prev, rec.ok = nd.e.parts[ev.Partition].log.epochAt(ev.Entry.Offset - 1)
	n.commits[k] = rec
}

// checkNode asserts the invariants of docs/engine.md on one node. The
// properties between nodes (one writer per epoch, every copy a prefix of
// its epoch owner's log) are checked against the record of every commit.
func (n *network) checkNode(nd *node) {
	n.t.Helper()
	if nd.dead {
		return
	}
	if len(nd.st.bad) > 0 {
		n.t.Fatalf("%s: state: %v", nd.id, nd.st.bad)
	}
	if nd.e.parts == nil {
		return
	}
	if nd.accepted == nil || nd.e.Yields() != nd.yields {
		// A cluster that gave way dropped every copy (rule 9): its
		// epochs and positions start over.
		nd.accepted = make([]Epoch, n.parts)
		nd.pos = make([]Position, n.parts)
		nd.yields = nd.e.Yields()
	}
	for p, pt := range nd.e.parts {
		if err := n.checkPart(nd, pt); err != nil {
			n.t.Fatalf("step %d: %s partition %d: %v", n.steps, nd.id, p, err)
		}
		if err := nd.disk.check(nd.e, pt); err != nil {
			n.t.Fatalf("step %d: %s partition %d: disk: %v", n.steps, nd.id, p, err)
		}
		nd.accepted[p], nd.pos[p] = pt.accepted, pt.position()
	}
}

func (n *network) checkPart(nd *node, pt *part) error {
	l := &pt.log
	// Rule 3: a node never goes back to a lower epoch, and its position
	// (the history it holds) never moves backwards.
	if pt.accepted.Less(nd.accepted[pt.p]) {
		return fmt.Errorf("accepted epoch went back from %v to %v", nd.accepted[pt.p], pt.accepted)
	}
	if pt.position().Compare(nd.pos[pt.p]) < 0 {
		return fmt.Errorf("position went back from %v to %v", nd.pos[pt.p], pt.position())
	}
	if pt.accepted.Less(pt.logEpoch) {
		return fmt.Errorf("log epoch %v above accepted %v", pt.logEpoch, pt.accepted)
	}
	if pt.active && (pt.accepted.Owner != nd.id || pt.logEpoch != pt.accepted || nd.client) {
		return fmt.Errorf("active in %v with log epoch %v", pt.accepted, pt.logEpoch)
	}
	// Rule 2: the state is the log applied in order, without holes.
	if nd.st.applied[pt.p] != l.last() {
		return fmt.Errorf("state at %d, log at %d", nd.st.applied[pt.p], l.last())
	}
	if l.n > nd.e.cfg.historyMax {
		return fmt.Errorf("log holds %d entries, cap %d", l.n, nd.e.cfg.historyMax)
	}
	prev := l.baseEpoch
	for o := l.base + 1; o <= l.last(); o++ {
		ent := l.at(o) // its epoch comes from the runs, checked against the commits below
		if ent.Epoch.Less(prev) {
			return fmt.Errorf("entry %d epoch %v below the one before, %v", o, ent.Epoch, prev)
		}
		// Rule 1 and the prefix property: every entry is one its epoch's
		// owner committed, and it follows what followed it there.
		rec, ok := n.commits[commitKey{p: pt.p, epoch: ent.Epoch, offset: o}]
		if !ok {
			return fmt.Errorf("entry %d (%v) was never committed", o, ent.Epoch)
		}
		if r := rec.ent; r.Type != ent.Type || r.Key != ent.Key || !bytes.Equal(r.Value, ent.Value) {
			return fmt.Errorf("entry %d differs from its commit: %+v vs %+v", o, ent, rec.ent)
		}
		if rec.ok && rec.prev != prev {
			return fmt.Errorf("entry %d (%v) follows %v here, %v at its owner", o, ent.Epoch, prev, rec.prev)
		}
		prev = ent.Epoch
	}
	if pt.logEpoch.Less(prev) {
		return fmt.Errorf("log epoch %v below its last entry's %v", pt.logEpoch, prev)
	}
	for o, ent := range pt.gap {
		if o <= l.last() || ent.Epoch != pt.accepted {
			return fmt.Errorf("gap buffer holds %d (%v) at %d, accepted %v", o, ent.Epoch, l.last(), pt.accepted)
		}
	}
	return nil
}

// deliver delivers the i-th queued message.
func (n *network) deliver(i int) {
	n.t.Helper()
	env := n.queue[i]
	n.queue = slices.Delete(n.queue, i, i+1)
	n.step(env)
}

func (n *network) step(env envelope) {
	n.t.Helper()
	to := n.nodes[env.to]
	if to == nil || to.dead || n.nodes[env.from].dead || n.cut[[2]string{env.from, env.to}] || (n.lose != nil && n.lose(env)) {
		return
	}
	msg := env.msg
	if n.roundTrip {
		b, err := msgpack.Marshal(msg)
		if err != nil {
			n.t.Fatal(err)
		}
		msg = NewMessage(env.msg.Kind())
		if err := msgpack.Unmarshal(b, msg); err != nil {
			n.t.Fatal(err)
		}
	}
	var wireBytes []byte
	if n.shared {
		b, err := AppendMessage(nil, msg)
		if err != nil {
			n.t.Fatal(err)
		}
		if msg, err = new(Decoder).DecodeShared(b); err != nil {
			n.t.Fatal(err)
		}
		wireBytes = b
	}
	// As the node's driver does; Warm must change nothing Step sees.
	to.e.Warm([]Message{msg}, WarmWindow)
	if err := to.e.Step(env.from, env.cluster, msg); err != nil {
		n.t.Fatalf("%s stepping %T from %s: %v", env.to, msg, env.from, err)
	}
	// The bytes are scribbled over once the round that stepped them has
	// ended: the engine may hold a restored snapshot's state until the
	// next Ready hands it to the disk (Decoder.DecodeShared), and nothing
	// past that. (Scribbled before that Ready, a durable server caught
	// up by a whole snapshot wrote 0xff bytes to its disk.)
	defer func() {
		for i := range wireBytes {
			wireBytes[i] = 0xff
		}
	}()
	if _, ok := msg.(*Heartbeat); ok && !to.e.HasReady() {
		// A heartbeat changes no partition: the invariant walk after it
		// (most of the messages of a long schedule) would find nothing new.
		n.steps++
		return
	}
	n.collect(to)
}

// deliverAll delivers in FIFO order until the queue is empty.
func (n *network) deliverAll() {
	n.t.Helper()
	for i := 0; len(n.queue) > 0; i++ {
		if i > 1_000_000 {
			n.t.Fatal("messages never stop")
		}
		n.deliver(0)
	}
}

// deliverWhere delivers, in order, queued messages matching f (and those
// they cause, if they match too), leaving the rest queued.
func (n *network) deliverWhere(f func(envelope) bool) {
	n.t.Helper()
	for {
		i := slices.IndexFunc(n.queue, f)
		if i < 0 {
			return
		}
		n.deliver(i)
	}
}

func (n *network) dropWhere(f func(envelope) bool) int {
	before := len(n.queue)
	n.queue = slices.DeleteFunc(n.queue, f)
	return before - len(n.queue)
}

func (n *network) tick(d time.Duration) {
	n.t.Helper()
	n.now = n.now.Add(d)
	for _, id := range n.ids() {
		if nd := n.nodes[id]; !nd.dead {
			nd.e.Tick(n.now)
			n.collect(nd)
		}
	}
}

// settle delivers and ticks until nothing moves for a while.
func (n *network) settle() {
	n.t.Helper()
	for range 60 {
		n.deliverAll()
		n.tick(250 * time.Millisecond)
	}
	n.deliverAll()
}

// isolate cuts every link between the two sides.
func (n *network) isolate(a, b []string) {
	for _, x := range a {
		for _, y := range b {
			n.cut[[2]string{x, y}], n.cut[[2]string{y, x}] = true, true
		}
	}
}

func (n *network) heal() { clear(n.cut) }

func (n *network) crash(id string) { n.nodes[id].dead = true }

// propose submits a write at node id and returns its token.
func (n *network) propose(id string, p int, key, value string, w Wait) (uint64, error) {
	n.t.Helper()
	n.token++
	nd := n.nodes[id]
	req := Request{Partition: p, Type: wire.RecordUpdate, Key: key, Value: val(value), Token: n.token, Wait: w}
	n.record(id, req)
	err := nd.e.Propose(req)
	n.collect(nd)
	return n.token, err
}

// dropSeed removes id from the seeds every node was given, as an
// operator who restarts them with new seeds (a driver passes the unseen
// ones with each map; here the live nodes learn at once).
func (n *network) dropSeed(id string) {
	n.seeds = slices.DeleteFunc(n.seeds, func(s string) bool { return s == id })
	for _, nid := range n.ids() {
		nd := n.nodes[nid]
		if nd.dead || nd.e.m == nil {
			continue
		}
		nd.e.SetUnseenSeeds(slices.DeleteFunc(slices.Clone(n.seeds), func(s string) bool {
			return s == nid || slices.ContainsFunc(nd.e.m.Members(), func(m ring.Member) bool { return m.ID == s })
		}))
	}
}

// record writes down a write that node id is about to propose, for the
// checks of its completion.
func (n *network) record(id string, req Request) {
	if n.waits == nil {
		n.waits = map[uint64]Wait{}
	}
	n.waits[req.Token] = req.Wait
	if n.proposals == nil {
		n.proposals = map[uint64]proposal{}
	}
	n.proposals[req.Token] = proposal{node: id, req: req, value: bytes.Clone(req.Value)}
}

func (n *network) owner(p int) string {
	var owner string
	for _, id := range n.ids() {
		nd := n.nodes[id]
		if !nd.dead && nd.e.parts != nil && nd.e.parts[p].active {
			if owner != "" && nd.e.parts[p].accepted == n.nodes[owner].e.parts[p].accepted {
				n.t.Fatalf("%s and %s both active in one epoch", owner, id)
			}
			owner = id
		}
	}
	return owner
}

// converged asserts every live node holds the same history and state.
func (n *network) converged() {
	n.t.Helper()
	var ref *node
	for _, id := range n.ids() {
		nd := n.nodes[id]
		if nd.dead {
			continue
		}
		if ref == nil {
			ref = nd
			continue
		}
		for p := range n.parts {
			a, b := ref.e.parts[p], nd.e.parts[p]
			if a.position() != b.position() {
				n.t.Fatalf("partition %d: %s at %v, %s at %v\n%s", p, ref.id, a.position(), id, b.position(), n.statusLine())
			}
			if !maps.Equal(ref.st.kv[p], nd.st.kv[p]) {
				n.t.Fatalf("partition %d: %s and %s states differ:\n%v\n%v", p, ref.id, id, ref.st.kv[p], nd.st.kv[p])
			}
		}
	}
	for p := range n.parts {
		if n.owner(p) == "" {
			n.t.Fatalf("partition %d has no owner after settling", p)
		}
	}
	// Rule 5: every majority-acked write is in the final history.
	for _, k := range n.durable {
		pt := ref.e.parts[k.p]
		if k.offset <= pt.log.base {
			continue // trimmed; its effect is in the snapshot
		}
		if k.offset > pt.log.last() || pt.log.at(k.offset).Epoch != k.epoch {
			n.t.Fatalf("majority-acked write %+v lost", k)
		}
	}
}

func (n *network) statusLine() string {
	var b strings.Builder
	for _, id := range n.ids() {
		nd := n.nodes[id]
		fmt.Fprintf(&b, "%s(dead=%v):", id, nd.dead)
		for p := range n.parts {
			s := nd.e.Status(p)
			fmt.Fprintf(&b, " [%d %v acc=%v pos=%v]", p, s.Role, s.Accepted, s.Position)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
