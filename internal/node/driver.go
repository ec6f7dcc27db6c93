// The driver: the one goroutine that steps the engine (drive), the
// batches peers send it (serveEngine, stepped inline when the engine is
// idle), and what each round's output becomes (process).
package node

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// serveEngine hands a peer's engine message to the driver. It runs on
// the connection's reader: when the inbox is full the connection stops
// reading, which pushes back on the sender.
func (n *Node) serveEngine(r *transport.Request) {
	from, ok := n.peers.idOfWait(n.ctx, r.Conn())
	if !ok || r.Mode() != transport.ModeSend {
		// Engine messages are a peer's, one-way. Never left unanswered:
		// an open call holds its read block (issue 42: 4 connections
		// pinned 322 MB).
		n.refuseEngine(r, ok)
		return
	}
	n.serveEngineFrom(r, from, r.Payload(), true)
}

// serveEngineFrom hands the engine batch payload, which came in r from
// the server from (directly, or through a relay: rule 17), to the driver.
func (n *Node) serveEngineFrom(r *transport.Request, from string, payload []byte, direct bool) {
	if direct && !n.cfg.Client {
		n.peers.relay.heard(from, time.Now())
	}
	// The messages alias the batch's bytes, which the connection keeps
	// until the round that steps them has been acted on (release): the
	// engine copies what it holds past the step that takes them (see
	// Decoder.DecodeShared).
	hold := r.Hold()
	var last partition.ClusterID
	if v, ok := n.peers.clusters.Load(from); ok {
		last = v.(partition.ClusterID)
	}
	dec := n.decoders.get()
	cluster, msgs, err := decodeBatch(dec, payload, last)
	if err != nil {
		n.decoders.put(dec)
		hold.Release()
		n.logger.Warn("fero: node: bad engine message", "from", from, "err", err)
		return
	}
	if cluster != last {
		n.peers.clusters.Store(from, cluster)
	}
	in := inbound{from: from, cluster: cluster, msgs: msgs, dec: dec, hold: hold}
	if membership.IsAttached(from) {
		// An attached client proved a token, not the secret: it names no
		// cluster, and steps only what a client sends for itself.
		in.cluster, in.limited = partition.ClusterID{}, true
	}
	if !n.cfg.Client && !r.More() && n.stepInline(in) {
		return
	}
	n.inboxed.Add(1)
	select {
	case n.inbox <- in:
	case <-n.ctx.Done():
		n.inboxed.Add(-1)
	}
}

// stepInline steps a batch on the connection's reader and acts on the
// round's output there, when the engine is idle: the lock is free and
// no batch waits in the inbox or in the driver's hands. It reports
// whether it did. A server's lone batch (a commit to its copy, the ack
// that completes a write) then costs no hand-over to the driver; in a
// burst, batches queue for the driver, which steps them as one round.
// A client node hands every batch to the driver: the commit that comes
// back with its call's reply, stepped on the reader, kept the caller
// waiting behind it (the unloaded round trip rose from 50 to 58 µs).
func (n *Node) stepInline(in inbound) bool {
	if n.inboxed.Load() != 0 || !n.engMu.TryLock() {
		return false
	}
	defer n.engMu.Unlock()
	// Under engMu, with nothing inboxed, every earlier batch from this
	// connection has been stepped: this one cannot overtake it.
	if n.inboxed.Load() != 0 || n.ctx.Err() != nil || n.eng.Map() == nil {
		return false
	}
	n.eng.Clock(time.Now())
	n.step(in)
	n.output()
	n.stats.steppedInline.Add(1)
	return true
}

// drive is the goroutine that steps the engine; it holds engMu for each
// round, from the input it takes to the output it handles. (writeAsync
// may run a round of its own on the caller's goroutine, under engMu too.)
func (n *Node) drive() {
	tick := time.NewTicker(n.cfg.Tick)
	defer tick.Stop()
	n.engMu.Lock()
	n.eng.Tick(time.Now())
	n.engMu.Unlock()
	for {
		select {
		case <-n.ctx.Done():
			n.engMu.Lock()
			defer n.engMu.Unlock()
			for _, w := range n.waiters.All() {
				n.complete(w, partition.Completion{Err: protocol.ErrClosedInFlight})
			}
			for _, p := range append(n.props.take(), n.unmapped.take()...) {
				n.refuse(p, protocol.ErrClosed)
			}
			n.closeSubs()
			return
		case <-n.view.changed:
			n.engMu.Lock()
			n.eng.Clock(time.Now())
			m, clients, unseen := n.view.current()
			// After a server leaves, wait one probe interval before any new
			// epoch, so that a burst of departures (a split seen member by
			// member) starts one round of syncs, not several. Safety does
			// not rest on it: a sync needs promises from a majority of the
			// configuration (rule 9).
			n.eng.SetSettleDelay(n.ms.ProbeInterval())
			if !n.cfg.Client {
				n.peers.relay.setMap(m, n.id, 3*n.ms.ProbeInterval(), time.Now())
			}
			n.logger.Info("fero: node: partition map changed", "version", fmt.Sprintf("%016x", m.Version()), "servers", len(m.Members()), "clients", len(clients))
			n.noteSeedAnswered()
			if len(unseen) > 0 && n.eng.AwaitingConfig() {
				n.logger.Info("fero: node: seeds not seen yet; this node forms no new cluster before it sees every one, or hears from a formed cluster", "unseen", unseen)
			}
			n.eng.SetUnseenSeeds(unseen)
			if err := n.eng.SetMap(m, clients); err != nil {
				n.logger.Error("fero: node: engine refused the map", "err", err)
			} else {
				n.engMap.Store(m)
				n.endMovedStreams(m)
				early := n.early
				n.early = nil
				for _, in := range early {
					n.step(in)
				}
				for _, p := range n.unmapped.take() {
					n.propose(p)
				}
			}
			n.peers.connect(m, clients)
			n.forgetGone(m, clients)
		case in := <-n.inbox:
			n.engMu.Lock()
			n.eng.Clock(time.Now())
			n.step(in)
			n.inboxed.Add(-1)
			n.batch()
		case <-n.props.ready:
			n.engMu.Lock()
			n.eng.Clock(time.Now())
			n.takeProps()
			n.batch()
		case q := <-n.queries:
			n.engMu.Lock()
			q(n.eng)
		case now := <-tick.C:
			n.peers.probeServers(now)
			n.engMu.Lock()
			n.eng.Tick(now)
			n.warnForming(now)
			for _, p := range n.unmapped.expired(now) {
				n.refuse(p, partition.ErrNoMap)
			}
		}
		n.output()
		n.engMu.Unlock()
	}
}

// output handles what the engine has for the driver, then releases the
// batches stepped since the last output; engMu is held.
func (n *Node) output() {
	if n.eng.HasReady() {
		n.process(n.eng.Ready())
		n.eng.Advance()
	}
	n.release()
}

// release hands the decoders and the bytes of the batches stepped this
// round back for reuse. Every step is followed by an output under the
// same hold of engMu, and the engine keeps nothing of a message past its
// step but what reaches the round's Ready (a snapshot's state for the
// disk), which output has acted on by now.
func (n *Node) release() {
	for i, in := range n.stepped {
		n.decoders.put(in.dec)
		in.hold.Release()
		n.stepped[i] = inbound{}
	}
	n.stepped = n.stepped[:0]
}

// defaultInbox is Config.Inbox's default. Each queued batch keeps its
// read block (up to 256 KiB) and its decoded messages: at most 4 MiB of
// blocks and what they decode to. With 256 batches, a server taking a million
// pipelined writes peaked at 230–307 MB of RSS (median 269) for 100 MB of
// records; with 16, at 211–217 MB, with no loss of throughput
// (docs/engine.md, the driver).
const defaultInbox = 16

// batch steps the engine with the messages and proposals already waiting,
// up to maxBatch, before the driver acts on its output: the commits of a
// batch leave in one Commit per partition and copy, instead of one each.
// It stops early once the output reaches maxRound, so a round's events and
// messages stay small enough to stay in cache.
func (n *Node) batch() {
	for range maxBatch {
		if n.eng.Pending() >= maxRound {
			return
		}
		if n.takeProps() > 0 {
			continue
		}
		select {
		case in := <-n.inbox:
			n.step(in)
			n.inboxed.Add(-1)
		default:
			return
		}
	}
}

// takeProps proposes every queued proposal and returns how many there
// were; engMu is held.
func (n *Node) takeProps() int {
	q := n.props.take()
	for i := 0; i < len(q); i += partition.WarmWindow {
		window := q[i:min(len(q), i+partition.WarmWindow)]
		for _, p := range window {
			n.eng.WarmRequest(p.req.Partition, p.req.Key)
		}
		n.eng.WarmRequests()
		for _, p := range window {
			n.propose(p)
		}
	}
	n.props.recycle(q)
	return len(q)
}

// forgetGone drops the batch writers of peers no longer in the map or the
// client list, so they do not pile up as members come and go.
func (n *Node) forgetGone(m *ring.Map, clients []string) {
	gone := func(id string) bool {
		return !slices.Contains(clients, id) && !slices.ContainsFunc(m.Members(), func(x ring.Member) bool { return x.ID == id })
	}
	n.peers.forget(gone)
}

// maxEarly bounds the batches kept for the engine before its first map.
const maxEarly = 256

func (n *Node) step(in inbound) {
	if n.eng.Map() == nil {
		// Peers that already see this node may ask it for its position
		// before its own view has produced a map; answering late beats
		// dropping the question (the asker would wait out its sync timeout).
		if len(n.early) < maxEarly {
			n.early = append(n.early, in)
		}
		return
	}
	for msgs := in.msgs; len(msgs) > 0; {
		k := n.eng.Warm(msgs, partition.WarmWindow)
		for _, m := range msgs[:k] {
			if n.cfg.Tracer != nil {
				if f, ok := m.(*partition.Forward); ok && f.Trace != "" {
					n.traceForward(in.from, f)
				}
			}
			if in.limited {
				n.stepLimited(in.from, m)
			} else if err := n.eng.Step(in.from, in.cluster, m); err != nil {
				n.logger.Warn("fero: node: engine refused a message", "from", in.from, "err", err)
			}
		}
		msgs = msgs[k:]
	}
	if in.dec != nil {
		n.stepped = append(n.stepped, in)
	}
}

// stepLimited steps an attached client's message (Engine.StepLimited).
// What a client's engine sends in the course of things and a server does
// not take from an attached one (a fence for a stale commit, an ack of
// an epoch other than the accepted one, as when ownership moves) is
// logged at DEBUG; anything else it refuses at WARN, at most once a
// second per client: no client sends it.
func (n *Node) stepLimited(from string, m partition.Message) {
	err := n.eng.StepLimited(from, m)
	if err == nil {
		return
	}
	switch m.(type) {
	case *partition.Fenced, *partition.CommitAck:
		n.logger.Debug("fero: node: engine refused an attached client's message", "from", from, "err", err)
	default:
		if n.peers.pool.refusals.Allow(from, time.Now()) {
			n.logger.Warn("fero: node: engine refused an attached client's message", "from", from, "err", err)
		}
	}
}

func (n *Node) propose(p proposal) {
	if n.disk != nil && n.disk.err() != nil {
		n.refuse(p, ErrDisk)
		return
	}
	if n.eng.Map() == nil {
		if !n.unmapped.hold(p, time.Now()) {
			n.refuse(p, partition.ErrNoMap)
		}
		return
	}
	if p.read != nil {
		n.proposeRead(p)
		return
	}
	if p.done != nil {
		p.req.Token = n.waiters.Add(waiter{done: p.done, began: p.began, wait: p.req.Wait})
	}
	if err := n.eng.Propose(p.req); err != nil {
		if p.done != nil {
			if w, ok := n.waiters.Take(p.req.Token); ok {
				n.complete(w, partition.Completion{Err: err})
			}
		}
	}
}

// proposeRead reads the value now, under the engine lock, so it is the
// state at the log offset the engine records for the read, and answers
// with it once the engine has confirmed the read.
func (n *Node) proposeRead(p proposal) {
	b, ok := n.store.GetBytes(p.req.Key)
	if p.versioned {
		// Read with the value, under the engine lock that every change
		// takes: the version of the value read.
		v := wire.AppendUint(wire.AppendArrayHeader(nil, 2), n.store.Version(p.req.Key))
		if ok {
			b = append(v, b...)
		} else {
			b = wire.AppendNil(v)
		}
	} else {
		b = bytes.Clone(b)
	}
	done := p.read
	tok := n.waiters.Add(waiter{done: CompleteFunc(func(c partition.Completion) {
		if c.Err != nil {
			done(nil, c.Err)
			return
		}
		done(b, nil)
	})})
	if err := n.eng.ProposeRead(partition.ReadRequest{Partition: p.req.Partition, Token: tok, Deadline: p.req.Deadline}); err != nil {
		n.waiters.Take(tok)
		done(nil, err)
	}
}

// readAsync proposes a linearizable read of key on this node, which must
// own the key's partition; done gets the value (nil if there is none) or
// an error, with the engine held (as WriteAsync's done). It reports false
// when the node is closed.
func (n *Node) readAsync(ctx context.Context, key string, versioned bool, done func([]byte, error)) bool {
	req := partition.Request{Partition: n.store.PartitionOf(key), Key: key}
	req.Deadline, _ = ctx.Deadline()
	n.spawning.mu.RLock()
	defer n.spawning.mu.RUnlock()
	if n.spawning.closed {
		return false
	}
	if err := n.props.push(ctx, n.ctx, proposal{req: req, read: done, versioned: versioned}, true); err != nil {
		done(nil, err)
	}
	return true
}

// process acts on what the engine asks: events to this node's streams,
// completions to the callers waiting for them, and messages out.
func (n *Node) process(rd partition.Ready) {
	if n.eng.ForeignVersion() != n.notes.seen.foreign || n.eng.Yields() != n.notes.seen.yields {
		n.noteClusters()
	}
	if !n.cfg.Client && n.eng.Map() != nil {
		n.noteVoting()
	}
	if n.disk != nil {
		if err := n.disk.write(rd); err != nil {
			n.diskFailed(rd, err)
			return
		}
	}
	// One batch per peer. The engine sends one message to many copies
	// back to back (a Commit to every copy): encode it once.
	var last partition.Message
	b := n.peers.scratch[:0]
	for _, env := range rd.Messages {
		if len(n.fwdSpans) > 0 {
			if r, ok := env.Msg.(*partition.ForwardReply); ok {
				n.tracedReply(env.To, r)
			}
		}
		if env.Msg != last {
			var err error
			if b, err = partition.AppendMessage(b[:0], env.Msg); err != nil {
				n.logger.Error("fero: node: cannot encode an engine message", "err", err)
				last = nil
				continue
			}
			last = env.Msg
		}
		n.peers.add(env.To, rd.Cluster, b)
	}
	if cap(b) <= maxBatchBytes {
		n.peers.scratch = b
	}
	// Events go first, then completions: a caller that has its answer
	// finds the write's change already handed to this node's streams. A
	// request answered on its connection's reader is written at once
	// (transport.Request), so the batches go last: the commit this round
	// sends to every copy, which the caller does not wait for, leaves
	// after the answer.
	var dropped map[int][3]uint64 // partition → count, lowest and highest offset dropped this round
	for _, ev := range rd.Events {
		if ev.Entry.Type == wire.RecordBatch {
			n.publishBatch(ev)
		} else {
			n.publish(ev)
		}
		switch ev.Kind {
		case partition.EventDropped:
			// Writes this node gave up (never Majority-acked: rule 6): an
			// operator's concern, so WARN, but one line per partition per
			// round, not one per write (a long split's heal drops many).
			if dropped == nil {
				dropped = map[int][3]uint64{}
			}
			d, o := dropped[ev.Partition], ev.Entry.Offset
			if d[0] == 0 || o < d[1] {
				d[1] = o
			}
			d[0], d[2] = d[0]+1, max(d[2], o)
			dropped[ev.Partition] = d
		case partition.EventFenced:
			n.logger.Info("fero: node: engine event", "kind", ev.Kind, "partition", ev.Partition,
				"epoch", ev.Epoch, "owner_by_map", n.ownerByMap(ev.Partition), "offset", ev.Entry.Offset)
		}
	}
	for p, d := range dropped {
		n.logger.Warn("fero: node: dropped writes that another history replaced", "partition", p,
			"writes", d[0], "offsets", fmt.Sprintf("%d-%d", d[1], d[2]), "owner_by_map", n.ownerByMap(p))
	}
	for _, c := range rd.Completions {
		if w, ok := n.waiters.Take(c.Token); ok {
			n.complete(w, c)
		}
	}
	n.peers.flush()
}

// ownerByMap is partition p's owner by this node's map ("" without one).
func (n *Node) ownerByMap(p int) string {
	if m, _, _ := n.view.current(); m != nil {
		if o, ok := m.Owner(p); ok {
			return o.ID
		}
	}
	return ""
}

// connectionLost tells the engine that the connection to peer id broke or
// could not be made, so the writes forwarded to it whose callers retry
// fail over at once (partition.Engine.ConnectionLost). It waits for the
// driver, so it runs on a goroutine of its own.
func (n *Node) connectionLost(id string) {
	select {
	case n.queries <- func(e *partition.Engine) { e.ConnectionLost(id) }:
	case <-n.ctx.Done():
	}
}

// noteClusters logs what changed about other clusters: this node's
// cluster gave way to another (rule 9, cluster identity), or servers of
// another cluster were refused. Each happens once per server or name, so
// the log cannot be flooded.
func (n *Node) noteClusters() {
	if y := n.eng.Yields(); y != n.notes.seen.yields {
		n.notes.seen.yields = y
		n.logger.Warn("fero: node: this server's cluster gave way to the cluster it met, which holds an earlier life of the server that founded it (a seedless server restarted without a data directory): every partition's copy was dropped, and the writes made in it are reported as dropped; the server now catches up as a learner (docs/engine.md rule 9, cluster identity)",
			"cluster", n.eng.Cluster().String())
	}
	if v := n.eng.ForeignVersion(); v != n.notes.seen.foreign {
		n.notes.seen.foreign = v
		others := n.eng.Foreign()
		ids := slices.Sorted(maps.Keys(others))
		names := make([]string, len(ids))
		for i, id := range ids {
			names[i] = id + " (" + others[id].String() + ")"
		}
		if len(ids) > 0 {
			n.logger.Error("fero: node: servers of another cluster are refused: both clusters founded without a shared server, so neither history may replace the other; stop the servers of one of them, or give it its own resource name (docs/engine.md rule 9, cluster identity)",
				"cluster", n.eng.Cluster().String(), "other", strings.Join(names, ", "))
		}
	}
}

// noteVoting times this server's catch-ups: from the first round it is
// seen not voting (a learner) to the first it is.
func (n *Node) noteVoting() {
	voting := n.eng.Voting()
	switch {
	case !voting && n.notes.learnerSince.IsZero():
		n.notes.learnerSince = time.Now()
	case voting && !n.notes.learnerSince.IsZero():
		d := time.Since(n.notes.learnerSince)
		n.notes.learnerSince = time.Time{}
		n.stats.catchUps.Add(1)
		n.stats.catchUpNanos.Add(int64(d))
		n.stats.lastCatchUp.Store(int64(d))
		n.logger.Info("fero: node: caught up: this server's vote counts", "took", d.Round(time.Millisecond))
	}
}

// maxBatch bounds the inputs the driver takes before it acts on the
// engine's output, and maxRound the output it lets pile up meanwhile (an
// input is a peer's batch, which may hold thousands of entries).
const (
	maxBatch = 256
	maxRound = 4096
)
