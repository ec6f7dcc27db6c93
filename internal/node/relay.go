package node

import (
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/transport"
)

const (
	// relayBatch: an engine batch for the named server, to the relay.
	relayBatch byte = 1 + iota
	// relayDeliver: an engine batch from the named server, from the relay.
	relayDeliver
	// relayRequest: a forwarded request (protocol.OpRequest's payload, its hop
	// already counted) for the named server, to the relay, which calls
	// the server with it and answers with its answer.
	relayRequest
	// relayProbe: nothing, sent directly; it shows the receiver that the
	// sender's messages reach it again.
	relayProbe
)

// appendRelay appends a protocol.OpRelay payload to b.
func appendRelay(b []byte, kind byte, id string, payload []byte) []byte {
	b = append(b, kind)
	b = binary.AppendUvarint(b, uint64(len(id)))
	b = append(b, id...)
	return append(b, payload...)
}

var errBadRelay = errs.New(errs.InvalidArgument, "fero: malformed relay frame")

// parseRelay splits a protocol.OpRelay payload; rest aliases b.
func parseRelay(b []byte) (kind byte, id string, rest []byte, err error) {
	if len(b) < 2 {
		return 0, "", nil, errBadRelay
	}
	kind = b[0]
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n > uint64(len(b)-1-k) || n > 1024 {
		return 0, "", nil, errBadRelay
	}
	off := 1 + k
	return kind, string(b[off : off+int(n)]), b[off+int(n):], nil
}

// relays is rule 17's bookkeeping: when each server of the map was last
// heard from directly, which server to send to a peer through, and what
// a relay passes on. It decides on the times it is given; the node gives
// it the wall clock. Every inbound batch notes its sender and every
// outbound one asks the way, so both read an immutable view of the map's
// servers and store times in atomics: no lock on the data path.
type relays struct {
	mu   sync.Mutex // serializes setMap
	view atomic.Pointer[relayView]
}

// relayView is one map's servers (all but this node, sorted) and, by the
// same index, when each was last heard from directly (or entered the
// map) and last probed, in Unix nanoseconds.
type relayView struct {
	lease          time.Duration
	servers        []string
	direct, probed []atomic.Int64
}

func newRelays() *relays { return &relays{} }

// index returns id's place in v.servers, or -1.
func (v *relayView) index(id string) int {
	if i, ok := slices.BinarySearch(v.servers, id); ok {
		return i
	}
	return -1
}

// cut reports whether the i-th server has not been heard from directly
// for a lease.
func (v *relayView) cut(i int, now time.Time) bool {
	return now.UnixNano()-v.direct[i].Load() > int64(v.lease)
}

// setMap takes the servers of a new map (all but self) and the lease, three
// probe intervals. A server new to the map counts as heard at now: it
// gets a lease to be heard, as the engine's lease does (rule 9).
func (t *relays) setMap(m *ring.Map, self string, lease time.Duration, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.view.Load()
	v := &relayView{lease: lease}
	for _, s := range m.Members() {
		if s.ID != self {
			v.servers = append(v.servers, s.ID)
		}
	}
	slices.Sort(v.servers)
	v.direct = make([]atomic.Int64, len(v.servers))
	v.probed = make([]atomic.Int64, len(v.servers))
	for i, id := range v.servers {
		v.direct[i].Store(now.UnixNano())
		if old != nil {
			if j := old.index(id); j >= 0 {
				v.direct[i].Store(old.direct[j].Load())
				v.probed[i].Store(old.probed[j].Load())
			}
		}
	}
	t.view.Store(v)
}

// lease is the current lease (0 before the first map).
func (t *relays) lease() time.Duration {
	if v := t.view.Load(); v != nil {
		return v.lease
	}
	return 0
}

// heard notes a batch or probe that came straight from id.
func (t *relays) heard(id string, now time.Time) {
	v := t.view.Load()
	if v == nil {
		return
	}
	if i := v.index(id); i >= 0 && v.direct[i].Load() < now.UnixNano() {
		// Two readers may race here; the later store may hold the
		// slightly earlier time, which costs nothing.
		v.direct[i].Store(now.UnixNano())
	}
}

// via returns the server to send to id through, or "" to send directly:
// id is a server of the map not heard from directly for a lease, and
// the relay is the first server by ID, other than id, heard from
// directly within one. With no such server, messages go directly.
func (t *relays) via(id string, now time.Time) string {
	v := t.view.Load()
	if v == nil {
		return ""
	}
	i := v.index(id)
	if i < 0 || !v.cut(i, now) {
		return ""
	}
	return v.relayFor(i, now)
}

// relayFor is the first server but the i-th heard from within a lease.
func (v *relayView) relayFor(i int, now time.Time) string {
	for j, s := range v.servers {
		if j != i && !v.cut(j, now) {
			return s
		}
	}
	return ""
}

// passes reports whether this node, as a relay, passes a message from
// server from on to server to: both are other servers of its map. It
// passes it even if it has not heard from to lately itself: over a
// connection that does not work the message is lost, as it would be
// dropped here; over one that is merely slow (a loaded machine) it
// arrives. (Dropping it here lost the messages of a cluster forming on
// a machine at load average 41, whose peers all looked cut, for 35 s.)
func (t *relays) passes(from, to string) bool {
	v := t.view.Load()
	return v != nil && from != to && v.index(from) >= 0 && v.index(to) >= 0
}

// sender reports whether id is a server of the map (a relayed batch's
// origin must be one).
func (t *relays) sender(id string) bool {
	v := t.view.Load()
	return v != nil && v.index(id) >= 0
}

// probes returns the servers whose probe is due (one per probe interval,
// a third of the lease), and marks them probed. Every server is probed,
// not only those cut: the engine's heartbeats go once per its own probe
// interval (1 s by default), longer than a lease of three gossip probe
// intervals (750 ms with lan), so on an idle cluster they alone left
// every peer looking cut between two of them. The driver's alone.
func (t *relays) probes(now time.Time) []string {
	v := t.view.Load()
	if v == nil {
		return nil
	}
	var out []string
	for i, id := range v.servers {
		if now.UnixNano()-v.probed[i].Load() >= int64(v.lease/3) {
			v.probed[i].Store(now.UnixNano())
			out = append(out, id)
		}
	}
	return out
}

// routes returns the servers cut from this node, each with the server
// messages to it go through ("" when none is heard from either).
func (t *relays) routes(now time.Time) map[string]string {
	v := t.view.Load()
	if v == nil {
		return nil
	}
	var out map[string]string
	for i, id := range v.servers {
		if !v.cut(i, now) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[id] = v.relayFor(i, now)
	}
	return out
}

// serveRelay serves OpRelay: a probe, a batch or request to pass on (as
// the relay), or a batch passed on (as the destination). Only a server
// that proved the cluster secret (an adopted, unattached peer) sends
// one, and only servers of this node's map are relayed for.
func (n *Node) serveRelay(r *transport.Request) {
	from, ok := n.peers.idOf(r.Conn())
	if !ok || membership.IsAttached(from) || n.cfg.Client {
		if r.Mode() == transport.ModeCall {
			_ = r.Fail(errs.New(errs.PermissionDenied, "fero: relays are for the servers of a cluster"))
		}
		n.closeUnproved(r.Conn()) // a stranger's (pre-auth budget): it had its chance
		return
	}
	kind, id, payload, err := parseRelay(r.Payload())
	if err != nil {
		if r.Mode() == transport.ModeCall {
			_ = r.Fail(err)
		}
		return
	}
	now := time.Now()
	switch kind {
	case relayProbe:
		n.peers.relay.heard(from, now)
	case relayBatch:
		c := n.peers.conn(id)
		if c == nil || !n.peers.relay.passes(from, id) {
			return // lost, as over the failed link
		}
		if err := c.Send(n.ctx, protocol.OpRelay, appendRelay(make([]byte, 0, len(payload)+len(from)+2), relayDeliver, from, payload), transport.FailFast); err == nil {
			n.stats.relayedFor.Add(1)
		}
	case relayDeliver:
		// From the relay: the origin's batch, stepped as the origin's.
		if !n.peers.relay.sender(id) || membership.IsAttached(id) || !n.peers.relay.sender(from) {
			return
		}
		n.serveEngineFrom(r, id, payload, false)
	case relayRequest:
		n.relayRequestTo(r, from, id, payload)
	}
}

// relayRequestTo passes a forwarded request on to server to and its
// answer back; a request it cannot pass on is answered "retry" (nothing
// was done), as a non-owner answers one.
func (n *Node) relayRequestTo(r *transport.Request, from, to string, payload []byte) {
	c := n.peers.conn(to)
	oneway := r.Mode() == transport.ModeSend
	if c == nil || !n.peers.relay.passes(from, to) {
		if !oneway {
			_ = r.Reply([]byte{protocol.ReplyRetry})
		}
		return
	}
	b := append([]byte(nil), payload...) // the read buffer is reused once this returns
	n.stats.relayedFor.Add(1)
	if oneway {
		_ = c.Send(n.ctx, protocol.OpRequest, b, transport.FailFast)
		return
	}
	err := c.Go(r.Context(), protocol.OpRequest, b, func(reply []byte, err error) {
		if err != nil {
			_ = r.Fail(protocol.ForwardFailure(err))
			return
		}
		_ = r.Reply(reply)
	}, transport.FailFast)
	if errors.Is(err, transport.ErrOutboxFull) {
		_ = r.Reply([]byte{protocol.ReplyRetry})
	} else if err != nil {
		_ = r.Fail(err)
	}
}
