package ferotest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"
)

// The data plane's links. Every node dials its peers through a dialer of
// its own (fero.WithDialer) that dials loopback TCP and runs the
// connection through a link: the node's transport gets one end of an
// in-memory pipe, and two pumps carry the bytes between the pipe's other
// end and the socket, each chunk once the delay of the link's slowed ends
// has passed. A link whose ends are in different groups of a partition is
// closed, and a dial that would cross one is refused. Every connection
// between nodes is dialed by one of them, so the links see all of them,
// whichever end accepted; the kit's status connections and a test's own
// fero.Dial do not go through them.

const (
	// chunkSize is the most a pump reads at once, and queueChunks how
	// many chunks it holds on their way: at most 1 MiB per direction of
	// a link, however slow the link.
	chunkSize   = 16 << 10
	queueChunks = 64
	// lingerTimeout is how long a link whose node closed its end waits,
	// once what that node wrote is sent, for the other end to close its
	// side, as the transport itself waits on a socket.
	lingerTimeout = 2 * time.Second
)

// dataNet is the cluster's data plane: its nodes and the links they
// dialed.
type dataNet struct {
	mu     sync.Mutex
	closed bool
	eps    map[*endpoint]bool   // every open node, listening or still opening
	byAddr map[string]*endpoint // a node's data address → the node
	links  map[*link]bool       // open
	wg     sync.WaitGroup       // one per open link
}

// endpoint is one node as the data plane sees it. Its fields are guarded
// by dataNet.mu.
type endpoint struct {
	id    string
	group int           // of the partition; 0 for the nodes no group lists
	delay time.Duration // added to what the node sends and what it receives
}

func newDataNet() *dataNet {
	return &dataNet{eps: map[*endpoint]bool{}, byAddr: map[string]*endpoint{}, links: map[*link]bool{}}
}

// add returns a new node's endpoint, in the group of the nodes no group
// lists. The node can dial from then on; it is dialed as itself once it
// is registered with its address.
func (n *dataNet) add(id string) *endpoint {
	n.mu.Lock()
	defer n.mu.Unlock()
	ep := &endpoint{id: id}
	n.eps[ep] = true
	return ep
}

// register tells the links that addr is ep's, now named id. Links already
// dialed to addr, before the node's Open returned, count as ep's too.
func (n *dataNet) register(ep *endpoint, id, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ep.id = id
	n.byAddr[addr] = ep
}

// remove forgets a node that closed.
func (n *dataNet) remove(ep *endpoint) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.eps, ep)
	for addr, e := range n.byAddr {
		if e == ep {
			delete(n.byAddr, addr)
		}
	}
}

// partition puts each node in its group of group (the ones it leaves out
// in group 0), closes every link that now crosses groups, and refuses
// dials that would. A nil group heals.
func (n *dataNet) partition(group map[*endpoint]int) {
	n.mu.Lock()
	for ep := range n.eps {
		ep.group = group[ep]
	}
	var cut []*link
	for l := range n.links {
		if n.crossesLocked(l.from, l.to) {
			cut = append(cut, l)
		}
	}
	n.mu.Unlock()
	for _, l := range cut {
		l.close()
	}
}

// slow sets the delay of ep's links: what it sends and what it receives
// from then on.
func (n *dataNet) slow(ep *endpoint, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ep.delay = d
}

// close closes every link and waits for their pumps; dials fail from then
// on.
func (n *dataNet) close() {
	n.mu.Lock()
	n.closed = true
	links := make([]*link, 0, len(n.links))
	for l := range n.links {
		links = append(links, l)
	}
	n.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	n.wg.Wait()
}

// crossesLocked reports whether from and the node at addr are in
// different groups; an address of no node (a test's listener) is reached
// from every group.
func (n *dataNet) crossesLocked(from *endpoint, addr string) bool {
	to := n.byAddr[addr]
	return to != nil && to.group != from.group
}

func (n *dataNet) refusalLocked(from *endpoint, addr string) error {
	if n.closed {
		return fmt.Errorf("ferotest: %s dials %s: the cluster is closed: %w", from.id, addr, net.ErrClosed)
	}
	if n.crossesLocked(from, addr) {
		// Refused, as by a host whose port is closed: the dial fails at
		// once rather than wait out the connect timeout.
		return fmt.Errorf("ferotest: %s cannot reach %s (%s) across a partition: %w",
			from.id, n.byAddr[addr].id, addr, syscall.ECONNREFUSED)
	}
	return nil
}

// dialer returns the dial function of the node from.
func (n *dataNet) dialer(from *endpoint) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.mu.Lock()
		err := n.refusalLocked(from, addr)
		n.mu.Unlock()
		if err != nil {
			return nil, err
		}
		var d net.Dialer
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return n.open(from, addr, nc)
	}
}

// open runs nc, dialed by from to addr, through a new link, unless a
// partition came between the check and the dial.
func (n *dataNet) open(from *endpoint, addr string, nc net.Conn) (net.Conn, error) {
	app, near := net.Pipe()
	l := &link{net: n, from: from, to: addr, tcp: nc, near: near, cut: make(chan struct{})}
	n.mu.Lock()
	if err := n.refusalLocked(from, addr); err != nil {
		n.mu.Unlock()
		l.close()
		_ = app.Close()
		return nil, err
	}
	n.links[l] = true
	n.wg.Add(1)
	n.mu.Unlock()
	go l.run()
	return &pipeConn{Conn: app, local: nc.LocalAddr(), remote: nc.RemoteAddr()}, nil
}

// link is one data connection a node dialed: the socket, and the pipe's
// end that the pumps hold (the node's transport holds the other).
type link struct {
	net       *dataNet
	from      *endpoint
	to        string // the address dialed; its node may register later
	tcp, near net.Conn
	cut       chan struct{} // closed by close
	closeOnce sync.Once
}

// run pumps the link's two directions until both have ended, then
// closes it. Out, a write that fails closes the link, so that the node
// learns its connection is lost; in, it means the node closed its end,
// and what still arrives is dropped until the socket ends.
func (l *link) run() {
	defer l.net.wg.Done()
	var wg sync.WaitGroup
	wg.Go(func() {
		l.pump(l.near, l.tcp, l.close)
		// The node closed its end and what it wrote is sent: end the
		// stream as a socket would, and let the other end close its side.
		if tc, ok := l.tcp.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		_ = l.tcp.SetReadDeadline(time.Now().Add(lingerTimeout))
	})
	wg.Go(func() {
		l.pump(l.tcp, l.near, func() {})
		_ = l.near.Close() // the node reads what came, then the end
	})
	wg.Wait()
	l.close()
	l.net.mu.Lock()
	delete(l.net.links, l)
	l.net.mu.Unlock()
}

// close ends the link at once, both ways; the pumps drop what they hold.
func (l *link) close() {
	l.closeOnce.Do(func() {
		close(l.cut)
		_ = l.tcp.Close()
		_ = l.near.Close()
	})
}

// delay is what the link adds now to each direction: the delays of its
// two ends.
func (l *link) delay() time.Duration {
	l.net.mu.Lock()
	defer l.net.mu.Unlock()
	d := l.from.delay
	if to := l.net.byAddr[l.to]; to != nil {
		d += to.delay
	}
	return d
}

type chunk struct {
	b   []byte
	due time.Time
}

// pump copies src to dst, each chunk once the link's delay at the time it
// was read has passed. Chunks keep their order: after the delay shrinks,
// one may wait for the chunk before it. A write to dst that fails calls
// failed, and the rest is dropped. pump returns once src has ended and
// every chunk read from it is written or dropped.
func (l *link) pump(src, dst net.Conn, failed func()) {
	q := make(chan chunk, queueChunks)
	go func() { // ends with src, and pump waits for it by draining q
		defer close(q)
		buf := make([]byte, chunkSize)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{b: bytes.Clone(buf[:n]), due: time.Now().Add(l.delay())}
			}
			if err != nil {
				return
			}
		}
	}()
	dropping := false
	for c := range q {
		if dropping {
			continue
		}
		if wait := time.Until(c.due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.cut:
				t.Stop()
				dropping = true
				continue
			}
		}
		if _, err := dst.Write(c.b); err != nil {
			dropping = true
			failed()
		}
	}
}

// pipeConn is the node's end of a link, with the socket's addresses.
type pipeConn struct {
	net.Conn
	local, remote net.Addr
}

func (c *pipeConn) LocalAddr() net.Addr  { return c.local }
func (c *pipeConn) RemoteAddr() net.Addr { return c.remote }
