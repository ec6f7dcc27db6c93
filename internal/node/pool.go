package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// hello names a node. With a cluster secret, the caller's hello carries a
// fresh nonce, and the callee's answer its own nonce and a MAC over both
// nonces and both IDs, which the caller checks before it sends its proof
// (protocol.OpHelloProof, the MAC the other way round). Neither side can replay a
// MAC from another connection: each covers a nonce the checker just drew.
type hello struct {
	ID    string `msgpack:"id"`
	Nonce []byte `msgpack:"n,omitempty"`
	MAC   []byte `msgpack:"m,omitempty"`
	// Attach marks an attached client's hello (attach.go): it comes on a
	// connection that proved a client token, and carries no nonce.
	Attach bool `msgpack:"a,omitempty"`
	// Proto and MinProto are the newest and oldest protocol versions the
	// sender speaks, Feat its optional features (protocol.go); a hello
	// without them is protocol 1's.
	Proto    uint32   `msgpack:"pv,omitempty"`
	MinProto uint32   `msgpack:"pmin,omitempty"`
	Feat     []string `msgpack:"feat,omitempty"`
}

// pool keeps one live connection per peer node, whichever side opened it:
// calls in both directions share it. When both sides dial at once, both
// keep the connection opened by the node with the smaller ID and close the
// other, so they agree without a further exchange.
type pool struct {
	self string
	opts []transport.Option // for dialing; include the node's handler

	logger   *slog.Logger
	refusals logLimit // refused hellos logged, per remote host

	keys atomic.Pointer[[][]byte] // hello keys (protocol.HelloKey of each cluster secret); the first proves; nil: none
	// attach: this node is an attached client (attach.go): it proves token
	// (a protocol.TokenKey; nil: none) on every connection it dials and says hello
	// marked Attach.
	attach bool
	token  []byte
	// onAttach answers a hello marked Attach (a server's: attach.go);
	// nil refuses them.
	onAttach func(r *transport.Request, h hello)
	// onLost is told, on a goroutine of its own, that the connection the
	// pool kept for a peer closed while it was still the one kept (it
	// broke; it was not replaced by a newer one); nil: nobody is.
	onLost func(id string)

	// proto is the range of protocol versions this node speaks: ours,
	// but for tests of nodes of other builds.
	proto protoRange

	mu      sync.Mutex
	proving map[*transport.Conn]proving // served a hello, waiting for the caller's proof
	conns   map[string]pooled
	byConn  map[*transport.Conn]string        // every adopted connection's peer, losers included until closed
	dialing map[string]chan struct{}          // closed when a dial to the peer ends
	pending map[*transport.Conn]chan struct{} // dialed, not yet adopted; closed once it is (or is not)
	closed  bool
	closing sync.WaitGroup // connections being closed in the background
	done    chan struct{}  // closed by close
}

// proving is a served hello whose caller has not proved the secret yet.
type proving struct {
	id           string
	mine, theirs []byte // nonces
	proto        uint32 // the protocol version agreed by the hellos
}

type pooled struct {
	c         *transport.Conn
	initiator string // who dialed it
	proto     uint32 // the protocol version its hellos agreed (0: not known, an attached client's)
}

func newPool(self string, opts ...transport.Option) *pool {
	return &pool{self: self, opts: opts, proto: ours, logger: slog.New(slog.DiscardHandler), refusals: logLimit{every: time.Second}, conns: make(map[string]pooled), byConn: make(map[*transport.Conn]string), dialing: make(map[string]chan struct{}), pending: make(map[*transport.Conn]chan struct{}), proving: make(map[*transport.Conn]proving), done: make(chan struct{})}
}

// get returns the live connection to peer id, dialing addr if there is
// none. Concurrent callers share one dial.
func (p *pool) get(ctx context.Context, id, addr string) (*transport.Conn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, transport.ErrClosed
		}
		if pc, ok := p.conns[id]; ok && pc.c.Err() == nil {
			p.mu.Unlock()
			return pc.c, nil
		}
		if wait, ok := p.dialing[id]; ok {
			p.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		p.dialing[id] = done
		p.mu.Unlock()

		c, proto, err := p.dial(ctx, id, addr)
		p.mu.Lock()
		delete(p.dialing, id)
		close(done)
		p.mu.Unlock()
		if err != nil {
			return nil, err
		}
		kept := p.adopt(id, c, p.self, proto)
		p.settle(c)
		if kept != nil {
			return kept, nil
		}
		// Our dial lost to a connection the peer opened meanwhile: loop
		// to pick that one up.
	}
}

// dial opens a connection to peer id at addr and says hello on it (with
// the proof of the cluster secret, or as an attached client), returning
// it with the protocol version the hellos agreed.
func (p *pool) dial(ctx context.Context, id, addr string) (_ *transport.Conn, proto uint32, _ error) {
	c, err := transport.DialConn(ctx, addr, p.opts...)
	if err != nil {
		return nil, 0, err
	}
	// The peer adopts the connection as soon as it has answered the hello,
	// and may send on it before this side has read the answer and adopted
	// it too: the reader holds such messages until then (see idOfWait).
	p.mu.Lock()
	p.pending[c] = make(chan struct{})
	p.mu.Unlock()
	fail := func(err error) (*transport.Conn, uint32, error) {
		// Settle first: a message the peer sent on c before we gave up
		// waits on c's reader for the settling (idOfWait), and Close waits
		// for that reader. Closed first, neither moved again, and no dial
		// to the peer ever started again (fault suite seeds 7668, 7690).
		p.settle(c)
		c.Close()
		return nil, 0, err
	}
	if p.attach {
		if p.token != nil {
			if err := protocol.Authenticate(ctx, c, protocol.CredToken, p.token); err != nil {
				return fail(fmt.Errorf("attaching to %s at %s: %w", id, addr, err))
			}
		}
		out := hello{ID: p.self, Attach: true}
		p.proto.announce(&out)
		b, err := msgpack.Marshal(out)
		if err != nil {
			return fail(err)
		}
		reply, err := c.Call(ctx, protocol.OpHello, b)
		if err != nil {
			return fail(fmt.Errorf("attaching to %s at %s: %w", id, addr, err))
		}
		var h hello
		if err := wire.DecodeValue(reply, &h); err != nil || h.ID != id {
			return fail(errs.Errorf(errs.FailedPrecondition, "%s answers as %q, not %q", addr, h.ID, id))
		}
		if proto, err = negotiate(p.proto, rangeOf(h), id); err != nil {
			return fail(err)
		}
		return c, proto, nil
	}
	keys := p.keys.Load()
	out := hello{ID: p.self}
	p.proto.announce(&out)
	if keys != nil {
		out.Nonce = protocol.NewNonce()
	}
	b, err := msgpack.Marshal(out)
	if err != nil {
		return fail(err)
	}
	reply, err := c.Call(ctx, protocol.OpHello, b)
	if err != nil {
		return fail(fmt.Errorf("hello to %s at %s: %w", id, addr, err))
	}
	var h hello
	if err := wire.DecodeValue(reply, &h); err != nil || h.ID != id {
		return fail(errs.Errorf(errs.FailedPrecondition, "%s answers as %q, not %q", addr, h.ID, id))
	}
	if proto, err = negotiate(p.proto, rangeOf(h), id); err != nil {
		return fail(err)
	}
	if keys == nil {
		return c, proto, nil
	}
	if !protocol.VerifyMAC(*keys, h.MAC, "server", out.Nonce, h.Nonce, id, p.self) {
		return fail(errs.Errorf(errs.PermissionDenied, "%s at %s did not prove the cluster secret", id, addr))
	}
	b, err = msgpack.Marshal(protocol.HelloProof{MAC: protocol.HelloMAC((*keys)[0], "client", out.Nonce, h.Nonce, p.self, id)})
	if err != nil {
		return fail(err)
	}
	if _, err := c.Call(ctx, protocol.OpHelloProof, b); err != nil {
		return fail(fmt.Errorf("proving the cluster secret to %s at %s: %w", id, addr, err))
	}
	return c, proto, nil
}

// protocolOf returns the protocol version spoken on the connection kept
// for peer id, or 0 if none is kept or its version is not known.
func (p *pool) protocolOf(id string) uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc, ok := p.conns[id]; ok && pc.c.Err() == nil {
		return pc.proto
	}
	return 0
}

// settle ends c's wait for adoption, adopted or not.
func (p *pool) settle(c *transport.Conn) {
	p.mu.Lock()
	if w, ok := p.pending[c]; ok {
		close(w)
		delete(p.pending, c)
	}
	p.mu.Unlock()
}

// serveHello answers a peer's hello with our ID and adopts the connection
// it came on; with a cluster secret, it answers with its MAC and adopts the
// connection once the caller has proved the secret (serveProof).
func (p *pool) serveHello(r *transport.Request) {
	var h hello
	// Bounded: a hello of 12 MB of nested arrays once overflowed the
	// decoder's stack and ended the process.
	if err := wire.DecodeValue(r.Payload(), &h); err != nil || h.ID == "" {
		_ = r.Fail(errs.New(errs.InvalidArgument, "malformed hello"))
		return
	}
	// A stranger's range is checked, and noted only once it has proved
	// what it must (a pre-auth hello must not grow the pool's tables).
	proto, err := negotiate(p.proto, rangeOf(h), h.ID)
	if err != nil {
		p.refused(r.Conn(), h.ID, err.Error())
		_ = r.Fail(err)
		return
	}
	if p.attach {
		// No node dials an attached client; one that says hello to it
		// (without the secret it cannot prove anything) could pose as
		// an owner and have its copy apply forged commits.
		p.refused(r.Conn(), h.ID, "an attached client takes no peers")
		_ = r.Fail(errs.New(errs.PermissionDenied, "this node is an attached client: it takes no peers"))
		return
	}
	if h.Attach {
		if p.onAttach == nil {
			_ = r.Fail(errs.New(errs.FailedPrecondition, "attach: this node takes no attached clients"))
			return
		}
		p.onAttach(r, h)
		return
	}
	keys := p.keys.Load()
	if keys == nil {
		// No secret to prove: the hello is all a peer shows (with client
		// tokens but no secret, a library-only setup).
		if !prove(r) {
			return
		}
		out := hello{ID: p.self}
		p.proto.announce(&out)
		b, err := msgpack.Marshal(out)
		if err != nil {
			_ = r.Fail(err)
			return
		}
		_ = r.Reply(b)
		p.adopt(h.ID, r.Conn(), h.ID, proto)
		return
	}
	if len(h.Nonce) != protocol.NonceSize {
		p.refused(r.Conn(), h.ID, "its hello carries no nonce: it has no cluster secret")
		_ = r.Fail(errs.New(errs.PermissionDenied, "this cluster needs a cluster secret"))
		return
	}
	mine := protocol.NewNonce()
	out := hello{ID: p.self, Nonce: mine, MAC: protocol.HelloMAC((*keys)[0], "server", h.Nonce, mine, p.self, h.ID)}
	p.proto.announce(&out)
	b, err := msgpack.Marshal(out)
	if err != nil {
		_ = r.Fail(err)
		return
	}
	c := r.Conn()
	p.mu.Lock()
	first := true
	if _, ok := p.proving[c]; ok {
		first = false
	}
	p.proving[c] = proving{id: h.ID, mine: mine, theirs: h.Nonce, proto: proto}
	p.mu.Unlock()
	if first {
		go func() {
			<-c.Done()
			p.mu.Lock()
			delete(p.proving, c)
			p.mu.Unlock()
		}()
	}
	_ = r.Reply(b)
}

// serveProof checks the caller's proof of the cluster secret and adopts
// the connection as the named node's. A wrong proof closes the connection.
func (p *pool) serveProof(r *transport.Request) {
	c := r.Conn()
	p.mu.Lock()
	pr, ok := p.proving[c]
	delete(p.proving, c)
	p.mu.Unlock()
	keys := p.keys.Load()
	var proof protocol.HelloProof
	switch {
	case !ok || keys == nil:
		_ = r.Fail(errs.New(errs.FailedPrecondition, "no hello to prove on this connection"))
		return
	case wire.DecodeValue(r.Payload(), &proof) != nil ||
		!protocol.VerifyMAC(*keys, proof.MAC, "client", pr.theirs, pr.mine, pr.id, p.self):
		p.refused(c, pr.id, "wrong proof of the cluster secret")
		_ = r.Fail(errs.New(errs.PermissionDenied, "wrong proof of the cluster secret"))
		go c.Close()
		return
	}
	if !prove(r) {
		return
	}
	_ = r.Reply(nil)
	p.adopt(pr.id, c, pr.id, pr.proto)
}

// refused logs a hello refused for want of the cluster secret, at most
// once a second per remote host, so that a flood of them cannot flood the
// log.
func (p *pool) refused(c *transport.Conn, id, why string) {
	if p.refusals.Allow(remoteHost(c), time.Now()) {
		p.logger.Warn("fero: node: refused a peer's hello", "remote", c.RemoteAddr(), "claims", id, "why", why)
	}
}

// adopt records c as the connection to id and returns the connection the
// pool keeps for id: c, or the one that wins over it, or nil if c lost and
// no live connection is left. The loser is closed in the background (a
// Close on the reader's own goroutine would wait for itself).
func (p *pool) adopt(id string, c *transport.Conn, initiator string, proto uint32) *transport.Conn {
	p.mu.Lock()
	if p.closed {
		p.closeLater(c)
		p.mu.Unlock()
		return nil
	}
	// Its other end is a member, proved by the cluster secret when there
	// is one: read its frames into buffers of their declared size (a
	// snapshot reply of megabytes no longer doubles its buffer as it
	// arrives). Not an attached client's: it proved only a token.
	if !membership.IsAttached(id) {
		c.TrustLengths()
	}
	// A connection adopted again (its hello came twice) changes nothing.
	cur, ok := p.conns[id]
	if ok && cur.c != c && cur.c.Err() == nil {
		// Two live connections: keep the one the smaller ID opened. Of two
		// that the same node opened, keep the newer: its opener dialed
		// again because it gave up on the older, which may not have
		// failed on this side yet.
		winner := min(p.self, id)
		if cur.initiator == winner && initiator != winner {
			// c lost, but the peer may send on it until it learns so:
			// serve what comes on it as the peer's, until it closes.
			p.byConn[c] = id
			p.closeLater(c)
			p.mu.Unlock()
			return cur.c
		}
		p.closeLater(cur.c)
	}
	if ok && cur.c != c && cur.c.Err() != nil {
		delete(p.byConn, cur.c) // a live loser keeps its entry until closeLater closes it
	}
	if !ok || cur.c != c {
		p.watch(id, c)
	}
	p.conns[id] = pooled{c: c, initiator: initiator, proto: proto}
	p.byConn[c] = id
	p.mu.Unlock()
	return c
}

// watch tells onLost when c, kept for peer id, closes while still kept.
// Callers hold mu.
func (p *pool) watch(id string, c *transport.Conn) {
	if p.onLost == nil {
		return
	}
	p.closing.Add(1)
	go func() {
		defer p.closing.Done()
		<-c.Done()
		p.mu.Lock()
		lost := !p.closed && p.conns[id].c == c
		p.mu.Unlock()
		if lost {
			p.onLost(id)
		}
	}()
}

// queued returns the bytes waiting in the outboxes of the pool's live
// connections.
func (p *pool) queued() int {
	p.mu.Lock()
	cs := make([]*transport.Conn, 0, len(p.conns))
	for _, pc := range p.conns {
		cs = append(cs, pc.c)
	}
	p.mu.Unlock()
	n := 0
	for _, c := range cs {
		if c.Err() == nil {
			n += c.Queued()
		}
	}
	return n
}

// lookup returns the live connection to id, or nil; it never dials.
func (p *pool) lookup(id string) *transport.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc, ok := p.conns[id]; ok && pc.c.Err() == nil {
		return pc.c
	}
	return nil
}

// initiatorOf reports whether the pool holds a live connection to id, and
// which side opened it.
func (p *pool) initiatorOf(id string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc, ok := p.conns[id]; ok && pc.c.Err() == nil {
		return pc.initiator, true
	}
	return "", false
}

// idOf returns the peer a connection belongs to.
func (p *pool) idOf(c *transport.Conn) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.byConn[c]
	return id, ok
}

// idOfWait is idOf for a message that came on c: if this side dialed c
// and has not adopted it yet (the peer answered the hello and sent at once),
// it waits for the adoption, until ctx ends.
func (p *pool) idOfWait(ctx context.Context, c *transport.Conn) (string, bool) {
	p.mu.Lock()
	id, ok := p.byConn[c]
	wait := p.pending[c]
	p.mu.Unlock()
	if ok || wait == nil {
		return id, ok
	}
	select {
	case <-wait:
	case <-ctx.Done():
		return "", false
	}
	return p.idOf(c)
}

// loserGrace is how long a connection that lost the tie-break stays open:
// calls already in flight on it finish, and messages the peer sends on it
// before it learns it lost are still served.
const loserGrace = 5 * time.Second

// closeLater closes c after loserGrace (at once when the pool closes), on
// a goroutine that close waits for. Callers hold mu.
func (p *pool) closeLater(c *transport.Conn) {
	p.closing.Add(1)
	go func() {
		defer p.closing.Done()
		t := time.NewTimer(loserGrace)
		select {
		case <-t.C:
		case <-p.done:
			t.Stop()
		case <-c.Done():
			t.Stop()
		}
		c.Close()
		p.mu.Lock()
		delete(p.byConn, c)
		p.mu.Unlock()
	}()
}

// peers returns the IDs of the peers with a live connection.
func (p *pool) peers() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for id, pc := range p.conns {
		if pc.c.Err() == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// close closes every connection and waits for them.
func (p *pool) close() {
	p.mu.Lock()
	if !p.closed {
		close(p.done)
	}
	p.closed = true
	conns := p.conns
	p.conns = map[string]pooled{}
	p.mu.Unlock()
	// Each Close may wait out the close timeout for a peer that does not
	// answer (transport's lingerClose): wait for all at once.
	var wg sync.WaitGroup
	for _, pc := range conns {
		wg.Go(func() { pc.c.Close() })
	}
	wg.Wait()
	p.closing.Wait()
}

// setSecrets installs the cluster secrets: the first proves this node, any
// of them verifies a peer. None turns authentication off.
func (p *pool) setSecrets(secrets [][]byte) {
	if len(secrets) == 0 {
		p.keys.Store(nil)
		return
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		keys[i] = protocol.HelloKey(s)
	}
	p.keys.Store(&keys)
}
