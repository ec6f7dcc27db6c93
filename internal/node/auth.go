package node

import (
	"bytes"
	"crypto/hmac"
	"net"
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

// role is what a connection may do.
type role uint8

const (
	roleNone   role = iota
	roleClient      // requests, status, tail
	roleAdmin       // and forget: it proved the cluster secret
)

// auth holds what the node accepts from connections that are not peers'.
type auth struct {
	mu      sync.Mutex               // guards conns and proving
	tokens  atomic.Pointer[[][]byte] // token keys; read on every request, so without the lock
	conns   map[*transport.Conn]role
	proving map[*transport.Conn]authProving
}

type authProving struct {
	kind         string
	key          []byte
	mine, theirs []byte
}

// authRequired reports whether connections must prove a credential: the node
// has a cluster secret or client tokens.
func (n *Node) authRequired() bool {
	t := n.auth.tokens.Load()
	return n.peers.pool.keys.Load() != nil || (t != nil && len(*t) > 0)
}

// SetTokens replaces the client tokens the node accepts (none: only the
// cluster secret, or nothing at all without one, proves a client).
func (n *Node) SetTokens(tokens ...[]byte) {
	keys := make([][]byte, len(tokens))
	for i, t := range tokens {
		keys[i] = protocol.TokenKey(t)
	}
	n.auth.tokens.Store(&keys)
}

// roleOf returns what the connection r came on may do: everything on a
// node without credentials; a peer's connection (it proved the secret in
// its hello) is an admin's.
func (n *Node) roleOf(c *transport.Conn) role {
	if !n.authRequired() {
		return roleAdmin
	}
	// A connection this node dialed may carry the peer's requests before
	// this side has adopted it (see idOfWait).
	if id, ok := n.peers.idOfWait(n.ctx, c); ok && !membership.IsAttached(id) {
		return roleAdmin
	}
	n.auth.mu.Lock()
	defer n.auth.mu.Unlock()
	return n.auth.conns[c]
}

// allow wraps a handler: a request from a connection below need is
// refused with PermissionDenied, and the refusal logged (rate-limited).
// A connection that has proved nothing is closed after the refusal
// (closeUnproved).
func (n *Node) allow(need role, h func(*transport.Request)) func(*transport.Request) {
	return func(r *transport.Request) {
		if got := n.roleOf(r.Conn()); got < need {
			what := "a client token or the cluster secret"
			if need == roleAdmin {
				what = "the cluster secret"
			}
			if got == roleClient || n.peers.pool.refusals.Allow(remoteHost(r.Conn()), time.Now()) {
				n.logger.Warn("fero: node: refused a request from a connection without the credential it needs", "remote", r.Conn().RemoteAddr(), "needs", what)
			}
			_ = r.Fail(errs.Errorf(errs.PermissionDenied, "this node needs %s for that (fero.WithToken, --token-file)", what))
			n.closeUnproved(r.Conn())
			return
		}
		h(r)
	}
}

// refuseEngine answers an engine message that is not a peer's one-way
// message: from a connection that said no hello (peer false), or sent as
// a call. A call is answered at once; a connection that has proved
// nothing is closed.
func (n *Node) refuseEngine(r *transport.Request, peer bool) {
	c := r.Conn()
	if peer {
		n.logger.Debug("fero: node: engine message sent as a call", "remote", c.RemoteAddr())
		_ = r.Fail(errs.New(errs.InvalidArgument, "engine messages are one-way"))
		return
	}
	if n.peers.pool.refusals.Allow(remoteHost(c), time.Now()) {
		n.logger.Warn("fero: node: refused an engine message on a connection without a peer's hello", "remote", c.RemoteAddr())
	}
	_ = r.Fail(errs.New(errs.PermissionDenied, "engine messages come from peers, after their hello"))
	n.closeUnproved(c)
}

// closeUnproved closes, once its refusal has left, a connection that has
// proved nothing (transport.WithPreAuth) and asked for what needs a
// proof: it had its chance to prove one. It counts the refusal.
func (n *Node) closeUnproved(c *transport.Conn) {
	if c.Proved() {
		return
	}
	n.stats.needProof.Add(1)
	go c.Close() // flushes the refusal; not on the reader, which Close waits for
}

// prove lifts a connection's pre-auth budget once it has proved a
// credential (transport.Conn.Prove). When the node holds as many proved
// connections as it takes, it fails r and closes the connection.
func prove(r *transport.Request) bool {
	c := r.Conn()
	if err := c.Prove(); err != nil {
		_ = r.Fail(err)
		go c.Close()
		return false
	}
	return true
}

// serveAuth answers a connection's protocol.OpAuth with the node's nonce and MAC.
func (n *Node) serveAuth(r *transport.Request) {
	var h protocol.AuthHello
	if err := wire.DecodeValue(r.Payload(), &h); err != nil || len(h.Nonce) != protocol.NonceSize {
		_ = r.Fail(errs.New(errs.InvalidArgument, "malformed auth"))
		return
	}
	keys, _ := n.acceptKeys(h.Kind)
	var key []byte
	for _, k := range keys {
		if bytes.Equal(protocol.KeyID(k), h.KeyID) {
			key = k
			break
		}
	}
	if key == nil {
		if n.peers.pool.refusals.Allow(remoteHost(r.Conn()), time.Now()) {
			n.logger.Warn("fero: node: refused a connection's credential", "remote", r.Conn().RemoteAddr(), "kind", h.Kind, "why", "not one this node takes")
		}
		_ = r.Fail(errs.Errorf(errs.PermissionDenied, "this node takes no such %s", h.Kind))
		return
	}
	mine := protocol.NewNonce()
	b, err := msgpack.Marshal(protocol.AuthHello{Kind: h.Kind, Nonce: mine, MAC: protocol.HelloMAC(key, "node", h.Nonce, mine, "", "")})
	if err != nil {
		_ = r.Fail(err)
		return
	}
	c := r.Conn()
	n.auth.mu.Lock()
	_, again := n.auth.proving[c]
	n.auth.proving[c] = authProving{kind: h.Kind, key: key, mine: mine, theirs: h.Nonce}
	n.auth.mu.Unlock()
	if !again {
		n.forgetConnWhenDone(c)
	}
	_ = r.Reply(b)
}

// serveAuthProof checks a connection's proof and grants it its role.
func (n *Node) serveAuthProof(r *transport.Request) {
	c := r.Conn()
	n.auth.mu.Lock()
	pr, ok := n.auth.proving[c]
	delete(n.auth.proving, c)
	n.auth.mu.Unlock()
	var proof protocol.HelloProof
	if !ok {
		_ = r.Fail(errs.New(errs.FailedPrecondition, "no auth to prove on this connection"))
		return
	}
	_, granted := n.acceptKeys(pr.kind)
	if wire.DecodeValue(r.Payload(), &proof) != nil || !hmac.Equal(proof.MAC, protocol.HelloMAC(pr.key, "caller", pr.theirs, pr.mine, "", "")) {
		if n.peers.pool.refusals.Allow(remoteHost(c), time.Now()) {
			n.logger.Warn("fero: node: refused a connection's credential", "remote", c.RemoteAddr(), "kind", pr.kind, "why", "wrong proof")
		}
		_ = r.Fail(errs.Errorf(errs.PermissionDenied, "wrong %s", pr.kind))
		go c.Close()
		return
	}
	if !prove(r) {
		return
	}
	n.auth.mu.Lock()
	n.auth.conns[c] = granted
	n.auth.mu.Unlock()
	_ = r.Reply(nil)
}

// acceptKeys returns the keys a proof of kind is checked against, and the
// role it grants.
func (n *Node) acceptKeys(kind string) ([][]byte, role) {
	switch kind {
	case protocol.CredToken:
		if t := n.auth.tokens.Load(); t != nil {
			return *t, roleClient
		}
		return nil, roleClient
	case protocol.CredSecret:
		if k := n.peers.pool.keys.Load(); k != nil {
			return *k, roleAdmin
		}
	}
	return nil, roleNone
}

func (n *Node) forgetConnWhenDone(c *transport.Conn) {
	go func() {
		<-c.Done()
		n.auth.mu.Lock()
		delete(n.auth.conns, c)
		delete(n.auth.proving, c)
		n.auth.mu.Unlock()
	}()
}

// remoteHost is the host part of a connection's remote address, the key
// refusals are rate-limited by.
func remoteHost(c *transport.Conn) string {
	host := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}
