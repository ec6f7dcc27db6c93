package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/testkit"
)

// startNode starts a node whose gossip runs over nw and whose data plane
// is real loopback TCP.
func startNode(t *testing.T, nw *memnet.Network, id string, client bool, seeds ...string) *Node {
	t.Helper()
	return startNodeWith(t, nw, id, client, nil, seeds...)
}

// startNodeWith is startNode with a handler.
func startNodeWith(t *testing.T, nw *memnet.Network, id string, client bool, h Handler, seeds ...string) *Node {
	t.Helper()
	return startNodeCfg(t, nw, id, client, h, nil, seeds...)
}

// startNodeCfg is startNodeWith with a last word on the Config.
func startNodeCfg(t *testing.T, nw *memnet.Network, id string, client bool, h Handler, edit func(*Config), seeds ...string) *Node {
	t.Helper()
	cfg := baseConfig(t, nw, id, client, h, seeds...)
	if edit != nil {
		edit(&cfg)
	}
	n, err := Start(ctxT(t), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// baseConfig is the Config of the nodes these tests start.
func baseConfig(t *testing.T, nw *memnet.Network, id string, client bool, h Handler, seeds ...string) Config {
	logger := testLogger(t)
	return Config{
		Handler: h, ID: id, Resource: "test", Client: client,
		Membership: []membership.Option{
			membership.WithPreset(membership.PresetLocal), membership.WithoutMulticast(),
			membership.WithTransport(nw.NewTransport()), membership.WithTuning(testkit.ClusterTimers),
			membership.WithSeeds(seeds...), membership.WithLeaveTimeout(time.Second),
		},
		Ring:   []ring.Option{ring.WithPartitions(32)},
		Engine: []partition.Option{partition.WithSyncTimeout(500 * time.Millisecond)},
		Tick:   20 * time.Millisecond,
		Logger: logger,
	}
}

// testLogger sends the node's info logs to the test log, so a failure
// shows what the engines saw.
func testLogger(t *testing.T) *slog.Logger { return testkit.Logger(t, slog.LevelInfo) }

// write retries while the cluster settles (owners syncing, maps moving),
// bounded by ctx.
func write(ctx context.Context, n *Node, c doc.Change, wait partition.Wait) error {
	for {
		// Each try gets a deadline of its own: a write in flight to an
		// owner that dies ends only at its deadline (rule 11).
		try, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := n.Write(try, c, wait, 0)
		cancel()
		// Retrying an indefinite failure is safe here: every write sets a
		// key to a value, and a write that failed took effect before its
		// answer or never (rule 11), so it cannot land after its retry.
		indefinite := err != nil && !errs.Definite(err) && ctx.Err() == nil
		if err == nil || (errs.CodeOf(err) != errs.Unavailable && !indefinite) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dumpDivergence logs, for every partition whose copies differ, what each
// node's engine says about it.
func dumpDivergence(t *testing.T, nodes []*Node) {
	sts := make([][]partition.Status, len(nodes))
	for i, n := range nodes {
		st, err := n.Status(context.Background())
		require.NoError(t, err)
		sts[i] = st
		t.Logf("%s holds %d keys", n.ID(), n.Store().Len())
	}
	for p := range sts[0] {
		same := true
		for i := range nodes {
			if sts[i][p].Position != sts[0][p].Position {
				same = false
			}
		}
		if same {
			continue
		}
		for i, n := range nodes {
			t.Logf("partition %d on %s: %+v", p, n.ID(), sts[i][p])
		}
	}
}

// settled reports whether every node routes by the same map of servers
// servers, as a service waits for its cluster before it sends.
func settled(nodes []*Node, servers int) bool {
	m0 := nodes[0].Map()
	for _, n := range nodes {
		m := n.Map()
		if m == nil || m0 == nil || m.Version() != m0.Version() || len(m.Members()) != servers {
			return false
		}
		// The engine routes by the map once the driver has handed it
		// over: before, a write fails with "no ring map yet".
		if em := n.EngineMap(); em == nil || em.Version() != m.Version() {
			return false
		}
	}
	return true
}

func converged(nodes []*Node, keys int) bool {
	d := nodes[0].Store().Digest()
	for _, n := range nodes {
		if n.Store().Len() != keys || n.Store().Digest() != d {
			return false
		}
	}
	return true
}

// TestClusterReplicates: three servers and a client; writes sent to random
// nodes (owners and not) are all acked and every copy ends identical.
func TestClusterReplicates(t *testing.T) {
	nw := memnet.New(7)
	a := startNode(t, nw, "a", false)
	seed := a.Membership().Local().Gossip
	nodes := []*Node{a, startNode(t, nw, "b", false, seed), startNode(t, nw, "c", false, seed), startNode(t, nw, "client", true, seed)}

	require.Eventually(t, func() bool { return settled(nodes, 3) }, 20*time.Second, 10*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var b doc.Builder
	rng := rand.New(rand.NewPCG(1, 2))
	const keys = 500
	for i := 0; i < keys; i++ {
		c, err := b.Update(fmt.Sprintf("k%d", i), map[string]any{"i": i, "pad": "0123456789"})
		require.NoError(t, err)
		via := nodes[rng.IntN(len(nodes))]
		require.NoError(t, write(ctx, via, c, partition.WaitAck), "write %d via %s", i, via.ID())
	}
	if !assert.Eventually(t, func() bool { return converged(nodes, keys) }, 30*time.Second, 20*time.Millisecond) {
		dumpDivergence(t, nodes)
		t.FailNow()
	}

	// A change the state refuses comes back as an error, from any node.
	dup, err := b.Add("k1", 1)
	require.NoError(t, err)
	err = write(ctx, nodes[3], dup, partition.WaitAck)
	require.Equal(t, errs.FailedPrecondition, errs.CodeOf(err), "%v", err)

	// Majority-acked writes.
	for i := 0; i < 50; i++ {
		c, err := b.Update(fmt.Sprintf("m%d", i), i)
		require.NoError(t, err)
		require.NoError(t, write(ctx, nodes[i%len(nodes)], c, partition.WaitMajority))
	}
	require.Eventually(t, func() bool { return converged(nodes, keys+50) }, 30*time.Second, 20*time.Millisecond)
	require.False(t, errors.Is(ctx.Err(), context.DeadlineExceeded))
}

// crash stops a node the way a killed process stops: no goodbye to the
// cluster, its sockets gone, its driver dead.
func crash(t *testing.T, nw *memnet.Network, n *Node) {
	t.Helper()
	nw.Isolate(n.Membership().Local().Gossip)
	n.cancel()
	n.wg.Wait()
	n.srv.Close()
	n.peers.close()
}

// TestJoinAndCrashWhileWriting streams majority-acked writes from a client
// while a fourth server joins and, later, a server crashes. Every survivor
// ends with the same state, holding every write whose ack the writer saw.
func TestJoinAndCrashWhileWriting(t *testing.T) {
	nw := memnet.New(11)
	a := startNode(t, nw, "a", false)
	seed := a.Membership().Local().Gossip
	b := startNode(t, nw, "b", false, seed)
	c := startNode(t, nw, "c", false, seed)
	cl := startNode(t, nw, "client", true, seed)
	require.Eventually(t, func() bool { return settled([]*Node{a, b, c, cl}, 3) }, 20*time.Second, 10*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var bld doc.Builder
	acked := map[string]int{}
	var d *Node
	const total = 3000
	for i := 0; i < total; i++ {
		switch i {
		case total / 3:
			d = startNode(t, nw, "d", false, seed) // joins mid-stream
		case 2 * total / 3:
			crash(t, nw, b) // dies mid-stream
		}
		key := fmt.Sprintf("k%d", i%700) // keys are overwritten, as a cache's are
		ch, err := bld.Update(key, i)
		require.NoError(t, err)
		if err := write(ctx, cl, ch, partition.WaitMajority); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		acked[key] = i
	}
	survivors := []*Node{a, c, d, cl}
	if !assert.Eventually(t, func() bool { return converged(survivors, len(acked)) }, 60*time.Second, 50*time.Millisecond) {
		dumpDivergence(t, survivors)
		t.FailNow()
	}
	for _, n := range survivors {
		for key, want := range acked {
			var got int
			ok, err := n.Store().GetInto(key, &got)
			require.NoError(t, err)
			require.True(t, ok, "%s lost acked key %s", n.ID(), key)
			require.Equal(t, want, got, "%s holds an old value of %s", n.ID(), key)
		}
	}
}

// TestHundredThousandUpdates sends 100,000 owner-acked updates from 16
// writers to random nodes (owners and not) of a settled cluster; every
// copy ends identical, holding each writer's last value for every key.
func TestHundredThousandUpdates(t *testing.T) {
	nw := memnet.New(13)
	a := startNode(t, nw, "a", false)
	seed := a.Membership().Local().Gossip
	nodes := []*Node{a, startNode(t, nw, "b", false, seed), startNode(t, nw, "c", false, seed), startNode(t, nw, "client", true, seed)}
	require.Eventually(t, func() bool { return settled(nodes, 3) }, 20*time.Second, 10*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const writers, perWriter, keysPerWriter = 16, 100_000 / 16, 500
	last := make([]map[string]int, writers)
	errc := make(chan error, writers)
	start := time.Now()
	for g := 0; g < writers; g++ {
		last[g] = map[string]int{}
		go func() {
			var b doc.Builder
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			for i := 0; i < perWriter; i++ {
				key := fmt.Sprintf("w%d-k%d", g, i%keysPerWriter)
				c, err := b.Update(key, i)
				if err == nil {
					err = write(ctx, nodes[rng.IntN(len(nodes))], c, partition.WaitAck)
				}
				if err != nil {
					errc <- fmt.Errorf("writer %d, update %d: %w", g, i, err)
					return
				}
				last[g][key] = i
			}
			errc <- nil
		}()
	}
	for g := 0; g < writers; g++ {
		require.NoError(t, <-errc)
	}
	t.Logf("%d updates acked in %v (in one process, -race)", writers*perWriter, time.Since(start).Round(time.Millisecond))
	if !assert.Eventually(t, func() bool { return converged(nodes, writers*keysPerWriter) }, 60*time.Second, 50*time.Millisecond) {
		dumpDivergence(t, nodes)
		t.FailNow()
	}
	for _, n := range nodes {
		for g := range last {
			for key, want := range last[g] {
				var got int
				ok, err := n.Store().GetInto(key, &got)
				require.NoError(t, err)
				require.True(t, ok && got == want, "%s: %s = %d (present %v), want %d", n.ID(), key, got, ok, want)
			}
		}
	}
}
