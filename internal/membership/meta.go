package membership

import (
	"fmt"
	"strings"

	"github.com/hashicorp/memberlist"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/wire"
)

// Role says whether a member can own partitions.
type Role uint8

const (
	// RoleServer members own partitions.
	RoleServer Role = iota + 1
	// RoleClient members own nothing; they read and send requests.
	RoleClient
)

func (r Role) String() string {
	switch r {
	case RoleServer:
		return "server"
	case RoleClient:
		return "client"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// Limits on metadata fields; together they keep the encoding far below
// memberlist.MetaMaxSize (512 bytes).
const (
	MaxIDLen       = 128
	MaxResourceLen = 128
	MaxAddrLen     = 128
)

// Meta is what every member publishes about itself through gossip.
type Meta struct {
	// ID is the member's stable identity and its memberlist node name.
	ID string `msgpack:"i"`
	// Resource is the name of the resource the cluster serves; members of
	// other resources are refused.
	Resource string `msgpack:"r"`
	// Addr is the data-plane address (host:port) peers send requests to;
	// empty until the transport listens.
	Addr string `msgpack:"a"`
	// Role is server or client.
	Role Role `msgpack:"o"`
	// Version increases on every metadata change of one process.
	Version uint64 `msgpack:"v"`
	// Boot is the process's start time with random low bits, so a member
	// that restarts with the same ID is told apart from its previous life
	// and comes after it.
	Boot uint64 `msgpack:"b"`
	// Leaving is set by a member that is closing, just before it leaves,
	// so that peers can tell a graceful leave (StatusRemoved) from a
	// failure (StatusDead): memberlist does not say which it was.
	Leaving bool `msgpack:"l,omitempty"`
}

// Validate checks field limits.
func (m Meta) Validate() error {
	switch {
	case m.ID == "" || len(m.ID) > MaxIDLen:
		return fmt.Errorf("%w: ID length %d not in [1, %d]", ErrInvalidMeta, len(m.ID), MaxIDLen)
	case m.Resource == "" || len(m.Resource) > MaxResourceLen:
		return fmt.Errorf("%w: resource length %d not in [1, %d]", ErrInvalidMeta, len(m.Resource), MaxResourceLen)
	case len(m.Addr) > MaxAddrLen:
		return fmt.Errorf("%w: addr length %d above %d", ErrInvalidMeta, len(m.Addr), MaxAddrLen)
	case m.Role != RoleServer && m.Role != RoleClient:
		return fmt.Errorf("%w: role %d", ErrInvalidMeta, m.Role)
	}
	return nil
}

// EncodeMeta validates m and encodes it as msgpack.
func EncodeMeta(m Meta) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	b, err := msgpack.Marshal(&m)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidMeta, err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes above memberlist's %d", ErrInvalidMeta, len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// AttachedPrefix begins the ID of every attached client (a client node
// that proved a client token to the servers, not the cluster secret, and
// so does not gossip: feed.go) and of no other member. A gossiping member
// cannot take such an ID, so an attached client cannot take the name of
// a server that joins later.
const AttachedPrefix = "~"

// IsAttached reports whether id is an attached client's.
func IsAttached(id string) bool { return strings.HasPrefix(id, AttachedPrefix) }

// DecodeMeta decodes and validates metadata received from a peer. Input is
// untrusted: anything longer than memberlist.MetaMaxSize is refused before
// decoding, which bounds the decoder's work.
func DecodeMeta(b []byte) (Meta, error) {
	if len(b) == 0 || len(b) > memberlist.MetaMaxSize {
		return Meta{}, fmt.Errorf("%w: %d bytes", ErrInvalidMeta, len(b))
	}
	var m Meta
	// DecodeValue checks first that every length the bytes declare is
	// there: msgpack's pooled decoders keep a buffer grown by a declared
	// length even when the bytes are missing, and a packet declaring a
	// string of 2 GB grew one by a quarter or more each time.
	if err := wire.DecodeValue(b, &m); err != nil {
		return Meta{}, fmt.Errorf("%w: %w", ErrInvalidMeta, err)
	}
	if err := m.Validate(); err != nil {
		return Meta{}, err
	}
	if IsAttached(m.ID) {
		return Meta{}, fmt.Errorf("%w: ID %q: %q begins only an attached client's, which does not gossip", ErrInvalidMeta, m.ID, AttachedPrefix)
	}
	return m, nil
}
