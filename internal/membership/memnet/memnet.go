// Package memnet is an in-memory network for memberlist: many members in one
// process, no sockets, with links that can be cut (partitions, isolation),
// healed, and made lossy. It implements memberlist.NodeAwareTransport and is
// shipped outside test files so that other packages' cluster tests can use
// it.
//
// Packets are delivered like UDP: a packet to an unreachable or overloaded
// member is dropped and the send still succeeds. Streams are net.Pipe pairs,
// like TCP: a dial across a cut link fails at once. Drops are drawn from a
// source seeded by [New]; the order in which goroutines send still varies
// between runs, so a seed narrows a replay rather than fixing it.
package memnet

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrUnreachable is returned by dials to a member that is closed, unknown,
// or on the other side of a cut link.
var ErrUnreachable = errors.New("fero: memnet: unreachable")

// packetBuffer is how many packets a member's inbox holds before it drops,
// as a UDP socket's receive buffer would.
const packetBuffer = 1024

// Network connects transports. The zero value is not usable; call New.
type Network struct {
	mu       sync.Mutex
	nodes    map[string]*Transport
	group    map[string]int // addr → partition group; absent means 0
	dropRate float64
	rng      *rand.Rand
	nextPort int
	dropped  atomic.Uint64
}

// New returns an empty network whose random drops are drawn from seed.
func New(seed uint64) *Network {
	return &Network{
		nodes:    make(map[string]*Transport),
		group:    make(map[string]int),
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		nextPort: 10000,
	}
}

// NewTransport returns a transport with a fresh address, 127.0.0.1:port.
func (n *Network) NewTransport() *Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nextPort++
	t := &Transport{
		net:      n,
		addr:     Addr("127.0.0.1:" + strconv.Itoa(n.nextPort)),
		packetCh: make(chan *memberlist.Packet, packetBuffer),
		streamCh: make(chan net.Conn),
		done:     make(chan struct{}),
	}
	n.nodes[string(t.addr)] = t
	return t
}

// Partition splits the network: members in the same group talk, members in
// different groups do not. Addresses not listed form one more group
// together. Replaces any earlier partition.
func (n *Network) Partition(groups ...[]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.group)
	for i, g := range groups {
		for _, a := range g {
			n.group[a] = i + 1
		}
	}
}

// Isolate cuts addr off from every other member (a crashed or unplugged
// host, as seen from the others).
func (n *Network) Isolate(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.group[addr] = -1 - len(n.group) // a group of its own
}

// Heal restores every link.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.group)
}

// SetDropRate makes each packet (not stream) be lost with probability p.
func (n *Network) SetDropRate(p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropRate = p
}

// Dropped returns how many packets were lost (cut links, drop rate, full
// inboxes).
func (n *Network) Dropped() uint64 { return n.dropped.Load() }

// route returns the destination if from may reach to now.
func (n *Network) route(from, to string, packet bool) (*Transport, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	dst, ok := n.nodes[to]
	if !ok || n.group[from] != n.group[to] {
		return nil, false
	}
	if packet && n.dropRate > 0 && n.rng.Float64() < n.dropRate {
		return nil, false
	}
	return dst, true
}

// Addr is a memnet address; it implements net.Addr.
type Addr string

// Network returns "memnet".
func (Addr) Network() string { return "memnet" }

func (a Addr) String() string { return string(a) }

// Transport is one member's attachment to the network.
type Transport struct {
	net       *Network
	addr      Addr
	packetCh  chan *memberlist.Packet
	streamCh  chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

var _ memberlist.NodeAwareTransport = (*Transport)(nil)

// Addr returns the transport's address, host:port.
func (t *Transport) Addr() string { return string(t.addr) }

// FinalAdvertiseAddr returns the transport's own address whatever is asked:
// memnet addresses are assigned, not bound.
func (t *Transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	host, port, err := net.SplitHostPort(string(t.addr))
	if err != nil {
		return nil, 0, err
	}
	p, err := strconv.Atoi(port)
	return net.ParseIP(host), p, err
}

// WriteTo sends a packet to addr.
func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends a packet; like UDP it reports success even when the
// packet is lost.
func (t *Transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	dst, ok := t.net.route(string(t.addr), a.Addr, true)
	if !ok {
		t.net.dropped.Add(1)
		return now, nil
	}
	p := &memberlist.Packet{Buf: append([]byte(nil), b...), From: t.addr, Timestamp: now}
	select {
	case dst.packetCh <- p:
	case <-dst.done:
		t.net.dropped.Add(1)
	default:
		t.net.dropped.Add(1)
	}
	return now, nil
}

// PacketCh delivers incoming packets.
func (t *Transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout opens a stream to addr.
func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout opens a stream; it fails at once across a cut link, and
// after timeout if the other side does not accept.
func (t *Transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	dst, ok := t.net.route(string(t.addr), a.Addr, false)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnreachable, a.Addr)
	}
	local, remote := net.Pipe()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case dst.streamCh <- &conn{Conn: remote, local: dst.addr, remote: t.addr}:
		return &conn{Conn: local, local: t.addr, remote: dst.addr}, nil
	case <-dst.done:
	case <-t.done:
	case <-timer.C:
	}
	_ = local.Close()
	_ = remote.Close()
	return nil, fmt.Errorf("%w: %s", ErrUnreachable, a.Addr)
}

// StreamCh delivers incoming streams.
func (t *Transport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown detaches the transport; its address becomes unreachable.
func (t *Transport) Shutdown() error {
	t.closeOnce.Do(func() {
		t.net.mu.Lock()
		delete(t.net.nodes, string(t.addr))
		t.net.mu.Unlock()
		close(t.done)
	})
	return nil
}

// conn reports memnet addresses instead of net.Pipe's.
type conn struct {
	net.Conn
	local, remote Addr
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }
