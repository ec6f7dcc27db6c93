package ferotest

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/pkg/fero"
)

// DefaultWaitTimeout is how long a wait polls before it fails the test,
// unless [WithWaitTimeout] says otherwise. It bounds a failing test, not
// a passing one: a wait returns as soon as its condition holds.
const DefaultWaitTimeout = 30 * time.Second

// pollInterval is how often a wait looks at the nodes again, and
// statusTimeout how long it gives one node to report its status.
const (
	pollInterval  = 20 * time.Millisecond
	statusTimeout = 2 * time.Second
)

// Option configures a [Cluster].
type Option func(*config)

type config struct {
	servers  int
	nodeOpts []fero.NodeOption
	wait     time.Duration
	level    slog.Level
}

// WithServers sets how many servers [NewCluster] starts (default 3, the
// fewest that keep a majority when one is lost); 0 starts none, for a
// test that adds every node itself with [Cluster.Add].
func WithServers(n int) Option { return func(c *config) { c.servers = n } }

// WithNodeOptions gives every node of the cluster opts, after the kit's
// defaults and before the options of [Cluster.Add]: handlers, a Connect
// store, ring settings. Repeated, it appends.
func WithNodeOptions(opts ...fero.NodeOption) Option {
	return func(c *config) { c.nodeOpts = append(c.nodeOpts, opts...) }
}

// WithWaitTimeout sets how long each wait, and each node's Open, may take
// before it fails the test (default [DefaultWaitTimeout]).
func WithWaitTimeout(d time.Duration) Option { return func(c *config) { c.wait = d } }

// WithLogLevel sets the level from which the nodes' logs are written to
// the test's log (default slog.LevelWarn). A test that gives its own
// fero.WithLogger replaces the kit's logger.
func WithLogLevel(l slog.Level) Option { return func(c *config) { c.level = l } }

// Cluster is a set of nodes of one resource running in the test's
// process; see the package comment for what they run on and what the
// kit can do to them. Make one with [NewCluster].
type Cluster struct {
	tb       testing.TB
	resource string
	cfg      config
	nw       *memnet.Network
	data     *dataNet
	logger   *slog.Logger

	mu    sync.Mutex
	nodes []*member // open, in the order they were added
	added int       // nodes ever added, for default IDs
}

// member is one open node and what the kit keeps for it.
type member struct {
	r    *fero.Resource
	tr   *memnet.Transport
	ep   *endpoint         // the node on the data plane
	opts []fero.DialOption // those of the node's that a Remote takes, for the kit's status connection
	// remote is the kit's status connection to the node, dialed on first
	// use; only the test's goroutine touches it.
	remote *fero.Remote
}

// NewCluster starts a cluster of the named resource: the servers of
// [WithServers] (three by default), each opened with the kit's defaults
// and [WithNodeOptions], and waits until they have settled
// ([Cluster.WaitSettled]). Every node, these and the ones added later, is
// closed when the test ends. NewCluster fails the test if a node does not
// open or the cluster does not settle.
func NewCluster(tb testing.TB, resource string, opts ...Option) *Cluster {
	tb.Helper()
	cfg := config{servers: 3, wait: DefaultWaitTimeout, level: slog.LevelWarn}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	w := &logWriter{tb: tb}
	c := &Cluster{
		tb: tb, resource: resource, cfg: cfg, nw: memnet.New(1), data: newDataNet(),
		logger: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: cfg.level})),
	}
	// Cleanups run last first: the nodes close, logging as they go, and
	// then the log goes quiet (memberlist may log once more after Close).
	tb.Cleanup(func() { w.done.Store(true) })
	tb.Cleanup(c.closeAll)
	for range cfg.servers {
		c.Add()
	}
	if cfg.servers > 0 {
		c.WaitSettled()
	}
	return c
}

// Add opens one more node of the cluster's resource with the kit's
// defaults, then the options of [WithNodeOptions], then opts (give
// fero.Client() for a client node), and returns it once it listens and
// gossips: it does not wait for the node to join (see
// [Cluster.WaitSettled]). The node is seeded with every open node, and
// closed when the test ends. During a partition a new node is in the
// group of the nodes no group lists. Add fails the test if the node does
// not open.
func (c *Cluster) Add(opts ...fero.NodeOption) *fero.Resource {
	c.tb.Helper()
	c.mu.Lock()
	c.added++
	id := fmt.Sprintf("node-%d", c.added)
	var seeds []string
	for _, m := range c.nodes {
		seeds = append(seeds, m.tr.Addr())
	}
	c.mu.Unlock()

	tr := c.nw.NewTransport()
	all := []fero.NodeOption{
		fero.WithID(id), fero.WithLogger(c.logger),
		fero.WithPreset(fero.PresetLocal), fero.WithoutMulticast(),
		fero.WithGossipTransport(tr), fero.WithGossipTuning(gossipTimings), fero.WithLeaveTimeout(time.Second),
		fero.WithPartitions(32), fero.WithSyncTimeout(500 * time.Millisecond), fero.WithTick(20 * time.Millisecond),
	}
	if len(seeds) > 0 {
		all = append(all, fero.WithSeeds(seeds...))
	}
	all = append(all, c.cfg.nodeOpts...)
	all = append(all, opts...)
	// The kit's dialer comes last, so the kit owns the node's data links.
	// The status connection (member.opts) goes without it: faults never
	// hide a node from the waits.
	ep := c.data.add(id)
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.wait)
	defer cancel()
	r, err := fero.Open(ctx, c.resource, append(slices.Clip(all), fero.WithDialer(c.data.dialer(ep)))...)
	if err != nil {
		_ = tr.Shutdown()
		c.data.remove(ep)
		c.tb.Fatalf("ferotest: open a node of %q: %v", c.resource, err)
	}
	c.data.register(ep, r.ID(), r.Addr())
	c.mu.Lock()
	c.nodes = append(c.nodes, &member{r: r, tr: tr, ep: ep, opts: dialable(all)})
	c.mu.Unlock()
	return r
}

// gossipTimings tunes memberlist for clusters in one process: failures
// are detected within a few seconds, but not so fast that a -race run on
// a loaded two-core machine suspects live members. A suspect member is
// declared dead after 2s once others confirm the suspicion, and after 4s
// at most (memberlist's default is six times the 2s): a partition
// is seen in seconds however few nodes are on a side to confirm it, and a
// live member still has 2s to refute a suspicion.
func gossipTimings(c *memberlist.Config) {
	c.ProbeInterval = 500 * time.Millisecond
	c.ProbeTimeout = 400 * time.Millisecond
	c.GossipInterval = 50 * time.Millisecond
	c.PushPullInterval = 2 * time.Second
	c.SuspicionMult = 4
	c.SuspicionMaxTimeoutMult = 2
	c.TCPTimeout = 2 * time.Second
}

// Remove closes r, one of the cluster's open nodes, and returns Close's
// error. The node leaves the cluster gracefully; as a server, it stays in
// the cluster's configuration (it counts toward the majority a write at
// fero.Majority needs) until a node forgets it ([fero.Resource.Forget]).
// Remove fails the test if r is not an open node of this cluster.
func (c *Cluster) Remove(r *fero.Resource) error {
	c.tb.Helper()
	c.mu.Lock()
	i := slices.IndexFunc(c.nodes, func(m *member) bool { return m.r == r })
	if i < 0 {
		c.mu.Unlock()
		c.tb.Fatalf("ferotest: Remove: %s is not an open node of this cluster", r.ID())
	}
	m := c.nodes[i]
	c.nodes = slices.Delete(c.nodes, i, i+1)
	c.mu.Unlock()
	err := m.close()
	c.data.remove(m.ep)
	return err
}

func (m *member) close() error {
	if m.remote != nil {
		_ = m.remote.Close()
		m.remote = nil
	}
	err := m.r.Close()
	_ = m.tr.Shutdown()
	return err
}

// closeAll closes every open node, the newest first.
func (c *Cluster) closeAll() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = nil
	c.mu.Unlock()
	for _, m := range slices.Backward(nodes) {
		if err := m.close(); err != nil {
			c.tb.Errorf("ferotest: close %s: %v", m.r.ID(), err)
		}
	}
	c.data.close()
}

// Nodes returns the open nodes, servers and clients, in the order they
// were added.
func (c *Cluster) Nodes() []*fero.Resource {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*fero.Resource, len(c.nodes))
	for i, m := range c.nodes {
		out[i] = m.r
	}
	return out
}

// Node returns the i-th open node, Nodes()[i]; it panics if there is no
// such node.
func (c *Cluster) Node(i int) *fero.Resource { return c.Nodes()[i] }

// Servers returns the open server nodes, in the order they were added.
func (c *Cluster) Servers() []*fero.Resource {
	return slices.DeleteFunc(c.Nodes(), (*fero.Resource).IsClient)
}

// WaitSettled waits until the cluster has settled: every open node sees
// every other alive and routes by the same partition map, made of the
// open servers; every
// server's vote counts and its configuration lists every open server; and
// every partition has an owner that has finished syncing it and whose
// epoch every node follows. Writes made after it are not refused for an
// owner still syncing or an epoch that changed. It fails the test if the
// cluster has not settled within the wait timeout, which happens when the
// open servers hold no majority of the cluster's configuration.
func (c *Cluster) WaitSettled() {
	c.tb.Helper()
	c.poll("settle", func(ctx context.Context) string {
		nodes := c.members()
		vs, why := c.statuses(ctx, nodes)
		if why != "" {
			return why
		}
		return agreed(vs, nodeIDs(nodes), serverIDs(nodes), true)
	})
}

// WaitConverged waits until every open node holds the same data: the same
// keys and values, by [fero.Resource.Digest]. It fails the test if they
// differ after the wait timeout. Call it once the writes it should see
// have returned (those at fero.Ack may still be on their way to the other
// copies: it waits for them), not while writes are still being made.
func (c *Cluster) WaitConverged() {
	c.tb.Helper()
	c.poll("converge", func(context.Context) string {
		nodes := c.members()
		if len(nodes) == 0 {
			return ""
		}
		ref := nodes[0].r
		for _, m := range nodes[1:] {
			if d := m.r.Digest(); d != ref.Digest() {
				return fmt.Sprintf("%s holds %d keys (digest %016x), %s %d keys (digest %016x)",
					ref.ID(), ref.Len(), ref.Digest(), m.r.ID(), m.r.Len(), d)
			}
		}
		return ""
	})
}

// Partition splits the cluster: nodes in the same group reach each
// other, and nodes in different groups do not, by gossip or by the data
// plane; the open nodes no group lists form one more group together, so
// Partition([]*fero.Resource{n}) isolates n. It replaces any earlier
// partition or cut ([Cluster.Cut]). Gossip between groups is lost, data
// connections between them are closed and new ones refused: the package
// comment says what follows.
//
// Partition returns once every node sees exactly the nodes of its group
// alive and routes by their map (each side has declared the other dead),
// and every group that holds a
// majority of the cluster's configuration has settled as
// [Cluster.WaitSettled] defines, so that it accepts writes at once while
// the other groups refuse them. It fails the test if a group lists a node
// that is not an open node of this cluster, or lists one twice, or if the
// groups have not split within the wait timeout.
func (c *Cluster) Partition(groups ...[]*fero.Resource) {
	c.tb.Helper()
	split := c.cut("Partition", groups)
	c.poll("split", func(ctx context.Context) string {
		for _, g := range split {
			if len(g) == 0 {
				continue
			}
			vs, why := c.statuses(ctx, g)
			if why != "" {
				return why
			}
			servers := serverIDs(g)
			if why := agreed(vs, nodeIDs(g), servers, hasMajority(vs, servers)); why != "" {
				return why
			}
		}
		return ""
	})
}

// Cut cuts the cluster into groups as [Cluster.Partition] does, and
// returns at once, before any node has noticed. Until each side declares
// the other dead (a few seconds with the kit's timings) the nodes route by
// the old map, and what they send across the cut is lost: a request or a
// write for a key whose owner is on the other side fails, and a commit
// does not reach the copies there. Cut is for a test of those seconds;
// Partition with the same groups then waits for the split, and
// [Cluster.Heal] joins the cluster again. It fails the test as Partition
// does for groups it cannot make.
func (c *Cluster) Cut(groups ...[]*fero.Resource) {
	c.tb.Helper()
	c.cut("Cut", groups)
}

// cut partitions gossip and the data plane into groups and returns the
// groups' members, with one more group of the nodes no group lists
// (perhaps empty).
func (c *Cluster) cut(what string, groups [][]*fero.Resource) [][]*member {
	c.tb.Helper()
	of := c.byResource()
	var split [][]*member
	var addrs [][]string
	group := map[*endpoint]int{}
	seen := map[*fero.Resource]bool{}
	for i, g := range groups {
		var ms []*member
		var as []string
		for _, r := range g {
			m, ok := of[r]
			if !ok || seen[r] {
				c.tb.Fatalf("ferotest: %s: %s is not an open node of this cluster, or is in two groups", what, r.ID())
			}
			seen[r] = true
			ms = append(ms, m)
			as = append(as, m.tr.Addr())
			group[m.ep] = i + 1
		}
		split = append(split, ms)
		addrs = append(addrs, as)
	}
	var rest []*member
	for _, m := range c.members() {
		if !seen[m.r] {
			rest = append(rest, m)
		}
	}
	split = append(split, rest)
	c.nw.Partition(addrs...)
	c.data.partition(group)
	return split
}

// Heal restores every link, gossip and data, and waits until the whole
// cluster has settled again ([Cluster.WaitSettled]). It leaves the delays
// of [Cluster.Slow] as they are.
func (c *Cluster) Heal() {
	c.tb.Helper()
	c.nw.Heal()
	c.data.partition(nil)
	c.WaitSettled()
}

// Slow adds the latency d to the data links of nodes: every byte one of
// them sends to another node, or receives from one, arrives d later (on a
// link between two slowed nodes, later by the sum of their delays), over
// the connections open now and those dialed later. Bytes keep their
// order, and a link holds at most 1 MiB each way in transit: a node that
// sends more waits, as on a full socket. Slow(0, nodes...) restores the
// nodes' links; bytes already in transit keep their delay. Gossip is not
// slowed: the in-memory network delivers at once, so membership is as
// quick as ever. Slow fails the test if d is negative or a node is not an
// open node of this cluster.
func (c *Cluster) Slow(d time.Duration, nodes ...*fero.Resource) {
	c.tb.Helper()
	if d < 0 {
		c.tb.Fatalf("ferotest: Slow: negative delay %v", d)
	}
	of := c.byResource()
	for _, r := range nodes {
		m, ok := of[r]
		if !ok {
			c.tb.Fatalf("ferotest: Slow: %s is not an open node of this cluster", r.ID())
		}
		c.data.slow(m.ep, d)
	}
}

// byResource returns the open nodes by their resource.
func (c *Cluster) byResource() map[*fero.Resource]*member {
	c.mu.Lock()
	defer c.mu.Unlock()
	of := make(map[*fero.Resource]*member, len(c.nodes))
	for _, m := range c.nodes {
		of[m.r] = m
	}
	return of
}

// members returns the open nodes.
func (c *Cluster) members() []*member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// poll checks cond every pollInterval until it returns "" and fails the
// test with its last answer, the reason it did not hold, once the wait
// timeout has passed.
func (c *Cluster) poll(what string, cond func(ctx context.Context) string) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.wait)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		why := cond(ctx)
		if why == "" {
			return
		}
		select {
		case <-ctx.Done():
			c.tb.Fatalf("ferotest: %s: not done after %v: %s", what, c.cfg.wait, why)
		case <-tick.C:
		}
	}
}

// view is a node's status, as a wait reads it.
type view struct {
	id     string
	client bool
	st     *fero.NodeStatus
}

// statuses reads the status of each node, or says which one did not
// answer.
func (c *Cluster) statuses(ctx context.Context, nodes []*member) ([]view, string) {
	vs := make([]view, 0, len(nodes))
	for _, m := range nodes {
		st, err := m.status(ctx)
		if err != nil {
			return nil, fmt.Sprintf("%s: status: %v", m.r.ID(), err)
		}
		vs = append(vs, view{id: m.r.ID(), client: m.r.IsClient(), st: st})
	}
	return vs, ""
}

// dialable returns those of a node's options that a Remote takes too
// (those that are a fero.Option: the cluster secret, a token, TLS, the
// transport's settings), for the kit's status connection. An option
// bundled with fero.Options is a NodeOption only, so it is left out:
// bundle credentials with fero.WithOptions.
func dialable(opts []fero.NodeOption) []fero.DialOption {
	var out []fero.DialOption
	for _, o := range opts {
		if d, ok := o.(fero.DialOption); ok {
			out = append(out, d)
		}
	}
	return out
}

// status asks the node for its status, with every partition's detail,
// over the kit's connection to it, which it dials with the node's own
// options that a Remote takes (so with its cluster secret, token and
// TLS, if it has them).
func (m *member) status(ctx context.Context) (*fero.NodeStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	if m.remote == nil {
		rem, err := fero.Dial(ctx, m.r.Addr(), m.opts...)
		if err != nil {
			return nil, err
		}
		m.remote = rem
	}
	st, err := m.remote.StatusWithPartitions(ctx)
	if err != nil {
		_ = m.remote.Close()
		m.remote = nil
	}
	return st, err
}

func nodeIDs(nodes []*member) []string {
	var ids []string
	for _, m := range nodes {
		ids = append(ids, m.r.ID())
	}
	slices.Sort(ids)
	return ids
}

func serverIDs(nodes []*member) []string {
	var ids []string
	for _, m := range nodes {
		if !m.r.IsClient() {
			ids = append(ids, m.r.ID())
		}
	}
	slices.Sort(ids)
	return ids
}

// hasMajority reports whether servers are a majority of the cluster's
// configuration as the first of them knows it.
func hasMajority(vs []view, servers []string) bool {
	for _, v := range vs {
		if v.client {
			continue
		}
		n := 0
		for _, e := range v.st.Configuration {
			if !e.Forgotten {
				n++
			}
		}
		return len(servers) > n/2
	}
	return false
}

// agreed says why the nodes of vs (ids, sorted), whose servers are
// servers, do not yet act as one cluster, or returns "". They must each
// see exactly those nodes alive, route by one map, and have handed that
// map to their engines. With settled, each server's vote must count and its
// configuration list every server, no partition may be syncing, and
// every node must have accepted the same epoch of every partition.
func agreed(vs []view, ids, servers []string, settled bool) string {
	if len(vs) == 0 {
		return ""
	}
	ref := vs[0]
	taken := 0
	for _, v := range vs {
		var live []string
		for _, mem := range v.st.Members {
			live = append(live, mem.ID)
		}
		slices.Sort(live)
		if !slices.Equal(live, ids) {
			return fmt.Sprintf("%s sees %v alive, want %v", v.id, live, ids)
		}
		if v.st.MapVersion != ref.st.MapVersion {
			return fmt.Sprintf("%s routes by map %016x, %s by %016x", ref.id, ref.st.MapVersion, v.id, v.st.MapVersion)
		}
		if !v.client {
			taken += v.st.Roles["owner"] + v.st.Roles["syncing"]
		}
	}
	// Each partition has one owner by the map, which owns it or syncs it
	// once its engine has taken the map.
	if len(servers) > 0 && taken != ref.st.Partitions {
		return fmt.Sprintf("the servers' engines own or sync %d of %d partitions: a map is not taken yet", taken, ref.st.Partitions)
	}
	if !settled {
		return ""
	}
	for _, v := range vs {
		if v.client {
			continue
		}
		if !v.st.Voting {
			return v.id + "'s vote does not count yet: it is catching up"
		}
		inConfig := map[string]bool{}
		for _, e := range v.st.Configuration {
			if !e.Forgotten {
				inConfig[e.ID] = true
			}
		}
		for _, s := range servers {
			if !inConfig[s] {
				return fmt.Sprintf("%s's configuration %v lacks %s", v.id, slices.Sorted(maps.Keys(inConfig)), s)
			}
		}
	}
	accepted := map[int]string{}
	for _, p := range ref.st.Parts {
		accepted[p.Partition] = p.Accepted
	}
	for _, v := range vs {
		if len(v.st.Syncing) > 0 {
			return fmt.Sprintf("%s is still syncing %d partitions (partition %d: %s)",
				v.id, len(v.st.Syncing), v.st.Syncing[0].Partition, v.st.Syncing[0].Why)
		}
		if len(v.st.Parts) != len(ref.st.Parts) {
			return fmt.Sprintf("%s reports %d partitions, %s %d", ref.id, len(ref.st.Parts), v.id, len(v.st.Parts))
		}
		for _, p := range v.st.Parts {
			if a := accepted[p.Partition]; p.Accepted != a {
				return fmt.Sprintf("partition %d: %s has accepted epoch %s, %s %s", p.Partition, ref.id, a, v.id, p.Accepted)
			}
		}
	}
	return ""
}

// logWriter writes the nodes' log records to the test's log until the
// test ends.
type logWriter struct {
	tb   testing.TB
	done atomic.Bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.tb.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}
