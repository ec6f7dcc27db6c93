package history

import "github.com/fero-go/fero/pkg/fero"

// Outcome says what an error tells the caller about its write.
type Outcome int

const (
	// Definite: the write certainly was not applied, and never will be
	// (Jepsen's :fail). Safe to retry.
	Definite Outcome = iota
	// Indefinite: the write may have been applied (Jepsen's :info).
	Indefinite
)

func (o Outcome) String() string {
	if o == Definite {
		return "definite"
	}
	return "indefinite"
}

// Type returns the history line type for a completion with this outcome.
func (o Outcome) Type() Type {
	if o == Definite {
		return Fail
	}
	return Info
}

// Classify says whether err, the error a write returned, is definite or
// indefinite. It is the one place the suite decides, and it defers to
// fero.Definite, which applies rule 12's table (docs/engine.md, "Errors say
// whether the write may have happened"): Unavailable (no quorum, not
// owner, no owner, sync queue full, no map yet, deadline passed before
// commit, epoch changed since sent) and the refusals before commit
// (InvalidArgument, FailedPrecondition, AlreadyExists, NotFound, ...) are
// definite; DeadlineExceeded, Aborted (ownership lost, connection lost,
// node closed in flight), Canceled and anything without a code are
// indefinite. The checkers then hold fero to the table: a definite write
// that shows up applied is an anomaly (check.KindFailedApplied).
func Classify(err error) Outcome {
	if fero.Definite(err) {
		return Definite
	}
	return Indefinite
}
