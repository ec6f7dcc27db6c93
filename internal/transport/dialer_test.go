package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/errs"
)

// countingConn counts the bytes written through it, to show that a
// connection runs over the conn the dialer returned.
type countingConn struct {
	net.Conn
	written *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	return n, err
}

// TestDialer: a Peer dials through the hook and runs TLS over the conn it
// returns; a hook's error fails the dial as Unavailable.
func TestDialer(t *testing.T) {
	ca := newCA(t)
	serverCert := ca.issue(t, "server", x509.ExtKeyUsageServerAuth)
	ts := newTestServer(t, WithTLS(&tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS13}))
	addr := ts.Addr().String()

	var dials atomic.Int32
	var written atomic.Int64
	dial := func(ctx context.Context, network, to string) (net.Conn, error) {
		assert.Equal(t, "tcp", network)
		assert.Equal(t, addr, to)
		_, ok := ctx.Deadline()
		assert.True(t, ok, "the connect timeout bounds the dial")
		dials.Add(1)
		var d net.Dialer
		nc, err := d.DialContext(ctx, network, to)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: nc, written: &written}, nil
	}
	p := dialTest(t, addr, WithDialer(dial), WithTLS(&tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS13}))
	payload := []byte("over the hook, in TLS")
	reply, err := p.Call(ctxT(t), opEcho, payload)
	require.NoError(t, err)
	assert.Equal(t, payload, reply)
	assert.Equal(t, int32(1), dials.Load())
	assert.Greater(t, written.Load(), int64(len(payload)), "the handshake and the call went through the hook's conn")

	refused := errors.New("refused by the hook")
	_, err = DialConn(ctxT(t), addr, WithDialer(func(context.Context, string, string) (net.Conn, error) { return nil, refused }))
	assert.ErrorIs(t, err, refused)
	assert.Equal(t, errs.Unavailable, errs.CodeOf(err))
}
