package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/spf13/cobra"
)

// certsFlags are fero certs' options.
type certsFlags struct {
	dir     string
	nodes   []string
	clients []string
	days    int
	force   bool
}

func newCerts() *cobra.Command {
	var f certsFlags
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make a throwaway CA and certificates for TLS (demos and tests)",
		Long: `certs makes a certificate authority and certificates it signs, as PEM files
in --dir, for serve's --tls-cert, --tls-key and --tls-ca and the other
commands' --tls-ca (docs/security.md, "TLS"):

  ca.pem, ca.key         the CA; every node and client takes ca.pem
  NODE.pem, NODE.key     a node's certificate, for serving and dialing peers
  CLIENT.pem, CLIENT.key a client certificate, for --tls-cert on the CLI

Keys are ECDSA P-256, written readable by their owner only. fero checks
that a certificate chains to the CA, not the names in it, so one node
certificate may serve every node; give each node its own to tell them
apart in logs.

If --dir already holds ca.pem and ca.key, the certificates are signed by
that CA, so a node can be added later. A file that exists is never
overwritten without --force, which also makes a new CA.

The CA's key signs whatever it is asked to: this is for demos and tests.
A production cluster's certificates come from the operator's own CA.

  fero certs --dir pki --nodes n1,n2,n3 --clients ops
  fero serve users --cluster-secret-file cluster.secret \
      --tls-cert pki/n1.pem --tls-key pki/n1.key --tls-ca pki/ca.pem
  fero get --tls-ca pki/ca.pem ada`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return makeCerts(cmd.OutOrStdout(), f, time.Now()) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dir, "dir", "pki", "the directory to write the files into (made if missing)")
	fl.StringSliceVar(&f.nodes, "nodes", []string{"node"}, "names of the node certificates to make (comma-separated)")
	fl.StringSliceVar(&f.clients, "clients", nil, "names of the client certificates to make (comma-separated)")
	fl.IntVar(&f.days, "days", 30, "how many days the certificates are valid")
	fl.BoolVar(&f.force, "force", false, "overwrite files that exist, with a new CA")
	return cmd
}

// certName is what a certificate's name may be: it becomes a file name.
var certName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// makeCerts writes the CA (or reuses the one in f.dir) and the
// certificates f asks for, and says on out what it wrote.
func makeCerts(out io.Writer, f certsFlags, now time.Time) error {
	if f.days < 1 {
		return fmt.Errorf("--days %d: at least 1", f.days)
	}
	if len(f.nodes)+len(f.clients) == 0 {
		return errors.New("no certificate asked for: give --nodes or --clients")
	}
	seen := map[string]bool{"ca": true}
	for _, n := range append(append([]string(nil), f.nodes...), f.clients...) {
		switch {
		case !certName.MatchString(n):
			return fmt.Errorf("certificate name %q: letters, digits, '.', '_' and '-' only, at most 64", n)
		case seen[n]:
			return fmt.Errorf("certificate name %q given twice (or is the CA's)", n)
		}
		seen[n] = true
	}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return err
	}
	path := func(name, ext string) string { return filepath.Join(f.dir, name+ext) }
	// Check every file first, so a refusal writes nothing.
	if !f.force {
		for n := range seen {
			if n == "ca" {
				continue
			}
			for _, ext := range []string{".pem", ".key"} {
				if _, err := os.Stat(path(n, ext)); err == nil {
					return fmt.Errorf("%s exists: remove it, or give --force to remake every file with a new CA", path(n, ext))
				} else if !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
		}
	}

	notBefore, notAfter := now.Add(-5*time.Minute), now.AddDate(0, 0, f.days)
	ca, caKey, reused, err := loadCA(path("ca", ".pem"), path("ca", ".key"))
	switch {
	case err != nil && !f.force:
		return err
	case ca != nil && !f.force:
		if now.After(ca.NotAfter) {
			return fmt.Errorf("the CA in %s expired on %s: give --force for a new one", f.dir, ca.NotAfter.Format(time.DateOnly))
		}
		if ca.NotAfter.Before(notAfter) {
			notAfter = ca.NotAfter
		}
	default:
		ca, caKey, err = newCA(now, notBefore, notAfter)
		if err != nil {
			return err
		}
		reused = false
		if err := writePEM(path("ca", ".key"), "EC PRIVATE KEY", mustMarshalKey(caKey), 0o600); err != nil {
			return err
		}
		if err := writePEM(path("ca", ".pem"), "CERTIFICATE", ca.Raw, 0o644); err != nil {
			return err
		}
	}
	if reused {
		fmt.Fprintf(out, "signing with the CA in %s (%s, until %s)\n", path("ca", ".pem"), ca.Subject.CommonName, ca.NotAfter.Format(time.DateOnly))
	} else {
		fmt.Fprintf(out, "wrote %s and %s: a new CA, until %s\n", path("ca", ".pem"), path("ca", ".key"), ca.NotAfter.Format(time.DateOnly))
	}

	issue := func(name, role string, usage []x509.ExtKeyUsage) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: name, OrganizationalUnit: []string{"fero " + role}},
			NotBefore: notBefore, NotAfter: notAfter,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := writePEM(path(name, ".key"), "EC PRIVATE KEY", mustMarshalKey(key), 0o600); err != nil {
			return err
		}
		if err := writePEM(path(name, ".pem"), "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s and %s: %s %q, until %s\n", path(name, ".pem"), path(name, ".key"), role, name, notAfter.Format(time.DateOnly))
		return nil
	}
	// A node's certificate serves its data port and dials its peers.
	for _, n := range f.nodes {
		if err := issue(n, "node", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}); err != nil {
			return err
		}
	}
	for _, n := range f.clients {
		if err := issue(n, "client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}); err != nil {
			return err
		}
	}
	return nil
}

// newCA makes a self-signed CA certificate and its key.
func newCA(now, notBefore, notAfter time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "fero throwaway CA " + now.UTC().Format("2006-01-02T15:04:05Z")},
		NotBefore:    notBefore, NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	return ca, key, err
}

// loadCA reads the CA certificate and key at certPath and keyPath. Both
// missing is no CA and no error; one without the other, or files that
// do not hold a CA and its key, is an error.
func loadCA(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, bool, error) {
	certPEM, errCert := os.ReadFile(certPath)
	keyPEM, errKey := os.ReadFile(keyPath)
	switch {
	case errors.Is(errCert, fs.ErrNotExist) && errors.Is(errKey, fs.ErrNotExist):
		return nil, nil, false, nil
	case errCert != nil:
		return nil, nil, false, fmt.Errorf("%s: %w (a CA needs both its certificate and its key; --force makes a new one)", certPath, errCert)
	case errKey != nil:
		return nil, nil, false, fmt.Errorf("%s: %w (a CA needs both its certificate and its key; --force makes a new one)", keyPath, errKey)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, false, fmt.Errorf("%s: no PEM certificate in it", certPath)
	}
	if kb == nil || kb.Type != "EC PRIVATE KEY" {
		return nil, nil, false, fmt.Errorf("%s: no PEM EC private key in it", keyPath)
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, false, fmt.Errorf("%s: %w", certPath, err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, false, fmt.Errorf("%s: %w", keyPath, err)
	}
	if !ca.IsCA || !key.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, false, fmt.Errorf("%s and %s are not a CA and its key", certPath, keyPath)
	}
	return ca, key, true, nil
}

// serial returns a random 128-bit certificate serial number.
func serial() *big.Int {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	b[0] &= 0x7f        // positive
	return new(big.Int).SetBytes(b)
}

func mustMarshalKey(k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		panic(err) // a P-256 key always marshals
	}
	return der
}

// writePEM writes one PEM block to path with perm, replacing the file.
func writePEM(path, kind string, der []byte, perm os.FileMode) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), perm); err != nil {
		return err
	}
	return os.Chmod(path, perm) // WriteFile keeps the mode of a file that existed
}
