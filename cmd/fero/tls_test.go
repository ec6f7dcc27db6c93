package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testPKI is a CA and a certificate it signed, as PEM files.
type testPKI struct {
	ca, cert, key string
}

// newTestPKI writes a CA and a certificate it signed for a node into dir.
// The node's certificate names no host: fero checks the chain, not names.
func newTestPKI(t *testing.T, dir, name string) testPKI {
	t.Helper()
	write := func(file, kind string, der []byte) string {
		p := filepath.Join(dir, file)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
		return p
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name + " node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return testPKI{
		ca:   write(name+"-ca.pem", "CERTIFICATE", caDER),
		cert: write(name+"-node.pem", "CERTIFICATE", der),
		key:  write(name+"-node.key", "EC PRIVATE KEY", keyDER),
	}
}

// TestServeTLS: three fero serve processes with --tls-cert, --tls-key
// and --tls-ca, from certificates fero certs made, form a cluster over
// TLS; the CLI with --tls-ca writes through one and reads through
// another, with and without a client certificate. The data port speaks
// nothing but TLS: the CLI without --tls-ca cannot talk to it, a raw
// frame gets no answer, and a client whose certificate chains to another
// CA, or that checks the node against another CA, is refused.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pkiDir := filepath.Join(dir, "pki")
	_, err := run(ctx, "certs", "--dir", pkiDir, "--nodes", "n1,n2,n3", "--clients", "ops")
	require.NoError(t, err)
	pki := testPKI{ca: filepath.Join(pkiDir, "ca.pem"), cert: filepath.Join(pkiDir, "ops.pem"), key: filepath.Join(pkiDir, "ops.key")}
	other := newTestPKI(t, dir, "other")
	flags := func(node string, args ...string) []string {
		return append(append([]string{"tls"}, args...), "--partitions", "31", "--tls-ca", pki.ca,
			"--tls-cert", filepath.Join(pkiDir, node+".pem"), "--tls-key", filepath.Join(pkiDir, node+".key"))
	}
	first := serve(t, flags("n1")...)
	ss := []*server{first,
		serve(t, flags("n2", "--seeds", first.gossip)...),
		serve(t, flags("n3", "--seeds", first.gossip)...)}

	withCA := func(args ...string) []string { return append(args, "--tls-ca", pki.ca) }
	require.Eventually(t, func() bool {
		out, err := run(ctx, withCA("status", "--addr", ss[2].data)...)
		return err == nil && strings.Count(out, " connected ") == 3
	}, 30*time.Second, 50*time.Millisecond, "the cluster did not form over TLS")
	require.NoError(t, retryUnavailable(ctx, func() error {
		_, err := run(ctx, withCA("put", "--addr", ss[0].data, "--wait", "majority", "ada", `{"name":"Ada"}`)...)
		return err
	}))
	out, err := run(ctx, withCA("get", "--addr", ss[1].data, "ada")...)
	require.NoError(t, err)
	require.Contains(t, out, `"name":"Ada"`)

	// With a client certificate of the cluster's CA, too.
	_, err = run(ctx, withCA("get", "--addr", ss[1].data, "--tls-cert", pki.cert, "--tls-key", pki.key, "ada")...)
	require.NoError(t, err)

	// An attached client node over TLS, on the client certificate: it
	// learns the three servers and its copy has the write.
	cl := serve(t, "tls", "--partitions", "31", "--client", "--attach", ss[0].data, "--tls-ca", pki.ca,
		"--tls-cert", pki.cert, "--tls-key", pki.key, "--wait-servers", "3")
	require.True(t, cl.out.Scan())
	require.Contains(t, cl.out.Text(), "sees 3 servers")
	require.Eventually(t, func() bool {
		out, err := run(ctx, withCA("get", "--addr", cl.data, "ada")...)
		return err == nil && strings.Contains(out, `"name":"Ada"`)
	}, 10*time.Second, 20*time.Millisecond, "the attached client's copy over TLS")

	// Without TLS the CLI gets nowhere.
	short := func(args ...string) error {
		_, err := run(ctx, append(args, "--timeout", "2s")...)
		return err
	}
	require.Error(t, short("get", "--addr", ss[1].data, "ada"), "plain TCP to a TLS node")
	// Checking the node against another CA fails.
	err = short("get", "--addr", ss[1].data, "--tls-ca", other.ca, "ada")
	require.Error(t, err)
	require.Contains(t, err.Error(), "does not chain to --tls-ca")
	// A client certificate of another CA is refused by the node.
	require.Error(t, short("get", "--addr", ss[1].data, "--tls-ca", pki.ca, "--tls-cert", other.cert, "--tls-key", other.key, "ada"))

	// The port answers a TLS handshake with the cluster's certificate...
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", ss[0].data, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}) //nolint:gosec // the test reads the certificate
	require.NoError(t, err)
	require.Equal(t, "n1", conn.ConnectionState().PeerCertificates[0].Subject.CommonName)
	require.NoError(t, conn.Close())
	// ...and a plain-text fero preface gets no answer but a closed connection.
	raw, err := d.Dial("tcp", ss[0].data)
	require.NoError(t, err)
	_, _ = raw.Write([]byte("FERO\x00\x01\x00\x00"))
	require.NoError(t, raw.SetReadDeadline(time.Now().Add(5*time.Second)))
	buf := make([]byte, 64)
	n, _ := raw.Read(buf)
	require.NoError(t, raw.Close())
	require.False(t, n > 0 && strings.HasPrefix(string(buf[:n]), "FERO"), "a plain-text preface was answered in plain text: %q", buf[:n])

	// Half the flags are an error that says what is missing.
	_, err = run(ctx, "get", "--addr", ss[1].data, "--tls-cert", pki.cert, "ada")
	require.ErrorContains(t, err, "--tls-ca is needed")
}
