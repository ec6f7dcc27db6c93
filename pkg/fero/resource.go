package fero

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/dashboard"
	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/gctune"
	"github.com/fero-go/fero/internal/node"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/wire"
)

// ErrClosed is returned by calls on a closed resource (CodeUnavailable).
var ErrClosed = protocol.ErrClosed

// Resource is one node's handle on a named resource: a key/value map that
// every node of the resource holds a full copy of. Reads are local. Writes
// go to the owner of the key's partition, which commits them and fans them
// out to every copy. Keys are paths: "user.tags.0" addresses element 0 of
// the tags array of the top-level key "user"; the top-level key picks the
// partition.
//
// Its methods are safe for concurrent use.
type Resource struct {
	name   string
	cfg    *config
	n      *node.Node
	logger *slog.Logger
	build  doc.Builder

	replay   *node.Subscription
	replayWG sync.WaitGroup
	close    sync.Once
	closeErr error
	// collector is the node's, registered by WithMetrics.
	collector prometheus.Collector
	// dash is the admin API and dashboard, made by the first
	// AdminHandler.
	dashOnce sync.Once
	dash     *dashboard.Dashboard
	// call is Call through its interceptors, composed at Open; stream is
	// Stream through its.
	call   CallFunc
	stream StreamFunc
	// gcStop ends this node's share of the collector's tuning; gcTuned
	// says whether the tuning ran when it opened (WithoutGCTuning).
	gcStop  func()
	gcTuned bool
}

// Open starts a node of the named resource and joins its cluster. It
// returns once the node listens and gossips; it does not wait for peers
// (see [Resource.WaitServers]), except that with [WithConnect] it waits up
// to the connect wait for another server and then restores the store's
// state if it found none.
func Open(ctx context.Context, name string, opts ...NodeOption) (*Resource, error) {
	cfg := newNodeConfig(opts)
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.expect < 0:
		return nil, errs.Errorf(errs.InvalidArgument, "WithExpect(%d): want the number of servers that form a new cluster, 1 or more", cfg.expect)
	case cfg.expect > 0 && cfg.client:
		return nil, errs.New(errs.InvalidArgument, "WithExpect is for servers: a client node forms no cluster")
	}
	if err := checkSecrets(cfg.secrets); err != nil {
		return nil, err
	}
	if err := checkSecrets(cfg.tokens); err != nil {
		return nil, err
	}
	r := &Resource{name: name, cfg: cfg, logger: cfg.logger.With("resource", name)}
	ncfg := node.Config{
		ID: cfg.id, Resource: name, Client: cfg.client, Listen: cfg.listen,
		Membership: cfg.membership, Ring: cfg.ring, Engine: cfg.engine, Transport: cfg.transport,
		Logger: r.logger, Tick: cfg.tick, MaxRequests: cfg.maxRequests, Secrets: cfg.secrets, Tokens: cfg.tokens,
		DataDir: cfg.dataDir, Sync: cfg.fsync, Metrics: cfg.metrics != nil, Tracer: cfg.tracer,
		Servers: cfg.attach, NoRetry: cfg.noRetry, Expect: cfg.expect,
	}
	if len(cfg.attach) > 0 {
		ncfg.Token = cfg.token
	}
	if len(cfg.interceptors) > 0 {
		h := cfg.handler
		if h == nil {
			h = func(ctx context.Context, req *Request) (any, error) { return req.Next(ctx) }
		}
		cfg.handler = chainHandler(h, cfg.interceptors)
	}
	if cfg.handler != nil {
		if verbs := cfg.concurrent; len(verbs) > 0 {
			ncfg.Concurrent = func(verb string) bool { return verbs[verb] }
		}
		ncfg.Handler = r.serve
	}
	r.call = chainCalls(r.callDirect, callChain(cfg))
	r.stream = chainStreams(r.streamDirect, cfg.streamInterceptors)
	n, err := node.Start(ctx, ncfg)
	if err != nil {
		return nil, err
	}
	r.n = n
	if !cfg.noGCTuning {
		r.gcStop, r.gcTuned = gctune.Start()
		r.logger.Debug("fero: garbage collector tuning", "on", r.gcTuned)
	}
	if err := r.registerMetrics(); err != nil {
		_ = n.Close()
		return nil, err
	}
	if len(cfg.secrets) == 0 && len(cfg.attach) == 0 {
		for _, addr := range []string{r.Addr(), r.GossipAddr()} {
			if !IsLoopback(addr) {
				r.logger.Warn("fero: no cluster secret, and the node is reachable beyond loopback: any process that reaches it can pose as a peer (see WithClusterSecret)", "addr", addr)
				break
			}
		}
	}
	if cfg.seedWait > 0 {
		if err := r.awaitSeed(ctx); err != nil {
			_ = r.Close()
			return nil, err
		}
	}
	if cfg.store != nil {
		if err := r.connect(ctx); err != nil {
			_ = r.Close()
			return nil, err
		}
	}
	return r, nil
}

// SetClusterSecret replaces the cluster secrets of a running node (see
// [WithClusterSecret]): it proves itself and encrypts gossip with the
// first from now on, and accepts peers that use any of them. To rotate a
// cluster's secret without downtime, go over every node three times, each
// round finished on every node before the next starts: (old, new), then
// (new, old), then (new). A node opened without a secret cannot take one.
func (r *Resource) SetClusterSecret(secrets ...[]byte) error {
	if err := checkSecrets(secrets); err != nil {
		return err
	}
	return r.n.SetSecrets(secrets...)
}

// ReadSecretFile reads a cluster secret file, as fero serve's
// --cluster-secret-file: one secret per line (the first proves this node),
// blank lines and surrounding spaces ignored, each at least
// MinSecretSize bytes. `fero secret` prints one.
func ReadSecretFile(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errs.Errorf(errs.InvalidArgument, "cluster secret file: %w", err)
	}
	var out [][]byte
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, []byte(line))
		}
	}
	if len(out) == 0 {
		return nil, errs.Errorf(errs.InvalidArgument, "cluster secret file %s holds no secret", path)
	}
	if err := checkSecrets(out); err != nil {
		return nil, errs.Errorf(errs.InvalidArgument, "cluster secret file %s: %w", path, err)
	}
	return out, nil
}

// SetClientTokens replaces the client tokens this node accepts (see
// [WithClientTokens]); connections that proved a token keep their rights
// until they close. To rotate a token: give every server (old, new), move
// every client to the new token, then give every server (new).
func (r *Resource) SetClientTokens(tokens ...[]byte) error {
	if err := checkSecrets(tokens); err != nil {
		return err
	}
	r.n.SetTokens(tokens...)
	return nil
}

func checkSecrets(secrets [][]byte) error {
	for i, s := range secrets {
		if len(s) < MinSecretSize {
			return errs.Errorf(errs.InvalidArgument, "cluster secret %d is %d bytes; want at least %d (fero secret makes one)", i+1, len(s), MinSecretSize)
		}
	}
	return nil
}

// IsLoopback reports whether addr, host:port, is on loopback: a loopback
// IP or "localhost". An unspecified address (0.0.0.0, ::) is not: it
// listens on every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Name returns the resource's name.
func (r *Resource) Name() string { return r.name }

// ID returns this node's identity.
func (r *Resource) ID() string { return r.n.ID() }

// Addr returns this node's data-plane address, which the fero CLI's --addr
// takes.
func (r *Resource) Addr() string { return r.n.Addr() }

// GossipAddr returns this node's gossip address, host:port: the seed
// other nodes join with ([WithSeeds]).
func (r *Resource) GossipAddr() string { return r.n.Membership().Local().Gossip }

// IsClient reports whether this node is a client.
func (r *Resource) IsClient() bool { return r.cfg.client }

// Reads. They never leave the process.

// Get returns the value at path in this node's copy. Values are decoded
// from msgpack into nil, bool, int64 (uint64 above MaxInt64), float64,
// string, []byte, []any and map[string]any. The value is shared with the
// copy: treat it as read-only; it never changes under you.
func (r *Resource) Get(path string) (any, bool) { return r.n.Store().Get(path) }

// GetInto decodes the value at path into v, a pointer; ok is false and v
// untouched when there is no value. A value found replaces what v held,
// so polling a key into one variable sees map entries and fields go.
func (r *Resource) GetInto(path string, v any) (ok bool, err error) {
	return r.n.Store().GetInto(path, v)
}

// Len returns the number of top-level keys in this node's copy.
func (r *Resource) Len() int { return r.n.Store().Len() }

// All yields every top-level key and its value, in key order within each
// partition. Each partition is read at one moment (its state at one offset
// of its log); partitions are independent logs, so there is no moment
// common to all of them.
func (r *Resource) All() iter.Seq2[string, any] { return r.n.Store().All() }

// Snapshot returns a copy of every top-level key and value, each
// partition read at one offset (as All). Values are shared and read-only,
// as with Get.
func (r *Resource) Snapshot() map[string]any {
	out := make(map[string]any, r.Len())
	for k, v := range r.All() {
		out[k] = v
	}
	return out
}

// Digest hashes this node's whole copy; two nodes with equal digests hold
// the same state.
func (r *Resource) Digest() uint64 { return r.n.Store().Digest() }

// Writes.

// Update sets the value at path, creating maps on the way.
func (r *Resource) Update(ctx context.Context, path string, value any, wait ...Wait) error {
	c, err := r.build.Update(path, value)
	if err != nil {
		return err
	}
	return r.write(ctx, c, wait)
}

// Add sets the value at path only if there is none (a map key) or inserts
// it before the element at an array index; ADD of a key that exists fails
// with CodeFailedPrecondition, so Add is a create-once.
func (r *Resource) Add(ctx context.Context, path string, value any, wait ...Wait) error {
	c, err := r.build.Add(path, value)
	if err != nil {
		return err
	}
	return r.write(ctx, c, wait)
}

// Remove deletes the value at path. Removing what is not there succeeds.
func (r *Resource) Remove(ctx context.Context, path string, wait ...Wait) error {
	return r.write(ctx, r.build.Remove(path), wait)
}

// Push appends value to the array at path, creating the array if missing.
func (r *Resource) Push(ctx context.Context, path string, value any, wait ...Wait) error {
	c, err := r.build.Push(path, value)
	if err != nil {
		return err
	}
	return r.write(ctx, c, wait)
}

// Patch updates each key of values under path (top-level keys when path is
// empty), one change per key in key order. The changes are independent
// commits: each is atomic, the patch as a whole is not. It waits for all
// of them and returns the first error.
func (r *Resource) Patch(ctx context.Context, path string, values map[string]any, wait ...Wait) error {
	cs, err := r.build.Patch(path, values)
	if err != nil {
		return err
	}
	w := r.waitOf(wait)
	if w.kind == partition.WaitNone {
		for _, c := range cs {
			if err := r.write(ctx, c, wait); err != nil {
				return err
			}
		}
		return nil
	}
	if err := w.validate(); err != nil {
		return err
	}
	// All in flight at once, each completing into errc (which never
	// blocks the engine: it has room for every answer).
	errc := make(chan error, len(cs))
	for _, c := range cs {
		if err := r.n.WriteAsync(ctx, c, w.kind, w.k, func(c partition.Completion) { errc <- c.Err }); err != nil {
			errc <- err
		}
	}
	var first error
	for range cs {
		select {
		case err := <-errc:
			if err != nil && first == nil {
				first = err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return first
}

// Set applies one change record, as the original's set: the general form
// of every write above.
func (r *Resource) Set(ctx context.Context, c Change, wait ...Wait) error {
	rec, err := record(c)
	if err != nil {
		return err
	}
	return r.write(ctx, rec, wait)
}

// record turns a public change into the store's, copying the value (the
// engine keeps it).
func record(c Change) (doc.Change, error) {
	if err := c.Type.valid(); err != nil {
		return doc.Change{}, err
	}
	value := []byte(c.Value)
	switch {
	case c.Type == Remove:
		value = nil
	case len(value) == 0:
		return doc.Change{}, errs.Errorf(errs.InvalidArgument, "fero: %s %q without a value", c.Type, c.Key)
	default:
		value = append([]byte(nil), value...)
	}
	return doc.Change{Type: c.Type.record(), Key: c.Key, Value: value}, nil
}

func (r *Resource) waitOf(wait []Wait) Wait {
	if len(wait) > 0 {
		return wait[len(wait)-1]
	}
	return r.cfg.wait
}

func (r *Resource) write(ctx context.Context, c doc.Change, wait []Wait) error {
	if c.Key == "" {
		return errs.New(errs.InvalidArgument, "fero: a write needs a key")
	}
	w := r.waitOf(wait)
	if err := w.validate(); err != nil {
		return err
	}
	_, err := r.n.Write(ctx, c, w.kind, w.k)
	return err
}

// Requests.

// Call sends a request with a verb, a key and a payload (encoded with
// msgpack; nil sends none) to the owner of key's partition, whose handler
// answers it, and decodes the reply into reply (a pointer; nil discards
// it). The handler's error comes back as an *Error with its code. A request
// that reaches a node that no longer owns the key is sent again to the new
// owner until ctx ends; one whose connection broke after it was sent is
// not, since the handler may have run: Call then fails with CodeAborted.
// WithCallRetry, WithCallTimeout and WithCallInterceptors apply.
func (r *Resource) Call(ctx context.Context, verb, key string, payload, reply any) error {
	return r.call(ctx, verb, key, payload, reply)
}

// callDirect is Call without its interceptors.
func (r *Resource) callDirect(ctx context.Context, verb, key string, payload, reply any) error {
	b, err := encodePayload(payload)
	if err != nil {
		return err
	}
	out, err := r.n.Request(ctx, verb, key, b, false)
	if err != nil {
		return err
	}
	if reply == nil || len(out) == 0 {
		return nil
	}
	if err := wire.DecodeValue(out, reply); err != nil {
		return errs.Errorf(errs.Internal, "fero: decode the reply to %s %q: %w", verb, key, err)
	}
	return nil
}

// Send sends a request and does not wait for anything: it returns once
// the request is queued. Its reply, or error, is discarded.
func (r *Resource) Send(ctx context.Context, verb, key string, payload any) error {
	b, err := encodePayload(payload)
	if err != nil {
		return err
	}
	_, err = r.n.Request(ctx, verb, key, b, true)
	return err
}

func encodePayload(v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case msgpack.RawMessage:
		return v, nil
	}
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, errs.Errorf(errs.InvalidArgument, "fero: encode payload: %w", err)
	}
	return b, nil
}

// Cluster.

// Member is a node of the resource's cluster as this node sees it.
type Member struct {
	ID     string
	Addr   string // data plane; empty for a client that does not listen
	Gossip string
	Client bool
	// Status is the peer's status: connecting, connected, client,
	// suspect, dead (the original's disconnected) or removed.
	Status string
	// Owned is the number of partitions the member owns in this node's map.
	Owned int
}

// Members lists the cluster's members, this node included.
func (r *Resource) Members() []Member {
	m := r.n.Map()
	var out []Member
	for _, mem := range r.n.Membership().Members() {
		x := memberOf(mem)
		if m != nil {
			x.Owned = len(m.Owned(mem.ID))
		}
		out = append(out, x)
	}
	return out
}

// WaitServers waits until this node's partition engine routes by a map of
// at least n servers (as a service waits for its cluster before it starts
// sending), or ctx ends. Owners that just gained partitions may still be
// syncing them: the first writes can wait for that, or get
// CodeUnavailable when they come faster than the sync queue takes them.
func (r *Resource) WaitServers(ctx context.Context, n int) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if m := r.n.EngineMap(); m != nil && len(m.Members()) >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			have := 0
			if m := r.n.EngineMap(); m != nil {
				have = len(m.Members())
			}
			return fmt.Errorf("fero: waiting for %d servers, have %d: %w", n, have, ctx.Err())
		case <-t.C:
		}
	}
}

// Close leaves the cluster gracefully and releases every goroutine, socket
// and timer the resource holds. It is idempotent.
func (r *Resource) Close() error {
	r.close.Do(func() {
		r.dashOnce.Do(func() {}) // no dashboard from now on
		if r.dash != nil {
			r.dash.Close()
		}
		if r.collector != nil {
			r.cfg.metrics.Unregister(r.collector)
		}
		r.closeErr = r.n.Close()
		if r.replay != nil {
			r.replay.Close()
		}
		r.replayWG.Wait()
		if r.gcStop != nil {
			r.gcStop()
		}
	})
	return r.closeErr
}

// AdminHandler serves this node's admin API under /api/v1/ (JSON,
// read-only, documented and versioned in docs/admin-api.md) and the live
// dashboard that reads it at /dashboard/ (/ redirects there). Mount it on
// your own mux at "/", or at "/api/" and "/dashboard/". The API's write
// and call rates and latencies need WithMetrics; everything else is read
// from the node. The first call starts sampling the node once a second;
// Close stops it. After Close it answers 503.
func (r *Resource) AdminHandler() http.Handler {
	r.dashOnce.Do(func() { r.dash = dashboard.New(r.n, moduleVersion()) })
	if r.dash == nil { // closed before any AdminHandler
		return dashboard.Pending(func() http.Handler { return nil })
	}
	return r.dash
}

// moduleVersion is fero's module version in this binary's build
// information ("(devel)" when built inside the module).
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if bi.Main.Path == modulePath {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath {
			return d.Version
		}
	}
	return "unknown"
}

const modulePath = "github.com/fero-go/fero"

// node exposes the node to the package's tests and the CLI server.
func (r *Resource) node() *node.Node { return r.n }

// Stats counts what happened to this node's copy since it opened.
type Stats struct {
	Committed uint64 `msgpack:"committed" json:"committed"` // changes this node committed as owner
	Applied   uint64 `msgpack:"applied" json:"applied"`     // owners' commits applied to this copy
	Dropped   uint64 `msgpack:"dropped" json:"dropped"`     // uncommitted changes undone (rule 6)
	Restored  uint64 `msgpack:"restored" json:"restored"`   // partitions replaced by a snapshot
	Gained    uint64 `msgpack:"gained" json:"gained"`       // partitions this node took ownership of
	Lost      uint64 `msgpack:"lost" json:"lost"`           // partitions this node stopped owning
	// Relayed counts the engine batches this server sent a peer through
	// another server, RelayedFor the batches and requests it passed on
	// for two others (docs/engine.md, rule 17).
	Relayed    uint64 `msgpack:"relayed,omitempty" json:"relayed,omitempty"`
	RelayedFor uint64 `msgpack:"relayed_for,omitempty" json:"relayed_for,omitempty"`
}

// Stats returns this node's counters.
func (r *Resource) Stats() Stats { return Stats(r.n.Stats()) }

// SetAsync applies a change without waiting for it: it returns once the
// change is queued on this node, and calls done exactly once when the
// write has completed as w asks (nil error) or failed. It is how a caller
// keeps many writes in flight. c.Value is copied: the caller may reuse its
// buffer once SetAsync returns. done runs while the node's engine is held,
// on its engine goroutine or on a connection's goroutine standing in for
// it: it must return at once and must not call the resource. With
// [NoWait], done must be nil.
func (r *Resource) SetAsync(ctx context.Context, c Change, w Wait, done func(error)) error {
	rec, err := record(c)
	if err != nil {
		return err
	}
	if err := w.validate(); err != nil {
		return err
	}
	if c.Key == "" {
		return errs.New(errs.InvalidArgument, "fero: a write needs a key")
	}
	var to node.Completer
	if done != nil {
		to = errDone(done)
	}
	return r.n.WriteAsyncTo(ctx, rec, w.kind, w.k, to)
}

// errDone hands a write's outcome to the caller's callback: a conversion,
// where a closure around the callback would cost an allocation a write.
type errDone func(error)

// Complete calls f with the write's error.
func (f errDone) Complete(c partition.Completion) { f(c.Err) }

// CallAsync sends a request like [Resource.Call] but does not wait: done is
// called exactly once with the reply's msgpack encoding (valid only until
// done returns) or the error. It returns an error, and never calls done,
// if the request could not be sent. done may run on a connection's
// goroutine: it must return promptly and must not call the resource. The
// request keeps nothing of payload once CallAsync returns: a
// [msgpack.RawMessage] buffer may be reused for the next call.
func (r *Resource) CallAsync(ctx context.Context, verb, key string, payload any, done func(reply msgpack.RawMessage, err error)) error {
	b, to, err := asyncArgs(payload, done)
	if err != nil {
		return err
	}
	return r.n.RequestAsyncTo(ctx, verb, key, b, to)
}

// asyncArgs checks and encodes what a CallAsync sends.
func asyncArgs(payload any, done func(reply msgpack.RawMessage, err error)) ([]byte, rawAnswer, error) {
	if done == nil {
		return nil, nil, errs.New(errs.InvalidArgument, "fero: CallAsync needs a callback")
	}
	b, err := encodePayload(payload)
	return b, rawAnswer(done), err
}

// A Batch sends requests like [Resource.CallAsync] that leave together:
// each waits in its owner's connection until [Batch.Flush], which sends
// what the batch holds in one write per connection, on the caller's
// goroutine. A caller that sends bursts (a client with a window of calls
// in flight, a load generator) saves the wake-up of each connection's
// writer per burst; a lone call gains nothing over CallAsync. A request
// may leave before the Flush, with other traffic on its connection, and
// one the resource runs itself (it owns the key) or sends before it has a
// connection to the owner leaves at once; none is sure to leave until
// the Flush, so flush at the end of every burst. A Batch is for one
// goroutine at a time; a resource may have many.
type Batch struct{ b *node.CallBatch }

// Batch returns an empty batch of requests.
func (r *Resource) Batch() *Batch { return &Batch{b: r.n.NewCallBatch()} }

// CallAsync is [Resource.CallAsync], held until Flush.
func (b *Batch) CallAsync(ctx context.Context, verb, key string, payload any, done func(reply msgpack.RawMessage, err error)) error {
	p, to, err := asyncArgs(payload, done)
	if err != nil {
		return err
	}
	return b.b.RequestAsyncTo(ctx, verb, key, p, to)
}

// Flush sends every request the batch holds. Their answers come to their
// callbacks as for CallAsync.
func (b *Batch) Flush() { b.b.Flush() }

// rawAnswer hands a call's answer, as msgpack, to the caller's callback:
// a conversion, where a closure around the callback would cost an
// allocation a call.
type rawAnswer func(reply msgpack.RawMessage, err error)

// Answer calls f.
func (f rawAnswer) Answer(reply []byte, err error) { f(reply, err) }

// Forget removes a server that is gone for good (its machine is lost, and
// it will never come back with its ID) from the cluster's configuration:
// the servers whose majority makes a quorum and acknowledges a Majority
// write. A server stays in it when it crashes and when it closes, so that
// a minority cut off by a split, however long, never takes itself for the
// whole cluster, and so that two servers leaving in a row cannot take the
// only copies of a Majority write with them. When departed servers leave
// the rest without a majority of the configuration, writes fail with
// CodeUnavailable ("no quorum") until they come back or are forgotten.
// Forget one server at a time, once the others have caught up (fero
// status shows every node's digest). Forget refuses a server this node sees
// alive (CodeFailedPrecondition). An ID this node has no entry for is
// forgotten too, in every life started before now: this node may have been
// cut off while that server joined, and the peers that list it drop it
// when they hear the removal (so check the spelling: a typo is recorded as
// a forgotten server). Forgetting a server twice is not an error. It returns
// once a majority of the new configuration holds the removal, so the
// removal outlives this node; when ctx ends first it returns
// CodeDeadlineExceeded and the removal may still spread: Forget again to
// confirm it. Name servers that must go together in one call: after two of
// three servers crash, the survivor is no majority with either of them, so
// Forget(ctx, "b", "c"). Forget
// only servers you know to be dead: a forgotten server that is merely cut
// off could, with the rest of its side, make a second majority.
func (r *Resource) Forget(ctx context.Context, ids ...string) error { return r.n.Forget(ctx, ids...) }

// Servers returns the cluster's configuration as this node knows it: each
// server's ID, and whether it has been forgotten.
func (r *Resource) Servers(ctx context.Context) ([]ServerEntry, error) {
	vs, err := r.n.Voters(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ServerEntry, len(vs))
	for i, v := range vs {
		out[i] = ServerEntry{ID: v.ID, Left: v.Left}
	}
	return out, nil
}

// ServerEntry is one server of the cluster's configuration.
type ServerEntry struct {
	ID   string
	Left bool
}
