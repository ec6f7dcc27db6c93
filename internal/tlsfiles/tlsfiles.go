// Package tlsfiles builds the data plane's TLS configuration from PEM
// files: a node's certificate and key and the CA that signed every
// node's certificate (docs/security.md, "TLS"). `fero` and the fault
// suite's harness both use it, so a test cluster runs TLS as an
// operator's does.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files are the PEM files: Cert and Key (a node's, or a client's
// optional one) and the CA.
type Files struct {
	Cert, Key, CA string
}

// Config returns the TLS configuration the files give, nil for none;
// server is true for a node, which serves and dials peers, false for a
// client.
//
// Certificates are checked against the CA alone, not against a host
// name: nodes dial each other by IP address, which changes (a pod's), and
// which node is which is proved by the cluster secret (docs/security.md).
// TLS here keeps the bytes private and proves that each end holds a
// certificate of the cluster's CA.
func Config(f Files, server bool) (*tls.Config, error) {
	if f.Cert == "" && f.Key == "" && f.CA == "" {
		return nil, nil
	}
	switch {
	case server && (f.Cert == "" || f.Key == "" || f.CA == ""):
		return nil, errors.New("--tls-cert, --tls-key and --tls-ca go together: a node serves with its certificate and checks its peers' against the CA")
	case !server && f.CA == "":
		return nil, errors.New("--tls-ca is needed to talk TLS: the node's certificate is checked against it")
	case (f.Cert == "") != (f.Key == ""):
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", f.CA)
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    pool,
		// The chain is checked in VerifyConnection, against the CA and not
		// a host name; the standard check, which wants the name, is off.
		InsecureSkipVerify: true, //nolint:gosec // verified below
		// A client may give a certificate or not (a token proves it); one
		// it gives must chain to the CA.
		ClientAuth: tls.RequestClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if !server && len(cs.PeerCertificates) == 0 {
				// Only a client uses this configuration: the other end is
				// a node, which must show its certificate.
				return errors.New("fero: the node showed no certificate")
			}
			return verifyChain(cs, pool)
		},
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert, --tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// verifyChain checks that the other end's certificate, if it gave one,
// chains to pool. A node's configuration serves and dials both, and a
// client may give none; a server always gives one (TLS 1.3 without a
// pre-shared key, and neither end keeps sessions to resume), which the
// client-only configuration also checks.
func verifyChain(cs tls.ConnectionState, pool *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return fmt.Errorf("fero: the certificate of the other end does not chain to --tls-ca: %w", err)
	}
	return nil
}
