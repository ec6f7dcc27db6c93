package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// opProve proves the connection it comes on (a node does so once a hello
// or a credential checks out); opEcho echoes.
const opProve uint32 = 40

// newPreAuthServer is a Server with WithPreAuth, whose opProve proves the
// connection and answers Prove's error, if any.
func newPreAuthServer(t *testing.T, stats *Stats, opts ...Option) *Server {
	t.Helper()
	mux := NewMux()
	mux.HandleFunc(opEcho, func(r *Request) { _ = r.Reply(r.Payload()) })
	mux.HandleFunc(opProve, func(r *Request) {
		if err := r.Conn().Prove(); err != nil {
			_ = r.Fail(err)
			return
		}
		_ = r.Reply(nil)
	})
	s, err := Listen("127.0.0.1:0", mux, append([]Option{WithPreAuth(true), WithStats(stats)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// rawFrom is rawConn from the loopback address ip.
func rawFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	nc, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	_, err = nc.Write(append(preface[:], hello...))
	require.NoError(t, err)
	return nc
}

// refusedFrom checks that the server refuses a connection from ip at
// once: the dial fails, or the server closes what it accepted.
func refusedFrom(t *testing.T, ip, addr string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return // reset before the dial returned
	}
	defer nc.Close()
	_, _ = nc.Write(append(preface[:], hello...))
	closedWithin(t, nc, 10*time.Second)
}

// TestPreAuthFrameLimit: before a connection proves itself, a frame over
// the pre-auth limit closes it at its length prefix, and is counted;
// once proved, the connection takes frames up to the frame limit.
func TestPreAuthFrameLimit(t *testing.T) {
	var stats Stats
	s := newPreAuthServer(t, &stats)
	addr := s.Addr().String()

	// Every byte of a 1 MiB frame but the last, from a stranger.
	nc := rawConn(t, addr)
	big := wire.AppendFrameHeader(nil, wire.KindCall, 1, opEcho, 1<<20)
	big = append(big, make([]byte, 1<<20-1)...)
	go func() { _, _ = nc.Write(big) }() // fails once the server resets it
	closedWithin(t, nc, 10*time.Second)
	require.Eventually(t, func() bool { return stats.PreAuthFrameTooLarge.Load() == 1 }, 10*time.Second, time.Millisecond)

	// A frame within the pre-auth limit is served before any proof.
	c, err := DialConn(ctxT(t), addr)
	require.NoError(t, err)
	defer c.Close()
	small := make([]byte, DefaultAuthMaxFrame-64)
	got, err := c.Call(ctxT(t), opEcho, small)
	require.NoError(t, err)
	require.Len(t, got, len(small))
	proved, unproved := s.Conns()
	require.Equal(t, [2]int{0, 1}, [2]int{proved, unproved})

	// Proved, it takes a frame of 4 MiB.
	_, err = c.Call(ctxT(t), opProve, nil)
	require.NoError(t, err)
	proved, unproved = s.Conns()
	require.Equal(t, [2]int{1, 0}, [2]int{proved, unproved})
	large := make([]byte, 4<<20)
	got, err = c.Call(ctxT(t), opEcho, large)
	require.NoError(t, err)
	require.Len(t, got, len(large))
	require.Equal(t, uint64(1), stats.PreAuthFrameTooLarge.Load())
}

// TestPreAuthTimeout: a connection that proves nothing within the auth
// timeout is closed, and counted; one that proved stays open past it.
func TestPreAuthTimeout(t *testing.T) {
	var stats Stats
	s := newPreAuthServer(t, &stats, WithAuthTimeout(300*time.Millisecond))
	addr := s.Addr().String()
	proved, err := DialConn(ctxT(t), addr)
	require.NoError(t, err)
	defer proved.Close()
	_, err = proved.Call(ctxT(t), opProve, nil)
	require.NoError(t, err)

	start := time.Now()
	nc := rawConn(t, addr)
	_, err = nc.Write(hello) // a first frame: the connect timeout is met
	require.NoError(t, err)
	closedWithin(t, nc, 10*time.Second)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	require.Equal(t, uint64(1), stats.PreAuthTimeouts.Load())

	// Well past the timeout, the proved connection still serves.
	time.Sleep(400 * time.Millisecond) // past the timeout, which would have closed it
	_, err = proved.Call(ctxT(t), opEcho, []byte("x"))
	require.NoError(t, err)
	require.Equal(t, uint64(1), stats.PreAuthTimeouts.Load())
}

// TestUnprovedCaps: unproved connections have caps of their own, per
// source address and in all, which proved ones never count against; at
// the cap in all, a newcomer from an address that holds few takes the
// place of the oldest of the address that holds the most; a connection
// that proves itself past the proved cap is refused.
func TestUnprovedCaps(t *testing.T) {
	var stats Stats
	s := newPreAuthServer(t, &stats, WithMaxUnprovedConns(4, 3), WithMaxConns(2))
	addr := s.Addr().String()
	unproved := func() int { _, u := s.Conns(); return u }

	// Two proved connections fill the proved cap; they leave the
	// unproved count.
	var good []*Conn
	for range 2 {
		c, err := DialConn(ctxT(t), addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Call(ctxT(t), opProve, nil)
		require.NoError(t, err)
		good = append(good, c)
	}
	require.Equal(t, 0, unproved())

	// Three strangers from one address: its cap.
	var a []net.Conn
	for range 3 {
		a = append(a, rawFrom(t, "127.0.0.2", addr))
	}
	require.Eventually(t, func() bool { return unproved() == 3 }, 10*time.Second, time.Millisecond)
	refusedFrom(t, "127.0.0.2", addr)
	require.Equal(t, uint64(1), stats.PreAuthCapPerIP.Load())

	// One from another address fills the cap in all; the next, from a
	// third address holding none, takes the place of 127.0.0.2's oldest.
	b := rawFrom(t, "127.0.0.3", addr)
	require.Eventually(t, func() bool { return unproved() == 4 }, 10*time.Second, time.Millisecond)
	newcomer, err := DialConn(ctxT(t), addr, WithDialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.4")}}
		return d.DialContext(ctx, network, addr)
	}))
	require.NoError(t, err)
	defer newcomer.Close()
	_, err = newcomer.Call(ctxT(t), opEcho, []byte("x"))
	require.NoError(t, err, "a newcomer from a new address is served at the cap in all")
	closedWithin(t, a[0], 10*time.Second)
	require.Equal(t, uint64(1), stats.PreAuthCapTotal.Load())
	require.Equal(t, 4, unproved())

	// 127.0.0.3 holds one and 127.0.0.2 two: one more from 127.0.0.3
	// would hold as many as it displaced, so it is refused.
	refusedFrom(t, "127.0.0.3", addr)
	require.Equal(t, uint64(2), stats.PreAuthCapTotal.Load())
	require.NoError(t, b.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err = io.Copy(io.Discard, b) // the server's preface, then nothing
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "127.0.0.3's first connection stays: %v", err)

	// The newcomer proves itself past the proved cap (2): refused.
	_, err = newcomer.Call(ctxT(t), opProve, nil)
	require.Equal(t, errs.ResourceExhausted, errs.CodeOf(err), "%v", err)
	for _, c := range good {
		_, err := c.Call(ctxT(t), opEcho, []byte("x"))
		require.NoError(t, err)
	}
}

// TestDialedConnsAreProved: a connection this end dialed is proved from
// the start (the server it dialed is not limited by WithPreAuth on this
// side); a Server without WithPreAuth proves every connection it accepts.
func TestDialedConnsAreProved(t *testing.T) {
	ts := newTestServer(t)
	c, err := DialConn(ctxT(t), ts.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	require.True(t, c.Proved())
	big := make([]byte, 2<<20)
	got, err := c.Call(ctxT(t), opEcho, big)
	require.NoError(t, err)
	require.Len(t, got, len(big))
	proved, unproved := ts.Conns()
	require.Equal(t, [2]int{1, 0}, [2]int{proved, unproved})
}

// TestScavengeAfterLargeConnsEnd: once connections holding 16 MiB or more
// of read blocks have ended, the server hands the memory back to the OS
// (debug.FreeOSMemory) rather than leave it to a collection an idle
// process may not run for minutes.
func TestScavengeAfterLargeConnsEnd(t *testing.T) {
	ts := newTestServer(t, WithMaxFrame(32<<20))
	scavenged := func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return !ts.scav.last.IsZero()
	}
	c, err := DialConn(ctxT(t), ts.Addr().String(), WithMaxFrame(32<<20))
	require.NoError(t, err)
	_, err = c.Call(ctxT(t), opEcho, make([]byte, 8<<20))
	require.NoError(t, err)
	require.False(t, scavenged(), "nothing ended yet")
	c.Close()
	require.False(t, scavenged(), "8 MiB is under the threshold")

	c, err = DialConn(ctxT(t), ts.Addr().String(), WithMaxFrame(32<<20))
	require.NoError(t, err)
	_, err = c.Call(ctxT(t), opEcho, make([]byte, 12<<20))
	require.NoError(t, err)
	c.Close()
	require.Eventually(t, scavenged, 10*time.Second, 10*time.Millisecond, "20 MiB of read blocks ended")
}

// TestPreAuthFrameLimitOverTLS: over TLS too, a stranger's frame over the
// pre-auth limit closes its connection at the length prefix (issue 42
// measured the same growth over TLS as without).
func TestPreAuthFrameLimitOverTLS(t *testing.T) {
	ca := newCA(t)
	cert := ca.issue(t, "server", x509.ExtKeyUsageServerAuth)
	var stats Stats
	s := newPreAuthServer(t, &stats, WithTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}))
	nc, err := tls.Dial("tcp", s.Addr().String(), &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS13})
	require.NoError(t, err)
	defer nc.Close()
	big := append(preface[:], wire.AppendFrameHeader(nil, wire.KindCall, 1, opEcho, 1<<20)...)
	big = append(big, make([]byte, 1<<20-1)...)
	go func() { _, _ = nc.Write(big) }() // fails once the server closes it
	closedWithin(t, nc, 10*time.Second)
	require.Eventually(t, func() bool { return stats.PreAuthFrameTooLarge.Load() == 1 }, 10*time.Second, time.Millisecond)
}

// TestNewConnRate: a source address that opens connections faster than
// WithNewConnRate allows has the ones over its burst reset at once, and
// counted; another address is not held back by it, and the first is
// let in again once its bucket refills. Before the pacing, a reconnect
// storm cost the node two goroutines and a handshake per connection and
// every one was accepted (the hostile soak's writers' p99 rose 4-6x).
func TestNewConnRate(t *testing.T) {
	var stats Stats
	// One new connection every 4 s, after a burst of 5: the sixth comes
	// long before a token is back, however loaded the machine.
	const every = 4 * time.Second
	s := newPreAuthServer(t, &stats, WithNewConnRate(float64(time.Second)/float64(every), 5))
	addr := s.Addr().String()

	// Five at once from 127.0.0.2, each closed at once (a storm): the burst.
	start := time.Now()
	for range 5 {
		nc := rawFrom(t, "127.0.0.2", addr)
		nc.Close()
	}
	require.Zero(t, stats.PreAuthRate.Load())
	// The sixth is over: reset.
	refusedFrom(t, "127.0.0.2", addr)
	require.Less(t, time.Since(start), every, "the machine stalled past the refill: the test cannot tell")
	require.Equal(t, uint64(1), stats.PreAuthRate.Load())

	// Another address is not paced by the first's storm.
	c, err := DialConn(ctxT(t), addr, WithDialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
		return d.DialContext(ctx, network, addr)
	}))
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Call(ctxT(t), opEcho, []byte("x"))
	require.NoError(t, err)

	// Once its bucket has a token again, 127.0.0.2 is let in.
	require.Eventually(t, func() bool {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
		nc, err := d.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer nc.Close()
		got := make([]byte, len(preface))
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadFull(nc, got) // the server's preface: accepted
		return err == nil
	}, 3*every, 100*time.Millisecond)
}

// TestNewConnRatesBounded: the buckets kept per address are bounded; an
// address past the bound shares one bucket, and full buckets (quiet
// addresses) are forgotten to make room.
func TestNewConnRatesBounded(t *testing.T) {
	r := newNewConnRates(1, 2)
	now := time.Unix(1000, 0)
	for i := range maxRateKeys {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		require.True(t, r.allow(ip, now))
	}
	require.Len(t, r.by, maxRateKeys)
	over := netip.MustParseAddr("192.0.2.1")
	require.True(t, r.allow(over, now))
	require.True(t, r.allow(netip.MustParseAddr("192.0.2.2"), now), "the shared bucket's burst")
	require.False(t, r.allow(over, now), "addresses past the bound share one bucket")
	require.Len(t, r.by, maxRateKeys+1)
	// Two seconds on, every bucket is full again: swept.
	later := now.Add(2 * time.Second)
	require.True(t, r.allow(over, later))
	require.Len(t, r.by, 1, "the quiet ones forgotten (the shared one too): the newcomer has its own again")
}
