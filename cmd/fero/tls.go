package main

import (
	"crypto/tls"
	"os"

	"github.com/spf13/pflag"

	"github.com/fero-go/fero/internal/tlsfiles"
)

// tlsFlags are the data plane's TLS files (docs/security.md, "TLS"):
// serve's certificate and key, and the CA that signed every node's
// certificate; a command that talks to a node takes the CA, and a client
// certificate if the operator has one.
type tlsFlags struct {
	cert, key, ca string
}

func (f *tlsFlags) register(fl *pflag.FlagSet, server bool) {
	if server {
		fl.StringVar(&f.cert, "tls-cert", "", "serve the data plane over TLS with this certificate (PEM); with --tls-key and --tls-ca")
		fl.StringVar(&f.key, "tls-key", "", "the private key of --tls-cert (PEM)")
		fl.StringVar(&f.ca, "tls-ca", "", "the CA (PEM) that signed every node's certificate: peers' certificates, and clients' when they give one, must chain to it")
		return
	}
	fl.StringVar(&f.ca, "tls-ca", os.Getenv("FERO_TLS_CA"), "talk TLS to the node, whose certificate must chain to this CA (PEM) (default $FERO_TLS_CA)")
	fl.StringVar(&f.cert, "tls-cert", os.Getenv("FERO_TLS_CERT"), "a client certificate (PEM) to present, with --tls-key (default $FERO_TLS_CERT)")
	fl.StringVar(&f.key, "tls-key", os.Getenv("FERO_TLS_KEY"), "the private key of --tls-cert (default $FERO_TLS_KEY)")
}

// config returns the TLS configuration the flags give, nil for none
// (tlsfiles.Config).
func (f *tlsFlags) config(server bool) (*tls.Config, error) {
	return tlsfiles.Config(tlsfiles.Files{Cert: f.cert, Key: f.key, CA: f.ca}, server)
}
