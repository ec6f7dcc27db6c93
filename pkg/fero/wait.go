package fero

import (
	"strconv"
	"strings"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
)

// Wait says what a write waits for before it returns. Pass one as the last
// argument of a write; without one the resource's default applies
// ([WithDefaultWait], [Ack] unless set).
//
// To wait for a handler's reply, send a request with [Resource.Call]; the
// built-in handler replies once the owner committed an ADD, UPDATE or
// REMOVE.
type Wait struct {
	kind partition.Wait
	k    int
}

var (
	// NoWait: fire and forget. The write returns once it is queued on this
	// node; nothing is allocated to wait for it, and its failure is not
	// reported.
	NoWait = Wait{kind: partition.WaitNone}
	// Ack: the owner committed the write (it has an offset in the log).
	// The write survives an orderly owner change, not the owner's crash,
	// nor an owner cut off or paused past failure detection, before a
	// replica applied it.
	Ack = Wait{kind: partition.WaitAck}
	// Majority: a majority of the cluster's configuration (every server
	// that joined and was not forgotten, the owner included) applied the
	// write, which makes it survive any owner change, the crash or pause
	// of a minority, and a split of any length.
	Majority = Wait{kind: partition.WaitMajority}
)

// Replicas waits until k replicas of the partition's replica group, not
// counting the owner, applied the write: the replication-factor dial. k
// must be at least 1 and at most the replica count ([WithReplicas]).
func Replicas(k int) Wait { return Wait{kind: partition.WaitReplicas, k: k} }

func (w Wait) validate() error {
	if w.kind == partition.WaitReplicas && w.k < 1 {
		return errs.Errorf(errs.InvalidArgument, "fero: Replicas(%d): k must be at least 1", w.k)
	}
	return nil
}

// String names the wait.
func (w Wait) String() string {
	switch w.kind {
	case partition.WaitNone:
		return "none"
	case partition.WaitAck:
		return "ack"
	case partition.WaitMajority:
		return "majority"
	case partition.WaitReplicas:
		return "replicas(" + strconv.Itoa(w.k) + ")"
	}
	return "unknown"
}

// ParseWait reads a wait level as the fero CLI's --wait spells it:
// "none", "ack", "majority" or "replicas=K".
func ParseWait(s string) (Wait, error) {
	switch s {
	case "none":
		return NoWait, nil
	case "ack":
		return Ack, nil
	case "majority":
		return Majority, nil
	}
	if k, ok := strings.CutPrefix(s, "replicas="); ok {
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 || n > 255 {
			return Wait{}, errs.Errorf(errs.InvalidArgument, "fero: wait %q: replicas=K needs K from 1 to 255", s)
		}
		return Replicas(n), nil
	}
	return Wait{}, errs.Errorf(errs.InvalidArgument, "fero: wait %q: want none, ack, majority or replicas=K", s)
}

// spec is the wait a remote write carries to the owner.
func (w Wait) spec() protocol.WaitSpec {
	return protocol.WaitSpec{Set: true, Kind: w.kind, K: uint8(min(max(w.k, 0), 255))}
}
