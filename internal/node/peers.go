package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/transport"
)

// Peer delivery: how the engine's batches reach other nodes. The driver
// hands each round's output to peers (add, then flush, one batch per peer
// and round, or Send for one batch); peers sends it on the peer's
// connection, spilling behind a full outbox (spill.go), dialing a peer it
// has no connection to (keeping what waits for the dial), or relaying
// through a third server when the direct path fails (relay.go, rule 17).
//
// Lock discipline:
//   - the pool has its own lock (pool.go); peers never holds it.
//   - smu guards spills (and each spillQueue); spilled is atomic.
//   - dmu guards dialing, dialErr and dialAt. A dial's goroutine sends
//     what waited for it holding dmu, so that a message sent to the peer
//     meanwhile queues behind them: dmu is taken before smu, never after.
//   - out, outOrder, hdr, hdrFor and relayRoutes are the driver's: touched
//     only on the driver (under the node's engMu).
//   - relay (relays) has its own lock.
//
// The rest of the node reaches peers through its methods (Send, conn,
// connTo, idOf, report, ...). Only the handshake is set up from outside:
// Start configures the pool's hello (secrets, token, callbacks) and auth
// shares its refusal limiter and keys (pool.go, auth.go).
type peers struct {
	self   string
	client bool // a client node: it probes no servers
	ctx    context.Context
	logger *slog.Logger
	// spawn runs a goroutine the node's Close waits for (Node.spawn).
	spawn func(func()) bool
	// addr is a peer's data address by the node's view.
	addr func(id string) (string, bool)
	// lost tells the engine that the connection to a peer broke or could
	// not be made (Node.connectionLost).
	lost func(id string)

	pool *pool
	// relay routes around a peer the data plane does not reach (rule 17);
	// relayRoutes is what the driver last logged of it.
	relay       *relays
	relayRoutes map[string]string
	// relayed counts the batches sent through another server.
	relayed atomic.Uint64

	smu          sync.Mutex
	spills       map[string]*spillQueue // peers whose must-deliver messages queue (see spill.go)
	spilled      atomic.Int64           // bytes in every spill queue
	spillDrained chan struct{}          // capacity 1: a spill queue shrank

	dmu     sync.Mutex
	dialing map[string][][]byte  // peers being dialed → messages waiting for the connection
	dialErr map[string]string    // peers → the last dial's error, until one succeeds (status)
	dialAt  map[string]time.Time // peers being dialed → when the dial began (status)

	out      map[string]*batchWriter // per peer, reused each round; the driver's
	outOrder []string                // peers in out with a batch this round
	hdr      []byte                  // the batches' cluster header (appendCluster), for hdrFor
	hdrFor   partition.ClusterID
	scratch  []byte // encodes one message at a time; the driver's

	// clusters holds the cluster each peer's last batch named, by ID, so
	// that its founder is not allocated again per batch (serveEngine).
	clusters sync.Map
}

// add queues the encoded engine message b for peer to, in this round's
// batch to it, under cluster's header; a batch that would outgrow
// maxBatchBytes goes now. The driver's.
func (ps *peers) add(to string, cluster partition.ClusterID, b []byte) {
	if cluster != ps.hdrFor {
		ps.hdrFor, ps.hdr = cluster, appendCluster(nil, cluster)
	}
	w := ps.out[to]
	if w == nil {
		w = &batchWriter{}
		ps.out[to] = w
	}
	if len(w.buf) == 0 {
		ps.outOrder = append(ps.outOrder, to) // the peer's first message this round
	} else if len(w.buf)+len(b) > maxBatchBytes {
		ps.Send(to, w.take())
		ps.outOrder = append(ps.outOrder, to)
	}
	w.add(ps.hdr, b)
}

// flush sends every peer its batch of this round. The driver's.
func (ps *peers) flush() {
	for _, id := range ps.outOrder {
		if b := ps.out[id].take(); len(b) > 0 {
			ps.Send(id, b)
		}
	}
	ps.outOrder = ps.outOrder[:0]
}

// forget drops what it keeps of the peers gone says are gone. The
// driver's.
func (ps *peers) forget(gone func(id string) bool) {
	for id := range ps.out {
		if gone(id) {
			delete(ps.out, id)
		}
	}
	ps.clusters.Range(func(k, _ any) bool {
		if id := k.(string); gone(id) {
			ps.clusters.Delete(id)
		}
		return true
	})
}

// conn returns the connection to peer id, nil without one.
func (ps *peers) conn(id string) *transport.Conn { return ps.pool.lookup(id) }

// connTo returns the connection to peer id, dialing it if needed.
func (ps *peers) connTo(ctx context.Context, id string) (*transport.Conn, error) {
	if c := ps.pool.lookup(id); c != nil {
		return c, nil
	}
	addr, ok := ps.addr(id)
	if !ok || addr == "" {
		return nil, errs.Errorf(errs.Unavailable, "fero: no address for %s", id)
	}
	return ps.pool.get(ctx, id, addr)
}

// idOf names the peer at the other end of c, once it said hello;
// idOfWait waits for its hello until ctx ends.
func (ps *peers) idOf(c *transport.Conn) (string, bool) { return ps.pool.idOf(c) }

func (ps *peers) idOfWait(ctx context.Context, c *transport.Conn) (string, bool) {
	return ps.pool.idOfWait(ctx, c)
}

// queued is the bytes waiting in the outboxes of every peer connection.
func (ps *peers) queued() int { return ps.pool.queued() }

// close closes every peer connection.
func (ps *peers) close() { ps.pool.close() }

// Send sends one engine message without ever blocking the driver. With
// no connection yet it dials in the background and keeps the message (up
// to maxWaitingMessages) for the new connection; a peer whose outbox is
// full misses the message. The engine's retries and fetches recover what
// is lost either way; the queue only saves them a timeout at start-up.
func (ps *peers) Send(id string, b []byte) {
	if via := ps.relay.via(id, time.Now()); via != "" && ps.relayVia(via, id, b) {
		return // rule 17: id has not been heard from directly for a lease
	}
	if c := ps.pool.lookup(id); c != nil {
		ps.send(id, c, b)
		return
	}
	ps.dialLater(id, b)
}

// connect dials every member with an address, so owners can reach
// clients over the connections clients open, and writes find owners.
func (ps *peers) connect(m *ring.Map, clients []string) {
	if m == nil {
		return
	}
	for _, mem := range m.Members() {
		if ps.pool.lookup(mem.ID) == nil {
			ps.dialLater(mem.ID, nil)
		}
	}
	for _, id := range clients {
		if ps.pool.lookup(id) == nil {
			ps.dialLater(id, nil)
		}
	}
}

// dialLater dials id in the background, once at a time, keeping msg (if
// any) to send first on the new connection, in order.
func (ps *peers) dialLater(id string, msg []byte) {
	if id == ps.self {
		return
	}
	addr, ok := ps.addr(id)
	if !ok || addr == "" {
		return // a client that does not listen connects to us
	}
	ps.dmu.Lock()
	waiting, under := ps.dialing[id]
	if msg != nil && len(waiting) < maxWaitingMessages {
		waiting = append(waiting, append([]byte(nil), msg...)) // the driver reuses msg
	}
	ps.dialing[id] = waiting
	if !under {
		if ps.dialAt == nil {
			ps.dialAt = map[string]time.Time{}
		}
		ps.dialAt[id] = time.Now()
	}
	ps.dmu.Unlock()
	if under {
		return
	}
	dialed := ps.spawn(func() {
		ctx, cancel := context.WithTimeout(ps.ctx, 5*time.Second)
		defer cancel()
		c, err := ps.pool.get(ctx, id, addr)
		if err != nil && ps.ctx.Err() == nil {
			ps.logger.Debug("fero: node: dial failed", "peer", id, "addr", addr, "err", err)
		}
		if err != nil && ps.ctx.Err() == nil {
			ps.lost(id) // what was sent to it waits for nothing
		}
		ps.dmu.Lock()
		if err != nil {
			if ps.dialErr == nil {
				ps.dialErr = map[string]string{}
			}
			ps.dialErr[id] = time.Now().UTC().Format(time.TimeOnly) + " " + err.Error()
		} else {
			delete(ps.dialErr, id)
		}
		ps.dmu.Unlock()
		// Send what waited. The driver may already have sent newer
		// messages on the connection (the pool shows it as soon as it is
		// adopted); the engine orders what it receives by offset and
		// epoch, so an overtaken message costs nothing but a duplicate.
		ps.dmu.Lock()
		defer ps.dmu.Unlock()
		if err == nil {
			for _, b := range ps.dialing[id] {
				ps.send(id, c, b)
			}
		}
		delete(ps.dialing, id)
		delete(ps.dialAt, id)
	})
	if !dialed { // closing
		ps.dmu.Lock()
		delete(ps.dialing, id)
		delete(ps.dialAt, id)
		ps.dmu.Unlock()
	}
}

// relayVia sends an engine batch for server to through relay; it reports
// whether the relay took it (a batch it does not take is lost, as a
// direct one over a failed link is: the engine's retries recover it).
func (ps *peers) relayVia(relay, to string, b []byte) bool {
	c := ps.pool.lookup(relay)
	if c == nil {
		return false
	}
	err := c.Send(ps.ctx, protocol.OpRelay, appendRelay(make([]byte, 0, len(b)+len(to)+2), relayBatch, to, b), transport.FailFast)
	if err != nil {
		ps.logger.Debug("fero: node: relaying failed", "to", to, "via", relay, "err", err)
		return false
	}
	ps.relayed.Add(1)
	return true
}

// probeServers sends a probe straight to every server of the map once per
// probe interval, dialing one afresh if its connection is gone (a stalled
// one dies at the transport's user timeout): a peer hears from this node
// directly at least that often while the path works. The driver's.
func (ps *peers) probeServers(now time.Time) {
	if ps.client {
		return
	}
	routes := ps.relay.routes(now)
	for id, via := range routes {
		if was, ok := ps.relayRoutes[id]; !ok || was != via {
			ps.logger.Warn("fero: node: a server gossip shows alive has not been heard from over the data plane for a lease; sending to it through another server (docs/engine.md, rule 17)",
				"peer", id, "via", via, "lease", ps.relay.lease())
		}
	}
	for id := range ps.relayRoutes {
		if _, ok := routes[id]; !ok && ps.relay.sender(id) {
			ps.logger.Info("fero: node: heard from a server directly again; sending to it directly", "peer", id)
		}
	}
	ps.relayRoutes = routes
	for _, id := range ps.relay.probes(now) {
		if c := ps.pool.lookup(id); c != nil {
			_ = c.Send(ps.ctx, protocol.OpRelay, appendRelay(nil, relayProbe, "", nil), transport.FailFast)
		} else {
			ps.dialLater(id, nil)
		}
	}
}

// report describes this node's data connection to peer id (see
// protocol.MemberReport.Conn).
func (ps *peers) report(id string) string {
	if by, ok := ps.pool.initiatorOf(id); ok {
		if v := ps.pool.protocolOf(id); v != 0 {
			by += fmt.Sprintf(", protocol %d", v)
		}
		ps.smu.Lock()
		defer ps.smu.Unlock()
		if sq, ok := ps.spills[id]; ok {
			return fmt.Sprintf("up, opened by %s; %d messages (%d bytes) queued behind a full outbox for %v",
				by, len(sq.q), sq.must+sq.loose, time.Since(sq.since).Round(time.Millisecond))
		}
		return "up, opened by " + by
	}
	ps.dmu.Lock()
	defer ps.dmu.Unlock()
	var dialing string
	if at, ok := ps.dialAt[id]; ok {
		dialing = fmt.Sprintf("; dialing for %v, %d messages waiting", time.Since(at).Round(time.Millisecond), len(ps.dialing[id]))
	}
	if e, ok := ps.dialErr[id]; ok {
		return "down: " + e + dialing
	}
	return "none" + dialing
}

// maxWaitingMessages bounds the messages kept for a peer being dialed.
const maxWaitingMessages = 4096
