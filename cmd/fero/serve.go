package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fero-go/fero/internal/dashboard"
	"github.com/fero-go/fero/internal/storage"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
	"github.com/fero-go/fero/pkg/fero"
)

// serveFlags mirror the options of pkg/fero that an operator sets.
type serveFlags struct {
	id           string
	listen       string
	bind         string
	seeds        []string
	requireSeeds bool
	seedWait     time.Duration
	portRange    string
	scanHosts    []string
	multicast    bool
	preset       string
	client       bool
	attach       []string
	partitions   int
	replicas     int
	vnodes       int
	historyMax   int
	historyBytes int
	quorum       int
	maxEntry     int
	logLevel     string
	readyServer  int
	secretFile   string
	tokenFile    string
	insecure     bool
	tls          tlsFlags
	dataDir      string
	inMemory     bool
	fsync        string
	pprof        string
	http         string
	traceOTLP    string
	traceSample  float64
	dns          string
	dnsPort      int
	dnsServer    string
	expect       int
	jepsenVerbs  bool
	// Limits on input (docs/security.md).
	maxConns, maxConnsPerIP       int
	maxUnproved, maxUnprovedPerIP int
	authMaxFrame                  int
	newConnRate                   float64
	newConnBurst                  int
	authTimeout                   time.Duration
	maxInflight, maxInflightBytes int
	maxFrame                      int
	frameTimeout                  time.Duration
	// Engine timings, which a fault suite compresses.
	writeTimeout  time.Duration
	syncTimeout   time.Duration
	probeInterval time.Duration
	clockSkew     time.Duration
}

func newServe() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve RESOURCE",
		Short: "Run a generic server node for a resource",
		Long: `serve runs one node of RESOURCE's cluster until it is interrupted, then
leaves the cluster gracefully. The node holds the resource's dynamic
documents and answers ADD, UPDATE, REMOVE and GET; any other verb gets an
"unknown verb" error.

Its first line on stdout names its addresses:

  fero: node <id> of "<resource>": gossip <host:port> data <host:port>

Other nodes join with --seeds <gossip address>; put, get, rm, tail and status
take --addr <data address>. A node given seeds never founds a cluster of
its own before it has seen them: while none answers it has joined nothing
and serves no writes, says so in a warning, and keeps trying them. With
--require-seeds it exits instead if none answers within --seed-wait.

--expect N makes a new cluster form only once N servers see each other,
however they found each other (seeds, --dns, multicast, --ports): until
then a server takes no writes (refused at once: "cluster not formed"), is
not ready, and warns every 5 s what it sees and which lookups failed.
Give every server of a new cluster the same N, the number you start (at
least a majority of it). A server that has met its cluster rejoins it
without N, and a newcomer joins a formed cluster as soon as it meets any
server of it. --dns needs it.

Every node of a resource must use the same --partitions, --replicas and
--vnodes.

A client node (--client) given --attach <data address>,... does not gossip
and needs no cluster secret: it learns the servers from one of the addresses
that answers, proves the first token of --token-file to each server, and
its first line says "attached <addresses>" where others say "gossip
<address>". The servers take from it only its own writes, fetches and acks
(docs/security.md, Attached clients).

A server keeps its partitions on disk and loads them when it starts again:
in --data-dir, or by default in fero-data/RESOURCE/ID with --id, else the
first of fero-data/RESOURCE/0, 1, ... that no other server holds (so
servers started side by side in one directory each take their own, and
take them back when started again). --in-memory keeps nothing: a restart
brings that server back empty.

Without --cluster-secret-file, any process that reaches the node's ports
can pose as a peer: that is for development on loopback, and serve refuses
to listen or gossip on any other address unless --insecure is given. With
it, every node proves on each connection that it knows a secret of the
file, and gossip is encrypted with a key derived from the first secret.
To rotate a secret without downtime, rewrite every node's file and send it
SIGHUP three times over, each round done on every node before the next:
"old, new", then "new, old", then "new" (docs/security.md).

With a secret or tokens, a data connection gets a handshake's budget until
it proves one: messages of at most --auth-max-frame bytes, --auth-timeout
to prove it, and caps of its own (--max-unproved-conns,
--max-unproved-conns-per-ip) that never take the places of peers and
clients that proved a credential (--max-conns, --max-conns-per-ip); one
source IP opens at most --new-conn-rate connections a second
(--new-conn-burst at once), the rest reset at once.

With --tls-cert, --tls-key and --tls-ca the data plane runs over TLS 1.3:
every connection, between nodes and from clients, is encrypted, and each
node's certificate must chain to the CA (host names are not checked: the
cluster secret says which node is which). Gossip is encrypted by the
cluster secret.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServe(cmd, args[0], &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.secretFile, "cluster-secret-file", "", "file of cluster secrets, one per line (the first proves this node, any is accepted); SIGHUP re-reads it; make one with `fero secret`")
	fl.StringVar(&f.tokenFile, "token-file", "", "file of client tokens this node accepts, one per line (fero put/get/status/tail --token-file); SIGHUP re-reads it")
	f.tls.register(fl, true)
	fl.BoolVar(&f.insecure, "insecure", false, "serve beyond loopback without a cluster secret: anyone who reaches the ports can pose as a peer")
	fl.StringVar(&f.id, "id", "", "node ID (default: the data dir's, or random)")
	fl.StringVar(&f.dataDir, "data-dir", "", "keep this server's partitions in DIR and load them at start (default: fero-data/RESOURCE/ID with --id, else the first of fero-data/RESOURCE/0, 1, ... no other server holds)")
	fl.BoolVar(&f.inMemory, "in-memory", false, "keep no data directory: a restarted server comes back empty and catches up from its peers")
	fl.StringVar(&f.fsync, "fsync", "group", "when writes reach the disk: group (fsync before any ack leaves), interval[=D] (every D, default 100ms), never (the OS decides)")
	fl.StringVar(&f.pprof, "pprof", "", "serve Go's profiler (/debug/pprof/) on this loopback address host:port, for finding where a node spends its time")
	fl.StringVar(&f.http, "http", "", "serve /metrics (Prometheus), /healthz, /readyz, the admin API (/api/v1/) and the dashboard (/dashboard/) on this address host:port (docs/operations.md)")
	fl.StringVar(&f.traceOTLP, "trace-otlp", "", "send OpenTelemetry traces to this OTLP/HTTP endpoint (http://collector:4318, to which /v1/traces is added when it has no path); off by default (docs/operations.md, Tracing)")
	fl.Float64Var(&f.traceSample, "trace-sample", 0.01, "with --trace-otlp, the share of the requests that arrive untraced to record (0 to 1); a request that carries its caller's trace context follows the caller's decision")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:0", "data-plane address host:port")
	fl.StringVar(&f.bind, "bind", "", `gossip address host:port (default "127.0.0.1:0" with --preset local, "0.0.0.0:0" with lan)`)
	fl.StringSliceVar(&f.seeds, "seeds", nil, "gossip addresses to join, comma-separated (the original's hosts)")
	fl.StringVar(&f.dns, "dns", "", "discover peers through DNS, looked up again at every re-join round: a name starting with _ as SRV records (a Kubernetes headless Service's _gossip._tcp.NAME), any other as A/AAAA records joined at --dns-port")
	fl.IntVar(&f.dnsPort, "dns-port", 0, "the gossip port of the A/AAAA records of --dns (0: 7946)")
	fl.StringVar(&f.dnsServer, "dns-server", "", "send --dns's lookups to this DNS server host:port instead of the system's resolver")
	fl.IntVar(&f.expect, "expect", 0, "servers that form a new cluster: a server that has met no formed cluster forms one only once it sees this many (itself included), takes no writes and is not ready until then, and warns every few seconds what it sees (required with --dns; give every server of a new cluster the same number)")
	fl.BoolVar(&f.requireSeeds, "require-seeds", false, "exit with an error, rather than wait joined to nothing, if no seed answers within --seed-wait")
	fl.DurationVar(&f.seedWait, "seed-wait", 10*time.Second, "how long --require-seeds waits for a seed to answer")
	fl.StringVar(&f.portRange, "ports", "", "gossip port range START-END to take a port from and scan for peers (the original's ports)")
	fl.StringSliceVar(&f.scanHosts, "scan-hosts", nil, "hosts whose port range is scanned (default the loopback host)")
	fl.BoolVar(&f.multicast, "multicast", false, "discover peers by UDP multicast (on by default with --preset lan)")
	fl.StringVar(&f.preset, "preset", "local", "gossip timings: local (one machine) or lan")
	fl.BoolVar(&f.client, "client", false, "run a client node: it owns nothing and keeps a full copy")
	fl.StringSliceVar(&f.attach, "attach", nil, "with --client: attach to the servers at these data addresses (comma-separated) instead of joining gossip, proving the first token of --token-file rather than the cluster secret (docs/security.md, Attached clients)")
	fl.IntVar(&f.partitions, "partitions", 271, "partition count")
	fl.IntVar(&f.replicas, "replicas", 2, "servers besides the owner whose acks make a write durable")
	fl.IntVar(&f.vnodes, "vnodes", 200, "virtual nodes per member on the ring (the original's dht.vnodes)")
	fl.IntVar(&f.historyMax, "history-max", 10000, "commits kept per partition (the original's partitions.history.max)")
	fl.IntVar(&f.historyBytes, "history-bytes", 2<<20, "bytes of keys and values kept in history per partition (the newest commit is kept whatever its size)")
	fl.IntVar(&f.quorum, "quorum", 0, "live servers an owner needs to accept writes (0: a majority of the most seen)")
	fl.IntVar(&f.maxEntry, "max-entry", 1<<20, "largest key plus value of one write, in bytes")
	fl.IntVar(&f.maxConns, "max-conns", transport.DefaultMaxConns, "data connections this node accepts in all; one over is closed at once (with a secret or tokens: connections that proved one)")
	fl.IntVar(&f.maxConnsPerIP, "max-conns-per-ip", transport.DefaultMaxConnsPerIP, "data connections this node accepts from one source IP, loopback included (with a secret or tokens: connections that proved one)")
	fl.IntVar(&f.maxUnproved, "max-unproved-conns", transport.DefaultMaxUnprovedConns, "with a secret or tokens: data connections that have not proved one yet, in all; at the cap a newcomer takes the place of the oldest of the source IP that holds the most, or is closed")
	fl.IntVar(&f.maxUnprovedPerIP, "max-unproved-conns-per-ip", transport.DefaultMaxUnprovedConnsPerIP, "with a secret or tokens: data connections from one source IP that have not proved one yet; one over is closed at once")
	fl.Float64Var(&f.newConnRate, "new-conn-rate", transport.DefaultNewConnRate, "with a secret or tokens: data connections a second this node accepts from one source IP; one over is reset at once, before any handshake")
	fl.IntVar(&f.newConnBurst, "new-conn-burst", transport.DefaultNewConnBurst, "with a secret or tokens: data connections this node accepts at once from one source IP before --new-conn-rate paces them")
	fl.IntVar(&f.authMaxFrame, "auth-max-frame", transport.DefaultAuthMaxFrame, "with a secret or tokens: largest message, in bytes, a connection may send before it proves one (the handshakes need a few hundred)")
	fl.DurationVar(&f.authTimeout, "auth-timeout", transport.DefaultAuthTimeout, "with a secret or tokens: how long a data connection has to prove one before it is closed")
	fl.IntVar(&f.maxInflight, "max-inflight", transport.DefaultMaxInflight, "requests one connection may have open (handler not yet answered); one over is answered resource exhausted")
	fl.IntVar(&f.maxInflightBytes, "max-inflight-bytes", transport.DefaultMaxInflightBytes, "bytes of read buffer the open requests of one connection may hold")
	fl.IntVar(&f.maxFrame, "max-frame", wire.DefaultMaxFrame, "largest message accepted or sent, in bytes")
	fl.DurationVar(&f.frameTimeout, "frame-timeout", transport.DefaultFrameTimeout, "longest a message may take to arrive once its first byte has (0: no limit)")
	fl.StringVar(&f.logLevel, "log-level", "warn", "log level on stderr: debug, info, warn or error")
	fl.IntVar(&f.readyServer, "wait-servers", 0, "before printing ready, wait until the node sees this many servers")
	fl.DurationVar(&f.writeTimeout, "write-timeout", 0, "longest life of a write: no node commits it later (0: the default, 10s)")
	fl.DurationVar(&f.syncTimeout, "sync-timeout", 0, "how long a new owner's sync waits before it starts over (0: the default, 2s)")
	fl.DurationVar(&f.probeInterval, "probe-interval", 0, "heartbeat and lag-probe interval; the owner's lease is three of them (0: the default, 1s)")
	fl.DurationVar(&f.clockSkew, "clock-skew", 0, "most two servers' clocks may differ by (0: the default, 100ms)")
	fl.BoolVar(&f.jepsenVerbs, "jepsen-verbs", false, "answer the fault suite's test verbs INCR, TRANSFER and BANKINIT (cmd/fero/jepsen.go; docs/chaos.md)")
	_ = fl.MarkHidden("jepsen-verbs")
	return cmd
}

func runServe(cmd *cobra.Command, resource string, f *serveFlags) error {
	ctx := cmd.Context()
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	opts := []fero.NodeOption{
		fero.WithLogger(logger), fero.WithListen(f.listen),
		fero.WithPartitions(f.partitions), fero.WithReplicas(f.replicas), fero.WithVNodes(f.vnodes),
		fero.WithHistoryMax(f.historyMax), fero.WithHistoryBytes(f.historyBytes), fero.WithQuorum(f.quorum), fero.WithMaxEntry(f.maxEntry),
		fero.WithMaxConns(f.maxConns, f.maxConnsPerIP), fero.WithMaxInflight(f.maxInflight, f.maxInflightBytes),
		fero.WithMaxFrame(f.maxFrame), fero.WithFrameTimeout(f.frameTimeout),
		fero.WithPreAuthLimits(f.authMaxFrame, f.maxUnproved, f.maxUnprovedPerIP), fero.WithAuthTimeout(f.authTimeout),
		fero.WithNewConnRate(f.newConnRate, f.newConnBurst),
	}
	for _, d := range []struct {
		v   time.Duration
		opt func(time.Duration) fero.NodeOption
	}{
		{f.writeTimeout, fero.WithWriteTimeout}, {f.syncTimeout, fero.WithSyncTimeout},
		{f.probeInterval, fero.WithProbeInterval}, {f.clockSkew, fero.WithClockSkew},
	} {
		if d.v != 0 {
			opts = append(opts, d.opt(d.v))
		}
	}
	switch f.preset {
	case "local":
		opts = append(opts, fero.WithPreset(fero.PresetLocal))
	case "lan":
		opts = append(opts, fero.WithPreset(fero.PresetLAN))
	default:
		return fmt.Errorf("--preset: %q is neither local nor lan", f.preset)
	}
	if f.id != "" {
		opts = append(opts, fero.WithID(f.id))
	}
	if f.jepsenVerbs {
		opts = append(opts, fero.WithHandler(jepsenHandler))
	}
	if f.inMemory && cmd.Flags().Changed("data-dir") {
		return errors.New("--in-memory and --data-dir exclude each other")
	}
	durable := !f.inMemory && !f.client
	fs, err := fero.ParseFsync(f.fsync)
	if err != nil {
		return fmt.Errorf("--fsync: %w", err)
	}
	if !durable && cmd.Flags().Changed("fsync") {
		return errors.New("--fsync needs a data directory (not --in-memory or --client)")
	}
	if f.bind != "" {
		opts = append(opts, fero.WithBind(f.bind))
	}
	switch {
	case f.expect < 0:
		return fmt.Errorf("--expect %d: want the number of servers that form a new cluster", f.expect)
	case f.expect > 0 && f.client:
		return errors.New("--expect is for servers: a client node forms no cluster")
	case f.dns != "" && f.expect == 0 && !f.client:
		return errors.New("--dns needs --expect N, the number of servers that form the cluster: without it a server whose lookups fail (a wrong name, DNS not ready yet) founds a cluster alone, and its writes are dropped when it meets the others")
	case f.expect > 0:
		opts = append(opts, fero.WithExpect(f.expect))
	}
	switch {
	case f.dns != "":
		opts = append(opts, fero.WithDNS(f.dns, f.dnsPort))
		if f.dnsServer != "" {
			opts = append(opts, fero.WithDNSServer(f.dnsServer))
		}
	case f.dnsPort != 0 || f.dnsServer != "":
		return errors.New("--dns-port and --dns-server go with --dns")
	}
	if len(f.seeds) > 0 {
		opts = append(opts, fero.WithSeeds(f.seeds...))
	}
	switch {
	case f.requireSeeds && len(f.seeds) == 0:
		return errors.New("--require-seeds needs --seeds")
	case f.requireSeeds && f.seedWait <= 0:
		return fmt.Errorf("--seed-wait %v: want a positive duration", f.seedWait)
	case f.requireSeeds:
		opts = append(opts, fero.WithRequireSeeds(f.seedWait))
	case cmd.Flags().Changed("seed-wait"):
		return errors.New("--seed-wait needs --require-seeds")
	}
	if f.portRange != "" {
		var lo, hi int
		if _, err := fmt.Sscanf(strings.TrimSpace(f.portRange), "%d-%d", &lo, &hi); err != nil {
			return fmt.Errorf("--ports: want START-END, got %q", f.portRange)
		}
		opts = append(opts, fero.WithPortRange(lo, hi))
	}
	if len(f.scanHosts) > 0 {
		opts = append(opts, fero.WithScanHosts(f.scanHosts...))
	}
	if cmd.Flags().Changed("multicast") {
		if f.multicast {
			opts = append(opts, fero.WithMulticast(fero.MulticastConfig{}))
		} else {
			opts = append(opts, fero.WithoutMulticast())
		}
	}
	if f.client {
		opts = append(opts, fero.Client())
	}
	var secrets [][]byte
	if len(f.attach) > 0 {
		switch {
		case !f.client:
			return errors.New("--attach needs --client: only a client node attaches to servers")
		case f.secretFile != "":
			return errors.New("--attach: an attached client proves a client token (--token-file), never the cluster secret; a node with the secret joins gossip (--seeds) instead")
		case len(f.seeds) > 0:
			return errors.New("--attach replaces --seeds: an attached client learns the servers from those it attaches to")
		}
		opts = append(opts, fero.WithAttach(f.attach...))
		if f.tokenFile != "" {
			tokens, err := fero.ReadSecretFile(f.tokenFile)
			if err != nil {
				return fmt.Errorf("--token-file: %w", err)
			}
			opts = append(opts, fero.WithToken(tokens[0]))
		}
		// No loopback check: it gossips nothing, and the servers decide
		// what its token allows.
	} else if f.secretFile != "" {
		var err error
		if secrets, err = readSecrets(f.secretFile); err != nil {
			return err
		}
		opts = append(opts, fero.WithClusterSecret(secrets...))
	} else if f.tokenFile != "" {
		return errors.New("--token-file needs --cluster-secret-file: client tokens mean nothing while anyone can pose as a peer")
	} else if !f.insecure {
		bind := f.bind
		if bind == "" && f.preset == "lan" {
			bind = "0.0.0.0:0"
		}
		for _, a := range []struct{ flag, addr string }{{"--listen", f.listen}, {"--bind", bind}} {
			if a.addr != "" && !fero.IsLoopback(a.addr) {
				return fmt.Errorf("%s %s is beyond loopback, and without --cluster-secret-file anyone who reaches it can pose as a peer; give a secret (fero secret > FILE), or --insecure to serve without one", a.flag, a.addr)
			}
		}
	}
	if f.tokenFile != "" && len(f.attach) == 0 {
		tokens, err := fero.ReadSecretFile(f.tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		opts = append(opts, fero.WithClientTokens(tokens...))
	}
	if cfg, err := f.tls.config(true); err != nil {
		return err
	} else if cfg != nil {
		opts = append(opts, fero.WithTLS(cfg))
	}
	if f.pprof != "" {
		stop, err := servePprof(f.pprof)
		if err != nil {
			return err
		}
		defer stop()
	}
	if f.traceOTLP != "" {
		tp, err := otlpTracer(ctx, f.traceOTLP, f.traceSample, resource)
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = tp.Shutdown(sctx) // sends what is batched
		}()
		opts = append(opts, fero.WithTracerProvider(tp))
	}
	var hs *httpServer
	if f.http != "" {
		// Before the node opens, so that /healthz answers while a large
		// data directory loads (a liveness probe must not kill a node for
		// taking its time), with /readyz saying it is starting.
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		if hs, err = serveHTTP(f.http, reg); err != nil {
			return err
		}
		defer hs.stop()
		opts = append(opts, fero.WithMetrics(reg))
	}
	var r *fero.Resource
	switch {
	case !durable:
		r, err = fero.Open(ctx, resource, opts...)
		if err == nil && !f.client {
			logger.Warn("fero: this server keeps its partitions in memory only (--in-memory): a restart brings it back empty, and a whole-cluster restart loses the data")
		}
	case f.dataDir != "":
		r, err = fero.Open(ctx, resource, append(opts, fero.WithDataDir(f.dataDir), fero.WithFsync(fs))...)
	default:
		var dir string
		r, dir, err = openDefaultDir(ctx, resource, f.id, opts, fs)
		if err == nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "fero: data in %s (the default; --data-dir DIR to choose, --in-memory for none)\n", dir)
		}
	}
	if err != nil {
		return err
	}
	defer r.Close()
	if hs != nil {
		hs.res.Store(r)
		r.AdminHandler() // start sampling: the dashboard shows the minutes before it was opened
	}
	if f.secretFile != "" {
		stop := reloadSecretsOnHUP(r, f.secretFile, f.tokenFile, cmd.OutOrStdout(), logger)
		defer stop()
	} else if len(f.attach) == 0 {
		logger.Warn("fero: serving without a cluster secret: any process that reaches this node can pose as a peer (development only)")
	}
	out := cmd.OutOrStdout()
	if len(f.attach) > 0 {
		fmt.Fprintf(out, "fero: node %s of %q: attached %s data %s\n", r.ID(), resource, strings.Join(f.attach, ","), r.Addr())
	} else {
		fmt.Fprintf(out, "fero: node %s of %q: gossip %s data %s\n", r.ID(), resource, r.GossipAddr(), r.Addr())
	}
	if hs != nil {
		fmt.Fprintf(out, "fero: http %s (/metrics, /healthz, /readyz, /api/v1/, /dashboard/)\n", hs.addr)
	}
	if f.readyServer > 0 {
		if err := r.WaitServers(ctx, f.readyServer); err != nil {
			return err
		}
		fmt.Fprintf(out, "fero: node %s sees %d servers\n", r.ID(), f.readyServer)
	}
	<-ctx.Done()
	fmt.Fprintf(out, "fero: node %s leaving\n", r.ID())
	start := time.Now()
	if err := r.Close(); err != nil {
		return err
	}
	fmt.Fprintf(out, "fero: node %s left in %v\n", r.ID(), time.Since(start).Round(time.Millisecond))
	return nil
}

// defaultDirs is how many numbered data directories serve tries, in the
// default place, for a server started without --id or --data-dir.
const defaultDirs = 64

// openDefaultDir opens resource on the default data directory: with an ID,
// fero-data/RESOURCE/ID under the working directory; without one, the first
// of fero-data/RESOURCE/0, 1, ... that no other process holds, so servers
// started side by side in one directory each take their own, and a server
// restarted takes back a directory with its identity and data (the ID is
// the directory's).
func openDefaultDir(ctx context.Context, resource, id string, opts []fero.NodeOption, fs fero.Fsync) (*fero.Resource, string, error) {
	base := filepath.Join("fero-data", url.PathEscape(resource))
	open := func(dir string) (*fero.Resource, error) {
		return fero.Open(ctx, resource, append(slices.Clip(opts), fero.WithDataDir(dir), fero.WithFsync(fs))...)
	}
	if id != "" {
		dir := filepath.Join(base, url.PathEscape(id))
		r, err := open(dir)
		return r, dir, err
	}
	for i := range defaultDirs {
		dir := filepath.Join(base, strconv.Itoa(i))
		r, err := open(dir)
		if errors.Is(err, storage.ErrLocked) {
			continue
		}
		return r, dir, err
	}
	return nil, "", fmt.Errorf("data dirs %s/0 to %d are all in use by other servers: give --data-dir DIR", base, defaultDirs-1)
}

// readSecrets reads --cluster-secret-file.
func readSecrets(path string) ([][]byte, error) {
	s, err := fero.ReadSecretFile(path)
	if err != nil {
		return nil, fmt.Errorf("--cluster-secret-file: %w", err)
	}
	return s, nil
}

// reloadSecretsOnHUP re-reads the secret file on each SIGHUP and installs
// it; it logs how many secrets it took, never what they are.
func reloadSecretsOnHUP(r *fero.Resource, path, tokenPath string, out io.Writer, logger *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-hup:
			}
			secrets, err := readSecrets(path)
			if err == nil {
				err = r.SetClusterSecret(secrets...)
			}
			if err != nil {
				logger.Error("fero: cluster secret not reloaded; the node keeps the secrets it had", "err", err)
				continue
			}
			fmt.Fprintf(out, "fero: node %s took %d cluster secrets from %s\n", r.ID(), len(secrets), path)
			if tokenPath == "" {
				continue
			}
			tokens, err := fero.ReadSecretFile(tokenPath)
			if err == nil {
				err = r.SetClientTokens(tokens...)
			}
			if err != nil {
				logger.Error("fero: client tokens not reloaded; the node keeps the tokens it had", "err", err)
				continue
			}
			fmt.Fprintf(out, "fero: node %s took %d client tokens from %s\n", r.ID(), len(tokens), tokenPath)
		}
	}()
	return func() { signal.Stop(hup); close(done) }
}

// httpServer serves a node's metrics and health (--http).
type httpServer struct {
	addr string
	res  atomic.Pointer[fero.Resource] // set once the node has opened
	stop func()
}

// readyTimeout bounds a /readyz check (it asks the node's engine).
const readyTimeout = 2 * time.Second

// serveHTTP serves /metrics from reg, /healthz and /readyz on addr, and
// the admin API and dashboard.
// /healthz answers 200 while the process serves HTTP at all and its data
// directory has not failed (Resource.Healthy): the question a liveness
// probe asks. /readyz answers 200 once the node has joined and
// serves its share (fero.Resource.Ready), and 503 with the reasons, one a
// line, until then.
func serveHTTP(addr string, reg *prometheus.Registry) (*httpServer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	hs := &httpServer{addr: l.Addr().String()}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if r := hs.res.Load(); r != nil {
			if err := r.Healthy(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, err)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		r := hs.res.Load()
		if r == nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "starting: the node has not opened yet (loading its data directory, or joining)")
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), readyTimeout)
		defer cancel()
		if err := r.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	// The admin API and the dashboard (docs/admin-api.md): the page at
	// once, the API once the node has opened.
	mux.Handle("/", dashboard.Pending(func() http.Handler {
		if r := hs.res.Load(); r != nil {
			return r.AdminHandler()
		}
		return nil
	}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	hs.stop = func() { _ = srv.Close() }
	return hs, nil
}

// otlpTracer returns a tracer provider that sends spans in batches to the
// OTLP/HTTP endpoint (a URL, http:// or https://; one with no path gets
// the standard /v1/traces), recording the share
// sample of the traces that start at this node and following the caller's
// decision for the others. The standard OTEL_EXPORTER_OTLP_* variables
// (headers, certificates, timeouts) apply.
func otlpTracer(ctx context.Context, endpoint string, sample float64, resource string) (*sdktrace.TracerProvider, error) {
	if sample < 0 || sample > 1 {
		return nil, fmt.Errorf("--trace-sample %v: want a share from 0 to 1", sample)
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--trace-otlp %q: want an http:// or https:// URL, such as http://localhost:4318", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		// A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is: traces go to
		// its /v1/traces.
		u.Path = "/v1/traces"
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("--trace-otlp: %w", err)
	}
	res, err := otelresource.Merge(otelresource.Default(), otelresource.NewSchemaless(
		attribute.String("service.name", "fero-"+resource)))
	if err != nil {
		return nil, fmt.Errorf("--trace-otlp: %w", err)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sample))),
	), nil
}

// servePprof serves net/http/pprof's handlers on addr, which must be a
// loopback address: a profile shows what the node holds.
func servePprof(addr string) (stop func(), err error) {
	if !fero.IsLoopback(addr) {
		return nil, fmt.Errorf("--pprof %s: the profiler serves on loopback only", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return func() { _ = srv.Close() }, nil
}
