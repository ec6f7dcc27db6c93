package fero

import (
	"context"
	"net"

	"github.com/fero-go/fero/internal/transport"
)

// WithDialer makes the data plane open its connections with dial instead
// of a net.Dialer: for tests, proxies and custom networks (like grpc's
// WithContextDialer). A node dials its peers with it, and a [Remote]
// (Dial) its node, on every dial and redial. dial is called with network
// "tcp", the data-plane address being dialed (host:port, as
// [Resource.Addr] gives it) and a context that ends with the connect
// timeout ([WithConnectTimeout]); an error it returns fails that dial as
// CodeUnavailable, and the node redials when it needs the peer again.
// With [WithTLS], TLS runs over the connection dial returns, and the
// cluster secret's or token's handshake after that, as over TCP. A
// connection that is not a *net.TCPConn gets no TCP options (no-delay,
// the user timeout that ends a connection whose link was cut), so dial
// should set what it needs. nil (the default) dials with a net.Dialer.
//
// Only dialing is replaced: a node still accepts connections on its own
// listener ([WithListen]), and gossip has its own hook
// ([WithGossipTransport]).
func WithDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return option(func(c *config) { c.transport = append(c.transport, transport.WithDialer(dial)) })
}
