package fero

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/storage"
	"github.com/fero-go/fero/internal/transport"
)

// Options are typed by what reads them, so that the compiler refuses an
// option given where it would do nothing (WithDataDir to Dial, say). The
// package comment lists every option with its kind, its default and the
// original library's constant.

// NodeOption configures a node when it opens: what [Open] and [OpenMap]
// take, for a server or a [Client] node. Every [Option] is a NodeOption.
// Some apply to one kind of node only; each says so, and what the other
// kind does with it (Open refuses some, such as [WithDataDir] on a client
// node; others, such as [WithHandler] there, do nothing). Only this
// package makes NodeOptions.
type NodeOption interface{ applyNode(*config) }

// DialOption configures a [Remote] when [Dial] opens it. Every [Option]
// is a DialOption. Only this package makes DialOptions.
type DialOption interface{ applyDial(*config) }

// Option is a setting that both a node and a [Remote] read, such as a
// credential, the transport's TLS and limits, tracing, and the call
// interceptors: one value can be given to [Open], [OpenMap] and [Dial]
// alike. A slice does not convert (a []Option is not a []NodeOption):
// append its options to each list one by one, or keep the lists apart.
type Option interface {
	NodeOption
	DialOption
}

// nodeOption, dialOption and option are the three kinds' implementations:
// one function applied to the config, whoever reads it.
type (
	nodeOption func(*config)
	dialOption func(*config)
	option     func(*config)
)

func (f nodeOption) applyNode(c *config) { f(c) }
func (f dialOption) applyDial(c *config) { f(c) }
func (f option) applyNode(c *config)     { f(c) }
func (f option) applyDial(c *config)     { f(c) }

// DefaultConnectWait is how long a node with a Connect store waits to find
// a cluster before it restores the store's state (the original's
// connect.wait).
const DefaultConnectWait = time.Second

type config struct {
	client  bool
	id      string
	listen  string
	logger  *slog.Logger
	handler Handler
	// concurrent: the verbs that run without their key's turn (Concurrent).
	concurrent map[string]bool
	// noRetry: WithoutRetry.
	noRetry bool
	// interceptors wrap handler; callInterceptors wrap Call
	// (WithInterceptors, WithCallInterceptors).
	interceptors     []Interceptor
	callInterceptors []CallInterceptor
	// streamInterceptors wrap Stream (WithStreamInterceptors).
	streamInterceptors []StreamInterceptor
	retry              *RetryPolicy  // WithCallRetry
	callTimeout        time.Duration // WithCallTimeout
	store              Store
	replayAll          bool
	connectWait        time.Duration
	seedWait           time.Duration // WithRequireSeeds; 0: off
	expect             int           // WithExpect; 0: off
	wait               Wait
	maxRequests        int
	tick               time.Duration
	secrets            [][]byte
	tokens             [][]byte // accepted from clients (WithClientTokens)
	token              []byte   // proved by Dial and an attached client (WithToken)
	attach             []string // servers' data addresses a client node attaches to (WithAttach)
	dataDir            string
	fsync              storage.SyncPolicy
	metrics            prometheus.Registerer // WithMetrics
	tracer             trace.Tracer          // WithTracerProvider
	noGCTuning         bool                  // WithoutGCTuning

	membership []membership.Option
	ring       []ring.Option
	engine     []partition.Option
	transport  []transport.Option
}

func defaultConfig() *config { return &config{connectWait: DefaultConnectWait, wait: Ack} }

// newNodeConfig applies a node's options (Open); nil options are skipped.
func newNodeConfig(opts []NodeOption) *config {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.applyNode(c)
		}
	}
	return c
}

// newDialConfig applies a Remote's options (Dial); nil options are
// skipped.
func newDialConfig(opts []DialOption) *config {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.applyDial(c)
		}
	}
	return c
}

// Options combines opts into one NodeOption, applied in order as if each
// had been passed to [Open] itself: code that hands out a single option,
// as ferogen's Register functions do, can configure several things with
// it. Nil options are skipped. [WithOptions] combines [Option]s into an
// Option, which Dial takes too, and [DialOptions] DialOptions.
func Options(opts ...NodeOption) NodeOption {
	return nodeOption(func(c *config) {
		for _, o := range opts {
			if o != nil {
				o.applyNode(c)
			}
		}
	})
}

// DialOptions combines opts into one DialOption, applied in order as if
// each had been passed to [Dial] itself. Nil options are skipped.
func DialOptions(opts ...DialOption) DialOption {
	return dialOption(func(c *config) {
		for _, o := range opts {
			if o != nil {
				o.applyDial(c)
			}
		}
	})
}

// Client makes this node a client: it owns no partition, receives every
// commit into its local copy, and sends writes and requests straight to
// the owners (the original's client: true).
func Client() NodeOption { return nodeOption(func(c *config) { c.client = true }) }

// WithID sets the node's stable identity (default: random). Two live nodes
// must not share one.
func WithID(id string) NodeOption { return nodeOption(func(c *config) { c.id = id }) }

// WithListen sets the data-plane address, host:port (default
// "127.0.0.1:0", a free port on loopback). Peers reach the node at the
// address it listens on, so on a real network give the host's address.
func WithListen(addr string) NodeOption { return nodeOption(func(c *config) { c.listen = addr }) }

// WithLogger sends the node's logs to l (default: none).
func WithLogger(l *slog.Logger) NodeOption { return nodeOption(func(c *config) { c.logger = l }) }

// WithHandler answers the requests sent to the partitions this node owns
// (the original's from function). Without one the node answers ADD, UPDATE
// and REMOVE (see [Request.Next]) and refuses every other verb. A [Client]
// node owns no partition: there it does nothing, as do [Concurrent] and
// [WithInterceptors].
func WithHandler(h Handler) NodeOption { return nodeOption(func(c *config) { c.handler = h }) }

// WithoutRetry turns exactly-once retries off (docs/engine.md, rule 16).
// By default every write a caller waits for (Update, Add, Remove, Push,
// Set and the typed map's, on a Resource or a Remote) and every Call
// carries a writer ID and a sequence number; when an attempt fails
// with an indefinite error (the owner died or lost the partition with it
// in flight) it is made again, as the same write, at the key's owner by
// then, until it succeeds, fails definite, or the caller's deadline (the
// write timeout, without one) passes; the owner commits it once and
// answers a retry with the first outcome, a verb's first reply included.
// Without it, an indefinite error reaches the caller at once, as it did
// before, and a retry the caller makes may apply twice. Writes that wait
// for nothing (NoWait), Patch, SetAsync and CallAsync carry no writer ID
// either way.
func WithoutRetry() Option { return option(func(c *config) { c.noRetry = true }) }

// Concurrent lets the handler's verbs named run without taking their key's
// turn (see [Handler]): many at once for one key, beside its writes. Give
// it to verbs that only read: a concurrent verb's writes are proposed one
// by one as it makes them, unfenced, as writes from outside a handler are,
// and may land on a value that changed since it was read. GET never takes
// a turn. Several Concurrent options add up.
func Concurrent(verbs ...string) NodeOption {
	return nodeOption(func(c *config) {
		if c.concurrent == nil {
			c.concurrent = map[string]bool{}
		}
		for _, v := range verbs {
			c.concurrent[v] = true
		}
	})
}

// WithTracerProvider traces this node's work with OpenTelemetry
// (docs/operations.md, "Tracing"): a span for each write (Update, Add,
// Remove, Set) and each Call and Send its callers make, one for each
// request the node forwards to a key's owner, and one for each request it
// handles as the owner, with the W3C trace context carried on the wire
// so that one request's spans on every node form one trace. A handler's
// context carries the owner's span: spans it starts are its children.
// The provider's sampler decides which traces are recorded. Without this
// option nothing is traced and tracing costs nothing. With [Dial], the
// Remote's calls and writes are spans too.
//
// SetAsync and CallAsync are not traced on the caller (a span per
// pipelined write would cost more than the write); the owner still
// traces what they send it.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return option(func(c *config) {
		c.tracer = nil
		if tp != nil {
			c.tracer = tp.Tracer(protocol.TracerName, trace.WithInstrumentationVersion(moduleVersion()))
		}
	})
}

// WithDefaultWait sets what writes wait for when the call does not say
// (default [Ack]).
func WithDefaultWait(w Wait) NodeOption { return nodeOption(func(c *config) { c.wait = w }) }

// WithMaxRequests bounds the handlers running at once on this node; beyond
// it requests are refused with CodeResourceExhausted (default 10,000).
func WithMaxRequests(n int) NodeOption { return nodeOption(func(c *config) { c.maxRequests = n }) }

// WithTick sets how often the partition engine's timers are driven
// (default 100ms).
func WithTick(d time.Duration) NodeOption { return nodeOption(func(c *config) { c.tick = d }) }

// WithConnect restores the resource's initial state from store when this
// node finds no other server within the connect wait, and replays changes
// into store as they are applied (the original's connect). See [Store].
func WithConnect(store Store) NodeOption { return nodeOption(func(c *config) { c.store = store }) }

// WithConnectWait sets how long Open waits to find a cluster before it
// restores from the Connect store (default [DefaultConnectWait], the
// original's connect.wait). It is used only with [WithConnect].
func WithConnectWait(d time.Duration) NodeOption {
	return nodeOption(func(c *config) { c.connectWait = d })
}

// WithReplayAll replays every change this node applies into the Connect
// store, not only the ones it commits as owner: for a store local to each
// node, such as a file. See [Store].
func WithReplayAll() NodeOption { return nodeOption(func(c *config) { c.replayAll = true }) }

// Discovery and gossip.

// Preset picks the gossip timing profile.
type Preset uint8

// Gossip timing profiles. Their values are the membership package's, so
// that a Preset converts to its one as it is (TestPublicTypes).
const (
	// PresetLAN: probe every second, suspicion multiplier 4 (the default).
	PresetLAN Preset = iota + 1
	// PresetLocal: loopback timings, for one machine and tests.
	PresetLocal
)

// MulticastConfig sets UDP multicast discovery: group, TTL, jitter and
// interval (the original's udp.ip, udp.port, udp.ttl, udp.jitter). A zero
// field takes its default.
type MulticastConfig struct {
	// Group is the multicast group host:port (default 224.0.0.251:5354).
	Group string
	// TTL is the multicast TTL (default 128).
	TTL int
	// Jitter is the most a node waits before its first announcement
	// (default 2s).
	Jitter time.Duration
	// Interval is how often a node that has no peers announces again
	// (default 5s).
	Interval time.Duration
}

// WithPreset picks the gossip timing profile (default [PresetLAN]).
func WithPreset(p Preset) NodeOption {
	return nodeOption(func(c *config) { c.membership = append(c.membership, membership.WithPreset(membership.Preset(p))) })
}

// WithBind sets the gossip address, host:port (default "0.0.0.0:0" with
// PresetLAN, "127.0.0.1:0" with PresetLocal).
func WithBind(hostport string) NodeOption {
	return nodeOption(func(c *config) { c.membership = append(c.membership, membership.WithBind(hostport)) })
}

// WithSeeds adds gossip addresses, host:port, to join (the original's
// hosts). They are retried in the background while the node runs.
func WithSeeds(addrs ...string) NodeOption {
	return nodeOption(func(c *config) { c.membership = append(c.membership, membership.WithSeeds(addrs...)) })
}

// WithRequireSeeds makes Open fail unless a node answers at one of the
// seeds ([WithSeeds]) within wait. Without it, a node whose seeds do not
// answer opens all the same and keeps trying them, joined to no cluster
// and serving no writes meanwhile (it logs a warning): a node given seeds
// never founds a cluster before it has seen them.
func WithRequireSeeds(wait time.Duration) NodeOption {
	return nodeOption(func(c *config) { c.seedWait = wait })
}

// WithExpect says how many servers form a new cluster (Consul's
// bootstrap_expect): a server that has not met a formed cluster forms one
// only once it sees n servers (itself included) that see each other,
// whatever found them (seeds, DNS, multicast, a port range), and until
// then takes no writes (each refused at once with
// code Unavailable, "cluster not formed: …"), is not ready, and says at
// WARN every few seconds what it sees and which lookups failed. Give every
// server of a new cluster the same n: the number you start, or at least a
// majority of it, so that two groups cannot each form one. A server that
// has met its cluster (its data directory remembers it) rejoins without
// it, and joining a formed cluster never needs n servers. Without it, a
// server given seeds forms a cluster once it sees every seed, and one
// given none founds a cluster alone: with DNS discovery, one whose
// lookups fail does. Open refuses it on a [Client] node.
func WithExpect(n int) NodeOption { return nodeOption(func(c *config) { c.expect = n }) }

// WithPortRange makes server nodes take a gossip port in [start, end] and
// look for peers on every port of the range (the original's ports), on the
// hosts given with WithScanHosts (default the loopback host).
func WithPortRange(start, end int) NodeOption {
	return nodeOption(func(c *config) { c.membership = append(c.membership, membership.WithPortRange(start, end)) })
}

// WithScanHosts sets the hosts whose port range is scanned for peers.
func WithScanHosts(hosts ...string) NodeOption {
	return nodeOption(func(c *config) { c.membership = append(c.membership, membership.WithScanHosts(hosts...)) })
}

// WithMulticast turns on UDP multicast discovery with the given settings
// (zero fields take their defaults). It is on by default with PresetLAN.
func WithMulticast(mc MulticastConfig) NodeOption {
	return nodeOption(func(c *config) {
		c.membership = append(c.membership, membership.WithMulticast(membership.MulticastConfig(mc)))
	})
}

// WithoutMulticast turns multicast discovery off (the original's udp:
// false, or udp.skip).
func WithoutMulticast() NodeOption {
	return nodeOption(func(c *config) { c.membership = append(c.membership, membership.WithoutMulticast()) })
}

// WithDNS discovers peers through DNS: a name starting with "_" as SRV
// records, any other as A/AAAA records joined at port.
func WithDNS(name string, port int) NodeOption {
	return nodeOption(func(c *config) { c.membership = append(c.membership, membership.WithDNS(name, port)) })
}

// WithDNSServer sends the lookups of WithDNS to the DNS server at addr
// (host:port, over UDP and then TCP as the answer needs) instead of the
// system's resolver: a Consul agent's DNS port, or a test's server.
func WithDNSServer(addr string) NodeOption {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	return nodeOption(func(c *config) { c.membership = append(c.membership, membership.WithResolver(r)) })
}

// WithSecretKey encrypts gossip with an AES key of 16, 24 or 32 bytes;
// every member needs the same key.
func WithSecretKey(key []byte) NodeOption {
	return nodeOption(func(c *config) { c.membership = append(c.membership, membership.WithSecretKey(key)) })
}

// WithClusterSecret makes the cluster authenticate its members: every node
// proves on each data connection that it knows a cluster secret before a
// peer takes its messages, and gossip is encrypted and authenticated with
// a key derived from the secret (it replaces [WithSecretKey]). The first
// secret proves this node; a peer proving any of them is accepted, so a
// secret can rotate on a running cluster ([Resource.SetClusterSecret]).
// Each secret is at least 16 bytes; draw it at random (32 bytes from
// crypto/rand, or `fero secret`) and give every node the same
// ones. Without one, any process that reaches a node's ports can pose as
// a peer: fit only for loopback, and Open logs a warning when the node
// listens or gossips anywhere else. Client commands (fero.Dial) are not
// yet authenticated; docs/security.md says what that leaves open.
func WithClusterSecret(secrets ...[]byte) Option {
	return option(func(c *config) {
		c.secrets = c.secrets[:0]
		for _, s := range secrets {
			c.secrets = append(c.secrets, append([]byte(nil), s...))
		}
	})
}

// WithClientTokens sets the client tokens a server accepts from
// connections that are not a peer's ([Dial], the fero CLI): a token lets
// them make requests (reads, writes, custom verbs), read the status and
// tail changes, but not forget servers, which takes the cluster secret.
// With a cluster secret or tokens, a connection that proves neither is
// refused everything. Each token is at least 16 bytes; a node accepts any
// of them, so tokens can rotate ([Resource.SetClientTokens]).
func WithClientTokens(tokens ...[]byte) NodeOption {
	return nodeOption(func(c *config) {
		c.tokens = c.tokens[:0]
		for _, t := range tokens {
			c.tokens = append(c.tokens, append([]byte(nil), t...))
		}
	})
}

// WithToken makes [Dial], and a client node that attaches ([WithAttach]),
// prove a client token on every connection it opens (a node with
// credentials refuses a connection that proves none). To [Dial] as an
// operator who may also forget servers, give [WithClusterSecret] instead.
// Open reads it only with WithAttach, and ignores it otherwise.
func WithToken(token []byte) Option {
	return option(func(c *config) { c.token = append([]byte(nil), token...) })
}

// WithAttach makes a [Client] node attach to the servers at these data
// addresses (what `fero serve` prints as "data", and [Resource.Addr])
// instead of joining gossip: it needs a client token ([WithToken]) where
// the servers take tokens, never the cluster secret. It learns the
// cluster's servers from one of them and keeps a full copy like any
// client node, but the servers take from it only its own writes, its
// fetches and its acks (docs/security.md, "Attached clients"). One
// address is enough; more are tried in turn when one does not answer. Its
// ID begins with "~" (one is made if [WithID] is not given), and gossip
// options (seeds, discovery, [WithClusterSecret]) are refused with it.
// Open refuses it on a server node.
func WithAttach(addrs ...string) NodeOption {
	return nodeOption(func(c *config) { c.attach = append(c.attach, addrs...) })
}

// MinSecretSize is the shortest cluster secret WithClusterSecret takes.
const MinSecretSize = 16

// WithGossipTransport replaces gossip's UDP/TCP transport, for example
// with an in-memory network in tests.
func WithGossipTransport(t memberlist.NodeAwareTransport) NodeOption {
	return nodeOption(func(c *config) { c.membership = append(c.membership, membership.WithTransport(t)) })
}

// WithGossipTuning edits memberlist's configuration after the preset, for
// timings the presets do not cover.
func WithGossipTuning(f func(*memberlist.Config)) NodeOption {
	return nodeOption(func(c *config) { c.membership = append(c.membership, membership.WithTuning(f)) })
}

// WithLeaveTimeout bounds how long Close spends telling the cluster it
// leaves.
func WithLeaveTimeout(d time.Duration) NodeOption {
	return nodeOption(func(c *config) { c.membership = append(c.membership, membership.WithLeaveTimeout(d)) })
}

// The ring. Every node of a resource must use the same ring settings.

// Partitioner maps a key to a 64-bit hash; the partition is the hash
// modulo the partition count (the original's hash). It must depend only
// on the key's top-level segment, be deterministic and safe for concurrent
// use.
type Partitioner interface {
	Hash(key string) uint64
}

// WithPartitions sets the partition count (default 271).
func WithPartitions(n int) NodeOption {
	return nodeOption(func(c *config) { c.ring = append(c.ring, ring.WithPartitions(n)) })
}

// WithVNodes sets the virtual nodes per member on the hash ring (default
// 200, the original's dht.vnodes).
func WithVNodes(n int) NodeOption {
	return nodeOption(func(c *config) { c.ring = append(c.ring, ring.WithVNodes(n)) })
}

// WithLoad bounds the partitions one member owns to load × the average
// (default 2.0).
func WithLoad(f float64) NodeOption {
	return nodeOption(func(c *config) { c.ring = append(c.ring, ring.WithLoad(f)) })
}

// WithReplicas sets how many servers besides the owner form a partition's
// replica group: the copies whose acks make a write durable (default 2).
// Every server and client keeps a copy either way.
func WithReplicas(n int) NodeOption {
	return nodeOption(func(c *config) { c.ring = append(c.ring, ring.WithReplicas(n)) })
}

// WithPartitioner replaces the default partitioner, which hashes the
// top-level key.
func WithPartitioner(p Partitioner) NodeOption {
	return nodeOption(func(c *config) { c.ring = append(c.ring, ring.WithPartitioner(p)) })
}

// The partition engine.

// WithHistoryMax caps the commits kept per partition; a copy that falls
// further behind syncs from a snapshot plus the tail (default 10,000; the
// original's partitions.history.max, which was unbounded).
func WithHistoryMax(n int) NodeOption {
	return nodeOption(func(c *config) { c.engine = append(c.engine, partition.WithHistoryMax(n)) })
}

// WithoutGCTuning leaves the garbage collector's settings alone. By
// default a node tunes them while it is open: a node's heap is mostly the
// history of commits it keeps, bytes without pointers that a collection
// never scans, and with GOGC's default the heap grows to twice its live
// size before each collection, history included. The node instead sizes
// the growth between collections by the heap a collection must scan, and
// at least 32 MiB even where GOGC would allow less: about the same
// collector work per byte written, a peak RSS near the live heap once it
// passes 32 MiB, and, below that, a collection every 32 MiB allocated
// rather than every few megabytes, which cut a round trip's p99.9
// latency by nearly half for at most 32 MiB of memory. The tuning is process-wide and shared by
// every node in the process; it does not start where GOGC is set in the
// environment or the program has set its own GC percent, and it steps
// aside if the percent is changed while it runs. docs/operations.md has
// the figures.
func WithoutGCTuning() NodeOption { return nodeOption(func(c *config) { c.noGCTuning = true }) }

// WithHistoryBytes caps the bytes of keys and values in the commits kept
// per partition, besides their count (default 2 MiB, twice the largest
// write; the newest commit is kept whatever its size). A partition's
// history, and so a node's memory, stays bounded whatever the writes: a
// copy that falls further behind syncs from a snapshot plus the tail.
func WithHistoryBytes(n int) NodeOption {
	return nodeOption(func(c *config) { c.engine = append(c.engine, partition.WithHistoryBytes(n)) })
}

// WithQuorum fixes how many live servers an owner must see to accept
// writes. 0, the default, means a majority of the cluster's configuration:
// every server that has joined and not been removed with Resource.Forget. A node on the minority side of a split refuses
// writes with CodeUnavailable however long the split lasts. A fixed quorum
// below that majority lets both sides of a split write, and one side's
// Majority-acked writes may then be lost on heal.
func WithQuorum(n int) NodeOption {
	return nodeOption(func(c *config) { c.engine = append(c.engine, partition.WithQuorum(n)) })
}

// WithClockSkew sets how far apart two servers' wall clocks may be
// (default 100ms). A write carries its deadline; an owner commits a write
// forwarded from another node only while the deadline is more than this
// away, so the forwarding node, which answers at the deadline by its own
// clock, never answers before the write took effect.
func WithClockSkew(d time.Duration) NodeOption {
	return nodeOption(func(c *config) { c.engine = append(c.engine, partition.WithClockSkew(d)) })
}

// WithWriteTimeout bounds every write's life (default 10s): a write whose
// context has no earlier deadline gets this one. No node commits a write
// after its deadline, so a caller told CodeDeadlineExceeded at the
// deadline knows the write took effect before, or never will.
func WithWriteTimeout(d time.Duration) NodeOption {
	return nodeOption(func(c *config) { c.engine = append(c.engine, partition.WithWriteTimeout(d)) })
}

// WithSyncTimeout sets how long a new owner's sync may wait for the other
// copies before it starts over (default 2s).
func WithSyncTimeout(d time.Duration) NodeOption {
	return nodeOption(func(c *config) { c.engine = append(c.engine, partition.WithSyncTimeout(d)) })
}

// WithSyncQueueMax caps the writes a syncing owner holds per partition
// (default 1,024); beyond it they fail with CodeUnavailable.
func WithSyncQueueMax(n int) NodeOption {
	return nodeOption(func(c *config) { c.engine = append(c.engine, partition.WithSyncQueueMax(n)) })
}

// WithTurnQueueMax caps the requests and writes that wait for one key's
// turn on its owner (see [Handler]; default 1,024); beyond it they fail
// with CodeResourceExhausted, definite. 0 lets none wait.
func WithTurnQueueMax(n int) NodeOption {
	return nodeOption(func(c *config) { c.engine = append(c.engine, partition.WithTurnQueueMax(n)) })
}

// WithGapBufferMax caps the out-of-order commits a copy holds per
// partition while it fetches the missing ones (default 1,024).
func WithGapBufferMax(n int) NodeOption {
	return nodeOption(func(c *config) { c.engine = append(c.engine, partition.WithGapBufferMax(n)) })
}

// WithFetchMax caps the commits in one catch-up reply (default 1,024).
func WithFetchMax(n int) NodeOption {
	return nodeOption(func(c *config) { c.engine = append(c.engine, partition.WithFetchMax(n)) })
}

// WithProbeInterval sets how often an owner checks that every copy keeps
// up (default 1s).
func WithProbeInterval(d time.Duration) NodeOption {
	return nodeOption(func(c *config) { c.engine = append(c.engine, partition.WithProbeInterval(d)) })
}

// The transport between nodes.

// WithRetry sets a [Remote]'s reconnect backoff: first delay, largest
// delay and attempts (the original's retries.base, retries.cap,
// retries.max; the jitter is always full). Nodes of a cluster redial each
// other whenever the engine has something to send.
func WithRetry(base, cap time.Duration, max int) DialOption {
	return dialOption(func(c *config) { c.transport = append(c.transport, transport.WithRetry(base, cap, max)) })
}

// WithConnectTimeout bounds one dial with its handshake (default 10s, the
// original's connections.timeout).
func WithConnectTimeout(d time.Duration) Option {
	return option(func(c *config) { c.transport = append(c.transport, transport.WithConnectTimeout(d)) })
}

// WithMaxBatch sets the most bytes handed to one socket write (the
// original's outbox.max).
func WithMaxBatch(n int) Option {
	return option(func(c *config) { c.transport = append(c.transport, transport.WithMaxBatch(n)) })
}

// WithOutboxLimit sets the bytes a connection may queue before senders
// wait (default 256 KiB).
func WithOutboxLimit(n int) Option {
	return option(func(c *config) { c.transport = append(c.transport, transport.WithOutboxLimit(n)) })
}

// WithMaxFrame sets the largest message accepted or sent, in bytes; it
// bounds a value's size (default 16 MiB).
func WithMaxFrame(n int) Option {
	return option(func(c *config) { c.transport = append(c.transport, transport.WithMaxFrame(n)) })
}

// WithMaxConns caps the data connections a node accepts, in all and from
// one source IP (defaults 4,096 and 1,024, loopback included); a
// connection over a cap is closed at once. On a node that takes
// credentials they count the connections that proved one;
// WithPreAuthLimits caps the others. docs/security.md lists every input
// limit.
func WithMaxConns(total, perIP int) NodeOption {
	return nodeOption(func(c *config) {
		c.transport = append(c.transport, transport.WithMaxConns(total), transport.WithMaxConnsPerIP(perIP))
	})
}

// WithPreAuthLimits caps what a data connection may take before it has
// proved a credential (a peer's hello with the cluster secret, or a
// client's token or secret), on a node that takes credentials: the
// largest message it may send (default 8 KiB, what the handshakes need;
// a larger one closes it), and how many such connections the node holds
// in all and from one source IP (defaults 256 and 64). These never count
// against WithMaxConns, whose caps are for connections that proved a
// credential. docs/security.md, The pre-auth budget.
func WithPreAuthLimits(maxFrame, conns, connsPerIP int) NodeOption {
	return nodeOption(func(c *config) {
		c.transport = append(c.transport, transport.WithAuthMaxFrame(maxFrame), transport.WithMaxUnprovedConns(conns, connsPerIP))
	})
}

// WithNewConnRate paces the data connections a node that takes
// credentials accepts from one source IP: perSecond sustained and burst
// at once (defaults 50 and 100); one over is reset before its TLS
// handshake. It bounds what a reconnect storm from one address costs the
// node; the unproved caps of WithPreAuthLimits bound what it holds.
// docs/security.md, The pre-auth budget.
func WithNewConnRate(perSecond float64, burst int) NodeOption {
	return nodeOption(func(c *config) { c.transport = append(c.transport, transport.WithNewConnRate(perSecond, burst)) })
}

// WithAuthTimeout sets how long a data connection has to prove a
// credential, on a node that takes credentials, before it is closed
// (default 5 s).
func WithAuthTimeout(d time.Duration) NodeOption {
	return nodeOption(func(c *config) { c.transport = append(c.transport, transport.WithAuthTimeout(d)) })
}

// WithMaxInflight caps the requests one connection may have open on this
// node (its handler not yet answered): by count, and by the bytes of read
// buffer they hold (defaults 4,096 and 64 MiB). A request over a cap is
// answered at once with a ResourceExhausted error.
func WithMaxInflight(n, bytes int) NodeOption {
	return nodeOption(func(c *config) {
		c.transport = append(c.transport, transport.WithMaxInflight(n), transport.WithMaxInflightBytes(bytes))
	})
}

// WithFrameTimeout bounds how long the rest of a message may take once its
// first byte has arrived (default 30 s; 0 turns it off): a half-sent
// message cannot hold its buffer longer.
func WithFrameTimeout(d time.Duration) Option {
	return option(func(c *config) { c.transport = append(c.transport, transport.WithFrameTimeout(d)) })
}

// WithTLS runs the data plane over TLS; for mutual TLS set ClientAuth and
// ClientCAs too. Every node of a resource needs a compatible config.
func WithTLS(cfg *tls.Config) Option {
	return option(func(c *config) { c.transport = append(c.transport, transport.WithTLS(cfg)) })
}

// WithMaxEntry bounds one write's key plus value, in bytes (default 1 MiB);
// a larger write fails with CodeInvalidArgument. Commits travel in
// messages of at most 4 MiB of entries, so it may not exceed that.
func WithMaxEntry(n int) NodeOption {
	return nodeOption(func(c *config) { c.engine = append(c.engine, partition.WithMaxEntry(n)) })
}

// WithOptions bundles opts into one Option, applied in order, which
// [Open] and [Dial] take alike: for a package that offers its settings as
// one value (a client's credentials and the interceptors that send them,
// say). Nil options are skipped. [Options] bundles NodeOptions.
func WithOptions(opts ...Option) Option { return options(opts) }

// options is WithOptions's bundle: each of its options applied as the
// reader of the bundle applies it.
type options []Option

func (os options) applyNode(c *config) {
	for _, o := range os {
		if o != nil {
			o.applyNode(c)
		}
	}
}

func (os options) applyDial(c *config) {
	for _, o := range os {
		if o != nil {
			o.applyDial(c)
		}
	}
}
