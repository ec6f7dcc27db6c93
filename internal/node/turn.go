package node

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/wire"
)

// A verb's turn (docs/engine.md, rule 15). Before the node's handler runs a
// request on the key's owner, it takes the key's turn from the engine:
// every earlier write to the key is then applied here, and no other write
// or verb for it runs until the handler returns. What the handler writes
// to its own partition (with the context it was given) is not proposed as
// it goes: it is staged in the turn, and committed when the handler
// returns, as one record, in the epoch the turn began in; or not at all,
// if the handler fails or the partition moved meanwhile. The caller is
// answered once the record is committed (as its writes asked to wait), so
// a reply never reports writes that did not happen.

// errTurnElsewhere says that a turn could not be taken here because this
// node does not own the key's partition (any more): the request goes to
// the owner by a fresher map, as a request that met a non-owner does.
var errTurnElsewhere = errs.New(errs.Unavailable, "fero: not the key's owner, ring changing")

// errTurnMoved says that a handler's record was refused because its turn
// ended while it ran (the partition moved, or the deadline passed):
// nothing it wrote was committed, and the call is made again at the
// key's owner, as one that met a non-owner is.
var errTurnMoved = errs.New(errs.Unavailable, "fero: the key's owner changed, or the caller's deadline passed, while the handler ran: nothing it wrote was committed")

// turn is a handler's hold on its key, and the writes it staged.
type turn struct {
	n         *Node
	partition int
	key       string        // the request's key
	id        uint64        // the engine's name for the turn
	once      protocol.Once // the call's, kept with its record

	mu      sync.Mutex
	changes []doc.Change
	wait    partition.Wait
	k       int
	ended   bool
}

type turnCtxKey struct{}

// turnOf returns the turn a handler's context carries, if any.
func turnOf(ctx context.Context) *turn {
	t, _ := ctx.Value(turnCtxKey{}).(*turn)
	return t
}

// needsTurn says whether req's handler takes its key's turn: every verb
// does but GET and VERSION (reads through the owner, rule 13), a stream,
// and the verbs the service declared concurrent.
func (n *Node) needsTurn(req *Request) bool {
	if req.Verb == protocol.VerbGet || req.Verb == protocol.VerbVersion || req.Send != nil {
		return false
	}
	return n.cfg.Concurrent == nil || !n.cfg.Concurrent(req.Verb)
}

// beginTurn takes req's key's turn on this node, waiting behind the writes
// and turns ahead of it. It fails with errTurnElsewhere where the node
// does not own the key's partition. A call whose record was committed
// before (a retry, rule 16) gets no turn: its first reply instead.
func (n *Node) beginTurn(ctx context.Context, req *Request) (t *turn, dup []byte, err error) {
	t = &turn{n: n, partition: req.Partition, key: req.Key, once: req.Once, wait: partition.WaitAck}
	var c partition.Completion
	if req.begun != nil {
		done := req.begun
		req.begun = nil
		c, err = n.awaitTurn(ctx, n.beginRequest(req, time.Time{}), done)
	} else {
		c, err = n.proposeTurn(ctx, n.beginRequest(req, time.Time{}))
	}
	switch {
	case errors.Is(err, partition.ErrNotOwner), errors.Is(err, partition.ErrNoOwner):
		return nil, nil, errTurnElsewhere
	case err != nil:
		return nil, nil, err
	case c.Duplicate:
		return nil, c.Reply, nil
	}
	t.id = c.Token
	return t, nil, nil
}

// beginRequest is the engine request that begins req's turn.
func (n *Node) beginRequest(req *Request, deadline time.Time) partition.Request {
	return partition.Request{Partition: req.Partition, Key: req.Key, Wait: partition.WaitAck, Turn: partition.TurnBegin,
		Writer: req.Once.Writer, Seq: req.Once.Seq, Deadline: deadline}
}

// beginEarly proposes the begin of the turn req will need, where the call
// arrived and in the order calls arrive, for handle to wait for
// (req.begun). A partition remembers only its writers' latest
// doc.DedupPerWriter sequences and refuses an older one it does not know
// as too old to tell: proposed by each call's own goroutine, in whatever
// order they ran, a caller's first attempts were refused so by the
// hundred (TestConcurrentCallsAreNotTooOld). Only calls that name their
// writer need it; the queue's being full, or the node's closing, leaves
// the begin to handle.
func (n *Node) beginEarly(req *Request, deadline time.Time) {
	if req.Once.Writer == "" || !n.needsTurn(req) || n.cfg.Handler == nil {
		return
	}
	done := make(chan partition.Completion, 1)
	n.spawning.mu.RLock()
	defer n.spawning.mu.RUnlock()
	if n.spawning.closed {
		return
	}
	if n.props.tryPush(proposal{req: n.beginRequest(req, deadline), done: CompleteFunc(func(c partition.Completion) { done <- c })}) {
		req.begun = done
	}
}

// dropBegun gives back the turn begun for req (beginEarly) that nothing
// will use, once the engine grants it.
func (n *Node) dropBegun(req *Request) {
	done := req.begun
	if done == nil {
		return
	}
	req.begun = nil
	if !n.spawn(func() {
		if c := <-done; c.Err == nil && !c.Duplicate {
			n.releaseTurn(c.Token, req.Partition, req.Key)
		}
	}) {
		return // closing: the engine ends every turn with the node
	}
}

// proposeTurn proposes a turn's begin or end and waits for its answer, or
// for ctx. A begin that ctx gave up on is ended, so that the key is not
// held for a handler that will never run.
func (n *Node) proposeTurn(ctx context.Context, req partition.Request) (partition.Completion, error) {
	req.Deadline, _ = ctx.Deadline()
	done := make(chan partition.Completion, 1)
	n.spawning.mu.RLock()
	closed := n.spawning.closed
	var err error
	if !closed {
		err = n.props.push(ctx, n.ctx, proposal{req: req, done: CompleteFunc(func(c partition.Completion) { done <- c })}, true)
	}
	n.spawning.mu.RUnlock()
	switch {
	case closed:
		return partition.Completion{}, protocol.ErrClosed
	case err != nil:
		return partition.Completion{}, err
	}
	return n.awaitTurn(ctx, req, done)
}

// awaitTurn waits for the answer to req, a turn's begin or end proposed
// with done, or for ctx (proposeTurn).
func (n *Node) awaitTurn(ctx context.Context, req partition.Request, done chan partition.Completion) (partition.Completion, error) {
	select {
	case c := <-done:
		return c, c.Err
	case <-ctx.Done():
		if req.Turn == partition.TurnBegin {
			n.spawn(func() {
				if c := <-done; c.Err == nil {
					n.releaseTurn(c.Token, req.Partition, req.Key)
				}
			})
		}
		return partition.Completion{}, ctx.Err()
	case <-n.ctx.Done():
		return partition.Completion{}, protocol.ErrClosedInFlight
	}
}

// releaseTurn gives a turn back without a record, waiting for nothing.
func (n *Node) releaseTurn(id uint64, p int, key string) {
	req := partition.Request{Partition: p, Key: key, Wait: partition.WaitAck, Turn: partition.TurnEnd, TurnID: id}
	n.spawning.mu.RLock()
	defer n.spawning.mu.RUnlock()
	if !n.spawning.closed {
		_ = n.props.push(n.ctx, n.ctx, proposal{req: req, done: CompleteFunc(func(partition.Completion) {})}, true)
	}
}

// stage keeps a write the turn's handler made to its own partition, to be
// committed with the turn. A write the state refuses as it stands (an ADD
// of a key that exists) is refused at once, when no earlier staged write
// touched its top-level key; otherwise the record's commit tells.
func (t *turn) stage(c doc.Change, wait partition.Wait, k int) error {
	if c.Type != wire.RecordRemove {
		if err := wire.ValidateValue(c.Value); err != nil {
			return errs.Errorf(errs.InvalidArgument, "fero: invalid value for %q: %v", c.Key, err)
		}
	}
	top, _, _ := strings.Cut(c.Key, string(rune(ring.DefaultSeparator)))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return errs.Errorf(errs.FailedPrecondition, "fero: a write to %q after its handler returned", c.Key)
	}
	touched := false
	for _, s := range t.changes {
		if strings.HasPrefix(s.Key, top) && (len(s.Key) == len(top) || s.Key[len(top)] == ring.DefaultSeparator) {
			touched = true
			break
		}
	}
	if !touched {
		if err := t.n.store.Check(t.partition, c); err != nil {
			return err
		}
	}
	// The handler may reuse its buffers once the call returns.
	c.Key, c.Value = strings.Clone(c.Key), append([]byte(nil), c.Value...)
	t.changes = append(t.changes, c)
	if wait > t.wait || (wait == t.wait && k > t.k) {
		t.wait, t.k = wait, k
	}
	return nil
}

// end commits what the turn staged, as one record in the turn's epoch,
// with the call's writer, sequence and reply when it has them, and waits
// for it as the staged writes asked; or, when the handler failed (herr),
// gives the turn back with nothing committed. It returns the reply the
// caller gets: the handler's, or, when the owner finds the call's record
// committed already (an earlier attempt's, synced meanwhile: rule 16),
// that record's reply, since its writes are the ones that happened. And
// the handler's error, or the commit's.
func (t *turn) end(ctx context.Context, reply []byte, herr error) ([]byte, error) {
	t.mu.Lock()
	t.ended = true
	changes := t.changes
	t.mu.Unlock()
	if herr != nil || len(changes) == 0 {
		t.n.releaseTurn(t.id, t.partition, t.key)
		return reply, herr
	}
	req := partition.Request{Partition: t.partition, Key: t.key, Wait: t.wait, K: t.k, Turn: partition.TurnEnd, TurnID: t.id}
	switch {
	case len(changes) == 1 && !changes[0].Cond && t.once.Writer == "":
		req.Type, req.Key, req.Value = changes[0].Type, changes[0].Key, changes[0].Value
	default:
		b := doc.Batch{Changes: changes, Writer: t.once.Writer, Seq: t.once.Seq}
		if t.once.Writer != "" {
			b.Reply = reply // kept up to doc.DedupMaxReply
		}
		req.Type, req.Value = wire.RecordBatch, doc.AppendBatch(nil, &b)
	}
	// The record commits before the caller's deadline or never (the turn
	// ends then), and the engine answers by the deadline: the handler
	// returned, so its record goes in even if its caller cancelled.
	wctx := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		wctx = &deadlineCtx{wctx, d}
	}
	c, err := t.n.proposeTurn(wctx, req)
	switch {
	case errors.Is(err, partition.ErrTurnEnded):
		// Nothing committed: the call goes again, to the owner by then
		// (until the caller's deadline, which may be what ended it).
		return nil, errTurnMoved
	case err != nil:
		return nil, err
	case c.Duplicate:
		return c.Reply, nil
	}
	return reply, nil
}
