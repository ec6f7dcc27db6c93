package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
)

// nested returns about n bytes of msgpack: a map whose field "x" (which a
// hello does not have, so a decoder skips it) holds n-1 one-element arrays
// around nil. Skipped recursively, it goes n levels deep.
func nested(n int) []byte {
	b := append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, n)...)
	b[len(b)-1] = 0xc0
	return b
}

// TestNestedHelloIsRefused: a hello of 12 MB of nested arrays, sent by
// anyone who reaches the data port, overflowed the decoder's stack and
// ended the process ("fatal error: stack overflow", which no recover
// catches). The hello is refused with a clear error and the node serves
// on.
func TestNestedHelloIsRefused(t *testing.T) {
	nw := memnet.New(1)
	a := startNode(t, nw, "a", false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := transport.DialConn(ctx, a.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Call(ctx, protocol.OpHello, nested(12<<20))
	require.Error(t, err)
	require.Equal(t, errs.InvalidArgument, errs.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "malformed hello")

	// The node still answers.
	c2, err := transport.DialConn(ctx, a.Addr())
	require.NoError(t, err)
	defer c2.Close()
	_, err = c2.Call(ctx, protocol.OpHello, []byte{0x81, 0xa2, 'i', 'd', 0xa1, 'z'})
	require.NoError(t, err)
}

// TestHelloNeedsTheClusterSecret: with a cluster secret, a node is taken
// for the ID its hello names only once it has proved the secret on that
// connection. Before, any process that reached the data port could send
// the hello as node "a", receive the engine traffic meant for a, and have
// a forged commit applied (issue 17). Nodes that share a secret connect;
// a node with another secret, or none, is refused both ways; and a caller
// that names "a" and cannot prove the secret gets nothing adopted.
func TestHelloNeedsTheClusterSecret(t *testing.T) {
	secret, other := []byte("0123456789abcdef-cluster"), []byte("fedcba9876543210-intruder")
	a := newTestNode(t, "a", secret)
	b := newTestNode(t, "b", secret)
	_, err := b.pool.get(ctxT(t), "a", a.addr())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.pool.lookup("b") != nil }, 10*time.Second, 5*time.Millisecond, "a adopts b's proven connection")

	for name, x := range map[string]*testNode{
		"another secret": newTestNode(t, "x", other),
		"no secret":      newTestNode(t, "x"),
	} {
		_, err := x.pool.get(ctxT(t), "a", a.addr())
		require.Error(t, err, name)
		require.Nil(t, a.pool.lookup("x"), "%s: a adopted x", name)
		_, err = a.pool.get(ctxT(t), "x", x.addr())
		require.Error(t, err, "%s: a dialing x", name)
		require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "%s: %v", name, err)
	}

	// A forger that names "b": it draws a nonce and gets a's MAC, but
	// cannot answer with b's.
	ctx := ctxT(t)
	raw, err := transport.DialConn(ctx, a.addr())
	require.NoError(t, err)
	defer raw.Close()
	h, err := msgpack.Marshal(hello{ID: "b", Nonce: protocol.NewNonce()})
	require.NoError(t, err)
	_, err = raw.Call(ctx, protocol.OpHello, h)
	require.NoError(t, err)
	proof, err := msgpack.Marshal(protocol.HelloProof{MAC: protocol.HelloMAC(protocol.HelloKey(other), "client", nil, nil, "b", "a")})
	require.NoError(t, err)
	_, err = raw.Call(ctx, protocol.OpHelloProof, proof)
	require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "%v", err)
	_, ok := a.pool.idOf(raw)
	require.False(t, ok, "the forger's connection belongs to nobody")
	require.Eventually(t, func() bool { return raw.Err() != nil }, 10*time.Second, 5*time.Millisecond, "a closes the forger's connection")
	// A proof with no hello before it is refused too.
	raw2, err := transport.DialConn(ctx, a.addr())
	require.NoError(t, err)
	defer raw2.Close()
	_, err = raw2.Call(ctx, protocol.OpHelloProof, proof)
	require.Equal(t, errs.FailedPrecondition, errs.CodeOf(err), "%v", err)
}

// TestSecretRotation: two nodes in the middle of a rotation (one has
// made the new secret first, the other not yet) still connect; two that
// share no secret do not.
func TestSecretRotation(t *testing.T) {
	oldS, newS := []byte("the-old-cluster-secret"), []byte("the-new-cluster-secret")
	a := newTestNode(t, "a", oldS, newS)
	b := newTestNode(t, "b", newS, oldS)
	_, err := b.pool.get(ctxT(t), "a", a.addr())
	require.NoError(t, err)
	c := newTestNode(t, "c", newS)
	d := newTestNode(t, "d", oldS)
	_, err = d.pool.get(ctxT(t), "c", c.addr())
	require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "%v", err)
	d.pool.setSecrets([][]byte{newS, oldS})
	_, err = d.pool.get(ctxT(t), "c", c.addr())
	require.NoError(t, err, "after d takes the new secret")
}

// TestConnectionsProveACredential: on a node with a cluster secret and a
// client token, a connection that is not a peer's gets nothing but the
// proof exchange until it proves one; a token lets it make requests and
// read the status but not forget a server; the secret lets it forget; a
// wrong token is refused and its connection closed. A node without
// credentials serves anyone (loopback development).
func TestConnectionsProveACredential(t *testing.T) {
	nw := memnet.New(3)
	secret, token := []byte("cluster-secret-0123456789"), []byte("client-token-0123456789")
	a := startNodeCfg(t, nw, "a", false, nil, func(c *Config) { c.Secrets, c.Tokens = [][]byte{secret}, [][]byte{token} })
	ctx := ctxT(t)
	dial := func() *transport.Conn {
		c, err := transport.DialConn(ctx, a.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	forget, err := msgpack.Marshal([]string{"nobody"})
	require.NoError(t, err)

	// Each refusal closes the connection that proved nothing (issue 42).
	for _, op := range []uint32{protocol.OpStatus, protocol.OpRequest, protocol.OpTail, protocol.OpForget, protocol.OpEngine} {
		anon := dial()
		_, err := anon.Call(ctx, op, nil)
		require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "op %d: %v", op, err)
		require.Eventually(t, func() bool { return anon.Err() != nil }, 10*time.Second, 5*time.Millisecond, "op %d: the connection is closed", op)
	}

	client := dial()
	require.NoError(t, protocol.Authenticate(ctx, client, protocol.CredToken, protocol.TokenKey(token)))
	_, err = client.Call(ctx, protocol.OpStatus, nil)
	require.NoError(t, err)
	_, err = client.Call(ctx, protocol.OpForget, forget)
	require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "a token does not forget servers: %v", err)

	admin := dial()
	require.NoError(t, protocol.Authenticate(ctx, admin, protocol.CredSecret, protocol.SecretKey(secret)))
	_, err = admin.Call(ctx, protocol.OpForget, forget)
	require.NotEqual(t, errs.PermissionDenied, errs.CodeOf(err), "the secret forgets servers: %v", err)

	wrong := dial()
	err = protocol.Authenticate(ctx, wrong, protocol.CredToken, protocol.TokenKey([]byte("not-the-token-0123456789")))
	require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "%v", err)
	// A caller that names the right key but cannot prove it.
	liar := dial()
	b, err := msgpack.Marshal(protocol.AuthHello{Kind: protocol.CredToken, KeyID: protocol.KeyID(protocol.TokenKey(token)), Nonce: protocol.NewNonce()})
	require.NoError(t, err)
	_, err = liar.Call(ctx, protocol.OpAuth, b)
	require.NoError(t, err)
	b, err = msgpack.Marshal(protocol.HelloProof{MAC: make([]byte, 32)})
	require.NoError(t, err)
	_, err = liar.Call(ctx, protocol.OpAuthProof, b)
	require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "%v", err)
	require.Eventually(t, func() bool { return liar.Err() != nil }, 10*time.Second, 5*time.Millisecond, "the liar's connection is closed")
	_, err = liar.Call(ctx, protocol.OpStatus, nil)
	require.Error(t, err)

	open := startNode(t, nw, "open", false)
	c, err := transport.DialConn(ctx, open.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Call(ctx, protocol.OpStatus, nil)
	require.NoError(t, err, "a node without credentials serves anyone")
}

// TestNoSecretInTheLogs: a node with a cluster secret and a client token
// that refuses hellos and credentials, and takes new secrets, logs none
// of them, nor the keys derived from them, at any level.
func TestNoSecretInTheLogs(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedBuffer{b: &logs, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	secret, token, next := []byte("the-cluster-secret-0001"), []byte("the-client-token-0001"), []byte("the-next-secret-00001")
	nw := memnet.New(2)
	a := startNodeCfg(t, nw, "a", false, nil, func(c *Config) {
		c.Secrets, c.Tokens, c.Logger = [][]byte{secret}, [][]byte{token}, logger
	})
	ctx := ctxT(t)
	c, err := transport.DialConn(ctx, a.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, _ = c.Call(ctx, protocol.OpStatus, nil)
	_ = protocol.Authenticate(ctx, c, protocol.CredToken, protocol.TokenKey([]byte("a-wrong-token-0000001")))
	c2, err := transport.DialConn(ctx, a.Addr())
	require.NoError(t, err)
	defer c2.Close()
	require.NoError(t, protocol.Authenticate(ctx, c2, protocol.CredToken, protocol.TokenKey(token)))
	require.NoError(t, a.SetSecrets(next, secret))
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	require.NotEmpty(t, out)
	for _, s := range [][]byte{secret, token, next, protocol.HelloKey(secret), protocol.TokenKey(token), protocol.GossipKey(secret)} {
		require.NotContains(t, out, string(s))
		require.NotContains(t, out, fmt.Sprintf("%x", s))
		require.NotContains(t, out, fmt.Sprintf("%v", s))
	}
}

type lockedBuffer struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
