package protocol

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
)

// ErrClosedInFlight answers a write the node closed under: it may have
// taken effect, so it is indefinite (Aborted), unlike ErrClosed, which
// answers what was never sent (docs/engine.md, rule 12).
var ErrClosedInFlight = errs.New(errs.Aborted, "node closed with the write in flight")

// Once names one write or verb call for exactly-once: the writer (this
// node, in this life) and its sequence. The zero Once names none.
type Once struct {
	Writer string
	Seq    uint64
}

// Metadata names that carry a request's Once to its owner.
const (
	WriterName = "fero-writer"
	SeqName    = "fero-seq"
)

// NewWriterID names this node's life as a writer: its ID and random
// bytes, so that two lives of one node never share sequences.
func NewWriterID(id string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	w := id + "~" + hex.EncodeToString(b[:])
	if len(w) > doc.MaxBatchWriter {
		w = w[len(w)-doc.MaxBatchWriter:]
	}
	return w
}

// Retryable says whether an attempt that failed with err is sent again,
// with the same Once: the cluster lost track of it (the connection broke
// with it in flight, here or between the node it reached and the owner,
// its owner left the cluster, closed, or lost the partition after
// committing it), so it may or may not have happened. (A
// caller's own node that closes ends the retries: Pause says so.) A handler's
// own error is its answer, and the caller's deadline ends the retries.
func Retryable(err error) bool {
	return errors.Is(err, transport.ErrConnLost) || errors.Is(err, partition.ErrOwnershipLost) ||
		errors.Is(err, partition.ErrOwnerGone) || errors.Is(err, partition.ErrForwardLost) ||
		errors.Is(err, ErrClosedInFlight) || errors.Is(err, ErrForwardLost)
}

// Rerouted says that an attempt met a node that does not own its key (yet):
// the maps are converging after an owner left, nothing was applied, and
// the attempt goes again to the owner by then. Measured on real processes
// (fero-chaos failover --mode failfast), the writes a SIGKILLed owner held
// were retried at a server whose map did not name it owner yet, and 437
// of them reached their callers as "not owner".
func Rerouted(err error) bool {
	return errors.Is(err, partition.ErrNotOwner)
}

// Attempts follows the attempts of one write or call that names its
// writer's sequence. Once an attempt has failed indefinite, the write may
// have committed, and only the owner's table can tell: a later attempt
// refused before the owner looked (not owner, no quorum, a sync under way,
// all Unavailable) is made again, and if the attempts end without the
// owner's word, the caller is told indefinite, whatever the last refusal
// said. (The fault suite's set and cas workloads saw a push that had
// committed answered "no quorum", definite, by its retry.)
type Attempts struct {
	Once      Once
	budget    time.Time
	uncertain bool  // an attempt failed indefinite
	Last      error // the last failure that led to another attempt
}

func NewAttempts(ctx context.Context, o Once) Attempts {
	return Attempts{Once: o, budget: RetryBudget(ctx)}
}

// Again says whether to make another attempt after one that failed with
// err, within the budget.
func (a *Attempts) Again(err error) bool {
	switch {
	case a.Once.Writer == "" || err == nil:
		return false
	case errors.Is(err, transport.ErrClosed) && !errors.Is(err, transport.ErrConnLost):
		// This side closed: nothing will carry another attempt.
		a.Last = err
		return false
	case Retryable(err):
		a.uncertain = true
	case Rerouted(err), a.uncertain && errs.CodeOf(err) == errs.Unavailable:
	default:
		return false
	}
	a.Last = err
	return time.Now().Before(a.budget)
}

// Answer is what the caller is told when the attempts end with err.
func (a *Attempts) Answer(err error) error {
	if err != nil && a.uncertain && errs.Definite(err) {
		return errs.Errorf(errs.Aborted, "fero: an attempt failed indefinite, and the last was refused before the owner could tell whether it had committed: %w", err)
	}
	return err
}

// RetryBudget is when a caller without a deadline stops retrying: its
// retries are bounded as a write's life is (the write timeout), without
// giving the call itself a deadline.
func RetryBudget(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(partition.DefaultWriteTimeout)
}

// ErrForwardLost answers a request forwarded (or relayed) to its owner
// whose connection to the owner broke with it in flight: the owner may
// have run it, so it is indefinite, and its caller makes it again with
// the same sequence (rule 16). It is a sentinel so that the caller
// recognises it after it has crossed the wire; the connection's own
// error would reach the caller as a plain Aborted, the handler's answer
// to all it can tell.
var ErrForwardLost = errs.New(errs.Aborted, "the connection to the owner broke with the request in flight")

// ForwardFailure is what the caller of a forwarded request is told when
// the forward failed with err.
func ForwardFailure(err error) error {
	if errors.Is(err, transport.ErrConnLost) || errors.Is(err, ErrForwardLost) {
		return ErrForwardLost
	}
	return err
}
