package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/ring"
)

func fastTimers(c *memberlist.Config) {
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.GossipInterval = 50 * time.Millisecond
	c.PushPullInterval = 2 * time.Second
	c.SuspicionMult = 3
	c.TCPTimeout = time.Second
}

type viewed struct {
	ms   *membership.Membership
	view *view
}

// startViewed starts a member on nw with a view running beside it.
func startViewed(t *testing.T, nw *memnet.Network, id string, port int, role membership.Role, seeds []string) *viewed {
	t.Helper()
	ms, err := membership.New(
		membership.WithID(id), membership.WithResource("test"), membership.WithRole(role),
		membership.WithDataAddr(fmt.Sprintf("127.0.0.1:%d", port)),
		membership.WithPreset(membership.PresetLocal), membership.WithoutMulticast(),
		membership.WithTransport(nw.NewTransport()), membership.WithTuning(fastTimers),
		membership.WithSeeds(seeds...), membership.WithLeaveTimeout(time.Second),
	)
	require.NoError(t, err)
	require.NoError(t, ms.Start(ctxT(t)))
	r, err := ring.New()
	require.NoError(t, err)
	v := newView(r, ms, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); v.run(ctx) }()
	vw := &viewed{ms: ms, view: v}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = ms.Close()
	})
	return vw
}

func sameMap(vs []*viewed, servers, clients int) bool {
	var version uint64
	for i, v := range vs {
		m, cl, _ := v.view.current()
		if m == nil || len(m.Members()) != servers || len(cl) != clients {
			return false
		}
		if i == 0 {
			version = m.Version()
		} else if m.Version() != version {
			return false
		}
	}
	return true
}

// TestViewsAgree: servers and a client converge on one map; the client owns
// nothing and is listed as a client; a server leaving changes every map.
func TestViewsAgree(t *testing.T) {
	nw := memnet.New(1)
	first := startViewed(t, nw, "s1", 7001, membership.RoleServer, nil)
	seed := []string{first.ms.Local().Gossip}
	vs := []*viewed{first,
		startViewed(t, nw, "s2", 7002, membership.RoleServer, seed),
		startViewed(t, nw, "s3", 7003, membership.RoleServer, seed),
		startViewed(t, nw, "c1", 7004, membership.RoleClient, seed),
	}
	require.Eventually(t, func() bool { return sameMap(vs, 3, 1) }, 20*time.Second, 10*time.Millisecond)
	m, clients, _ := vs[0].view.current()
	assert.Equal(t, []string{"c1"}, clients)
	assert.Empty(t, m.Owned("c1"), "a client owns nothing")
	for id, want := range map[string]string{"s1": "127.0.0.1:7001", "s2": "127.0.0.1:7002", "c1": "127.0.0.1:7004"} {
		addr, ok := vs[3].view.addr(id)
		assert.True(t, ok)
		assert.Equal(t, want, addr)
	}

	require.NoError(t, vs[2].ms.Close())
	rest := []*viewed{vs[0], vs[1], vs[3]}
	require.Eventually(t, func() bool { return sameMap(rest, 2, 1) }, 20*time.Second, 10*time.Millisecond)
	m2, _, _ := rest[0].view.current()
	assert.NotEqual(t, m.Version(), m2.Version())
	assert.Len(t, ring.Diff(m, m2), len(m.Owned("s3")), "exactly s3's partitions moved")
}
