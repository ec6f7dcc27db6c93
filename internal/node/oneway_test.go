package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
)

// cutLinks is a data plane that can refuse the dials of one node to
// another's address (gossip, over memnet, is not touched).
type cutLinks struct {
	mu  sync.Mutex
	cut map[[2]string]bool // from ID, to data address
}

func (l *cutLinks) dialer(from string) transport.Option {
	return transport.WithDialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
		l.mu.Lock()
		cut := l.cut[[2]string{from, addr}]
		l.mu.Unlock()
		if cut {
			return nil, errors.New("test: link cut")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	})
}

func (l *cutLinks) set(from, addr string, cut bool) {
	l.mu.Lock()
	l.cut[[2]string{from, addr}] = cut
	l.mu.Unlock()
}

// TestOneWayCutIsRoutedAround: with the data plane between two servers
// down both ways (what a one-way packet drop does to TCP) and gossip
// still showing both alive, a Majority write through either to a key
// the other owns succeeds, as a node's own write (an engine Forward),
// as a request it forwards, and as its own request (docs/engine.md,
// rule 17). Before the
// relays, both waited for the cut to heal (gossip never declares
// either dead), and the writes here failed at their deadlines.
func TestOneWayCutIsRoutedAround(t *testing.T) {
	nw := memnet.New(42)
	links := &cutLinks{cut: map[[2]string]bool{}}
	start := func(id string, seeds ...string) *Node {
		return startNodeCfg(t, nw, id, false, nil, func(c *Config) {
			c.Transport = append(c.Transport, links.dialer(id))
		}, seeds...)
	}
	a := start("a")
	seed := a.Membership().Local().Gossip
	b, c := start("b", seed), start("c", seed)
	nodes := []*Node{a, b, c}
	require.Eventually(t, func() bool { return settled(nodes, 3) }, 20*time.Second, 10*time.Millisecond)

	// A key each of a and b owns, by a's map (the maps agree).
	owned := func(owner string) string {
		for i := 0; ; i++ {
			k := fmt.Sprintf("k%d", i)
			if o, ok := a.Map().Owner(a.Store().PartitionOf(k)); ok && o.ID == owner {
				return k
			}
		}
	}
	ka, kb := owned("a"), owned("b")
	var bld doc.Builder
	change := func(k string, v int) doc.Change {
		ch, err := bld.Update(k, v)
		require.NoError(t, err)
		return ch
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, write(ctx, a, change(kb, 0), partition.WaitMajority))
	require.NoError(t, write(ctx, b, change(ka, 0), partition.WaitMajority))

	// Cut a and b apart: neither can dial the other, and their
	// connection closes.
	links.set("a", b.Addr(), true)
	links.set("b", a.Addr(), true)
	var wg sync.WaitGroup
	for _, pair := range [][2]*Node{{a, b}, {b, a}} {
		if conn := pair[0].peers.pool.lookup(pair[1].ID()); conn != nil {
			wg.Go(func() { conn.Close() })
		}
	}
	wg.Wait()
	cutAt := time.Now()

	// Writes through the cut servers, to each other's keys, each with a
	// deadline of a second: they succeed once the relay carries them.
	// The bound is generous (lease 1.5 s with these timers, plus a -race
	// run on a loaded machine); before, none succeeded.
	peer, err := transport.Dial(ctx, a.Addr())
	require.NoError(t, err)
	defer peer.Close()
	const bound = 15 * time.Second
	for i := 1; i <= 5; i++ {
		for _, w := range []struct {
			via  *Node
			key  string
			call string // "": a write; "remote": a request to via; "own": via's own request
		}{{a, kb, ""}, {b, ka, ""}, {a, kb, "remote"}, {b, ka, "own"}} {
			var err error
			for {
				try, cancel := context.WithTimeout(ctx, time.Second)
				payload, merr := msgpack.Marshal(i)
				require.NoError(t, merr)
				switch w.call {
				case "remote":
					_, err = protocol.CallNodeWait(try, peer, protocol.VerbUpdate, w.key, payload, protocol.WaitSpec{Set: true, Kind: partition.WaitMajority})
				case "own":
					_, err = w.via.Request(try, protocol.VerbUpdate, w.key, payload, false)
				default:
					_, err = w.via.Write(try, change(w.key, i), partition.WaitMajority, 0)
				}
				cancel()
				if err == nil || time.Since(cutAt) > bound {
					break
				}
			}
			require.NoError(t, err, "write %d of %s through %s (as a request: %q), %v after the cut", i, w.key, w.via.ID(), w.call, time.Since(cutAt).Round(time.Millisecond))
		}
	}
	t.Logf("the writes through the cut servers took %v from the cut", time.Since(cutAt).Round(time.Millisecond))
	for _, n := range nodes {
		require.Equal(t, 3, len(n.Map().Members()), "gossip keeps every server in %s's map", n.ID())
	}

	// The heal: a and b send each other directly again.
	links.set("a", b.Addr(), false)
	links.set("b", a.Addr(), false)
	require.Eventually(t, func() bool {
		return a.peers.pool.lookup("b") != nil && b.peers.pool.lookup("a") != nil && a.peers.relay.via("b", time.Now()) == "" && b.peers.relay.via("a", time.Now()) == ""
	}, 20*time.Second, 20*time.Millisecond, "a and b reach each other directly again")
	require.NoError(t, write(ctx, a, change(kb, 100), partition.WaitMajority))
}
