package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/seqtab"
	"github.com/fero-go/fero/internal/storage"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// Config describes one node. Resource is required; everything else has a
// default.
type Config struct {
	// ID is the node's stable identity; a random one if empty.
	ID string
	// Resource names the cluster's resource.
	Resource string
	// Client nodes own nothing; they keep a full copy and send writes to
	// owners directly.
	Client bool
	// Listen is the data-plane address (default 127.0.0.1:0).
	Listen string
	// Membership adds options (discovery, bind address, encryption, …).
	Membership []membership.Option
	// Ring sets the partition count, vnodes, load bound and partitioner.
	Ring []ring.Option
	// Engine sets the partition engine's limits and timeouts.
	Engine []partition.Option
	// Transport applies to the server and to every connection dialed.
	Transport []transport.Option
	// Logger receives the node's logs (default: none).
	Logger *slog.Logger
	// Tick is how often the engine's timers are driven (default 100ms).
	Tick time.Duration
	// Inbox bounds the batches of engine messages queued for the engine
	// (each at most 256 KiB unless one message is larger); a full inbox
	// makes connections stop reading (default 16: a queued batch holds
	// its read block and its decoded messages, and a deeper queue only
	// raised a flooded node's peak memory).
	Inbox int
	// Handler answers requests for the partitions this node owns (default:
	// Builtin, which commits ADD, UPDATE and REMOVE and refuses other verbs).
	Handler Handler
	// Concurrent says which verbs of Handler run without taking their
	// key's turn (turn.go): verbs that only read. Nil: every verb but GET
	// takes it.
	Concurrent func(verb string) bool
	// NoRetry: writes and verb calls carry no writer ID and are not sent
	// again after an indefinite failure (once.go). By default they are,
	// within the caller's deadline (or the write timeout without one), and
	// apply once.
	NoRetry bool
	// MaxRequests bounds the handlers running at once; beyond it requests
	// are refused with ErrTooManyRequests (default DefaultMaxRequests).
	MaxRequests int
	// Secrets are the cluster secrets: with any, every node proves on each
	// data connection that it knows one before a peer takes its messages
	// (the first proves this node, any verifies a peer), and gossip is
	// encrypted with keys derived from them (protocol.GossipKey). Rotate them on a
	// running node with SetSecrets. None: peers are trusted on their word,
	// fit only for loopback.
	Secrets [][]byte
	// Servers, for a client node, are data addresses of servers to attach
	// to (attach.go): the node does not gossip, learns the servers from
	// one of them, and proves Token to each (the cluster secret is not
	// needed, and not taken). Its own data port takes no peers, and asks
	// for Token (unless Tokens says otherwise). Its ID begins with
	// membership.AttachedPrefix (one is made if ID is empty). With
	// Servers, Membership options that mean gossip are refused.
	Servers []string
	// Token is the client token an attached client proves (Servers).
	Token []byte
	// Tokens are the client tokens the node accepts from connections that
	// are not peers' (fero.Dial, the fero CLI): they may make requests,
	// read the status and tail, but not forget servers (that takes the
	// cluster secret). With a secret or tokens, a connection that proved
	// neither is refused everything but the proof itself. Replace them on a
	// running node with SetTokens.
	Tokens [][]byte
	// DataDir, when set, is the server's data directory (docs/storage.md):
	// its partitions, the epochs it promised and the configuration are kept
	// there, each round's before the round's messages and answers leave,
	// and the node loads them when it starts. A directory belongs to one
	// node and resource; an empty ID takes the node's from it. Servers only.
	DataDir string
	// Expect is how many servers form a new cluster (partition.WithExpect;
	// fero serve --expect): a server that has heard no formed cluster forms
	// one only once it sees that many, and takes no writes meanwhile (each
	// refused at once, saying why, and a WARN every formingWarnEvery). 0:
	// a server given seeds waits for every seed, one given none founds a
	// cluster alone. Servers only.
	Expect int
	// Sync is the data directory's fsync policy (default: each group).
	Sync storage.SyncPolicy
	// Metrics counts the callers' writes and calls and times them, for
	// the node's Prometheus collector (Node.Collector); without it the
	// collector has only what the node counts anyway.
	Metrics bool
	// Tracer, when set, traces the callers' calls and writes, the
	// requests this node forwards and those it handles as the owner
	// (trace.go); nil traces nothing.
	Tracer trace.Tracer
}

// DefaultMaxRequests is the default bound on handlers running at once.
const DefaultMaxRequests = 10000

// Node is one running member of a resource's cluster.
type Node struct {
	cfg     Config
	id      string
	logger  *slog.Logger
	started atomic.Bool // Start has set everything up; requests are served
	// writer names this node's life as a writer, and seq counts its
	// writes and calls (once.go).
	writer string
	seq    atomic.Uint64
	// seqTurn orders this node's new writes: a write takes its sequence
	// and reaches the engine holding it, so the engine takes them, and
	// the owner sees them, in sequence order (once.go, takeSeq).
	seqTurn chan struct{}
	// hot is the write and call metrics (Config.Metrics); nil without.
	hot *hotMetrics
	// fwdSpans are the owner's spans of traced forwarded writes awaiting
	// their reply (trace.go); under engMu.
	fwdSpans map[fwdKey]fwdSpan
	// subDrops counts changes subscribers with the Drop policy missed.
	subDrops atomic.Uint64
	// needProof counts requests refused, and their connections closed,
	// for asking what needs a credential before proving one.
	needProof atomic.Uint64
	// t0 is when the node was made: the origin of Node.since.
	t0 time.Time
	// tstats counts the backpressure of every connection the node makes
	// or accepts.
	tstats transport.Stats

	srv  *transport.Server
	pool *pool
	// relay routes around a peer the data plane does not reach (rule 17);
	// relayRoutes is what the driver last logged of it.
	relay       *relays
	relayRoutes map[string]string
	// attached is a server's attached clients; feed an attached client's
	// source of the servers (attach.go).
	attached attachedSet
	feed     feeder
	auth     auth
	ms       *membership.Membership
	ring     *ring.Ring
	view     *view
	store    *doc.Store
	eng      *partition.Engine
	disk     *disk // nil without a data directory
	// diskLogged: the disk's failure has been logged.
	diskLogged bool

	inbox    chan inbound
	handlers chan struct{} // a semaphore: one token per running handler
	streams  streamRuns    // the stream handlers running as owner
	props    propQueue
	queries  chan func(*partition.Engine) // run by the driver, under engMu
	engMu    sync.Mutex                   // held for each round of the engine (see drive)

	// inboxed counts the batches handed to the inbox that the driver has
	// not stepped yet, from before the send to after the step: a reader
	// that finds it zero under engMu knows no earlier batch still waits.
	inboxed atomic.Int64
	// steppedInline counts the batches stepped on a reader (tests).
	steppedInline atomic.Int64

	// waiters holds the callbacks of proposals, by token, under engMu. The
	// engine completes every proposal it accepts within its write timeout,
	// which bounds how far the table's window spans.
	waiters  seqtab.Table[waiter]
	early    []inbound               // messages before the engine's first map; under engMu
	unmapped unmapped                // proposals before the engine's first map; under engMu
	stepped  []inbound               // the batches stepped this round (release); under engMu
	decoders *freeDecoders           // decoders free for the next batches
	out      map[string]*batchWriter // per peer, reused each round; under engMu
	hdr      []byte                  // the batches' cluster header (appendCluster), for hdrFor; under engMu
	hdrFor   partition.ClusterID
	seen     struct{ foreign, yields uint64 } // what noteClusters last logged; under engMu
	// learnerSince is when this server was last seen not voting, while it
	// catches up (zero once it votes); under engMu. catchUps counts the
	// catch-ups that ended with its vote counting, catchUpNanos their
	// total time and lastCatchUp the last one's, for the metrics.
	learnerSince              time.Time
	catchUps                  atomic.Uint64
	catchUpNanos, lastCatchUp atomic.Int64
	// noSeedSince is when the node warned that no seed answered its join
	// (zero: it did not, or a seed has answered since); the driver's.
	noSeedSince time.Time
	// formingWarned is when the driver last warned that no cluster has
	// formed (warnForming); under engMu.
	formingWarned time.Time
	// peerCluster holds the cluster each peer's last batch named, by ID,
	// so that its founder is not allocated again per batch.
	peerCluster sync.Map
	outOrder    []string // peers in out with a batch this round
	scratch     []byte   // encodes one message at a time; under engMu

	stats  stats
	engMap atomic.Pointer[ring.Map] // the map the engine routes by

	subMu      sync.Mutex
	subs       map[*Subscription]struct{}
	subIdx     subIndex
	subsClosed bool
	pubScratch []*Subscription // publish's list of streams; under engMu

	smu          sync.Mutex
	spills       map[string]*spillQueue // peers whose must-deliver messages queue (see spill.go)
	spilled      atomic.Int64           // bytes in every spill queue
	spillDrained chan struct{}          // capacity 1: a spill queue shrank

	dmu     sync.Mutex
	dialing map[string][][]byte  // peers being dialed → messages waiting for the connection
	dialErr map[string]string    // peers → the last dial's error, until one succeeds (status)
	dialAt  map[string]time.Time // peers being dialed → when the dial began (status)

	spawnMu     sync.RWMutex
	spawnClosed bool // no more goroutines for wg

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the driver, the view, background dials and handlers
	close  sync.Once
}

type inbound struct {
	from    string
	cluster partition.ClusterID // the sender's (rule 9, cluster identity)
	msgs    []partition.Message
	dec     *partition.Decoder // msgs' memory, reused once they are stepped (release)
	hold    transport.Hold     // the bytes msgs alias, released with dec
	limited bool               // from an attached client (Engine.StepLimited)
}

type proposal struct {
	req  partition.Request
	done Completer // nil: nobody waits; runs with the engine held
	// began is when the caller asked, on the node's clock (Node.since),
	// for the write metrics; 0 when not timed.
	began int64
	// read, when set, makes this a linearizable read of req.Key (rule 13)
	// instead of a write: the driver reads the value as it proposes the
	// read, and hands it to read once the engine confirms it; versioned,
	// as the array [version, value].
	read      func([]byte, error)
	versioned bool
}

// waiter is a proposal's callback, by token, and what the metrics need to
// time it.
type waiter struct {
	done  Completer
	began int64 // Node.since when the caller asked; 0: not timed
	wait  partition.Wait
}

// complete calls w's callback with c, timing it first.
func (n *Node) complete(w waiter, c partition.Completion) {
	if w.began != 0 && n.hot != nil {
		n.hot.wrote(w.wait, c.Err, time.Duration(n.since()-w.began))
	}
	w.done.Complete(c)
}

// A Completer takes a write's completion (WriteAsyncTo).
type Completer interface {
	Complete(partition.Completion)
}

// CompleteFunc is a function as a Completer.
type CompleteFunc func(partition.Completion)

// Complete calls f.
func (f CompleteFunc) Complete(c partition.Completion) { f(c) }

// since is the time since the node was made, on the monotonic clock, in
// nanoseconds, at least 1.
func (n *Node) since() int64 { return int64(time.Since(n.t0)) + 1 }

// Start listens, joins the cluster and starts the driver.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Resource == "" {
		return nil, errs.New(errs.InvalidArgument, "node: a resource name is required")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.Inbox <= 0 {
		cfg.Inbox = defaultInbox
	}
	if cfg.MaxRequests <= 0 {
		cfg.MaxRequests = DefaultMaxRequests
	}
	if len(cfg.Servers) > 0 {
		switch {
		case !cfg.Client:
			return nil, errs.New(errs.InvalidArgument, "node: only a client node attaches to servers (Servers)")
		case len(cfg.Secrets) > 0:
			return nil, errs.New(errs.InvalidArgument, "node: a node with the cluster secret gossips: give it seeds, not Servers to attach to")
		case cfg.ID == "":
			cfg.ID = membership.AttachedPrefix + randomID()
		case !membership.IsAttached(cfg.ID):
			return nil, errs.Errorf(errs.InvalidArgument, "node: an attached client's ID begins with %q: %q", membership.AttachedPrefix, cfg.ID)
		}
		if cfg.Token != nil && len(cfg.Tokens) == 0 {
			// Its data port asks for the token it proves to the servers,
			// or anyone who reached it would write with its rights.
			cfg.Tokens = [][]byte{cfg.Token}
		}
	} else if cfg.Token != nil {
		return nil, errs.New(errs.InvalidArgument, "node: a token proves an attached client: give the servers to attach to (Servers)")
	}
	rg, err := ring.New(cfg.Ring...)
	if err != nil {
		return nil, err
	}
	var dk *disk
	if cfg.DataDir != "" {
		if cfg.Client {
			return nil, errs.New(errs.InvalidArgument, "node: a client node keeps no data directory")
		}
		if dk, err = openDisk(&cfg, rg.Partitions(), cfg.Logger); err != nil {
			return nil, err
		}
	}
	if cfg.ID == "" {
		cfg.ID = randomID()
	}
	n := &Node{
		cfg: cfg, id: cfg.ID, logger: cfg.Logger.With("node", cfg.ID), writer: protocol.NewWriterID(cfg.ID),
		inbox: make(chan inbound, cfg.Inbox), decoders: newFreeDecoders(), props: newPropQueue(), queries: make(chan func(*partition.Engine)),
		dialing: make(map[string][][]byte),
		subs:    make(map[*Subscription]struct{}), handlers: make(chan struct{}, cfg.MaxRequests), seqTurn: make(chan struct{}, 1),
		spills: make(map[string]*spillQueue), spillDrained: make(chan struct{}, 1),
		out: make(map[string]*batchWriter),
	}
	n.t0 = time.Now()
	if cfg.Metrics {
		n.hot = newHotMetrics(cfg.Resource)
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.ring, n.disk = rg, dk
	ok := false
	defer func() {
		if !ok && dk != nil {
			_ = dk.close()
		}
	}()

	if n.store, err = doc.New(n.ring.Partitions()); err != nil {
		return nil, err
	}
	engOpts := slices.Clone(cfg.Engine)
	if cfg.Client {
		engOpts = append(engOpts, partition.WithClient())
	}
	if dk != nil {
		engOpts = append(engOpts, partition.WithDurable())
	}
	// Ids above any an earlier process under this node id handed out: a
	// peer's reply to that process may reach this one.
	engOpts = append(engOpts, partition.WithFirstID(uint64(time.Now().UnixNano())))
	if n.eng, err = partition.New(n.id, docState{store: n.store, logger: n.logger}, engOpts...); err != nil {
		return nil, err
	}
	if dk != nil {
		start := time.Now()
		entries, err := dk.load(n.eng, n.ring.Partitions())
		if err != nil {
			return nil, damaged(cfg.DataDir, err)
		}
		n.logger.Info("fero: node: loaded the data dir", "dir", cfg.DataDir, "entries", entries,
			"took", time.Since(start).Round(time.Millisecond), "fsync", cfg.Sync.Mode)
	}

	mux := transport.NewMux()
	topts := append([]transport.Option{transport.WithLogger(n.logger), transport.WithStats(&n.tstats), transport.WithAfterBurst(n.afterBurst)}, cfg.Transport...)
	n.pool = newPool(n.id, append(topts, transport.WithHandler(mux))...)
	n.relay = newRelays()
	n.pool.logger = n.logger
	n.pool.setSecrets(cfg.Secrets)
	n.auth.conns, n.auth.proving = make(map[*transport.Conn]role), make(map[*transport.Conn]authProving)
	n.SetTokens(cfg.Tokens...)
	n.pool.onAttach = n.serveAttach
	n.pool.onLost = n.connectionLost
	if len(cfg.Servers) > 0 {
		n.pool.attach = true
		if cfg.Token != nil {
			n.pool.token = protocol.TokenKey(cfg.Token)
		}
	}
	mux.HandleFunc(protocol.OpHello, n.pool.serveHello)
	mux.HandleFunc(protocol.OpHelloProof, n.pool.serveProof)
	mux.HandleFunc(protocol.OpAuth, n.serveAuth)
	mux.HandleFunc(protocol.OpAuthProof, n.serveAuthProof)
	mux.HandleFunc(protocol.OpEngine, n.serveEngine)
	mux.HandleFunc(protocol.OpRelay, n.serveRelay)
	mux.HandleFunc(protocol.OpRequest, n.allow(roleClient, n.whenStarted(n.serveRequest)))
	mux.HandleFunc(protocol.OpStatus, n.allow(roleClient, n.whenStarted(n.serveStatus)))
	mux.HandleFunc(protocol.OpForget, n.allow(roleAdmin, n.whenStarted(n.serveForget)))
	mux.HandleFunc(protocol.OpTail, n.allow(roleClient, n.whenStarted(n.serveTail)))
	mux.HandleFunc(protocol.OpMembers, n.allow(roleClient, n.whenStarted(n.serveMembers)))
	mux.HandleFunc(protocol.OpBackup, n.allow(roleClient, n.whenStarted(n.serveBackup)))
	sopts := topts
	if len(cfg.Secrets) > 0 || len(cfg.Tokens) > 0 {
		// Strangers get a handshake's budget until they prove a
		// credential (serveProof, serveAuthProof). Without credentials
		// there is nothing to prove: every connection is as trusted as
		// it will be, and the budget would only cut idle clients.
		sopts = append(slices.Clone(topts), transport.WithPreAuth(true))
	}
	if n.srv, err = transport.Listen(cfg.Listen, mux, sopts...); err != nil {
		return nil, err
	}

	role := membership.RoleServer
	if cfg.Client {
		role = membership.RoleClient
	}
	mopts := append([]membership.Option{
		membership.WithID(n.id), membership.WithResource(cfg.Resource), membership.WithRole(role),
		membership.WithDataAddr(n.srv.Addr().String()), membership.WithLogger(n.logger),
	}, cfg.Membership...)
	if len(cfg.Secrets) > 0 {
		mopts = append(mopts, membership.WithSecretKeys(gossipKeys(cfg.Secrets)...))
	}
	if len(cfg.Servers) > 0 {
		mopts = append(mopts, membership.WithFeed(n.feedMembers))
	}
	if n.ms, err = membership.New(mopts...); err != nil {
		n.srv.Close()
		return nil, err
	}
	// A node given seeds joins a cluster: alone in its map (its seeds cut
	// off), it waits rather than found a cluster of one (rule 9).
	n.eng.SetJoining(n.ms.HasSeeds() || cfg.Expect > 1)
	n.eng.SetExpect(cfg.Expect)
	n.formingWarned = time.Now() // the first warning, if any, formingWarnEvery from now
	if !n.ms.HasSeeds() && cfg.Expect <= 1 && !cfg.Client && cfg.DataDir == "" {
		n.logger.Warn("fero: node: no seeds and no data directory: this server founds a new cluster whenever it finds no peer, each time it starts; restarted while cut off from the others, it takes writes alone, and they are dropped when it meets its cluster again; give it a data directory, or every server the others as seeds (docs/engine.md, rule 9)")
	}
	if err := n.ms.Start(ctx); err != nil {
		n.srv.Close()
		return nil, err
	}
	if n.ms.HasSeeds() {
		n.warnNoSeed()
	}
	if addr, _ := n.ms.DuplicateOf(ctx); addr != "" {
		err := fmt.Errorf("fero: node: another live node already runs as %q (its gossip address %s): every node needs its own ID; give this one another --id, or stop the other first", n.id, addr)
		_ = n.ms.Close()
		n.srv.Close()
		return nil, err
	}
	n.view = newView(n.ring, n.ms, n.logger)
	n.view.attached = n.attached.ids
	n.wg.Add(2)
	go func() { defer n.wg.Done(); n.view.run(n.ctx) }()
	go func() { defer n.wg.Done(); n.drive() }()
	n.started.Store(true)
	ok = true
	return n, nil
}

// warnNoSeed logs, at WARN, that none of the node's seeds answered the
// join it made as it started, if none did. Such a node has joined no
// cluster, and a node given seeds never founds one (docs/engine.md, rule
// 9): without the line it looked like a working cluster of one, while
// every write waited out its timeout.
func (n *Node) warnNoSeed() {
	var tried []string
	others := false
	for _, s := range n.ms.Seeds() {
		if s.Answered {
			return
		}
		others = others || !s.Self
		tried = append(tried, s.String())
	}
	if !others {
		return // its seeds name only itself: it may found a cluster
	}
	n.noSeedSince = time.Now()
	n.logger.Warn("fero: node: no seed answered: this node has joined no cluster, and a node given seeds founds none before it sees them, so it serves no writes (each is refused at once: cluster not formed). It keeps trying the seeds: if they are starting too, this passes once one answers; if not, check that each is the gossip address of a running node of this resource (fero serve prints it when it starts, fero status lists them), or start the first server without seeds",
		"seeds", strings.Join(tried, ", "))
}

// noteSeedAnswered logs, once a seed answers, that the warning of
// warnNoSeed no longer holds; the driver calls it as the map changes.
func (n *Node) noteSeedAnswered() {
	if n.noSeedSince.IsZero() {
		return
	}
	for _, s := range n.ms.Seeds() {
		if s.Answered {
			n.logger.Warn("fero: node: a seed answered; this node has joined its cluster", "seed", s.Seed,
				"after", time.Since(n.noSeedSince).Round(time.Millisecond))
			n.noSeedSince = time.Time{}
			return
		}
	}
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// SetSecrets replaces the cluster secrets of a running node: it proves
// itself and encrypts gossip with the first from now on, and accepts peers
// and gossip that use any of them. Rotating a cluster's secret takes three
// rounds over every node, each finished before the next starts: add the
// new secret (old, new), make it first (new, old), drop the old (new). A
// node started without secrets cannot take any.
func (n *Node) SetSecrets(secrets ...[]byte) error {
	if len(secrets) == 0 {
		return errs.New(errs.InvalidArgument, "set secrets: none given; a node cannot turn authentication off")
	}
	if n.pool.keys.Load() == nil {
		return errs.New(errs.FailedPrecondition, "set secrets: the node started without a cluster secret")
	}
	if err := n.ms.SetSecretKeys(gossipKeys(secrets)...); err != nil {
		return err
	}
	n.pool.setSecrets(secrets)
	return nil
}

func gossipKeys(secrets [][]byte) [][]byte {
	out := make([][]byte, len(secrets))
	for i, s := range secrets {
		out[i] = protocol.GossipKey(s)
	}
	return out
}

// ID returns the node's identity.
func (n *Node) ID() string { return n.id }

// Addr returns the node's data-plane address.
func (n *Node) Addr() string { return n.srv.Addr().String() }

// Store returns the node's local copy of the resource.
func (n *Node) Store() *doc.Store { return n.store }

// Map returns the partition map the node currently routes by (nil before
// it has seen its own membership).
func (n *Node) Map() *ring.Map {
	m, _, _ := n.view.current()
	return m
}

// EngineMap returns the map the partition engine routes by: the same as
// Map once the driver has handed it over (nil before). A write routed by
// it cannot fail for want of a map.
func (n *Node) EngineMap() *ring.Map { return n.engMap.Load() }

// Membership returns the node's membership.
func (n *Node) Membership() *membership.Membership { return n.ms }

// Write proposes a change and waits as asked: WaitNone returns once the
// change is queued for the engine; the others return when the write
// completes, fails, or ctx ends.
func (n *Node) Write(ctx context.Context, c doc.Change, wait partition.Wait, k int) (partition.Position, error) {
	if n.cfg.Tracer != nil {
		ctx, span := n.startSpan(ctx, "fero.write", trace.SpanKindClient, c.Type.String(), n.store.PartitionOf(c.Key))
		pos, err := n.write(ctx, c, wait, k)
		endSpan(span, err)
		return pos, err
	}
	return n.write(ctx, c, wait, k)
}

// write is Write without the span. A write that fails indefinite is sent
// again, with its writer's sequence, until it succeeds, fails definite,
// or its budget ends: the caller's deadline, or the write timeout from now
// without one (rule 16).
func (n *Node) write(ctx context.Context, c doc.Change, wait partition.Wait, k int) (partition.Position, error) {
	if wait == partition.WaitNone {
		return partition.Position{}, n.WriteAsync(ctx, c, wait, k, nil)
	}
	if t := turnOf(ctx); t != nil && n.store.PartitionOf(c.Key) == t.partition {
		// Staged in the handler's turn (turn.go): the call's writer and
		// sequence go with the turn's record.
		return n.writeOnce(ctx, c, wait, k, &protocol.Once{})
	}
	o := n.newOnce() // its sequence is taken as the first attempt reaches the engine
	if o.Writer == "" {
		return n.writeOnce(ctx, c, wait, k, &o)
	}
	tries := protocol.NewAttempts(ctx, o)
	backoff := protocol.RetryBackoffMin
	for {
		pos, err := n.writeOnce(ctx, c, wait, k, &o)
		tries.Once = o
		if !tries.Again(err) {
			return pos, tries.Answer(err)
		}
		n.logger.Debug("fero: node: retrying a write whose first attempt may have committed", "key", c.Key, "seq", o.Seq, "err", err)
		if protocol.Pause(ctx, n.ctx, &backoff) != nil {
			return pos, tries.Answer(err) // the attempt's answer: it may have applied
		}
	}
}

// writeOnce is one attempt of a write that waits; o names it (a protocol.Once
// with a writer and no sequence takes one as the write is proposed).
func (n *Node) writeOnce(ctx context.Context, c doc.Change, wait partition.Wait, k int, o *protocol.Once) (partition.Position, error) {
	done := make(chan partition.Completion, 1) // the driver never blocks on a caller that left
	if err := n.writeAsync(ctx, c, wait, k, CompleteFunc(func(c partition.Completion) { done <- c }), queued, o); err != nil {
		return partition.Position{}, err
	}
	select {
	case c := <-done:
		return c.Position, c.Err
	case <-ctx.Done():
		if ctx.Err() == context.DeadlineExceeded {
			// The write carries this deadline and no node commits it
			// later, but a round already under way may still commit it:
			// the engine's answer, due within a tick, says which (rule 1).
			select {
			case c := <-done:
				return c.Position, c.Err
			case <-n.ctx.Done():
				return partition.Position{}, protocol.ErrClosedInFlight
			}
		}
		// Canceled before its deadline: the write may still take effect
		// until then. The driver still completes it.
		return partition.Position{}, ctx.Err()
	case <-n.ctx.Done():
		return partition.Position{}, protocol.ErrClosedInFlight
	}
}

// WriteAsync proposes a change without waiting: it returns once the
// change is queued for the engine (or fails if ctx ends or the node closes
// first). With a wait other than WaitNone, done is called exactly once
// with how the write completed; it runs with the engine held, on the
// node's driver goroutine or on a connection's reader standing in for it
// (Node.afterBurst), so it must return at once and must not call the node.
// With WaitNone, done must be nil: nothing is kept for the write.
func (n *Node) WriteAsync(ctx context.Context, c doc.Change, wait partition.Wait, k int, done func(partition.Completion)) error {
	var to Completer
	if done != nil {
		to = CompleteFunc(done)
	}
	return n.writeAsync(ctx, c, wait, k, to, queued, &protocol.Once{})
}

// WriteAsyncTo is WriteAsync with the completion given to done: a caller
// that keeps a write's state in a record of its own can have the record
// take the completion, rather than a closure allocated for every write.
func (n *Node) WriteAsyncTo(ctx context.Context, c doc.Change, wait partition.Wait, k int, done Completer) error {
	return n.writeAsync(ctx, c, wait, k, done, queued, &protocol.Once{})
}

// proposeMode says where a write is proposed.
type proposeMode uint8

const (
	// queued: by the driver.
	queued proposeMode = iota
	// inline: on the caller's goroutine when the engine is idle (no
	// driver round under way, no proposal queued), with the engine's
	// output handled there too, done included: it saves the hand-over to
	// the driver, which is most of an unloaded write's latency. Else
	// queued.
	inline
	// burst: queued without waking the driver, by a connection's
	// reader; once it has dispatched its burst (one request or many) it
	// proposes what is queued itself if the engine is idle, or wakes the
	// driver (Node.afterBurst).
	burst
)

// writeAsync is WriteAsync, proposed as mode says. Only callers whose done
// takes no lock may ask for inline or burst (the built-in request
// handling): done may run before writeAsync returns, or on a connection's
// reader.
func (n *Node) writeAsync(ctx context.Context, c doc.Change, wait partition.Wait, k int, done Completer, mode proposeMode, once *protocol.Once) error {
	if (wait == partition.WaitNone) != (done == nil) {
		return errs.New(errs.InvalidArgument, "node: a callback goes with a wait, and only with one")
	}
	if n.cfg.Handler != nil {
		// A handler's write to its own partition is part of its turn: kept
		// for the turn's record, not proposed (turn.go).
		if t := turnOf(ctx); t != nil && n.store.PartitionOf(c.Key) == t.partition {
			if err := t.stage(c, wait, k); err != nil {
				return err
			}
			if done != nil {
				done.Complete(partition.Completion{Partition: t.partition})
			}
			return nil
		}
	}
	var ordered func() // called once the write's place in the engine's order is fixed
	if once.Writer != "" && once.Seq == 0 {
		// A new write: it takes its sequence, and reaches the engine,
		// holding the node's turn to do so.
		if err := n.takeSeq(ctx, once); err != nil {
			return err
		}
		held := true
		ordered = func() {
			if held {
				held = false
				n.releaseSeq()
			}
		}
		defer ordered()
	}
	o := *once
	// A condition, and a writer's sequence, travel in a batch record,
	// which the owner's state checks as it commits it.
	if o.Writer != "" || c.Cond {
		c = onceRecord(c, o)
	}
	m := n.hot
	if m == nil || int(wait) >= len(waitNames) {
		return n.proposeWrite(ctx, c, wait, k, done, mode, 0, o, ordered)
	}
	if done == nil {
		err := n.proposeWrite(ctx, c, wait, k, done, mode, 0, o, ordered)
		if err != nil {
			m.wrote(wait, err, 0)
		} else {
			m.writesOK[wait].Inc() // queued
		}
		return err
	}
	// Timed when its waiter completes (Node.complete): a field in the
	// waiter, not a closure around done, which cost an allocation a write.
	began := n.since()
	err := n.proposeWrite(ctx, c, wait, k, done, mode, began, o, ordered)
	if err != nil {
		m.wrote(wait, err, time.Duration(n.since()-began)) // done is not called
	}
	return err
}

// proposeWrite is writeAsync without the metrics. ordered, if set, is
// called as soon as the engine has the write, or it is queued for it:
// from then on no later write can overtake it.
func (n *Node) proposeWrite(ctx context.Context, c doc.Change, wait partition.Wait, k int, done Completer, mode proposeMode, began int64, o protocol.Once, ordered func()) error {
	if err := n.awaitSpill(ctx); err != nil {
		return err
	}
	req := partition.Request{Partition: n.store.PartitionOf(c.Key), Type: c.Type, Key: c.Key, Value: c.Value, Wait: wait, K: k, Writer: o.Writer, Seq: o.Seq}
	if n.cfg.Tracer != nil {
		// For the owner's span, should the write travel to another node.
		if owner, ok := n.ownerOf(req.Partition); !ok || owner != n.id || n.cfg.Client {
			req.Trace = protocol.Traceparent(ctx)
		}
	}
	// The caller's deadline bounds the write's life (rule 1): a caller
	// whose context ends at its deadline is answered after any commit.
	req.Deadline, _ = ctx.Deadline()
	if mode == inline && n.engMu.TryLock() {
		// The driver takes queued proposals only under engMu and proposes
		// them before it lets go: with the queue empty, every proposal
		// queued before has been proposed, so this one cannot overtake an
		// earlier write.
		// The driver completes every waiter under engMu once the node's
		// context ends, so a write proposed here before that is completed.
		// (spawnMu is not held: done may spawn.)
		if n.ctx.Err() != nil {
			n.engMu.Unlock()
			return protocol.ErrClosed
		}
		if n.props.empty() && n.eng.Map() != nil {
			n.eng.Clock(time.Now())
			n.propose(proposal{req: req, done: done, began: began})
			if ordered != nil {
				ordered() // the writes behind it need not wait for the output
			}
			n.output()
			n.engMu.Unlock()
			return nil
		}
		n.engMu.Unlock()
	}
	// Close waits for senders under way, then the driver drains what they
	// queued, so every done is called.
	n.spawnMu.RLock()
	defer n.spawnMu.RUnlock()
	if n.spawnClosed {
		return protocol.ErrClosed
	}
	return n.props.push(ctx, n.ctx, proposal{req: req, done: done, began: began}, mode != burst)
}

// afterBurst runs on a connection's reader at the end of each burst of
// frames (transport.WithAfterBurst): what the burst's requests queued
// without waking the driver is proposed here, in queue order, with the
// engine's output, if the engine is idle; else the driver is woken for
// it. Either way the burst's answers leave in the reader's one write.
func (n *Node) afterBurst() {
	if !n.props.claimQuiet() {
		return
	}
	if n.engMu.TryLock() {
		// protocol.Once the node's context ends the driver completes what is
		// queued (and nothing is queued after), under engMu.
		if n.ctx.Err() == nil {
			n.eng.Clock(time.Now())
			n.takeProps()
			n.output()
		}
		n.engMu.Unlock()
		return
	}
	signal(n.props.ready)
}

// serveEngine hands a peer's engine message to the driver. It runs on
// the connection's reader: when the inbox is full the connection stops
// reading, which pushes back on the sender.
func (n *Node) serveEngine(r *transport.Request) {
	from, ok := n.pool.idOfWait(n.ctx, r.Conn())
	if !ok || r.Mode() != transport.ModeSend {
		// Engine messages are a peer's, one-way. Never left unanswered:
		// an open call holds its read block (issue 42: 4 connections
		// pinned 322 MB).
		n.refuseEngine(r, ok)
		return
	}
	n.serveEngineFrom(r, from, r.Payload(), true)
}

// serveEngineFrom hands the engine batch payload, which came in r from
// the server from (directly, or through a relay: rule 17), to the driver.
func (n *Node) serveEngineFrom(r *transport.Request, from string, payload []byte, direct bool) {
	if direct && !n.cfg.Client {
		n.relay.heard(from, time.Now())
	}
	// The messages alias the batch's bytes, which the connection keeps
	// until the round that steps them has been acted on (release): the
	// engine copies what it holds past the step that takes them (see
	// Decoder.DecodeShared).
	hold := r.Hold()
	var last partition.ClusterID
	if v, ok := n.peerCluster.Load(from); ok {
		last = v.(partition.ClusterID)
	}
	dec := n.decoders.get()
	cluster, msgs, err := decodeBatch(dec, payload, last)
	if err != nil {
		n.decoders.put(dec)
		hold.Release()
		n.logger.Warn("fero: node: bad engine message", "from", from, "err", err)
		return
	}
	if cluster != last {
		n.peerCluster.Store(from, cluster)
	}
	in := inbound{from: from, cluster: cluster, msgs: msgs, dec: dec, hold: hold}
	if membership.IsAttached(from) {
		// An attached client proved a token, not the secret: it names no
		// cluster, and steps only what a client sends for itself.
		in.cluster, in.limited = partition.ClusterID{}, true
	}
	if !n.cfg.Client && !r.More() && n.stepInline(in) {
		return
	}
	n.inboxed.Add(1)
	select {
	case n.inbox <- in:
	case <-n.ctx.Done():
		n.inboxed.Add(-1)
	}
}

// stepInline steps a batch on the connection's reader and acts on the
// round's output there, when the engine is idle: the lock is free and
// no batch waits in the inbox or in the driver's hands. It reports
// whether it did. A server's lone batch (a commit to its copy, the ack
// that completes a write) then costs no hand-over to the driver; in a
// burst, batches queue for the driver, which steps them as one round.
// A client node hands every batch to the driver: the commit that comes
// back with its call's reply, stepped on the reader, kept the caller
// waiting behind it (the unloaded round trip rose from 50 to 58 µs).
func (n *Node) stepInline(in inbound) bool {
	if n.inboxed.Load() != 0 || !n.engMu.TryLock() {
		return false
	}
	defer n.engMu.Unlock()
	// Under engMu, with nothing inboxed, every earlier batch from this
	// connection has been stepped: this one cannot overtake it.
	if n.inboxed.Load() != 0 || n.ctx.Err() != nil || n.eng.Map() == nil {
		return false
	}
	n.eng.Clock(time.Now())
	n.step(in)
	n.output()
	n.steppedInline.Add(1)
	return true
}

// drive is the goroutine that steps the engine; it holds engMu for each
// round, from the input it takes to the output it handles. (writeAsync
// may run a round of its own on the caller's goroutine, under engMu too.)
func (n *Node) drive() {
	tick := time.NewTicker(n.cfg.Tick)
	defer tick.Stop()
	n.engMu.Lock()
	n.eng.Tick(time.Now())
	n.engMu.Unlock()
	for {
		select {
		case <-n.ctx.Done():
			n.engMu.Lock()
			defer n.engMu.Unlock()
			for _, w := range n.waiters.All() {
				n.complete(w, partition.Completion{Err: protocol.ErrClosedInFlight})
			}
			for _, p := range append(n.props.take(), n.unmapped.take()...) {
				n.refuse(p, protocol.ErrClosed)
			}
			n.closeSubs()
			return
		case <-n.view.changed:
			n.engMu.Lock()
			n.eng.Clock(time.Now())
			m, clients, unseen := n.view.current()
			// After a server leaves, wait one probe interval before any new
			// epoch, so that a burst of departures (a split seen member by
			// member) starts one round of syncs, not several. Safety does
			// not rest on it: a sync needs promises from a majority of the
			// configuration (rule 9).
			n.eng.SetSettleDelay(n.ms.ProbeInterval())
			if !n.cfg.Client {
				n.relay.setMap(m, n.id, 3*n.ms.ProbeInterval(), time.Now())
			}
			n.logger.Info("fero: node: partition map changed", "version", fmt.Sprintf("%016x", m.Version()), "servers", len(m.Members()), "clients", len(clients))
			n.noteSeedAnswered()
			if len(unseen) > 0 && n.eng.AwaitingConfig() {
				n.logger.Info("fero: node: seeds not seen yet; this node forms no new cluster before it sees every one, or hears from a formed cluster", "unseen", unseen)
			}
			n.eng.SetUnseenSeeds(unseen)
			if err := n.eng.SetMap(m, clients); err != nil {
				n.logger.Error("fero: node: engine refused the map", "err", err)
			} else {
				n.engMap.Store(m)
				n.endMovedStreams(m)
				early := n.early
				n.early = nil
				for _, in := range early {
					n.step(in)
				}
				for _, p := range n.unmapped.take() {
					n.propose(p)
				}
			}
			n.connectPeers(m, clients)
			n.forgetGone(m, clients)
		case in := <-n.inbox:
			n.engMu.Lock()
			n.eng.Clock(time.Now())
			n.step(in)
			n.inboxed.Add(-1)
			n.batch()
		case <-n.props.ready:
			n.engMu.Lock()
			n.eng.Clock(time.Now())
			n.takeProps()
			n.batch()
		case q := <-n.queries:
			n.engMu.Lock()
			q(n.eng)
		case now := <-tick.C:
			n.probeServers(now)
			n.engMu.Lock()
			n.eng.Tick(now)
			n.warnForming(now)
			for _, p := range n.unmapped.expired(now) {
				n.refuse(p, partition.ErrNoMap)
			}
		}
		n.output()
		n.engMu.Unlock()
	}
}

// output handles what the engine has for the driver, then releases the
// batches stepped since the last output; engMu is held.
func (n *Node) output() {
	if n.eng.HasReady() {
		n.process(n.eng.Ready())
		n.eng.Advance()
	}
	n.release()
}

// release hands the decoders and the bytes of the batches stepped this
// round back for reuse. Every step is followed by an output under the
// same hold of engMu, and the engine keeps nothing of a message past its
// step but what reaches the round's Ready (a snapshot's state for the
// disk), which output has acted on by now.
func (n *Node) release() {
	for i, in := range n.stepped {
		n.decoders.put(in.dec)
		in.hold.Release()
		n.stepped[i] = inbound{}
	}
	n.stepped = n.stepped[:0]
}

// defaultInbox is Config.Inbox's default. Each queued batch keeps its
// read block (up to 256 KiB) and its decoded messages: at most 4 MiB of
// blocks and what they decode to. With 256 batches, a server taking a million
// pipelined writes peaked at 230–307 MB of RSS (median 269) for 100 MB of
// records; with 16, at 211–217 MB, with no loss of throughput
// (docs/engine.md, the driver).
const defaultInbox = 16

// maxBatch bounds the inputs the driver takes before it acts on the
// engine's output, and maxRound the output it lets pile up meanwhile (an
// input is a peer's batch, which may hold thousands of entries).
const (
	maxBatch = 256
	maxRound = 4096
)

// batch steps the engine with the messages and proposals already waiting,
// up to maxBatch, before the driver acts on its output: the commits of a
// batch leave in one Commit per partition and copy, instead of one each.
// It stops early once the output reaches maxRound, so a round's events and
// messages stay small enough to stay in cache.
func (n *Node) batch() {
	for range maxBatch {
		if n.eng.Pending() >= maxRound {
			return
		}
		if n.takeProps() > 0 {
			continue
		}
		select {
		case in := <-n.inbox:
			n.step(in)
			n.inboxed.Add(-1)
		default:
			return
		}
	}
}

// takeProps proposes every queued proposal and returns how many there
// were; engMu is held.
func (n *Node) takeProps() int {
	q := n.props.take()
	for i := 0; i < len(q); i += partition.WarmWindow {
		window := q[i:min(len(q), i+partition.WarmWindow)]
		for _, p := range window {
			n.eng.WarmRequest(p.req.Partition, p.req.Key)
		}
		n.eng.WarmRequests()
		for _, p := range window {
			n.propose(p)
		}
	}
	n.props.recycle(q)
	return len(q)
}

// forgetGone drops the batch writers of peers no longer in the map or the
// client list, so they do not pile up as members come and go.
func (n *Node) forgetGone(m *ring.Map, clients []string) {
	gone := func(id string) bool {
		return !slices.Contains(clients, id) && !slices.ContainsFunc(m.Members(), func(x ring.Member) bool { return x.ID == id })
	}
	for id := range n.out {
		if gone(id) {
			delete(n.out, id)
		}
	}
	n.peerCluster.Range(func(k, _ any) bool {
		if id := k.(string); gone(id) {
			n.peerCluster.Delete(id)
		}
		return true
	})
}

// maxEarly bounds the batches kept for the engine before its first map.
const maxEarly = 256

func (n *Node) step(in inbound) {
	if n.eng.Map() == nil {
		// Peers that already see this node may ask it for its position
		// before its own view has produced a map; answering late beats
		// dropping the question (the asker would wait out its sync timeout).
		if len(n.early) < maxEarly {
			n.early = append(n.early, in)
		}
		return
	}
	for msgs := in.msgs; len(msgs) > 0; {
		k := n.eng.Warm(msgs, partition.WarmWindow)
		for _, m := range msgs[:k] {
			if n.cfg.Tracer != nil {
				if f, ok := m.(*partition.Forward); ok && f.Trace != "" {
					n.traceForward(in.from, f)
				}
			}
			if in.limited {
				n.stepLimited(in.from, m)
			} else if err := n.eng.Step(in.from, in.cluster, m); err != nil {
				n.logger.Warn("fero: node: engine refused a message", "from", in.from, "err", err)
			}
		}
		msgs = msgs[k:]
	}
	if in.dec != nil {
		n.stepped = append(n.stepped, in)
	}
}

// stepLimited steps an attached client's message (Engine.StepLimited).
// What a client's engine sends in the course of things and a server does
// not take from an attached one (a fence for a stale commit, an ack of
// an epoch other than the accepted one, as when ownership moves) is
// logged at DEBUG; anything else it refuses at WARN, at most once a
// second per client: no client sends it.
func (n *Node) stepLimited(from string, m partition.Message) {
	err := n.eng.StepLimited(from, m)
	if err == nil {
		return
	}
	switch m.(type) {
	case *partition.Fenced, *partition.CommitAck:
		n.logger.Debug("fero: node: engine refused an attached client's message", "from", from, "err", err)
	default:
		if n.pool.refusals.Allow(from, time.Now()) {
			n.logger.Warn("fero: node: engine refused an attached client's message", "from", from, "err", err)
		}
	}
}

func (n *Node) propose(p proposal) {
	if n.disk != nil && n.disk.err() != nil {
		n.refuse(p, ErrDisk)
		return
	}
	if n.eng.Map() == nil {
		if !n.unmapped.hold(p, time.Now()) {
			n.refuse(p, partition.ErrNoMap)
		}
		return
	}
	if p.read != nil {
		n.proposeRead(p)
		return
	}
	if p.done != nil {
		p.req.Token = n.waiters.Add(waiter{done: p.done, began: p.began, wait: p.req.Wait})
	}
	if err := n.eng.Propose(p.req); err != nil {
		if p.done != nil {
			if w, ok := n.waiters.Take(p.req.Token); ok {
				n.complete(w, partition.Completion{Err: err})
			}
		}
	}
}

// proposeRead reads the value now, under the engine lock, so it is the
// state at the log offset the engine records for the read, and answers
// with it once the engine has confirmed the read.
func (n *Node) proposeRead(p proposal) {
	b, ok := n.store.GetBytes(p.req.Key)
	if p.versioned {
		// Read with the value, under the engine lock that every change
		// takes: the version of the value read.
		v := wire.AppendUint(wire.AppendArrayHeader(nil, 2), n.store.Version(p.req.Key))
		if ok {
			b = append(v, b...)
		} else {
			b = wire.AppendNil(v)
		}
	} else {
		b = bytes.Clone(b)
	}
	done := p.read
	tok := n.waiters.Add(waiter{done: CompleteFunc(func(c partition.Completion) {
		if c.Err != nil {
			done(nil, c.Err)
			return
		}
		done(b, nil)
	})})
	if err := n.eng.ProposeRead(partition.ReadRequest{Partition: p.req.Partition, Token: tok, Deadline: p.req.Deadline}); err != nil {
		n.waiters.Take(tok)
		done(nil, err)
	}
}

// readAsync proposes a linearizable read of key on this node, which must
// own the key's partition; done gets the value (nil if there is none) or
// an error, with the engine held (as WriteAsync's done). It reports false
// when the node is closed.
func (n *Node) readAsync(ctx context.Context, key string, versioned bool, done func([]byte, error)) bool {
	req := partition.Request{Partition: n.store.PartitionOf(key), Key: key}
	req.Deadline, _ = ctx.Deadline()
	n.spawnMu.RLock()
	defer n.spawnMu.RUnlock()
	if n.spawnClosed {
		return false
	}
	if err := n.props.push(ctx, n.ctx, proposal{req: req, read: done, versioned: versioned}, true); err != nil {
		done(nil, err)
	}
	return true
}

// process acts on what the engine asks: events to this node's streams,
// completions to the callers waiting for them, and messages out.
func (n *Node) process(rd partition.Ready) {
	if n.eng.ForeignVersion() != n.seen.foreign || n.eng.Yields() != n.seen.yields {
		n.noteClusters()
	}
	if !n.cfg.Client && n.eng.Map() != nil {
		n.noteVoting()
	}
	if n.disk != nil {
		if err := n.disk.write(rd); err != nil {
			n.diskFailed(rd, err)
			return
		}
	}
	// One batch per peer. The engine sends one message to many copies
	// back to back (a Commit to every copy): encode it once.
	var last partition.Message
	b := n.scratch[:0]
	if rd.Cluster != n.hdrFor {
		n.hdrFor, n.hdr = rd.Cluster, appendCluster(nil, rd.Cluster)
	}
	for _, env := range rd.Messages {
		if len(n.fwdSpans) > 0 {
			if r, ok := env.Msg.(*partition.ForwardReply); ok {
				n.tracedReply(env.To, r)
			}
		}
		if env.Msg != last {
			var err error
			if b, err = partition.AppendMessage(b[:0], env.Msg); err != nil {
				n.logger.Error("fero: node: cannot encode an engine message", "err", err)
				last = nil
				continue
			}
			last = env.Msg
		}
		w := n.out[env.To]
		if w == nil {
			w = &batchWriter{}
			n.out[env.To] = w
		}
		if len(w.buf) == 0 {
			n.outOrder = append(n.outOrder, env.To) // the peer's first message this round
		} else if len(w.buf)+len(b) > maxBatchBytes {
			n.sendTo(env.To, w.take())
			n.outOrder = append(n.outOrder, env.To)
		}
		w.add(n.hdr, b)
	}
	if cap(b) <= maxBatchBytes {
		n.scratch = b
	}
	// Events go first, then completions: a caller that has its answer
	// finds the write's change already handed to this node's streams. A
	// request answered on its connection's reader is written at once
	// (transport.Request), so the batches go last: the commit this round
	// sends to every copy, which the caller does not wait for, leaves
	// after the answer.
	var dropped map[int][3]uint64 // partition → count, lowest and highest offset dropped this round
	for _, ev := range rd.Events {
		if ev.Entry.Type == wire.RecordBatch {
			n.publishBatch(ev)
		} else {
			n.publish(ev)
		}
		switch ev.Kind {
		case partition.EventDropped:
			// Writes this node gave up (never Majority-acked: rule 6): an
			// operator's concern, so WARN, but one line per partition per
			// round, not one per write (a long split's heal drops many).
			if dropped == nil {
				dropped = map[int][3]uint64{}
			}
			d, o := dropped[ev.Partition], ev.Entry.Offset
			if d[0] == 0 || o < d[1] {
				d[1] = o
			}
			d[0], d[2] = d[0]+1, max(d[2], o)
			dropped[ev.Partition] = d
		case partition.EventFenced:
			n.logger.Info("fero: node: engine event", "kind", ev.Kind, "partition", ev.Partition,
				"epoch", ev.Epoch, "owner_by_map", n.ownerByMap(ev.Partition), "offset", ev.Entry.Offset)
		}
	}
	for p, d := range dropped {
		n.logger.Warn("fero: node: dropped writes that another history replaced", "partition", p,
			"writes", d[0], "offsets", fmt.Sprintf("%d-%d", d[1], d[2]), "owner_by_map", n.ownerByMap(p))
	}
	for _, c := range rd.Completions {
		if w, ok := n.waiters.Take(c.Token); ok {
			n.complete(w, c)
		}
	}
	for _, id := range n.outOrder {
		if b := n.out[id].take(); len(b) > 0 {
			n.sendTo(id, b)
		}
	}
	n.outOrder = n.outOrder[:0]
}

// ownerByMap is partition p's owner by this node's map ("" without one).
func (n *Node) ownerByMap(p int) string {
	if m, _, _ := n.view.current(); m != nil {
		if o, ok := m.Owner(p); ok {
			return o.ID
		}
	}
	return ""
}

// maxWaitingMessages bounds the messages kept for a peer being dialed.
const maxWaitingMessages = 4096

// sendTo sends one engine message without ever blocking the driver. With
// no connection yet it dials in the background and keeps the message (up
// to maxWaitingMessages) for the new connection; a peer whose outbox is
// full misses the message. The engine's retries and fetches recover what
// is lost either way; the queue only saves them a timeout at start-up.
func (n *Node) sendTo(id string, b []byte) {
	if via := n.relay.via(id, time.Now()); via != "" && n.relayVia(via, id, b) {
		return // rule 17: id has not been heard from directly for a lease
	}
	if c := n.pool.lookup(id); c != nil {
		n.send(id, c, b)
		return
	}
	n.dialLater(id, b)
}

// connectPeers dials every member with an address, so owners can reach
// clients over the connections clients open, and writes find owners.
func (n *Node) connectPeers(m *ring.Map, clients []string) {
	if m == nil {
		return
	}
	for _, mem := range m.Members() {
		if n.pool.lookup(mem.ID) == nil {
			n.dialLater(mem.ID, nil)
		}
	}
	for _, id := range clients {
		if n.pool.lookup(id) == nil {
			n.dialLater(id, nil)
		}
	}
}

// dialLater dials id in the background, once at a time, keeping msg (if
// any) to send first on the new connection, in order.
func (n *Node) dialLater(id string, msg []byte) {
	if id == n.id {
		return
	}
	addr, ok := n.view.addr(id)
	if !ok || addr == "" {
		return // a client that does not listen connects to us
	}
	n.dmu.Lock()
	waiting, under := n.dialing[id]
	if msg != nil && len(waiting) < maxWaitingMessages {
		waiting = append(waiting, append([]byte(nil), msg...)) // the driver reuses msg
	}
	n.dialing[id] = waiting
	if !under {
		if n.dialAt == nil {
			n.dialAt = map[string]time.Time{}
		}
		n.dialAt[id] = time.Now()
	}
	n.dmu.Unlock()
	if under {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		defer cancel()
		c, err := n.pool.get(ctx, id, addr)
		if err != nil && n.ctx.Err() == nil {
			n.logger.Debug("fero: node: dial failed", "peer", id, "addr", addr, "err", err)
		}
		if err != nil && n.ctx.Err() == nil {
			n.connectionLost(id) // what was sent to it waits for nothing
		}
		n.dmu.Lock()
		if err != nil {
			if n.dialErr == nil {
				n.dialErr = map[string]string{}
			}
			n.dialErr[id] = time.Now().UTC().Format(time.TimeOnly) + " " + err.Error()
		} else {
			delete(n.dialErr, id)
		}
		n.dmu.Unlock()
		// Send what waited. The driver may already have sent newer
		// messages on the connection (the pool shows it as soon as it is
		// adopted); the engine orders what it receives by offset and
		// epoch, so an overtaken message costs nothing but a duplicate.
		n.dmu.Lock()
		defer n.dmu.Unlock()
		if err == nil {
			for _, b := range n.dialing[id] {
				n.send(id, c, b)
			}
		}
		delete(n.dialing, id)
		delete(n.dialAt, id)
	}()
}

// connectionLost tells the engine that the connection to peer id broke or
// could not be made, so the writes forwarded to it whose callers retry
// fail over at once (partition.Engine.ConnectionLost). It waits for the
// driver, so it runs on a goroutine of its own.
func (n *Node) connectionLost(id string) {
	select {
	case n.queries <- func(e *partition.Engine) { e.ConnectionLost(id) }:
	case <-n.ctx.Done():
	}
}

// Status returns the engine's view of every partition, read on the
// driver goroutine (the engine is not safe to read from others).
func (n *Node) Status(ctx context.Context) ([]partition.Status, error) {
	out := make(chan []partition.Status, 1)
	q := func(e *partition.Engine) {
		st := make([]partition.Status, e.Partitions())
		for p := range st {
			st[p] = e.Status(p)
		}
		out <- st
	}
	select {
	case n.queries <- q:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.ctx.Done():
		return nil, protocol.ErrClosed
	}
	return <-out, nil
}

// errStarting answers a request that arrives while the node starts: the
// data address listens before membership and the map exist.
var errStarting = errs.New(errs.Unavailable, "node starting")

// whenStarted refuses requests until Start has set the node up: a request
// arriving between the listen and the first map once found no view and
// panicked (recovered by the transport; the fault suite's restarts showed it).
func (n *Node) whenStarted(h func(*transport.Request)) func(*transport.Request) {
	return func(r *transport.Request) {
		if !n.started.Load() {
			_ = r.Fail(errStarting)
			return
		}
		h(r)
	}
}

// Forget removes servers gone for good from the cluster's configuration
// (partition.Engine.Forget) and returns once a majority of the new
// configuration holds the removal: a removal only this node held would be
// lost if it stopped. If ctx ends first, the removal may still spread;
// Forget again to confirm it.
func (n *Node) Forget(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return errs.New(errs.InvalidArgument, "forget: no server named")
	}
	id := strings.Join(ids, ", ")
	out := make(chan error, 1)
	q := func(e *partition.Engine) {
		for _, id := range ids {
			if err := e.Forget(id); err != nil {
				out <- fmt.Errorf("forget %s: %w", id, err)
				return
			}
		}
		out <- nil
	}
	if err := n.query(ctx, q); err != nil {
		return err
	}
	if err := <-out; err != nil {
		return err
	}
	type count struct{ have, need int }
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		cs := make(chan count, 1)
		q := func(e *partition.Engine) {
			h, nd := e.Forgotten(ids...)
			cs <- count{h, nd}
		}
		if err := n.query(ctx, q); err != nil {
			return err
		}
		c := <-cs
		if c.have >= c.need {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return errs.Errorf(errs.DeadlineExceeded, "forget %s: a majority of the configuration does not hold the removal yet (%d of %d); forget again to confirm: %w", id, c.have, c.need, ctx.Err())
		case <-n.ctx.Done():
			return protocol.ErrClosed
		}
	}
}

// query hands q to the driver goroutine, which runs it with the engine;
// q reports through a channel of its own, buffered so it never blocks.
func (n *Node) query(ctx context.Context, q func(*partition.Engine)) error {
	select {
	case n.queries <- q:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.ctx.Done():
		return protocol.ErrClosed
	}
}

// Voters returns the cluster's configuration as this node knows it.
func (n *Node) Voters(ctx context.Context) ([]partition.Voter, error) {
	ci, err := n.clusterInfo(ctx)
	return ci.voters, err
}

// noteClusters logs what changed about other clusters: this node's
// cluster gave way to another (rule 9, cluster identity), or servers of
// another cluster were refused. Each happens once per server or name, so
// the log cannot be flooded.
func (n *Node) noteClusters() {
	if y := n.eng.Yields(); y != n.seen.yields {
		n.seen.yields = y
		n.logger.Warn("fero: node: this server's cluster gave way to the cluster it met, which holds an earlier life of the server that founded it (a seedless server restarted without a data directory): every partition's copy was dropped, and the writes made in it are reported as dropped; the server now catches up as a learner (docs/engine.md rule 9, cluster identity)",
			"cluster", n.eng.Cluster().String())
	}
	if v := n.eng.ForeignVersion(); v != n.seen.foreign {
		n.seen.foreign = v
		others := n.eng.Foreign()
		ids := slices.Sorted(maps.Keys(others))
		names := make([]string, len(ids))
		for i, id := range ids {
			names[i] = id + " (" + others[id].String() + ")"
		}
		if len(ids) > 0 {
			n.logger.Error("fero: node: servers of another cluster are refused: both clusters founded without a shared server, so neither history may replace the other; stop the servers of one of them, or give it its own resource name (docs/engine.md rule 9, cluster identity)",
				"cluster", n.eng.Cluster().String(), "other", strings.Join(names, ", "))
		}
	}
}

// noteVoting times this server's catch-ups: from the first round it is
// seen not voting (a learner) to the first it is.
func (n *Node) noteVoting() {
	voting := n.eng.Voting()
	switch {
	case !voting && n.learnerSince.IsZero():
		n.learnerSince = time.Now()
	case voting && !n.learnerSince.IsZero():
		d := time.Since(n.learnerSince)
		n.learnerSince = time.Time{}
		n.catchUps.Add(1)
		n.catchUpNanos.Add(int64(d))
		n.lastCatchUp.Store(int64(d))
		n.logger.Info("fero: node: caught up: this server's vote counts", "took", d.Round(time.Millisecond))
	}
}

// clusterView is what the engine says of the configuration and the
// cluster, for status.
type clusterView struct {
	voters  []partition.Voter
	voting  bool
	cluster partition.ClusterID
	foreign map[string]partition.ClusterID
	yields  uint64
	catchUp partition.CatchUp
	forming string // partition.Engine.Forming
}

func (n *Node) clusterInfo(ctx context.Context) (clusterView, error) {
	out := make(chan clusterView, 1)
	q := func(e *partition.Engine) {
		out <- clusterView{e.Voters(), e.Voting(), e.Cluster(), e.Foreign(), e.Yields(), e.CatchUp(), e.Forming()}
	}
	if err := n.query(ctx, q); err != nil {
		return clusterView{}, err
	}
	return <-out, nil
}

// Close leaves the cluster gracefully, stops the driver and closes every
// connection. It is idempotent.
func (n *Node) Close() error {
	var err error
	n.close.Do(func() {
		err = n.ms.Close()
		n.spawnMu.Lock()
		n.spawnClosed = true
		n.spawnMu.Unlock()
		n.cancel()
		// Closing the connections first ends every request's context, so
		// handlers that wait on theirs return before wg.Wait.
		n.pool.close()
		n.feed.close()
		if cerr := n.srv.Close(); err == nil {
			err = cerr
		}
		n.wg.Wait()
		if n.disk != nil {
			// The driver has stopped: leave states on the disk, not a tail
			// of entries to replay at the next start.
			n.engMu.Lock()
			n.eng.SnapshotDisk()
			if n.eng.HasReady() {
				_ = n.disk.write(n.eng.Ready()) // its messages go nowhere now
				n.eng.Advance()
			}
			n.engMu.Unlock()
			if derr := n.disk.close(); err == nil {
				err = derr
			}
		}
	})
	return err
}

// String names the node for logs and tests.
func (n *Node) String() string { return fmt.Sprintf("node %s (%s)", n.id, n.Addr()) }
