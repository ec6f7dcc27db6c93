package node

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/testkit"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

var (
	fuzzSecret = []byte("fuzz-cluster-secret-0123456789")
	fuzzToken  = []byte("fuzz-client-token-0123456789")
)

// fuzzExecTimeout bounds the calls of one fuzz input: a hang fails the
// input rather than the whole run.
const fuzzExecTimeout = 10 * time.Second

// reusableConn hands out one client connection across fuzz inputs while
// it is open and clean, and dials anew otherwise: a dial per input would
// cost more than the input itself.
type reusableConn struct {
	addr string
	c    *transport.Conn
}

func (r *reusableConn) get(ctx context.Context, t *testing.T) *transport.Conn {
	if r.c != nil && r.c.Err() == nil {
		return r.c
	}
	r.drop()
	c, err := transport.DialConn(ctx, r.addr)
	require.NoError(t, err)
	r.c = c
	return c
}

// drop closes the connection, so the next input starts on a fresh one.
func (r *reusableConn) drop() {
	if r.c != nil {
		r.c.Close()
		r.c = nil
	}
}

// validHello is a protocol.OpHello payload as a dialing node with a cluster secret
// sends it.
func validHello(f *testing.F, id string, nonce bool) []byte {
	h := hello{ID: id}
	if nonce {
		h.Nonce = make([]byte, protocol.NonceSize)
	}
	b, err := msgpack.Marshal(h)
	require.NoError(f, err)
	return b
}

// FuzzHello sends arbitrary bytes as a protocol.OpHello payload and then as an
// protocol.OpHelloProof payload (or, when asked and possible, the right proof) to
// a pool with or without a cluster secret. The pool must never panic; a
// hello is refused with a coded error, or answered (with the pool's MAC
// under a secret); a connection is adopted at once without a secret, and
// with one only after the right proof, which fuzzed bytes cannot forge.
// A hello marked Attach is an attached client's: taken at once, without a
// MAC, only under an ID beginning with "~" and, with a secret, on a
// connection that proved a token (prove stands for that).
// Each input meets a fresh pool behind one long-lived server.
func FuzzHello(f *testing.F) {
	var cur atomic.Pointer[pool]
	mux := transport.NewMux()
	mux.HandleFunc(protocol.OpHello, func(r *transport.Request) { cur.Load().serveHello(r) })
	mux.HandleFunc(protocol.OpHelloProof, func(r *transport.Request) { cur.Load().serveProof(r) })
	srv, err := transport.Listen("127.0.0.1:0", mux)
	require.NoError(f, err)
	client := &reusableConn{addr: srv.Addr().String()}
	f.Cleanup(func() {
		client.drop()
		srv.Close()
	})
	key := protocol.HelloKey(fuzzSecret)

	proof, err := msgpack.Marshal(protocol.HelloProof{MAC: make([]byte, 32)})
	require.NoError(f, err)
	for _, secret := range []bool{false, true} {
		f.Add(nested(1<<20), nested(1<<20), secret, false)
		f.Add([]byte("\xde\xad\xbe\xef garbage"), []byte{0xc1}, secret, false)
		f.Add([]byte{}, []byte{}, secret, false)
		f.Add(validHello(f, "b", false), proof, secret, false)
		f.Add(validHello(f, "b", true), proof, secret, false)
		f.Add(validHello(f, "b", true), proof, secret, true)
		f.Add([]byte{0x81, 0xa2, 'i', 'd', 0xa0}, []byte{0x80}, secret, false) // an empty ID
		for _, id := range []string{"~c", "c"} {
			b, err := msgpack.Marshal(hello{ID: id, Attach: true})
			require.NoError(f, err)
			f.Add(b, proof, secret, false)
			f.Add(b, proof, secret, true)
		}
	}

	f.Fuzz(func(t *testing.T, helloB, proofB []byte, secret, prove bool) {
		ctx, cancel := context.WithTimeout(context.Background(), fuzzExecTimeout)
		defer cancel()
		p := newPool("a")
		if secret {
			p.setSecrets([][]byte{fuzzSecret})
		}
		// An attached client's hello: as a server decides it
		// (Node.serveAttach), prove standing for a token proved on the
		// connection, which a node with a secret asks for.
		proved := roleNone
		if prove {
			proved = roleClient
		}
		p.onAttach = func(r *transport.Request, h hello) {
			if err := attachRefusal(h.ID, false, secret, proved); err != nil {
				_ = r.Fail(err)
				return
			}
			b, err := msgpack.Marshal(hello{ID: "a"})
			if err != nil {
				_ = r.Fail(err)
				return
			}
			_ = r.Reply(b)
			p.adopt(h.ID, r.Conn(), h.ID, 0)
		}
		cur.Store(p)
		c := client.get(ctx, t)
		answered := false
		defer func() {
			// An answered hello's connection is the pool's, or is being
			// closed for a wrong proof: only a refused one is reused.
			// Close it first, so that closing the pool finds it ended.
			if answered {
				client.drop()
			}
			p.close()
		}()

		var want hello
		valid := wire.DecodeValue(helloB, &want) == nil && want.ID != ""
		reply, err := c.Call(ctx, protocol.OpHello, helloB)
		switch {
		case !valid:
			require.Equal(t, errs.InvalidArgument, errs.CodeOf(err), "a malformed hello: %v", err)
		case want.Attach:
			if refusal := attachRefusal(want.ID, false, secret, proved); refusal != nil {
				require.Equal(t, errs.CodeOf(refusal), errs.CodeOf(err), "an attached client's hello: %v", err)
				break
			}
			require.NoError(t, err, "an attached client's hello with its token proved")
			var got hello
			require.NoError(t, wire.DecodeValue(reply, &got))
			require.Equal(t, "a", got.ID)
			require.Empty(t, got.MAC, "an attached client is proved by its token, not a MAC")
		case secret && len(want.Nonce) != protocol.NonceSize:
			require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "a hello without a nonce to a pool with a secret: %v", err)
		default:
			require.NoError(t, err, "a well-formed hello")
			var got hello
			require.NoError(t, wire.DecodeValue(reply, &got))
			require.Equal(t, "a", got.ID)
			if secret {
				require.True(t, protocol.VerifyMAC([][]byte{key}, got.MAC, "server", want.Nonce, got.Nonce, "a", want.ID), "the pool proves the secret")
			} else {
				require.Empty(t, got.MAC)
			}
		}
		answered = err == nil

		right := secret && answered && prove && !want.Attach
		if right {
			var got hello
			require.NoError(t, wire.DecodeValue(reply, &got))
			proofB, err = msgpack.Marshal(protocol.HelloProof{MAC: protocol.HelloMAC(key, "client", want.Nonce, got.Nonce, want.ID, "a")})
			require.NoError(t, err)
		}
		_, err = c.Call(ctx, protocol.OpHelloProof, proofB)
		switch {
		case right:
			require.NoError(t, err, "the right proof")
			// The pool adopts the connection after it answers the proof;
			// a call behind it on the same connection is served after.
			_, err := c.Call(ctx, 0xfffe, nil)
			require.Equal(t, errs.Unimplemented, errs.CodeOf(err), "%v", err)
		case secret && answered && !want.Attach:
			require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "a proof of fuzzed bytes: %v", err)
		default:
			require.Equal(t, errs.FailedPrecondition, errs.CodeOf(err), "a proof with no hello to prove: %v", err)
		}

		// Without a secret the answered hello's connection is the
		// caller's at once; with one, only after the right proof.
		switch peers := p.peers(); {
		case answered && (!secret || right || want.Attach):
			require.Equal(t, []string{want.ID}, peers)
		default:
			require.Empty(t, peers, "a connection adopted without the proof")
		}
	})
}

// startFuzzNode starts a node of its own for a fuzz target, with edit's
// last word on its Config, and waits until its map names it the owner of
// every partition.
func startFuzzNode(tb testing.TB, edit func(*Config)) *Node {
	tb.Helper()
	cfg := Config{
		ID: "a", Resource: "fuzz",
		Membership: []membership.Option{
			membership.WithPreset(membership.PresetLocal), membership.WithoutMulticast(),
			membership.WithTransport(memnet.New(1).NewTransport()), membership.WithTuning(testkit.ClusterTimers),
			membership.WithLeaveTimeout(time.Second),
		},
		Ring:   []ring.Option{ring.WithPartitions(8)},
		Engine: []partition.Option{partition.WithSyncTimeout(500 * time.Millisecond)},
		Tick:   20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), // every refused input logs a warning
	}
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Start(ctx, cfg)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = n.Close() })
	require.Eventually(tb, func() bool {
		m := n.Map()
		if m == nil {
			return false
		}
		for p := range m.Partitions() {
			if o, ok := m.Owner(p); !ok || o.ID != n.ID() {
				return false
			}
		}
		return true
	}, 20*time.Second, 5*time.Millisecond)
	return n
}

// FuzzAuth sends arbitrary bytes as a protocol.OpAuth payload and then as an
// protocol.OpAuthProof payload (or, when asked and possible, the right proof) to a
// node with a cluster secret and a client token. The node must never
// panic; a protocol.OpAuth is refused with a coded error or answered with the
// node's MAC under the key it names; a connection gets a role only with
// the right proof: the client role for the token, the admin role for the
// secret.
func FuzzAuth(f *testing.F) {
	accepted := make(chan *transport.Conn, 16)
	n := startFuzzNode(f, func(c *Config) {
		c.Secrets, c.Tokens = [][]byte{fuzzSecret}, [][]byte{fuzzToken}
		// A refused auth leaves its connection unproved, and the target
		// reuses it for the next input: past the auth timeout (5 s) the
		// node closed it between two calls, on a machine loaded enough
		// that a run of refused inputs took that long. The target checks
		// the exchanges, not the timeout (cmd/fero's preauth tests do).
		// Nor the pace of new connections: it redials from one address
		// thousands of times a second (transport's TestNewConnRate checks
		// the pace).
		c.Transport = []transport.Option{transport.WithOnConn(func(c *transport.Conn) { accepted <- c }), transport.WithAuthTimeout(time.Hour),
			transport.WithNewConnRate(1e9, 1<<30)}
	})
	client := &reusableConn{addr: n.Addr()}
	var served *transport.Conn // the node's end of client.c
	f.Cleanup(client.drop)
	keys := map[string][]byte{protocol.CredToken: protocol.TokenKey(fuzzToken), protocol.CredSecret: protocol.SecretKey(fuzzSecret)}
	grants := map[string]role{protocol.CredToken: roleClient, protocol.CredSecret: roleAdmin}

	auth := func(kind string, key []byte) []byte {
		b, err := msgpack.Marshal(protocol.AuthHello{Kind: kind, KeyID: protocol.KeyID(key), Nonce: make([]byte, protocol.NonceSize)})
		require.NoError(f, err)
		return b
	}
	proof, err := msgpack.Marshal(protocol.HelloProof{MAC: make([]byte, 32)})
	require.NoError(f, err)
	for _, prove := range []bool{false, true} {
		f.Add(auth(protocol.CredToken, keys[protocol.CredToken]), proof, prove)
		f.Add(auth(protocol.CredSecret, keys[protocol.CredSecret]), proof, prove)
	}
	f.Add(auth(protocol.CredToken, keys[protocol.CredSecret]), proof, true) // the secret's key named as a token
	f.Add(auth("nobody", keys[protocol.CredToken]), proof, true)
	f.Add(nested(1<<20), nested(1<<20), false)
	f.Add([]byte("\xde\xad\xbe\xef garbage"), []byte{0xc1}, false)
	f.Add([]byte{}, []byte{}, false)

	f.Fuzz(func(t *testing.T, authB, proofB []byte, prove bool) {
		ctx, cancel := context.WithTimeout(context.Background(), fuzzExecTimeout)
		defer cancel()
		c := client.get(ctx, t)
		if served == nil || served.RemoteAddr().String() != c.LocalAddr().String() {
			select {
			case served = <-accepted:
			case <-ctx.Done():
				t.Fatal("the node never reported the connection")
			}
			require.Equal(t, c.LocalAddr().String(), served.RemoteAddr().String())
		}
		answered := false
		defer func() {
			// An answered auth's connection holds a role now, or is
			// being closed for a wrong proof: only a refused one is
			// reused.
			if answered {
				client.drop()
			}
		}()
		require.Equal(t, roleNone, n.roleOf(served), "a fresh connection holds no role")
		// A frame over the pre-auth limit closes the connection at its
		// length, before its payload is read (transport.WithPreAuth).
		overLimit := func(op uint32, b []byte) bool {
			if len(b) <= transport.DefaultAuthMaxFrame-64 {
				return false
			}
			_, err := c.Call(ctx, op, b)
			if len(b) > transport.DefaultAuthMaxFrame {
				require.ErrorIs(t, err, transport.ErrConnLost, "a frame over the pre-auth limit")
			}
			client.drop()
			return true
		}
		if overLimit(protocol.OpAuth, authB) {
			return
		}

		var want protocol.AuthHello
		var key []byte
		valid := wire.DecodeValue(authB, &want) == nil && len(want.Nonce) == protocol.NonceSize
		if valid {
			key = keys[want.Kind]
			if key != nil && string(protocol.KeyID(key)) != string(want.KeyID) {
				key = nil
			}
		}
		reply, err := c.Call(ctx, protocol.OpAuth, authB)
		switch {
		case !valid:
			require.Equal(t, errs.InvalidArgument, errs.CodeOf(err), "a malformed auth: %v", err)
		case key == nil:
			require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "an auth naming no key the node takes: %v", err)
		default:
			require.NoError(t, err, "an auth naming the node's key")
		}
		var got protocol.AuthHello
		if err == nil {
			require.NoError(t, wire.DecodeValue(reply, &got))
			require.Len(t, got.Nonce, protocol.NonceSize)
			require.Equal(t, protocol.HelloMAC(key, "node", want.Nonce, got.Nonce, "", ""), got.MAC, "the node proves the key")
		}
		answered = err == nil

		right := answered && prove
		if right {
			proofB, err = msgpack.Marshal(protocol.HelloProof{MAC: protocol.HelloMAC(key, "caller", want.Nonce, got.Nonce, "", "")})
			require.NoError(t, err)
		} else if overLimit(protocol.OpAuthProof, proofB) {
			return
		}
		_, err = c.Call(ctx, protocol.OpAuthProof, proofB)
		switch {
		case right:
			require.NoError(t, err, "the right proof")
			require.Equal(t, grants[want.Kind], n.roleOf(served))
		case answered:
			require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "a proof of fuzzed bytes: %v", err)
			require.Equal(t, roleNone, n.roleOf(served), "a role without the right proof")
		default:
			require.Equal(t, errs.FailedPrecondition, errs.CodeOf(err), "a proof with no auth to prove: %v", err)
			require.Equal(t, roleNone, n.roleOf(served), "a role without an auth")
		}
	})
}
