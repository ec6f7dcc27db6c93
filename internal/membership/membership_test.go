package membership

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/ring"
	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
)

// TestMemClusterConverges: members seeded with one peer all learn about each
// other, agree on one ring, and a subscriber sees each as connected (and a
// client member as client).
func TestMemClusterConverges(t *testing.T) {
	t.Parallel()
	nw := memnet.New(1)
	ms := memCluster(t, nw, 5)
	client := start(t, append(memOpts(nw, "client-0"), WithRole(RoleClient), WithSeeds(ms[2].Local().Gossip))...)
	all := append(slices.Clone(ms), client)
	d := waitConverged(t, all, append(idsOf(ms), "client-0"), 20*time.Second)
	t.Logf("6 in-memory members converged in %v", d)

	sub := ms[0].Subscribe()
	defer sub.Close()
	got := map[string]Status{}
	for len(got) < 6 {
		ev := <-sub.Events()
		got[ev.Member.ID] = ev.Member.Status
	}
	for _, id := range idsOf(ms) {
		require.Equal(t, StatusConnected, got[id], id)
	}
	require.Equal(t, StatusClient, got["client-0"])
	require.Equal(t, RoleClient, client.Local().Role)
}

// TestGracefulLeave: Close leaves the cluster; the others see the member
// removed within a second, well before failure detection would.
func TestGracefulLeave(t *testing.T) {
	t.Parallel()
	nw := memnet.New(2)
	ms := memCluster(t, nw, 4)
	waitConverged(t, ms, idsOf(ms), 20*time.Second)
	sub := ms[0].Subscribe()
	defer sub.Close()
	begin := time.Now()
	require.NoError(t, ms[3].Close())
	at, seen := waitStatus(t, sub, "node-003", StatusRemoved, 5*time.Second)
	t.Logf("graceful leave seen as removed after %v (statuses %v)", at.Sub(begin), seen)
	require.Less(t, at.Sub(begin), time.Second)
	waitConverged(t, ms[:3], idsOf(ms[:3]), 10*time.Second)
}

// TestCrashDetected: a member cut off without leaving is suspected by a
// prober and declared dead by everyone within memberlist's suspicion
// timeout.
func TestCrashDetected(t *testing.T) {
	t.Parallel()
	nw := memnet.New(3)
	ms := memCluster(t, nw, 4)
	waitConverged(t, ms, idsOf(ms), 20*time.Second)
	subs := make([]*Subscription, 3)
	for i := range subs {
		subs[i] = ms[i].Subscribe()
		defer subs[i].Close()
	}
	begin := time.Now()
	nw.Isolate(ms[3].Local().Gossip)
	suspected := false
	var worst time.Duration
	for _, sub := range subs {
		at, seen := waitStatus(t, sub, "node-003", StatusDead, 15*time.Second)
		worst = max(worst, at.Sub(begin))
		suspected = suspected || slices.Contains(seen, StatusSuspect)
	}
	// With probe 200ms and suspicion multiplier 3 on 4 members the
	// suspicion timeout is 3*log10(4)*200ms ≈ 360ms, up to 6x that before
	// confirmations; plus up to one probe round per member to notice.
	t.Logf("crash detected as dead by all after %v (suspect seen: %v)", worst, suspected)
	require.Less(t, worst, 5*time.Second)
	require.True(t, suspected, "some prober reported suspect before dead")
	waitConverged(t, ms[:3], idsOf(ms[:3]), 10*time.Second)
}

// TestPartitionHeals: a split that outlasts failure detection and
// memberlist's own memory of dead peers (GossipToTheDeadTime) merges again
// by itself once the network heals, thanks to the re-join loop.
func TestPartitionHeals(t *testing.T) {
	t.Parallel()
	nw := memnet.New(4)
	ms := memCluster(t, nw, 6)
	waitConverged(t, ms, idsOf(ms), 20*time.Second)
	var a, b []string
	for i, m := range ms {
		if i < 3 {
			a = append(a, m.Local().Gossip)
		} else {
			b = append(b, m.Local().Gossip)
		}
	}
	nw.Partition(a, b)
	waitConverged(t, ms[:3], idsOf(ms[:3]), 20*time.Second)
	waitConverged(t, ms[3:], idsOf(ms[3:]), 20*time.Second)
	// Let memberlist reap the dead peers (GossipToTheDeadTime is 2s in
	// fastTimers): only the re-join loop can merge the sides after this.
	<-time.After(3 * time.Second)
	require.True(t, converged(t, mustRing(t), ms[:3], idsOf(ms[:3])), "still split before healing")
	nw.Heal()
	d := waitConverged(t, ms, idsOf(ms), 20*time.Second)
	t.Logf("split of 3+3 merged %v after healing", d)
}

func mustRing(t testing.TB) *ring.Ring {
	r, err := ring.New()
	require.NoError(t, err)
	return r
}

// TestWrongKeyRefused: with gossip encryption on, a member with another key
// cannot join, and the cluster never lists it; the right key joins.
func TestWrongKeyRefused(t *testing.T) {
	t.Parallel()
	nw := memnet.New(5)
	key := bytes.Repeat([]byte{1}, 32)
	ms := memCluster(t, nw, 3, WithSecretKey(key))
	waitConverged(t, ms, idsOf(ms), 20*time.Second)

	intruder := start(t, append(memOpts(nw, "intruder"), WithSecretKey(bytes.Repeat([]byte{2}, 32)))...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := intruder.Join(ctx, ms[0].Local().Gossip)
	require.ErrorIs(t, err, ErrNoPeers)
	plain := start(t, memOpts(nw, "plain")...)
	_, err = plain.Join(ctx, ms[0].Local().Gossip)
	require.ErrorIs(t, err, ErrNoPeers)

	friend := start(t, append(memOpts(nw, "friend"), WithSecretKey(key), WithSeeds(ms[1].Local().Gossip))...)
	all := append(slices.Clone(ms), friend)
	waitConverged(t, all, []string{"friend", "node-000", "node-001", "node-002"}, 20*time.Second)
	for _, m := range all {
		require.NotContains(t, ids(m.Members()), "intruder")
		require.NotContains(t, ids(m.Members()), "plain")
	}
	require.Equal(t, []string{"intruder"}, ids(intruder.Members()))
}

// TestForeignResourceRefused: members of another resource are not admitted
// (memberlist's label drops their packets; NotifyAlive would refuse them).
func TestForeignResourceRefused(t *testing.T) {
	t.Parallel()
	nw := memnet.New(6)
	ms := memCluster(t, nw, 2)
	other := start(t, append(memOpts(nw, "other"), WithResource("other"))...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := other.Join(ctx, ms[0].Local().Gossip)
	require.Error(t, err)
	waitConverged(t, ms, idsOf(ms), 20*time.Second)

	d := &delegate{m: ms[0]}
	foreign, err := EncodeMeta(Meta{ID: "x", Resource: "other", Role: RoleServer})
	require.NoError(t, err)
	require.ErrorIs(t, d.NotifyAlive(nodeWithMeta("x", foreign)), ErrForeignResource)
	require.ErrorIs(t, d.NotifyAlive(nodeWithMeta("x", []byte{0xc1})), ErrInvalidMeta)
	same, err := EncodeMeta(Meta{ID: "y", Resource: "test", Role: RoleServer})
	require.NoError(t, err)
	require.ErrorIs(t, d.NotifyAlive(nodeWithMeta("x", same)), ErrInvalidMeta, "node name must match meta ID")
}

// TestSlowSubscriber: a subscriber that does not read never blocks gossip;
// it keeps one pending event per peer, counts the replaced ones, and when it
// reads it sees each peer's latest state.
func TestSlowSubscriber(t *testing.T) {
	t.Parallel()
	nw := memnet.New(7)
	ms := memCluster(t, nw, 2)
	slow := ms[0].Subscribe()
	defer slow.Close()
	// Churn: members join and leave while nobody reads.
	for round := range 3 {
		extra := make([]*Membership, 3)
		for i := range extra {
			extra[i] = start(t, append(memOpts(nw, fmt.Sprintf("churn-%d", i)), WithSeeds(ms[1].Local().Gossip))...)
		}
		all := append(slices.Clone(ms), extra...)
		waitConverged(t, all, append(idsOf(ms), idsOf(extra)...), 20*time.Second)
		for _, m := range extra {
			require.NoError(t, m.Close())
		}
		waitConverged(t, ms, idsOf(ms), 20*time.Second)
		t.Logf("round %d: coalesced %d", round, slow.Coalesced())
	}
	require.NotZero(t, slow.Coalesced())
	latest := map[string]Status{}
	for len(latest) < 5 {
		select {
		case ev := <-slow.Events():
			latest[ev.Member.ID] = ev.Member.Status
		case <-time.After(5 * time.Second):
			require.Failf(t, "drain", "got %v", latest)
		}
	}
	for i := range 3 {
		require.Equal(t, StatusRemoved, latest[fmt.Sprintf("churn-%d", i)])
	}
	require.Equal(t, StatusConnected, latest["node-001"])
}

// TestDNSDiscovery: SRV records (a headless service) and A records lead a
// member with no seeds to the cluster, through an injected resolver.
func TestDNSDiscovery(t *testing.T) {
	t.Parallel()
	nw := memnet.New(8)
	ms := memCluster(t, nw, 2)
	res := &fakeResolver{srv: map[string][]*net.SRV{}, hosts: map[string][]string{}}
	for _, m := range ms {
		host, port, err := net.SplitHostPort(m.Local().Gossip)
		require.NoError(t, err)
		var p uint16
		_, _ = fmt.Sscan(port, &p)
		name := m.Local().ID + ".fero.default.svc.cluster.local."
		res.srv["_gossip._udp.fero.default.svc.cluster.local"] = append(res.srv["_gossip._udp.fero.default.svc.cluster.local"], &net.SRV{Target: name, Port: p})
		res.hosts[name[:len(name)-1]] = []string{host}
	}
	bySRV := start(t, append(memOpts(nw, "srv"), WithDNS("_gossip._udp.fero.default.svc.cluster.local", 0), WithResolver(res))...)
	_, port, _ := net.SplitHostPort(ms[0].Local().Gossip)
	var p int
	_, _ = fmt.Sscan(port, &p)
	res.setHost("fero.default.svc", []string{"127.0.0.1"})
	byA := start(t, append(memOpts(nw, "a-record"), WithDNS("fero.default.svc", p), WithResolver(res))...)
	all := append(slices.Clone(ms), bySRV, byA)
	waitConverged(t, all, []string{"a-record", "node-000", "node-001", "srv"}, 20*time.Second)
}

type fakeResolver struct {
	mu    sync.Mutex
	srv   map[string][]*net.SRV
	hosts map[string][]string
}

func (r *fakeResolver) setHost(name string, ips []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hosts[name] = ips
}

func (r *fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ips, ok := r.hosts[host]; ok {
		return ips, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *fakeResolver) LookupSRV(_ context.Context, _, _, name string) (string, []*net.SRV, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.srv[name]; ok {
		return name, s, nil
	}
	return "", nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

// TestMulticastDiscovery: announcements on a shared (in-memory) multicast
// bus lead members with no seeds to each other; announcements from other
// resources and garbage are ignored. Real multicast is in
// TestRealMulticast.
func TestMulticastDiscovery(t *testing.T) {
	t.Parallel()
	nw := memnet.New(9)
	bus := newMulticastBus()
	mc := WithMulticast(MulticastConfig{Group: "224.0.0.251:5354", Jitter: 50 * time.Millisecond, Interval: 200 * time.Millisecond})
	var ms []*Membership
	for i := range 3 {
		ms = append(ms, start(t, append(memOpts(nw, fmt.Sprintf("mc-%d", i)), mc, bus.option())...))
	}
	other := start(t, append(memOpts(nw, "mc-other"), WithResource("other"), mc, bus.option())...)
	bus.inject([]byte("garbage"))
	waitConverged(t, ms, []string{"mc-0", "mc-1", "mc-2"}, 20*time.Second)
	require.Equal(t, []string{"mc-other"}, ids(other.Members()))
}

// TestSetDataAddr: a metadata change reaches peers with a higher version.
func TestSetDataAddr(t *testing.T) {
	t.Parallel()
	nw := memnet.New(10)
	ms := memCluster(t, nw, 3)
	waitConverged(t, ms, idsOf(ms), 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, ms[1].SetDataAddr(ctx, "127.0.0.1:9999"))
	require.Eventually(t, func() bool {
		for _, m := range ms {
			for _, mem := range m.Members() {
				if mem.ID == "node-001" && (mem.Addr != "127.0.0.1:9999" || mem.Version != 2) {
					return false
				}
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
	require.ErrorIs(t, ms[1].SetDataAddr(ctx, string(make([]byte, MaxAddrLen+1))), ErrInvalidMeta)
}

// TestLifecycle: Start twice, use after Close, Close twice, Subscribe
// after Close; Close waits for and ends every goroutine (goleak checks).
func TestLifecycle(t *testing.T) {
	t.Parallel()
	nw := memnet.New(11)
	m, err := New(memOpts(nw, "life")...)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = m.Join(ctx, "127.0.0.1:1")
	require.ErrorIs(t, err, ErrNotStarted)
	require.NoError(t, m.Start(ctx))
	require.ErrorIs(t, m.Start(ctx), ErrStarted)
	sub := m.Subscribe()
	require.NoError(t, m.Close())
	require.NoError(t, m.Close())
	for range sub.Events() { // drained and closed by Close
	}
	_, ok := <-m.Subscribe().Events()
	require.False(t, ok)
	_, err = m.Join(ctx, "127.0.0.1:1")
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, m.Start(ctx), ErrClosed)
	require.ErrorIs(t, m.SetDataAddr(ctx, "x:1"), ErrClosed)
}

// TestLogsGoToSlog: memberlist's lines arrive in the given slog logger at
// their level; nothing is written anywhere else.
func TestLogsGoToSlog(t *testing.T) {
	t.Parallel()
	h := &recordingHandler{}
	nw := memnet.New(12)
	ms := memCluster(t, nw, 2, WithLogger(slog.New(h)))
	waitConverged(t, ms, idsOf(ms), 20*time.Second)
	require.Eventually(t, func() bool { return h.count(slog.LevelDebug) > 0 }, 10*time.Second, 20*time.Millisecond)
	b := &logBridge{m: ms[0]}
	_, _ = b.Write([]byte("[WARN] memberlist: something odd\n"))
	require.Positive(t, h.count(slog.LevelWarn))
}

type recordingHandler struct {
	mu     sync.Mutex
	levels map[slog.Level]int
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.levels == nil {
		h.levels = map[slog.Level]int{}
	}
	h.levels[r.Level]++
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }
func (h *recordingHandler) count(l slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.levels[l]
}

// TestScaleMemnet: many members in one process agree on one ring within a
// bounded time. 100 members in the long profile, 20 with -short.
func TestScaleMemnet(t *testing.T) {
	n, within := 100, 120*time.Second
	if testing.Short() {
		// 60 s: beside the rest of the race suite and three fuzz workers
		// on two cores, one member still held another suspect at 30 s
		// (alone it converges in under a second).
		n, within = 20, 60*time.Second
	}
	nw := memnet.New(13)
	// Slower timers than fastTimers: n memberlists share two cores under
	// -race here, and probes that miss their timeout only because the
	// machine is saturated would make members flap.
	tune := WithTuning(func(c *ConfigAlias) {
		fastTimers(c)
		c.ProbeInterval = 2 * time.Second
		c.ProbeTimeout = time.Second
		c.GossipInterval = 200 * time.Millisecond
		c.SuspicionMult = 5
		c.PushPullInterval = 30 * time.Second
		c.GossipToTheDeadTime = 30 * time.Second
	})
	begin := time.Now()
	ms := make([]*Membership, n)
	t.Cleanup(func() { closeAll(ms) })
	for i := range ms {
		opts := append(memOpts(nw, fmt.Sprintf("node-%03d", i)), tune)
		if i > 0 {
			// Seed with a few earlier members so no single member takes
			// every join's push-pull.
			opts = append(opts, WithSeeds(ms[i/2].Local().Gossip, ms[0].Local().Gossip))
		}
		m, err := New(opts...)
		require.NoError(t, err)
		require.NoError(t, m.Start(context.Background()))
		ms[i] = m
	}
	started := time.Since(begin)
	d := waitConverged(t, ms, idsOf(ms), within)
	r := mustRing(t)
	m, err := r.Build(toRing(ms[0].Members()))
	require.NoError(t, err)
	t.Logf("%d in-memory members: started in %v, converged on one ring (version %x) %v later", n, started, m.Version(), d)
}

// closeAll closes members concurrently: each Close waits for its leave to
// go out, so closing a hundred one by one takes minutes.
func closeAll(ms []*Membership) {
	var wg sync.WaitGroup
	for _, m := range ms {
		if m != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = m.Close()
			}()
		}
	}
	wg.Wait()
}

// TestQuickRestart: a member that crashes and comes back under the same ID
// at a new address before the others declared it dead is refused by
// memberlist at first (conflicting address); the re-join loop brings the new
// life in as soon as the old one is declared dead, instead of at the next
// push-pull.
func TestQuickRestart(t *testing.T) {
	t.Parallel()
	nw := memnet.New(14)
	ms := memCluster(t, nw, 4)
	waitConverged(t, ms, idsOf(ms), 20*time.Second)
	oldBoot := ms[3].Local().Boot
	nw.Isolate(ms[3].Local().Gossip)
	require.NoError(t, ms[3].Close())
	reborn := start(t, append(memOpts(nw, "node-003"), WithSeeds(ms[0].Local().Gossip),
		WithTuning(func(c *ConfigAlias) { fastTimers(c); c.PushPullInterval = time.Minute }))...)
	all := append(slices.Clone(ms[:3]), reborn)
	begin := time.Now()
	waitConverged(t, all, idsOf(ms), 20*time.Second)
	for _, m := range ms[:3] {
		for _, mem := range m.Members() {
			if mem.ID == "node-003" {
				require.NotEqual(t, oldBoot, mem.Boot, "the new life is listed")
			}
		}
	}
	t.Logf("quick restart accepted %v after the new life started", time.Since(begin))
}

// TestUnseenSeeds: a seed is seen when a member gossips from an address it
// names, given as an IP or as a host name the resolver knows; a seed at
// which nobody answers stays unseen, and so does every seed while the
// member list holds none of them.
func TestUnseenSeeds(t *testing.T) {
	t.Parallel()
	nw := memnet.New(8)
	ms := memCluster(t, nw, 2)
	host1, port1, err := net.SplitHostPort(ms[1].Local().Gossip)
	require.NoError(t, err)
	res := &fakeResolver{hosts: map[string][]string{"second.example": {host1}}}
	byName := net.JoinHostPort("second.example", port1)
	nobody := "127.0.0.9:1"
	late := start(t, append(memOpts(nw, "late"), WithSeeds(ms[0].Local().Gossip, byName, nobody), WithResolver(res))...)
	waitConverged(t, append(slices.Clone(ms), late), []string{"late", "node-000", "node-001"}, 20*time.Second)
	require.Equal(t, []string{nobody}, late.UnseenSeeds(late.Members()))
	require.Equal(t, []string{ms[0].Local().Gossip, byName, nobody}, late.UnseenSeeds(nil))
}

// TestSeedsSayWhyTheyDidNotAnswer: Seeds tells the seeds a live peer
// answers at from those nobody does, with the error of the last join of
// each, which the rejoin loop keeps up to date.
func TestSeedsSayWhyTheyDidNotAnswer(t *testing.T) {
	t.Parallel()
	nw := memnet.New(9)
	ms := memCluster(t, nw, 1)
	nobody := "127.0.0.9:1"
	alone := start(t, append(memOpts(nw, "alone"), WithSeeds(nobody))...)
	st := alone.Seeds()
	require.Len(t, st, 1)
	require.False(t, st[0].Answered)
	require.False(t, st[0].Self)
	require.Contains(t, st[0].Err, "unreachable", "the initial join's error, without memberlist's wrapping")
	require.NotContains(t, st[0].Err, "failed to join", "the seed is not named twice")

	late := start(t, append(memOpts(nw, "late"), WithSeeds(ms[0].Local().Gossip, nobody))...)
	waitConverged(t, []*Membership{ms[0], late}, []string{"late", "node-000"}, 20*time.Second)
	// Seeds are joined at once and Start returns once one answered, so
	// the other's error may be recorded just after.
	require.Eventually(t, func() bool { return late.Seeds()[1].Err != "" }, 20*time.Second, 10*time.Millisecond)
	st = late.Seeds()
	require.Equal(t, SeedStatus{Seed: ms[0].Local().Gossip, Answered: true}, st[0])
	require.Equal(t, nobody, st[1].Seed)
	require.False(t, st[1].Answered)

	require.NoError(t, ms[0].Close())
	require.Eventually(t, func() bool {
		st := late.Seeds()
		return !st[0].Answered && st[0].Err != ""
	}, 20*time.Second, 20*time.Millisecond, "the seed that left is tried again, and why it fails is kept")
}

// TestKeyRotation: a running cluster moves from one gossip key to another
// in three rounds (add, use, drop) without a member ever leaving; then a
// member with the new key joins and one with the old key cannot.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	nw := memnet.New(9)
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{3}, 32)
	ms := memCluster(t, nw, 3, WithSecretKey(oldKey))
	waitConverged(t, ms, idsOf(ms), 20*time.Second)
	for _, round := range [][][]byte{{oldKey, newKey}, {newKey, oldKey}, {newKey}} {
		for _, m := range ms {
			require.NoError(t, m.SetSecretKeys(round...))
		}
		waitConverged(t, ms, idsOf(ms), 20*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stale := start(t, append(memOpts(nw, "stale"), WithSecretKey(oldKey))...)
	_, err := stale.Join(ctx, ms[0].Local().Gossip)
	require.ErrorIs(t, err, ErrNoPeers)
	fresh := start(t, append(memOpts(nw, "fresh"), WithSecretKeys(newKey), WithSeeds(ms[2].Local().Gossip))...)
	waitConverged(t, append(slices.Clone(ms), fresh), []string{"fresh", "node-000", "node-001", "node-002"}, 20*time.Second)

	plain := start(t, memOpts(nw, "plain")...)
	require.ErrorIs(t, plain.SetSecretKeys(newKey), ErrInvalidOption)
	require.ErrorIs(t, ms[0].SetSecretKeys([]byte("short")), ErrInvalidOption)
}

// TestBadPacketsCannotFloodTheLog: memberlist logs one ERROR line per
// packet it cannot take, naming the sender; 1,000 of them from one host
// make one line (and others from another host one more), and the first
// line after the interval says how many were held back.
func TestBadPacketsCannotFloodTheLog(t *testing.T) {
	h := &recordingHandler{}
	m, err := New(WithID("x"), WithResource("test"), WithLogger(slog.New(h)))
	require.NoError(t, err)
	b := &logBridge{m: m}
	for i := range 1000 {
		_, _ = fmt.Fprintf(b, "[ERROR] memberlist: failed to receive: no installed keys could decrypt the message from=10.0.0.9:%d\n", 40000+i)
	}
	_, _ = b.Write([]byte("[ERROR] memberlist: failed to receive: no installed keys could decrypt the message from=10.0.0.7:1\n"))
	require.Equal(t, 2, h.count(slog.LevelError))
	ok, held := b.pass("failed to receive: no installed keys could decrypt the message from=10.0.0.9:1", time.Now().Add(logEvery))
	require.True(t, ok)
	require.Equal(t, 999, held)
	_, _ = b.Write([]byte("[ERROR] memberlist: a line that names no sender\n"))
	_, _ = b.Write([]byte("[ERROR] memberlist: a line that names no sender\n"))
	require.Equal(t, 4, h.count(slog.LevelError), "lines without a sender all pass")
}

// TestMemberlistLevels: memberlist's ERROR lines about a peer that went
// away, or about this member's own sockets closing, are logged at DEBUG;
// those about a peer's host that does not answer at WARN; every other
// keeps memberlist's level. The lines are memberlist v0.7.0's.
func TestMemberlistLevels(t *testing.T) {
	for _, c := range []struct {
		line string
		want slog.Level
	}{
		// A peer killed or leaving.
		{"[ERR] memberlist: Push/Pull with n2 failed: dial tcp 127.0.0.1:7502: connect: connection refused", slog.LevelDebug},
		{"[ERR] memberlist: Push/Pull with n2 failed: EOF", slog.LevelDebug},
		{"[ERR] memberlist: Failed fallback TCP ping: read tcp 127.0.0.1:40112->127.0.0.1:7502: read: connection reset by peer", slog.LevelDebug},
		{"[ERR] memberlist: Failed to send gossip to 127.0.0.1:7502: write udp 127.0.0.1:7501->127.0.0.1:7502: sendto: connection refused", slog.LevelDebug},
		{"[ERR] memberlist: Failed to send ack: write tcp 127.0.0.1:7501->127.0.0.1:40112: write: broken pipe from=127.0.0.1:40112", slog.LevelDebug},
		{"[ERR] memberlist: failed to receive: EOF from=127.0.0.1:40112", slog.LevelDebug},
		// This member closing.
		{"[ERR] memberlist: Failed fallback TCP ping: read tcp 127.0.0.1:40112->127.0.0.1:7502: use of closed network connection", slog.LevelDebug},
		{"[ERR] memberlist: Error reading UDP packet: read udp 127.0.0.1:7501: use of closed network connection", slog.LevelDebug},
		// A peer's host that does not answer.
		{"[ERR] memberlist: Failed fallback TCP ping: timeout 1s: read tcp 127.0.0.1:40112->10.0.0.2:7946: i/o timeout", slog.LevelWarn},
		{"[ERR] memberlist: Push/Pull with n2 failed: dial tcp 10.0.0.2:7946: connect: no route to host", slog.LevelWarn},
		// Real errors.
		{"[ERR] memberlist: failed to receive: no installed keys could decrypt the message from=10.0.0.9:4000", slog.LevelError},
		{"[ERR] memberlist: discarding packet with unacceptable label \"other\": from=10.0.0.9:4000", slog.LevelError},
		{"[ERR] memberlist: Too many pending push/pull requests", slog.LevelError},
		{"[ERR] memberlist: Error accepting TCP connection: accept tcp [::]:7946: accept4: too many open files", slog.LevelError},
		{"[ERR] memberlist: Conflicting address for n2. Mine: 10.0.0.2:7946 Theirs: 10.0.0.3:7946 Old state: 0", slog.LevelError},
		{"[ERROR] memberlist: Failed to encrypt local state: cipher: message authentication failed", slog.LevelError},
		// memberlist's other levels stand.
		{"[WARN] memberlist: Refuting a suspect message (from: n2)", slog.LevelWarn},
		{"[INFO] memberlist: Suspect n2 has failed, no acks received", slog.LevelInfo},
		{"[DEBUG] memberlist: failed to join 127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused", slog.LevelDebug},
		{"[WARN] memberlist: Got ping for unexpected node n9 from=10.0.0.9:4000: EOF", slog.LevelWarn},
	} {
		got, rest := logLevel(c.line)
		require.Equal(t, c.want, got, c.line)
		require.False(t, strings.HasPrefix(rest, "[") || strings.HasPrefix(rest, "memberlist:"), "the prefixes are cut: %q", rest)
	}
}

// TestSilentSeedsDoNotDelayTheJoin: a member whose first seeds accept no
// connection (as a cut-off host drops the SYN, so that each costs
// memberlist's TCP timeout) joins through the seed that answers without
// waiting them out. Tried one after another, the first silent seed alone
// would outlast Start's context.
func TestSilentSeedsDoNotDelayTheJoin(t *testing.T) {
	t.Parallel()
	nw := memnet.New(10)
	ms := memCluster(t, nw, 1)
	// Attached to the network, so a dial waits, but nobody accepts.
	silent := []string{nw.NewTransport().Addr(), nw.NewTransport().Addr()}
	slow := func(c *memberlist.Config) {
		fastTimers(c)
		c.TCPTimeout = time.Minute
	}
	late, err := New(append(memOpts(nw, "late"), WithTuning(slow), WithSeeds(append(silent, ms[0].Local().Gossip)...))...)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, late.Start(ctx), "Start waited for the silent seeds")
	t.Cleanup(func() { _ = late.Close() })
	waitConverged(t, []*Membership{ms[0], late}, []string{"late", "node-000"}, 20*time.Second)

	st := late.Seeds()
	require.Len(t, st, 3)
	require.Equal(t, SeedStatus{Seed: ms[0].Local().Gossip, Answered: true}, st[2])
	for _, s := range st[:2] {
		require.False(t, s.Answered, s.Seed)
	}
}
