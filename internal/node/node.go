package node

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/seqtab"
	"github.com/fero-go/fero/internal/transport"
)

// Node is one running member of a resource's cluster.
type Node struct {
	cfg     Config
	id      string
	logger  *slog.Logger
	started atomic.Bool // Start has set everything up; requests are served
	// once numbers this node's writes and calls for exactly-once
	// (once.go).
	once onceState
	// hot is the write and call metrics (Config.Metrics); nil without.
	hot *hotMetrics
	// fwdSpans are the owner's spans of traced forwarded writes awaiting
	// their reply (trace.go); under engMu.
	fwdSpans map[fwdKey]fwdSpan
	// t0 is when the node was made: the origin of Node.since.
	t0 time.Time
	// tstats counts the backpressure of every connection the node makes
	// or accepts.
	tstats transport.Stats

	srv *transport.Server
	// peers delivers to other nodes: connections, dialing, spilling,
	// relaying, per-peer batches (peers.go has its lock discipline).
	peers *peers
	// attach is a server's attached clients, and an attached client's
	// feed of the servers (attach.go).
	attach struct {
		set  attachedSet
		feed feeder
	}
	auth  auth // the credentials accepted and each connection's role; auth.mu
	ms    *membership.Membership
	ring  *ring.Ring
	view  *view
	store *doc.Store
	eng   *partition.Engine // the driver's: used only under engMu
	disk  *disk             // nil without a data directory; written under engMu

	inbox    chan inbound
	handlers chan struct{} // a semaphore: one token per running handler
	streams  streamRuns    // the stream handlers running as owner; streams.mu
	props    propQueue
	queries  chan func(*partition.Engine) // run by the driver, under engMu
	// engMu is held for each round of the engine (see drive): the
	// driver's, or a reader's that steps a batch inline. It guards the
	// engine and every field marked "under engMu".
	engMu sync.Mutex

	// inboxed counts the batches handed to the inbox that the driver has
	// not stepped yet, from before the send to after the step: a reader
	// that finds it zero under engMu knows no earlier batch still waits.
	inboxed atomic.Int64

	// waiters holds the callbacks of proposals, by token, under engMu. The
	// engine completes every proposal it accepts within its write timeout,
	// which bounds how far the table's window spans.
	waiters  seqtab.Table[waiter]
	early    []inbound     // messages before the engine's first map; under engMu
	unmapped unmapped      // proposals before the engine's first map; under engMu
	stepped  []inbound     // the batches stepped this round (release); under engMu
	decoders *freeDecoders // decoders free for the next batches
	notes    driverNotes   // what the driver last logged and when; under engMu

	stats  stats                    // counters, all atomic
	engMap atomic.Pointer[ring.Map] // the map the engine routes by

	subs subscribers // the change streams (changes.go); subs.mu

	// spawning refuses new goroutines once Close began (spawn).
	spawning struct {
		mu     sync.RWMutex
		closed bool // no more goroutines for wg
	}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the driver, the view, background dials and handlers
	close  sync.Once
}

// onceState numbers a node's writes and calls (once.go).
type onceState struct {
	// writer names this node's life as a writer, and seq counts its
	// writes and calls.
	writer string
	seq    atomic.Uint64
	// turn orders this node's new writes: a write takes its sequence
	// and reaches the engine holding it, so the engine takes them, and
	// the owner sees them, in sequence order (takeSeq).
	turn chan struct{}
}

// driverNotes is what the driver remembers of what it logged; under
// engMu.
type driverNotes struct {
	seen struct{ foreign, yields uint64 } // what noteClusters last logged
	// learnerSince is when this server was last seen not voting, while it
	// catches up (zero once it votes).
	learnerSince time.Time
	// noSeedSince is when the node warned that no seed answered its join
	// (zero: it did not, or a seed has answered since).
	noSeedSince time.Time
	// formingWarned is when the driver last warned that no cluster has
	// formed (warnForming).
	formingWarned time.Time
	// diskLogged: the disk's failure has been logged.
	diskLogged bool
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

// since is the time since the node was made, on the monotonic clock, in
// nanoseconds, at least 1.
func (n *Node) since() int64 { return int64(time.Since(n.t0)) + 1 }

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
		n.spawning.mu.Lock()
		n.spawning.closed = true
		n.spawning.mu.Unlock()
		n.cancel()
		// Closing the connections first ends every request's context, so
		// handlers that wait on theirs return before wg.Wait.
		n.peers.close()
		n.attach.feed.close()
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
