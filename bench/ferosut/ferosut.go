// Package ferosut puts fero itself (pkg/fero, with the partition engine
// behind it) under the benchmark harness as a [bench.System].
//
// Each server process is a fero server node of the resource "fero-bench";
// each client process is a fero client node of it, which joins the cluster,
// keeps a copy, and sends every write straight to the owner of its key's
// partition. Records are UPDATEs of keys spread over every partition
// (Keys distinct keys), their values the payload as msgpack binary.
//
//   - Send is an UPDATE waiting for the owner's ack, kept in flight
//     (Resource.SetAsync): tacks is every record handed to the client node,
//     yacks every ack back.
//   - Go and Call are UPDATE requests answered by the owner's handler once
//     it committed them (Resource.CallAsync, Resource.Call): sacks.
//   - Replicated waits until every server has applied as many records as
//     were sent: the time to replicate everything to every copy.
//
// Servers keep their partitions in memory unless [System.Fsync] names a
// policy: then each server keeps them in a data directory of its own
// (fero.WithDataDir), fresh for the server and removed when it stops, and
// the harness reads each server's count of fsyncs from its status
// ([System.Fsyncs]).
package ferosut

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmihailenco/msgpack/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fero-go/fero/bench"
	"github.com/fero-go/fero/internal/wire"
	"github.com/fero-go/fero/pkg/fero"
)

// Resource is the benchmark's resource name.
const Resource = "fero-bench"

// Keys is how many distinct keys the records cycle through.
const Keys = 10000

// System is fero as a system under test.
type System struct {
	// Fsync, if set, is the fsync policy of every server's data directory,
	// as fero.ParseFsync reads it ("group", "interval", "never"). Empty:
	// servers keep everything in memory.
	Fsync string
	// Metrics turns on every node's Prometheus metrics (fero.WithMetrics,
	// on a registry of its own that nothing scrapes): what they cost the
	// hot path is the difference from the same system without them.
	Metrics bool
	// Trace, if set, gives every node an OpenTelemetry tracer provider
	// (fero.WithTracerProvider) whose sampler records no span ("never") or
	// every span ("all", sent to an exporter that drops them): what
	// tracing costs when it is configured, sampling nothing or everything.
	Trace string
	// Remote, if set, makes each client a fero.Remote (fero.Dial) rather
	// than a client node: it keeps no copy of the resource and applies no
	// commits, as a Redis client keeps none, and it sends every record to
	// one server's data address (client i to server i mod n), which
	// forwards what it does not own. Send and Go are both Remote.CallAsync
	// of UPDATE, answered once the owner committed. Beside fero, it shows
	// what the client node's copy costs.
	Remote bool
}

// options returns the options of s every node takes.
func (s System) options() []fero.NodeOption {
	var o []fero.NodeOption
	if s.Metrics {
		o = append(o, fero.WithMetrics(prometheus.NewRegistry()))
	}
	for _, t := range s.tracing() {
		o = append(o, t)
	}
	return o
}

// tracing returns the tracing option of s, which nodes and Remotes take.
func (s System) tracing() []fero.Option {
	switch s.Trace {
	case "never":
		return []fero.Option{fero.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())))}
	case "all":
		return []fero.Option{fero.WithTracerProvider(sdktrace.NewTracerProvider(
			sdktrace.WithSyncer(tracetest.NewNoopExporter()), sdktrace.WithSampler(sdktrace.AlwaysSample())))}
	}
	return nil
}

var (
	_ bench.System       = System{}
	_ bench.FsyncCounter = System{}
)

func baseOptions() []fero.NodeOption {
	o := []fero.NodeOption{
		fero.WithBind("127.0.0.1:0"), fero.WithPreset(fero.PresetLocal), fero.WithoutMulticast(),
	}
	if secret := secretOption(); secret != nil {
		o = append(o, secret)
	}
	return o
}

// dialOptions returns the options every Remote takes: the cluster secret
// of baseOptions, if any.
func dialOptions() []fero.DialOption {
	if secret := secretOption(); secret != nil {
		return []fero.DialOption{secret}
	}
	return nil
}

// secretOption returns the cluster secret of SecretFileEnv's file, or nil
// without one. The soak (scripts/soak.sh) runs the cluster with a secret,
// as a node beside a hostile process must.
func secretOption() fero.Option {
	path := os.Getenv(SecretFileEnv)
	if path == "" {
		return nil
	}
	secrets, err := fero.ReadSecretFile(path)
	if err != nil {
		panic(fmt.Sprintf("ferosut: %s: %v", SecretFileEnv, err))
	}
	return fero.WithClusterSecret(secrets...)
}

// SecretFileEnv names a cluster secret file (fero secret) that every
// server and client node of the system uses when it is set.
const SecretFileEnv = "FERO_BENCH_SECRET_FILE"

// Serve runs a fero server node until ctx is done. Its address, for
// clients and later servers, is "<gossip address> <data address>". With
// an fsync policy, its data directory is made under opts.DataDir and
// removed once the node has closed.
func (s System) Serve(ctx context.Context, opts bench.ServeOptions, ready func(addr string)) error {
	extra := s.options()
	if s.Fsync == "" {
		return serve(ctx, opts, extra, ready)
	}
	policy, err := fero.ParseFsync(s.Fsync)
	if err != nil {
		return fmt.Errorf("ferosut: %w", err)
	}
	dir, remove, err := bench.NewDataDir(opts.DataDir, "fero")
	if err != nil {
		return err
	}
	err = serve(ctx, opts, append(extra, fero.WithDataDir(dir), fero.WithFsync(policy)), ready)
	return errors.Join(err, remove())
}

// serve runs the server node, with extra options, until ctx is done.
func serve(ctx context.Context, opts bench.ServeOptions, extra []fero.NodeOption, ready func(addr string)) error {
	o := append(baseOptions(), fero.WithListen(opts.Addr), fero.WithID(fmt.Sprintf("server-%d", opts.Index)))
	o = append(o, extra...)
	if seeds := gossipOf(opts.Peers); len(seeds) > 0 {
		o = append(o, fero.WithSeeds(seeds...))
	}
	r, err := fero.Open(ctx, Resource, o...)
	if err != nil {
		return fmt.Errorf("ferosut: open server: %w", err)
	}
	// Stable: this server routes by a map of itself and every server
	// started before it.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = r.WaitServers(wctx, len(opts.Peers)+1)
	cancel()
	if err != nil {
		r.Close()
		return fmt.Errorf("ferosut: server %d joining: %w", opts.Index, err)
	}
	ready(r.GossipAddr() + " " + r.Addr())
	<-ctx.Done()
	return r.Close()
}

// Durability names the data directory's fsync policy; empty in memory.
func (s System) Durability() string {
	if s.Fsync == "" {
		return ""
	}
	return "fsync " + s.Fsync
}

// Fsyncs returns how many fsyncs of write groups the server at addr has
// made since it started, from its status.
func (System) Fsyncs(ctx context.Context, addr string) (uint64, error) {
	data := dataOf([]string{addr})
	if len(data) == 0 {
		return 0, fmt.Errorf("ferosut: %q is not a fero server's address (\"<gossip address> <data address>\")", addr)
	}
	rc, err := fero.Dial(ctx, data[0], dialOptions()...)
	if err != nil {
		return 0, fmt.Errorf("ferosut: dial %s for its fsyncs: %w", data[0], err)
	}
	defer rc.Close()
	st, err := rc.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("ferosut: status of %s: %w", data[0], err)
	}
	if st.Disk == nil {
		return 0, fmt.Errorf("ferosut: %s keeps no data directory, so it counts no fsyncs: serve a fero system with an fsync policy (fero-group, say)", data[0])
	}
	if st.Disk.Err != "" {
		return 0, fmt.Errorf("ferosut: the data directory of %s failed: %s", data[0], st.Disk.Err)
	}
	return st.Disk.Syncs, nil
}

func gossipOf(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		out = append(out, strings.Fields(a)[0])
	}
	return out
}

func dataOf(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if f := strings.Fields(a); len(f) == 2 {
			out = append(out, f[1])
		}
	}
	return out
}

// Dial opens a fero client node and waits until it routes by a map of
// every server.
func (s System) Dial(ctx context.Context, opts bench.DialOptions) (bench.Conn, error) {
	if len(opts.Servers) == 0 {
		return nil, errors.New("ferosut: no server")
	}
	if s.Remote {
		return s.dialRemote(ctx, opts)
	}
	o := append(baseOptions(), fero.Client(), fero.WithID(fmt.Sprintf("client-%d-%d", opts.Index, os.Getpid())), fero.WithSeeds(gossipOf(opts.Servers)...))
	o = append(o, s.options()...)
	r, err := fero.Open(ctx, Resource, o...)
	if err != nil {
		return nil, fmt.Errorf("ferosut: open client: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.WaitServers(wctx, len(opts.Servers)); err != nil {
		r.Close()
		return nil, err
	}
	c := newConn(opts)
	c.r, c.api = r, r
	c.batch = r.Batch()
	if err := c.prepare(wctx); err != nil {
		r.Close()
		return nil, err
	}
	return c, nil
}

// dialRemote opens client opts.Index as a fero.Remote to one server.
func (s System) dialRemote(ctx context.Context, opts bench.DialOptions) (bench.Conn, error) {
	c := newConn(opts)
	addr := c.servers[opts.Index%len(c.servers)]
	o := dialOptions()
	for _, t := range s.tracing() {
		o = append(o, t)
	}
	rc, err := fero.Dial(ctx, addr, o...)
	if err != nil {
		return nil, fmt.Errorf("ferosut: dial %s: %w", addr, err)
	}
	c.rc, c.api = rc, rc
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.prepare(wctx); err != nil {
		rc.Close()
		return nil, err
	}
	return c, nil
}

func newConn(opts bench.DialOptions) *conn {
	c := &conn{servers: dataOf(opts.Servers), keys: make([]string, Keys), acked: make(chan struct{}, 1)}
	c.onAck = c.ack
	c.onReply = c.reply
	for i := range c.keys {
		c.keys[i] = fmt.Sprintf("k%d", i)
	}
	return c
}

// prepare notes what the servers hold and settles the partitions.
func (c *conn) prepare(ctx context.Context) error {
	// Servers this run did not start (fero-bench run --attach) have
	// applied records before: Replicated counts from what they hold now.
	var err error
	if c.base, err = appliedBy(ctx, c.servers); err != nil {
		return err
	}
	// Owners sync the partitions they just gained: write every key once,
	// so the measured records never wait for that.
	for i := 0; i < Keys; i += Keys / 100 {
		if err := c.settle(ctx, c.keys[i]); err != nil {
			return err
		}
	}
	return nil
}

type conn struct {
	api     api            // r or rc, for what both do the same way
	r       *fero.Resource // a client node, or
	rc      *fero.Remote   // a Remote (System.Remote)
	batch   *fero.Batch    // a client node's Go requests, sent at each Flush
	servers []string
	base    []uint64 // what each server had applied when this conn opened
	keys    []string
	next    uint64
	scratch []byte // Send's and Go's encoding of a value

	mu      sync.Mutex   // orders the done callbacks (bench.Conn's contract)
	writes  atomic.Int64 // every write this conn made, for Replicated
	sent    atomic.Int64
	done    atomic.Int64
	failed  atomic.Int64
	lastErr atomic.Value
	acked   chan struct{}                   // signalled when done catches up with sent
	onAck   func(error)                     // c.ack, made once: Send passes it to every write
	onReply func(msgpack.RawMessage, error) // c.reply, made once, for a Remote's Send
}

var _ bench.Conn = (*conn)(nil)

// settle writes key until the owner accepts it.
func (c *conn) settle(ctx context.Context, key string) error {
	for {
		err := c.api.Update(ctx, key, 0)
		if err == nil {
			c.writes.Add(1)
			return nil
		}
		if fero.CodeOf(err) != fero.CodeUnavailable {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ferosut: the cluster never took writes for %q: %w", key, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (c *conn) key() string {
	k := c.keys[c.next%Keys]
	c.next++
	c.writes.Add(1)
	return k
}

// value encodes payload as msgpack binary, in a buffer of its own (the
// harness reuses payload), the way a service holding raw bytes would.
func value(payload []byte) msgpack.RawMessage {
	return wire.AppendBin(make([]byte, 0, len(payload)+5), payload)
}

func (c *conn) Send(ctx context.Context, payload []byte) error {
	c.sent.Add(1)
	if c.rc != nil {
		c.scratch = wire.AppendBin(c.scratch[:0], payload)
		err := c.rc.CallAsync(ctx, fero.VerbUpdate, c.key(), msgpack.RawMessage(c.scratch), c.onReply)
		if err != nil {
			c.sent.Add(-1)
		}
		return err
	}
	// SetAsync copies the value, so one buffer serves every record.
	c.scratch = wire.AppendBin(c.scratch[:0], payload)
	err := c.r.SetAsync(ctx, fero.Change{Type: fero.Update, Key: c.key(), Value: c.scratch}, fero.Ack, c.onAck)
	if err != nil {
		c.sent.Add(-1)
	}
	return err
}

// reply counts one Remote write's outcome.
func (c *conn) reply(_ msgpack.RawMessage, err error) { c.ack(err) }

// ack counts one write's outcome.
func (c *conn) ack(err error) {
	if err != nil {
		c.failed.Add(1)
		c.lastErr.Store(err)
	}
	if c.done.Add(1) == c.sent.Load() {
		select {
		case c.acked <- struct{}{}:
		default:
		}
	}
}

// Sync waits until every record sent so far is acked; a record that failed
// fails the sync, with the count.
func (c *conn) Sync(ctx context.Context) error {
	for c.done.Load() < c.sent.Load() {
		select {
		case <-c.acked:
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("ferosut: %d of %d acks: %w", c.done.Load(), c.sent.Load(), ctx.Err())
		}
	}
	if n := c.failed.Load(); n > 0 {
		return fmt.Errorf("ferosut: %d of %d writes failed, the last with: %v", n, c.sent.Load(), c.lastErr.Load())
	}
	return nil
}

func (c *conn) Go(ctx context.Context, payload []byte, done func([]byte, error)) error {
	cb := func(reply msgpack.RawMessage, err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		done(reply, err)
	}
	// CallAsync keeps nothing of the payload once it returns, so one
	// buffer serves every request, as in Send.
	c.scratch = wire.AppendBin(c.scratch[:0], payload)
	if c.batch != nil {
		// Held until the scenario's Flush, at the end of its burst, as
		// the echo's and Redis's clients hold theirs.
		return c.batch.CallAsync(ctx, fero.VerbUpdate, c.key(), msgpack.RawMessage(c.scratch), cb)
	}
	return c.api.CallAsync(ctx, fero.VerbUpdate, c.key(), msgpack.RawMessage(c.scratch), cb)
}

// Flush sends the requests Go held (bench.Flusher). Writes sent with Send
// need none: the node's engine batches them.
func (c *conn) Flush(context.Context) error {
	if c.batch != nil {
		c.batch.Flush()
	}
	return nil
}

func (c *conn) Call(ctx context.Context, payload []byte) ([]byte, error) {
	var reply msgpack.RawMessage
	err := c.api.Call(ctx, fero.VerbUpdate, c.key(), value(payload), &reply)
	return reply, err
}

// Replicated waits until every server has applied (or, as owner,
// committed) as many records as this conn has written: every record sent
// so far, plus the warm-up and settling writes. With several clients, a
// server counts the others' records too, so this is when the slowest
// server has caught up with at least this much.
func (c *conn) Replicated(ctx context.Context) error {
	writes := uint64(c.writes.Load())
	remotes, err := dialAll(ctx, c.servers)
	defer closeAll(remotes)
	if err != nil {
		return err
	}
	for i, rc := range remotes {
		want := c.base[i] + writes
		for {
			st, err := rc.Status(ctx)
			if err != nil {
				return err
			}
			if st.Stats.Applied+st.Stats.Committed >= want {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("ferosut: %s applied %d of %d: %w", rc.Addr(), st.Stats.Applied+st.Stats.Committed, want, ctx.Err())
			case <-time.After(time.Millisecond):
			}
		}
	}
	return nil
}

func (c *conn) Close() error { return c.api.Close() }

// api is what a client node (fero.Resource) and a fero.Remote both offer,
// with the same signatures.
type api interface {
	Update(ctx context.Context, key string, value any, wait ...fero.Wait) error
	Call(ctx context.Context, verb, key string, payload, reply any) error
	CallAsync(ctx context.Context, verb, key string, payload any, done func(reply msgpack.RawMessage, err error)) error
	Close() error
}

var (
	_ api = (*fero.Resource)(nil)
	_ api = (*fero.Remote)(nil)
)

func dialAll(ctx context.Context, addrs []string) ([]*fero.Remote, error) {
	remotes := make([]*fero.Remote, 0, len(addrs))
	for _, addr := range addrs {
		rc, err := fero.Dial(ctx, addr, dialOptions()...)
		if err != nil {
			return remotes, err
		}
		remotes = append(remotes, rc)
	}
	return remotes, nil
}

func closeAll(remotes []*fero.Remote) {
	for _, rc := range remotes {
		rc.Close()
	}
}

// appliedBy returns how many records each server has applied or, as
// owner, committed.
func appliedBy(ctx context.Context, addrs []string) ([]uint64, error) {
	remotes, err := dialAll(ctx, addrs)
	defer closeAll(remotes)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, len(remotes))
	for i, rc := range remotes {
		st, err := rc.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("ferosut: status of %s: %w", rc.Addr(), err)
		}
		out[i] = st.Stats.Applied + st.Stats.Committed
	}
	return out, nil
}
