package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// Exactly-once (docs/engine.md, rule 16). Each write a caller waits for,
// and each verb it calls, carries this node's writer ID and a sequence
// number of its own. The owner's state remembers the outcome of a writer's
// recent sequences in each partition (doc.Store's table, replicated with
// the partition), so when an attempt fails with an indefinite error (the
// owner died or lost the partition with the write in flight) the node
// sends it again with the same sequence, to whoever owns the key by then,
// and the write applies once: a retry of a committed write, or of a verb
// whose record was committed, is answered with the first outcome.

// Once names one write or verb call for exactly-once: the writer (this
// node, in this life) and its sequence. The zero Once names none.
type Once struct {
	Writer string
	Seq    uint64
}

// Metadata names that carry a request's Once to its owner.
const (
	writerName = "fero-writer"
	seqName    = "fero-seq"
)

// newWriterID names this node's life as a writer: its ID and random
// bytes, so that two lives of one node never share sequences.
func newWriterID(id string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	w := id + "~" + hex.EncodeToString(b[:])
	if len(w) > doc.MaxBatchWriter {
		w = w[len(w)-doc.MaxBatchWriter:]
	}
	return w
}

// newOnce names a new write of this node's whose sequence is taken when
// it is proposed (takeSeq), or none when the node does not retry.
func (n *Node) newOnce() Once {
	if n.cfg.NoRetry {
		return Once{}
	}
	return Once{Writer: n.writer}
}

// takeSeq gives o the next sequence number and holds the node's turn to
// propose until releaseSeq: the writes of one node reach its
// engine, which forwards them to their owners in the order it takes them,
// in sequence order. A partition remembers its writers' latest
// doc.DedupPerWriter sequences and refuses an older one it does not know
// as too old to tell; numbered before they queued, a first attempt could
// arrive more than that many behind later ones and be refused
// (TestConcurrentWritesAreNotTooOld: 400 goroutines writing to one
// partition through a client node).
func (n *Node) takeSeq(ctx context.Context, o *Once) error {
	select {
	case n.seqTurn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.ctx.Done():
		return ErrClosed
	}
	o.Seq = n.seq.Add(1)
	return nil
}

// releaseSeq gives back the turn takeSeq took.
func (n *Node) releaseSeq() { <-n.seqTurn }

// retryable says whether an attempt that failed with err is sent again,
// with the same Once: the cluster lost track of it (the connection broke
// with it in flight, here or between the node it reached and the owner,
// its owner left the cluster, closed, or lost the partition after
// committing it), so it may or may not have happened. (A
// caller's own node that closes ends the retries: pause says so.) A handler's
// own error is its answer, and the caller's deadline ends the retries.
func retryable(err error) bool {
	return errors.Is(err, transport.ErrConnLost) || errors.Is(err, partition.ErrOwnershipLost) ||
		errors.Is(err, partition.ErrOwnerGone) || errors.Is(err, partition.ErrForwardLost) ||
		errors.Is(err, errClosedInFlight) || errors.Is(err, errForwardLost)
}

// onceRecord is the record of change c sent as o: a batch that names its
// writer's sequence (and carries c's condition, if any), or c itself when
// it needs neither.
func onceRecord(c doc.Change, o Once) doc.Change {
	if o.Writer == "" && !c.Cond {
		return c
	}
	b := doc.Batch{Changes: []doc.Change{c}, Writer: o.Writer, Seq: o.Seq}
	return doc.Change{Type: wire.RecordBatch, Key: c.Key, Value: doc.AppendBatch(nil, &b)}
}

// rerouted says that an attempt met a node that does not own its key (yet):
// the maps are converging after an owner left, nothing was applied, and
// the attempt goes again to the owner by then. Measured on real processes
// (fero-chaos failover --mode failfast), the writes a SIGKILLed owner held
// were retried at a server whose map did not name it owner yet, and 437
// of them reached their callers as "not owner".
func rerouted(err error) bool {
	return errors.Is(err, partition.ErrNotOwner)
}

// attempts follows the attempts of one write or call that names its
// writer's sequence. Once an attempt has failed indefinite, the write may
// have committed, and only the owner's table can tell: a later attempt
// refused before the owner looked (not owner, no quorum, a sync under way,
// all Unavailable) is made again, and if the attempts end without the
// owner's word, the caller is told indefinite, whatever the last refusal
// said. (The fault suite's set and cas workloads saw a push that had
// committed answered "no quorum", definite, by its retry.)
type attempts struct {
	once      Once
	budget    time.Time
	uncertain bool  // an attempt failed indefinite
	last      error // the last failure that led to another attempt
}

func newAttempts(ctx context.Context, o Once) attempts {
	return attempts{once: o, budget: retryBudget(ctx)}
}

// again says whether to make another attempt after one that failed with
// err, within the budget.
func (a *attempts) again(err error) bool {
	switch {
	case a.once.Writer == "" || err == nil:
		return false
	case errors.Is(err, transport.ErrClosed) && !errors.Is(err, transport.ErrConnLost):
		// This side closed: nothing will carry another attempt.
		a.last = err
		return false
	case retryable(err):
		a.uncertain = true
	case rerouted(err), a.uncertain && errs.CodeOf(err) == errs.Unavailable:
	default:
		return false
	}
	a.last = err
	return time.Now().Before(a.budget)
}

// answer is what the caller is told when the attempts end with err.
func (a *attempts) answer(err error) error {
	if err != nil && a.uncertain && errs.Definite(err) {
		return errs.Errorf(errs.Aborted, "fero: an attempt failed indefinite, and the last was refused before the owner could tell whether it had committed: %w", err)
	}
	return err
}

// retryBudget is when a caller without a deadline stops retrying: its
// retries are bounded as a write's life is (the write timeout), without
// giving the call itself a deadline.
func retryBudget(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(partition.DefaultWriteTimeout)
}
