package protocol

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// Credential kinds an OpAuth names.
const (
	CredToken  = "token"
	CredSecret = "secret"
)

type AuthHello struct {
	Kind  string `msgpack:"k"`
	KeyID []byte `msgpack:"i,omitempty"`
	Nonce []byte `msgpack:"n"`
	MAC   []byte `msgpack:"m,omitempty"`
}

// KeyID names a derived key without revealing it.
func KeyID(key []byte) []byte {
	sum := sha256.Sum256(key)
	return sum[:8]
}

// TokenKey derives the key a client token is proved with.
func TokenKey(token []byte) []byte { return DeriveKey(token, "fero client token key v1") }

// SecretKey derives the key the cluster secret is proved with by a
// connection that is not a peer's (the hello key).
func SecretKey(secret []byte) []byte { return HelloKey(secret) }

// Authenticate proves a credential on a connection to a node (OpAuth):
// kind is CredToken or CredSecret, key its TokenKey or SecretKey. It
// checks that the node holds the credential too.
func Authenticate(ctx context.Context, c *transport.Conn, kind string, key []byte) error {
	mine := NewNonce()
	b, err := msgpack.Marshal(AuthHello{Kind: kind, KeyID: KeyID(key), Nonce: mine})
	if err != nil {
		return err
	}
	reply, err := c.Call(ctx, OpAuth, b)
	if err != nil {
		return fmt.Errorf("fero: authenticate to %s: %w", c.RemoteAddr(), err)
	}
	var h AuthHello
	if err := wire.DecodeValue(reply, &h); err != nil || len(h.Nonce) != NonceSize ||
		!hmac.Equal(h.MAC, HelloMAC(key, "node", mine, h.Nonce, "", "")) {
		return errs.Errorf(errs.PermissionDenied, "fero: %s did not prove that it holds the %s", c.RemoteAddr(), kind)
	}
	b, err = msgpack.Marshal(HelloProof{MAC: HelloMAC(key, "caller", mine, h.Nonce, "", "")})
	if err != nil {
		return err
	}
	if _, err := c.Call(ctx, OpAuthProof, b); err != nil {
		return fmt.Errorf("fero: authenticate to %s: %w", c.RemoteAddr(), err)
	}
	return nil
}

// NonceSize is the size of a hello nonce.
const NonceSize = 32

// HelloKey derives the key that hellos are MACed with from a cluster
// secret; the gossip key is derived apart (gossipKey), so neither reveals
// the other.
func HelloKey(secret []byte) []byte { return DeriveKey(secret, "fero hello key v1") }

// GossipKey derives the gossip encryption key (AES-256) from a cluster
// secret.
func GossipKey(secret []byte) []byte { return DeriveKey(secret, "fero gossip key v1") }

func DeriveKey(secret []byte, label string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// HelloMAC is the MAC of one side of a hello: role ("server" for the
// callee, "client" for the caller), both nonces in the caller's order, the
// signer's ID and the other side's.
func HelloMAC(key []byte, role string, callerNonce, calleeNonce []byte, signer, other string) []byte {
	m := hmac.New(sha256.New, key)
	for _, b := range [][]byte{[]byte(role), callerNonce, calleeNonce, []byte(signer), []byte(other)} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		m.Write(n[:])
		m.Write(b)
	}
	return m.Sum(nil)
}

// VerifyMAC reports whether mac is HelloMAC under any of keys.
func VerifyMAC(keys [][]byte, mac []byte, role string, callerNonce, calleeNonce []byte, signer, other string) bool {
	for _, k := range keys {
		if hmac.Equal(mac, HelloMAC(k, role, callerNonce, calleeNonce, signer, other)) {
			return true
		}
	}
	return false
}

func NewNonce() []byte {
	b := make([]byte, NonceSize)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return b
}

// HelloProof is the caller's MAC (OpHelloProof).
type HelloProof struct {
	MAC []byte `msgpack:"m"`
}
