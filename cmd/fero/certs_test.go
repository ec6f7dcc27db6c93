package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readCert reads the one PEM certificate in path.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	blk, _ := pem.Decode(b)
	require.NotNil(t, blk, path)
	c, err := x509.ParseCertificate(blk.Bytes)
	require.NoError(t, err)
	return c
}

// TestCerts: fero certs writes a CA and node and client certificates
// that chain to it, for the uses fero puts them to, with their keys
// readable by their owner only. It never overwrites a file without
// --force, signs later certificates with the CA already in the
// directory, and refuses bad names, an expired CA and a CA without its
// key.
func TestCerts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "pki")
	out, err := run(ctx, "certs", "--dir", dir, "--nodes", "n1,n2", "--clients", "ops", "--days", "7")
	require.NoError(t, err)
	require.Contains(t, out, "a new CA")

	ca := readCert(t, filepath.Join(dir, "ca.pem"))
	require.True(t, ca.IsCA)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	check := func(name string, usage x509.ExtKeyUsage) *x509.Certificate {
		t.Helper()
		c := readCert(t, filepath.Join(dir, name+".pem"))
		require.Equal(t, name, c.Subject.CommonName)
		_, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}})
		require.NoError(t, err, "%s for %v", name, usage)
		require.WithinDuration(t, time.Now().AddDate(0, 0, 7), c.NotAfter, time.Minute)
		// The key is the certificate's, and TLS takes the pair.
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key"))
		require.NoError(t, err)
		require.True(t, pair.PrivateKey.(*ecdsa.PrivateKey).PublicKey.Equal(c.PublicKey))
		return c
	}
	for _, n := range []string{"n1", "n2"} {
		// A node serves its port and dials its peers with one certificate.
		check(n, x509.ExtKeyUsageServerAuth)
		check(n, x509.ExtKeyUsageClientAuth)
	}
	c := check("ops", x509.ExtKeyUsageClientAuth)
	_, err = c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.Error(t, err, "a client certificate must not serve")
	for _, f := range []string{"ca.key", "n1.key", "n2.key", "ops.key"} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
	}

	// Nothing is overwritten without --force, and a refusal writes
	// nothing: n3 is not made either.
	before, err := os.ReadFile(filepath.Join(dir, "n1.pem"))
	require.NoError(t, err)
	_, err = run(ctx, "certs", "--dir", dir, "--nodes", "n3,n1")
	require.ErrorContains(t, err, "n1.pem exists")
	after, err := os.ReadFile(filepath.Join(dir, "n1.pem"))
	require.NoError(t, err)
	require.Equal(t, before, after)
	require.NoFileExists(t, filepath.Join(dir, "n3.pem"))

	// A node added later is signed by the same CA.
	out, err = run(ctx, "certs", "--dir", dir, "--nodes", "n3")
	require.NoError(t, err)
	require.Contains(t, out, "signing with the CA in")
	require.Equal(t, ca.Raw, readCert(t, filepath.Join(dir, "ca.pem")).Raw)
	check("n3", x509.ExtKeyUsageServerAuth)

	// --force makes a new CA, and the old certificates no longer chain.
	_, err = run(ctx, "certs", "--dir", dir, "--nodes", "n1", "--force", "--days", "7")
	require.NoError(t, err)
	ca2 := readCert(t, filepath.Join(dir, "ca.pem"))
	require.NotEqual(t, ca.Raw, ca2.Raw)
	roots = x509.NewCertPool()
	roots.AddCert(ca2)
	check("n1", x509.ExtKeyUsageServerAuth)
	_, err = readCert(t, filepath.Join(dir, "n3.pem")).Verify(x509.VerifyOptions{Roots: roots})
	require.Error(t, err)

	// Bad requests say what is wrong.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nodes", "../n1"}, "letters, digits"},
		{[]string{"--nodes", "ca"}, "given twice (or is the CA's)"},
		{[]string{"--nodes", "a,a"}, "given twice"},
		{[]string{"--nodes", "", "--clients", ""}, "no certificate asked for"},
		{[]string{"--days", "0"}, "at least 1"},
	} {
		_, err := run(ctx, append([]string{"certs", "--dir", t.TempDir()}, tc.args...)...)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
	}

	// An expired CA is not used, and a CA without its key is not a CA.
	old := t.TempDir()
	require.NoError(t, makeCerts(io.Discard, certsFlags{dir: old, nodes: []string{"n1"}, days: 1}, time.Now().AddDate(0, 0, -3)))
	_, err = run(ctx, "certs", "--dir", old, "--nodes", "n2")
	require.ErrorContains(t, err, "expired")
	require.NoError(t, os.Remove(filepath.Join(old, "ca.key")))
	_, err = run(ctx, "certs", "--dir", old, "--nodes", "n2")
	require.ErrorContains(t, err, "ca.key")
}
