package node

import (
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// preAuthRefusals reads fero_preauth_refusals_total by reason, and
// fero_data_connections by state.
func preAuthRefusals(t *testing.T, n *Node) (refusals, conns map[string]float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(n.Collector()))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	refusals, conns = map[string]float64{}, map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "fero_preauth_refusals_total":
				refusals[labels["reason"]] = m.GetCounter().GetValue()
			case "fero_data_connections":
				conns[labels["state"]] = m.GetGauge().GetValue()
			}
		}
	}
	return refusals, conns
}

// TestPreAuthBudget: on a node with a cluster secret and a token, a
// connection that has proved nothing is closed for a frame over the
// pre-auth limit, for an engine call (answered permission denied first:
// it was never answered, and held its read block), for a request that
// needs a credential, and when the auth timeout passes; each refusal is
// counted in /metrics. A client that proved its token takes large
// frames.
func TestPreAuthBudget(t *testing.T) {
	nw := memnet.New(5)
	secret, token := []byte("cluster-secret-0123456789"), []byte("client-token-0123456789")
	creds := func(c *Config) {
		c.Secrets, c.Tokens = [][]byte{secret}, [][]byte{token}
		c.Transport = []transport.Option{transport.WithAuthTimeout(500 * time.Millisecond)}
	}
	a := startNodeCfg(t, nw, "a", false, nil, creds)
	startNodeCfg(t, nw, "b", false, nil, creds, a.Membership().Local().Gossip)
	ctx := ctxT(t)
	dial := func() *transport.Conn {
		c, err := transport.DialConn(ctx, a.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	closed := func(c *transport.Conn, what string) {
		t.Helper()
		require.Eventually(t, func() bool { return c.Err() != nil }, 10*time.Second, 5*time.Millisecond, "%s: the connection is closed", what)
	}

	big := dial()
	_, err := big.Call(ctx, protocol.OpAuth, make([]byte, 1<<20))
	require.ErrorIs(t, err, transport.ErrConnLost, "a frame over the pre-auth limit")
	engine := dial()
	_, err = engine.Call(ctx, protocol.OpEngine, []byte{0x90})
	require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "an engine call without a hello: %v", err)
	closed(engine, "engine call")
	status := dial()
	_, err = status.Call(ctx, protocol.OpStatus, nil)
	require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "status without a credential: %v", err)
	closed(status, "status")
	silent := dial()
	closed(silent, "silent")

	client := dial()
	require.NoError(t, protocol.Authenticate(ctx, client, protocol.CredToken, protocol.TokenKey(token)))
	// Proved, the client sends what a stranger cannot: a request of
	// 1 MiB (refused by the node's own rules, not the frame limit).
	req := (&protocol.Request{Verb: "FUZZ", Key: "k", Payload: make([]byte, 1<<20)}).Append(nil)
	_, err = client.Call(ctx, protocol.OpRequest, req)
	require.NotErrorIs(t, err, transport.ErrConnLost)
	require.NoError(t, client.Err())

	refusals, conns := preAuthRefusals(t, a)
	require.Equal(t, 1.0, refusals["frame_too_large"], "%v", refusals)
	require.Equal(t, 2.0, refusals["needs_proof"], "%v", refusals)
	require.GreaterOrEqual(t, refusals["auth_timeout"], 1.0, "%v", refusals)
	require.Equal(t, 0.0, conns["unproved"], "%v", conns)
	require.GreaterOrEqual(t, conns["proved"], 1.0, "the client's: %v", conns)
}

// TestEngineCallIsAnswered: an engine message sent as a call, from a
// peer or from a connection on a node without credentials that said no
// hello, is answered at once rather than held open with its read block.
func TestEngineCallIsAnswered(t *testing.T) {
	nw := memnet.New(2)
	a := startNode(t, nw, "a", false)
	ctx := ctxT(t)
	c, err := transport.DialConn(ctx, a.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Call(ctx, protocol.OpEngine, make([]byte, 4000))
	require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "%v", err)
	_, err = c.Call(ctx, protocol.OpStatus, nil)
	require.NoError(t, err, "on a node without credentials the connection serves on")

	// A raw engine call, answered: the node's preface, then the refusal.
	nc, err := net.Dial("tcp", a.Addr())
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.Write(append([]byte{'F', 'E', 'R', 'O', 0, 0, 0, 1}, wire.AppendFrame(nil, wire.KindCall, 7, protocol.OpEngine, []byte{0x90})...))
	require.NoError(t, err)
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(10*time.Second)))
	pre := make([]byte, 8)
	_, err = nc.Read(pre)
	require.NoError(t, err)
	var f wire.Frame
	require.NoError(t, wire.NewReader(nc, 1<<20).Next(&f))
	require.Equal(t, wire.KindError, f.Kind)
	require.Equal(t, uint64(7), f.ID)
}
