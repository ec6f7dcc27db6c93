package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fero test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestTLS(t *testing.T) {
	ca := newCA(t)
	serverCert := ca.issue(t, "server", x509.ExtKeyUsageServerAuth)
	ts := newTestServer(t, WithTLS(&tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS13}))
	p := dialTest(t, ts.Addr().String(), WithTLS(&tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS13}))
	reply, err := p.Call(ctxT(t), opEcho, []byte("over tls"))
	require.NoError(t, err)
	assert.Equal(t, "over tls", string(reply))

	// A client that does not trust the server's CA is refused.
	_, err = Dial(ctxT(t), ts.Addr().String(), WithTLS(&tls.Config{RootCAs: x509.NewCertPool()}))
	assert.ErrorContains(t, err, "tls handshake")
}

func TestMutualTLS(t *testing.T) {
	ca := newCA(t)
	serverCert := ca.issue(t, "server", x509.ExtKeyUsageServerAuth)
	clientCert := ca.issue(t, "client", x509.ExtKeyUsageClientAuth)
	ts := newTestServer(t, WithTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.pool,
		MinVersion:   tls.VersionTLS13,
	}))
	p := dialTest(t, ts.Addr().String(), WithTLS(&tls.Config{
		RootCAs: ca.pool, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS13,
	}))
	reply, err := p.Call(ctxT(t), opEcho, []byte("mutual"))
	require.NoError(t, err)
	assert.Equal(t, "mutual", string(reply))

	// Without a client certificate: TLS 1.3 lets the client finish its
	// handshake before the server's verdict, so the refusal shows on the
	// first call.
	stranger, err := DialConn(ctxT(t), ts.Addr().String(), WithTLS(&tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS13}))
	if err == nil {
		defer stranger.Close()
		_, err = stranger.Call(ctxT(t), opEcho, []byte("let me in"))
	}
	require.Error(t, err)
}
