// Starting a node: its configuration, Start, and what it sets up once.
package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/storage"
	"github.com/fero-go/fero/internal/transport"
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
		cfg: cfg, id: cfg.ID, logger: cfg.Logger.With("node", cfg.ID),
		inbox: make(chan inbound, cfg.Inbox), decoders: newFreeDecoders(), props: newPropQueue(), queries: make(chan func(*partition.Engine)),
		handlers: make(chan struct{}, cfg.MaxRequests),
	}
	n.once.writer, n.once.turn = protocol.NewWriterID(cfg.ID), make(chan struct{}, 1)
	n.subs.all = make(map[*Subscription]struct{})
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
	n.peers = &peers{
		self: n.id, client: cfg.Client, ctx: n.ctx, logger: n.logger, spawn: n.spawn,
		addr: func(id string) (string, bool) { return n.view.addr(id) }, lost: n.connectionLost,
		pool:  newPool(n.id, append(topts, transport.WithHandler(mux))...),
		relay: newRelays(), dialing: make(map[string][][]byte),
		spills: make(map[string]*spillQueue), spillDrained: make(chan struct{}, 1),
		out: make(map[string]*batchWriter),
	}
	n.peers.pool.logger = n.logger
	n.peers.pool.setSecrets(cfg.Secrets)
	n.auth.conns, n.auth.proving = make(map[*transport.Conn]role), make(map[*transport.Conn]authProving)
	n.SetTokens(cfg.Tokens...)
	n.peers.pool.onAttach = n.serveAttach
	n.peers.pool.onLost = n.connectionLost
	if len(cfg.Servers) > 0 {
		n.peers.pool.attach = true
		if cfg.Token != nil {
			n.peers.pool.token = protocol.TokenKey(cfg.Token)
		}
	}
	mux.HandleFunc(protocol.OpHello, n.peers.pool.serveHello)
	mux.HandleFunc(protocol.OpHelloProof, n.peers.pool.serveProof)
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
	n.notes.formingWarned = time.Now() // the first warning, if any, formingWarnEvery from now
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
	n.view.attached = n.attach.set.ids
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
	n.notes.noSeedSince = time.Now()
	n.logger.Warn("fero: node: no seed answered: this node has joined no cluster, and a node given seeds founds none before it sees them, so it serves no writes (each is refused at once: cluster not formed). It keeps trying the seeds: if they are starting too, this passes once one answers; if not, check that each is the gossip address of a running node of this resource (fero serve prints it when it starts, fero status lists them), or start the first server without seeds",
		"seeds", strings.Join(tried, ", "))
}

// noteSeedAnswered logs, once a seed answers, that the warning of
// warnNoSeed no longer holds; the driver calls it as the map changes.
func (n *Node) noteSeedAnswered() {
	if n.notes.noSeedSince.IsZero() {
		return
	}
	for _, s := range n.ms.Seeds() {
		if s.Answered {
			n.logger.Warn("fero: node: a seed answered; this node has joined its cluster", "seed", s.Seed,
				"after", time.Since(n.notes.noSeedSince).Round(time.Millisecond))
			n.notes.noSeedSince = time.Time{}
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
	if n.peers.pool.keys.Load() == nil {
		return errs.New(errs.FailedPrecondition, "set secrets: the node started without a cluster secret")
	}
	if err := n.ms.SetSecretKeys(gossipKeys(secrets)...); err != nil {
		return err
	}
	n.peers.pool.setSecrets(secrets)
	return nil
}

func gossipKeys(secrets [][]byte) [][]byte {
	out := make([][]byte, len(secrets))
	for i, s := range secrets {
		out[i] = protocol.GossipKey(s)
	}
	return out
}
