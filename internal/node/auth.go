package node

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// Connections that are not a peer's (fero.Dial, the fero CLI) prove a
// credential before a node with credentials serves them: a client token,
// which lets them make requests, read the status and tail, or the cluster
// secret, which also lets them forget servers. The exchange is the
// hello's (pool.go) without IDs: OpAuth carries the caller's nonce and the
// ID of its key (a hash prefix of the derived key, so a node that accepts
// several tokens, or secrets during a rotation, knows which to use), and
// is answered with the node's nonce and its MAC under that key, so the
// caller knows it reached a node that holds the credential too; then
// OpAuthProof carries the caller's MAC. The MACs carry different labels
// ("node", "caller"), so neither side can reflect the other's.
const (
	OpAuth      uint32 = 9
	OpAuthProof uint32 = 10
)

// Credential kinds an OpAuth names.
const (
	CredToken  = "token"
	CredSecret = "secret"
)

type authHello struct {
	Kind  string `msgpack:"k"`
	KeyID []byte `msgpack:"i,omitempty"`
	Nonce []byte `msgpack:"n"`
	MAC   []byte `msgpack:"m,omitempty"`
}

// keyID names a derived key without revealing it.
func keyID(key []byte) []byte {
	sum := sha256.Sum256(key)
	return sum[:8]
}

// role is what a connection may do.
type role uint8

const (
	roleNone   role = iota
	roleClient      // requests, status, tail
	roleAdmin       // and forget: it proved the cluster secret
)

// TokenKey derives the key a client token is proved with.
func TokenKey(token []byte) []byte { return deriveKey(token, "fero client token key v1") }

// SecretKey derives the key the cluster secret is proved with by a
// connection that is not a peer's (the hello key).
func SecretKey(secret []byte) []byte { return helloKey(secret) }

// auth holds what the node accepts from connections that are not peers'.
type auth struct {
	mu      sync.Mutex
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
	return n.pool.keys.Load() != nil || (t != nil && len(*t) > 0)
}

// SetTokens replaces the client tokens the node accepts (none: only the
// cluster secret, or nothing at all without one, proves a client).
func (n *Node) SetTokens(tokens ...[]byte) {
	keys := make([][]byte, len(tokens))
	for i, t := range tokens {
		keys[i] = TokenKey(t)
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
	if id, ok := n.pool.idOfWait(n.ctx, c); ok && !membership.IsAttached(id) {
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
			if got == roleClient || n.pool.refusals.Allow(remoteHost(r.Conn()), time.Now()) {
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
	if n.pool.refusals.Allow(remoteHost(c), time.Now()) {
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
	n.needProof.Add(1)
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

// serveAuth answers a connection's OpAuth with the node's nonce and MAC.
func (n *Node) serveAuth(r *transport.Request) {
	var h authHello
	if err := wire.DecodeValue(r.Payload(), &h); err != nil || len(h.Nonce) != nonceSize {
		_ = r.Fail(errs.New(errs.InvalidArgument, "malformed auth"))
		return
	}
	keys, _ := n.acceptKeys(h.Kind)
	var key []byte
	for _, k := range keys {
		if bytes.Equal(keyID(k), h.KeyID) {
			key = k
			break
		}
	}
	if key == nil {
		if n.pool.refusals.Allow(remoteHost(r.Conn()), time.Now()) {
			n.logger.Warn("fero: node: refused a connection's credential", "remote", r.Conn().RemoteAddr(), "kind", h.Kind, "why", "not one this node takes")
		}
		_ = r.Fail(errs.Errorf(errs.PermissionDenied, "this node takes no such %s", h.Kind))
		return
	}
	mine := newNonce()
	b, err := msgpack.Marshal(authHello{Kind: h.Kind, Nonce: mine, MAC: helloMAC(key, "node", h.Nonce, mine, "", "")})
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
	var proof helloProof
	if !ok {
		_ = r.Fail(errs.New(errs.FailedPrecondition, "no auth to prove on this connection"))
		return
	}
	_, granted := n.acceptKeys(pr.kind)
	if wire.DecodeValue(r.Payload(), &proof) != nil || !hmac.Equal(proof.MAC, helloMAC(pr.key, "caller", pr.theirs, pr.mine, "", "")) {
		if n.pool.refusals.Allow(remoteHost(c), time.Now()) {
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
	case CredToken:
		if t := n.auth.tokens.Load(); t != nil {
			return *t, roleClient
		}
		return nil, roleClient
	case CredSecret:
		if k := n.pool.keys.Load(); k != nil {
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

// Authenticate proves a credential on a connection to a node (OpAuth):
// kind is CredToken or CredSecret, key its TokenKey or SecretKey. It
// checks that the node holds the credential too.
func Authenticate(ctx context.Context, c *transport.Conn, kind string, key []byte) error {
	mine := newNonce()
	b, err := msgpack.Marshal(authHello{Kind: kind, KeyID: keyID(key), Nonce: mine})
	if err != nil {
		return err
	}
	reply, err := c.Call(ctx, OpAuth, b)
	if err != nil {
		return fmt.Errorf("fero: authenticate to %s: %w", c.RemoteAddr(), err)
	}
	var h authHello
	if err := wire.DecodeValue(reply, &h); err != nil || len(h.Nonce) != nonceSize ||
		!hmac.Equal(h.MAC, helloMAC(key, "node", mine, h.Nonce, "", "")) {
		return errs.Errorf(errs.PermissionDenied, "fero: %s did not prove that it holds the %s", c.RemoteAddr(), kind)
	}
	b, err = msgpack.Marshal(helloProof{MAC: helloMAC(key, "caller", mine, h.Nonce, "", "")})
	if err != nil {
		return err
	}
	if _, err := c.Call(ctx, OpAuthProof, b); err != nil {
		return fmt.Errorf("fero: authenticate to %s: %w", c.RemoteAddr(), err)
	}
	return nil
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
