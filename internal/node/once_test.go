package node

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// TestForwardFailsOverWhenItsConnectionBreaks: a write forwarded to its
// owner whose bytes are lost, and then its connection breaks (the owner
// still in the map, as when a network path fails), is made again at once,
// over a new connection, and applies once (issue 41, fail fast: "or whose
// connection breaks"). Before, the forward waited for its deadline.
func TestForwardFailsOverWhenItsConnectionBreaks(t *testing.T) {
	nw := memnet.New(41)
	var d lossyDialer
	lossy := func(c *Config) { c.Transport = append(c.Transport, transport.WithDialer(d.dial)) }
	a := startNodeCfg(t, nw, "a", false, nil, lossy)
	x := startNodeCfg(t, nw, "x", true, nil, lossy, a.Membership().Local().Gossip)
	require.Eventually(t, func() bool { return settled([]*Node{a, x}, 1) }, 20*time.Second, 10*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, write(ctx, x, doc.Change{Type: wire.RecordUpdate, Key: "k", Value: wire.AppendUint(nil, 1)}, partition.WaitAck))
	p := a.Store().PartitionOf("k")
	start := ownerOffset(t, a, p)

	// What either sends now on the connections between them is lost on
	// the way.
	d.lose()
	// The write's deadline is far past the test's wait below.
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	wrote := make(chan error, 1)
	go func() {
		_, err := x.Write(wctx, doc.Change{Type: wire.RecordUpdate, Key: "k", Value: wire.AppendUint(nil, 7)}, partition.WaitAck, 0)
		wrote <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); forwardsWaiting(t, x) == 0; time.Sleep(time.Millisecond) {
		select {
		case err := <-wrote:
			t.Fatalf("the write was answered before its connection broke (%v): the test cannot tell", err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "the write was never forwarded")
	}
	// Then the connection breaks; a new one carries what is sent.
	d.breakAll()
	began := time.Now()
	select {
	case err := <-wrote:
		require.NoError(t, err)
	case <-time.After(8 * time.Second):
		t.Fatalf("the write was not made again after its connection broke: still waiting after %v", time.Since(began))
	}
	v, ok := a.Store().Get("k")
	require.True(t, ok, "the write is not in the owner's state")
	assert.Equal(t, "7", fmt.Sprint(v))
	assert.Equal(t, start+1, ownerOffset(t, a, p), "the write was committed more than once, or not at all")
}

// lossyDialer dials TCP connections whose writes can be made to vanish
// (lose), and which can be broken (breakAll), as a failing network path
// does; connections dialed after breakAll are sound.
type lossyDialer struct {
	mu    sync.Mutex
	conns []*lossyConn
}

type lossyConn struct {
	net.Conn
	lost atomic.Bool
}

func (c *lossyConn) Write(b []byte) (int, error) {
	if c.lost.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (d *lossyDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	lc := &lossyConn{Conn: c}
	d.mu.Lock()
	d.conns = append(d.conns, lc)
	d.mu.Unlock()
	return lc, nil
}

func (d *lossyDialer) lose() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.lost.Store(true)
	}
}

func (d *lossyDialer) breakAll() {
	d.mu.Lock()
	cs := d.conns
	d.conns = nil
	d.mu.Unlock()
	for _, c := range cs {
		_ = c.Conn.Close()
	}
}

// ownerOffset returns the offset of partition p's last commit on n.
func ownerOffset(t *testing.T, n *Node, p int) uint64 {
	t.Helper()
	st, err := n.Status(context.Background())
	require.NoError(t, err)
	return st[p].Position.Offset
}

// forwardsWaiting returns how many writes n forwarded that wait for their
// owner's answer.
func forwardsWaiting(t *testing.T, n *Node) int {
	t.Helper()
	out := make(chan int, 1)
	require.NoError(t, n.query(context.Background(), func(e *partition.Engine) { out <- e.Forwards() }))
	return <-out
}

// TestForwardedCallRetriedWhenItsOwnerConnectionBreaks: a verb call that
// reached a server that does not own its key (the caller's map was
// stale, as during a rolling restart) is forwarded to the owner; when the
// forwarder's connection to the owner breaks with the call in flight, the
// caller is told something it makes again (the call may have run), and
// the verb applies once. Before, the forwarder relayed its own "transport
// closed with the call in flight", which crossed the wire as a plain
// Aborted that the caller took as the handler's answer: CI's
// TestRegisterDuringRollingRestart saw two of three registrations fail so.
func TestForwardedCallRetriedWhenItsOwnerConnectionBreaks(t *testing.T) {
	nw := memnet.New(43)
	var a *Node
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	releaseAll := sync.OnceFunc(func() { close(release) })
	var runs atomic.Int32
	h := func(ctx context.Context, req *Request) ([]byte, error) {
		if req.Verb != "slow" {
			return nil, errs.Errorf(errs.Unimplemented, "no verb %q", req.Verb)
		}
		runs.Add(1)
		entered <- struct{}{}
		<-release
		// The verb's effect, an increment in its turn: what must happen
		// once. (A run whose caller's connection closed may commit
		// nothing; then a second run is right.)
		n := uint64(0)
		if v, ok := a.Store().Get(req.Key); ok {
			n = v.(uint64)
		}
		if _, err := a.Write(ctx, doc.Change{Type: wire.RecordUpdate, Key: req.Key, Value: wire.AppendUint(nil, n+1)}, partition.WaitAck, 0); err != nil {
			return nil, err
		}
		return []byte("done"), nil
	}
	a = startNodeWith(t, nw, "a", false, h)
	b := startNodeWith(t, nw, "b", false, h, a.Membership().Local().Gossip)
	t.Cleanup(releaseAll) // runs before the nodes close (they wait for their handlers)
	nodes := []*Node{a, b}
	require.Eventually(t, func() bool { return settled(nodes, 2) }, 20*time.Second, 10*time.Millisecond)
	var key string
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		if o, ok := a.Map().Owner(a.Store().PartitionOf(k)); ok && o.ID == "a" {
			key = k
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	peer, err := transport.Dial(ctx, b.Addr())
	require.NoError(t, err)
	defer peer.Close()
	answered := make(chan error, 1)
	var reply []byte
	go func() {
		var err error
		reply, err = protocol.CallNodeWith(ctx, peer, "slow", key, nil, protocol.CallOpts{Once: protocol.NewWriter("caller").Next()})
		answered <- err
	}()
	select {
	case <-entered:
	case err := <-answered:
		t.Fatalf("answered before the handler ran: %v", err)
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}
	// b's connection to a breaks, on b's side, with the call in flight.
	for _, pair := range [][2]*Node{{b, a}, {a, b}} {
		if c := pair[0].peers.pool.lookup(pair[1].ID()); c != nil {
			c.Close()
		}
	}
	// The caller makes the call again (it waits for the turn the first
	// attempt holds), and is answered with the first run's reply.
	select {
	case err := <-answered:
		t.Fatalf("the caller was answered while the first attempt still ran: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	releaseAll()
	select {
	case err := <-answered:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the call was never answered")
	}
	assert.Equal(t, "done", string(reply))
	v, ok := a.Store().Get(key)
	require.True(t, ok, "the verb's write is not in the owner's state")
	assert.Equal(t, "1", fmt.Sprint(v), "the verb applied more than once (it ran %d times)", runs.Load())
}

// TestConcurrentWritesAreNotTooOld: 400 goroutines write through one
// client node to keys of one partition at once; none is refused. Before,
// each write took its sequence before it queued for the engine, so a
// first attempt could reach the owner more than doc.DedupPerWriter (64)
// sequences behind later ones and be refused as "a retry older than the
// owner's memory of its writer" (Aborted, indefinite, though it had
// never been applied): 4 runs of 5 saw one.
func TestConcurrentWritesAreNotTooOld(t *testing.T) {
	nw := memnet.New(44)
	a := startNode(t, nw, "a", false)
	c := startNode(t, nw, "c", true, a.Membership().Local().Gossip)
	require.Eventually(t, func() bool { return settled([]*Node{a, c}, 1) }, 20*time.Second, 10*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	failed := concurrently(400, 20, func(g, i int) error {
		// Sub-keys of one key: one partition.
		_, err := c.Write(ctx, doc.Change{Type: wire.RecordUpdate, Key: fmt.Sprintf("k.%d", g), Value: wire.AppendUint(nil, uint64(i))}, partition.WaitAck, 0)
		return err
	})
	require.Empty(t, failed, "writes refused")
}

// concurrently runs op(g, i) for i below each in each of goroutines
// goroutines g at once, and counts the errors by their text.
func concurrently(goroutines, each int, op func(g, i int) error) map[string]int {
	var mu sync.Mutex
	failed := map[string]int{}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				if err := op(g, i); err != nil {
					mu.Lock()
					failed[err.Error()]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return failed
}

// TestConcurrentCallsAreNotTooOld: 400 goroutines call a verb through a
// client node, each on its own sub-key of one key (one partition), and
// none is refused. Before, a call took its sequence before it was sent,
// and the owner began each call's turn on the call's own goroutine, in
// whatever order they ran: 110 to 254 of 4,000 first attempts, never
// applied, were refused as "a retry older than the owner's memory of its
// writer" in each of three runs.
func TestConcurrentCallsAreNotTooOld(t *testing.T) {
	nw := memnet.New(45)
	var a *Node
	set := func(ctx context.Context, req *Request) ([]byte, error) {
		_, err := a.Write(ctx, doc.Change{Type: wire.RecordUpdate, Key: req.Key, Value: wire.AppendUint(nil, 1)}, partition.WaitAck, 0)
		return nil, err
	}
	a = startNodeWith(t, nw, "a", false, set)
	c := startNode(t, nw, "c", true, a.Membership().Local().Gossip)
	require.Eventually(t, func() bool { return settled([]*Node{a, c}, 1) }, 20*time.Second, 10*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	failed := concurrently(400, 10, func(g, _ int) error {
		_, err := c.Request(ctx, "set", fmt.Sprintf("k.%d", g), nil, false)
		return err
	})
	require.Empty(t, failed, "calls refused")
}
