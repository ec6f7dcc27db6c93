// The write path: a change from its caller to the engine (Write,
// WriteAsync), numbered for exactly-once and proposed in order.
package node

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
)

// A Completer takes a write's completion (WriteAsyncTo).
type Completer interface {
	Complete(partition.Completion)
}

// CompleteFunc is a function as a Completer.
type CompleteFunc func(partition.Completion)

// Complete calls f.
func (f CompleteFunc) Complete(c partition.Completion) { f(c) }

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
	if err := n.peers.awaitSpill(ctx); err != nil {
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
	n.spawning.mu.RLock()
	defer n.spawning.mu.RUnlock()
	if n.spawning.closed {
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
		// Once the node's context ends the driver completes what is
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
