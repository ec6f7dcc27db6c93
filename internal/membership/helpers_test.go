package membership

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/ring"
	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	code := m.Run()
	// memberlist's Shutdown does not wait for a probe in flight; it ends on
	// its own within ProbeInterval plus the TCP fallback. Give such
	// goroutines up to 20s to finish; ours end before Close returns.
	deadline := time.Now().Add(20 * time.Second)
	for err := goleak.Find(); code == 0 && err != nil; err = goleak.Find() {
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
		<-time.After(200 * time.Millisecond)
	}
	os.Exit(code)
}

// fastTimers shortens memberlist's timers for in-memory clusters: detection
// in about a second instead of several, while still leaving headroom for a
// loaded 2-core machine under -race.
func fastTimers(c *memberlist.Config) {
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.GossipInterval = 50 * time.Millisecond
	c.PushPullInterval = 2 * time.Second
	c.SuspicionMult = 3
	c.GossipToTheDeadTime = 2 * time.Second
	c.TCPTimeout = time.Second
}

// memOpts are the options every in-memory test member gets.
func memOpts(nw *memnet.Network, id string) []Option {
	return []Option{
		WithID(id),
		WithResource("test"),
		WithPreset(PresetLocal),
		WithoutMulticast(),
		WithTransport(nw.NewTransport()),
		WithTuning(fastTimers),
		WithRejoin(50*time.Millisecond, time.Second, 0.5),
		WithLeaveTimeout(time.Second),
	}
}

// start builds and starts a member and closes it at the end of the test.
func start(t testing.TB, opts ...Option) *Membership {
	t.Helper()
	m, err := New(opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, m.Start(ctx))
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// memCluster starts n members on nw, each seeded with the first member.
func memCluster(t testing.TB, nw *memnet.Network, n int, extra ...Option) []*Membership {
	t.Helper()
	ms := make([]*Membership, n)
	for i := range ms {
		opts := memOpts(nw, fmt.Sprintf("node-%03d", i))
		if i > 0 {
			opts = append(opts, WithSeeds(ms[0].Local().Gossip))
		}
		ms[i] = start(t, append(opts, extra...)...)
	}
	return ms
}

func ids(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func idsOf(ms []*Membership) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Local().ID
	}
	return out
}

// toRing turns live members into ring members; Boot is the incarnation.
func toRing(ms []Member) []ring.Member {
	out := make([]ring.Member, len(ms))
	for i, m := range ms {
		out[i] = ring.Member{ID: m.ID, Incarnation: m.Boot, Client: m.Role == RoleClient}
	}
	return out
}

// converged reports whether every member sees exactly want, and so computes
// the same ring version.
func converged(t testing.TB, r *ring.Ring, ms []*Membership, want []string) bool {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	var version uint64
	for i, m := range ms {
		members := m.Members()
		if fmt.Sprint(ids(members)) != fmt.Sprint(want) {
			return false
		}
		v, err := r.Version(toRing(members))
		require.NoError(t, err)
		if i > 0 && v != version {
			return false
		}
		version = v
	}
	return true
}

// waitConverged waits until every member sees want and returns how long it
// took.
func waitConverged(t testing.TB, ms []*Membership, want []string, within time.Duration) time.Duration {
	t.Helper()
	r, err := ring.New()
	require.NoError(t, err)
	begin := time.Now()
	deadline := begin.Add(within)
	for !converged(t, r, ms, want) {
		if time.Now().After(deadline) {
			var views []string
			for _, m := range ms {
				var ss []string
				for _, mem := range m.Members() {
					ss = append(ss, mem.ID+"/"+mem.Status.String())
				}
				views = append(views, fmt.Sprintf("%s sees %v", m.Local().ID, ss))
			}
			require.Failf(t, "no convergence", "members did not converge on %v within %v:\n%s", want, within, strings.Join(views, "\n"))
		}
		<-time.After(20 * time.Millisecond)
	}
	return time.Since(begin)
}

// waitStatus waits until watcher's subscription reports id in status and
// returns when it was seen.
func waitStatus(t testing.TB, sub *Subscription, id string, want Status, within time.Duration) (time.Time, []Status) {
	t.Helper()
	var seen []Status
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-sub.Events():
			require.True(t, ok, "subscription closed")
			if ev.Member.ID != id {
				continue
			}
			seen = append(seen, ev.Member.Status)
			if ev.Member.Status == want {
				return ev.At, seen
			}
		case <-timer.C:
			require.Failf(t, "status not reached", "%s did not become %v within %v (saw %v)", id, want, within, seen)
		}
	}
}

// ConfigAlias keeps tuning closures short.
type ConfigAlias = memberlist.Config

func nodeWithMeta(name string, meta []byte) *memberlist.Node {
	return &memberlist.Node{Name: name, Addr: net.ParseIP("127.0.0.1"), Port: 1, Meta: meta}
}

// multicastBus is an in-memory multicast group for tests: every packet
// written reaches every reader.
type multicastBus struct {
	mu    sync.Mutex
	conns []*busConn
}

func newMulticastBus() *multicastBus { return &multicastBus{} }

func (b *multicastBus) option() Option {
	return optionFunc(func(c *config) {
		c.multicastConns = func(MulticastConfig) (packetConn, packetConn, net.Addr, error) {
			c := &busConn{bus: b, in: make(chan []byte, 64), done: make(chan struct{})}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
			return c, c, memnet.Addr("group"), nil
		}
	})
}

func (b *multicastBus) inject(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		select {
		case c.in <- p:
		default:
		}
	}
}

type busConn struct {
	bus       *multicastBus
	in        chan []byte
	done      chan struct{}
	closeOnce sync.Once
}

func (c *busConn) ReadFrom(p []byte) (int, net.Addr, error) {
	select {
	case b := <-c.in:
		return copy(p, b), memnet.Addr("peer"), nil
	case <-c.done:
		return 0, nil, net.ErrClosed
	}
}

func (c *busConn) WriteTo(p []byte, _ net.Addr) (int, error) {
	c.bus.inject(append([]byte(nil), p...))
	return len(p), nil
}

func (c *busConn) Close() error {
	c.closeOnce.Do(func() { close(c.done) })
	return nil
}
