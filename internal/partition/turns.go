package partition

import (
	"bytes"
	"strings"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/ring"
)

// Turns (rule 15, docs/engine.md). On its owner, one key's writes and verbs
// run one at a time, in the order they reach the engine. A verb's handler
// takes its key's turn (TurnBegin) before it runs and gives it back with
// its record (TurnEnd): while the turn is held, every other write to the
// key, from this node or forwarded, and every other turn asked for it,
// waits in the turn's queue, and runs in order once the turn ends. A key
// that no turn holds costs a write nothing but a look at an empty map.
//
// A turn belongs to the epoch it began in: when this node stops owning the
// partition every turn ends, the writes waiting behind them fail (definite:
// none was committed) and a TurnEnd that comes later is refused with
// ErrTurnEnded, so a handler's record never commits under another owner,
// nor in a later tenure of this one. A turn also ends at its deadline (its
// caller's), so a handler that never returns holds its key no longer than
// its caller waits.

// TurnOp says what a [Request] does with its key's turn.
type TurnOp uint8

const (
	// TurnNone: a write, which waits behind the key's turn if one is held.
	TurnNone TurnOp = iota
	// TurnBegin asks for the key's turn. Its completion (it must wait for
	// at least WaitAck) comes once the turn is this request's: every
	// earlier write to the key is then committed and applied. The
	// completion's Position is the partition's, and its epoch the turn's.
	// The request's Token names the turn in its TurnEnd.
	TurnBegin
	// TurnEnd ends the turn TurnID. With a Type (RecordBatch, or any
	// write type) it commits that record in the turn's epoch first, and
	// waits as asked; without one (Type 0) it only gives the turn back.
	TurnEnd
)

var (
	// ErrTurnEnded refuses a TurnEnd whose turn is over: this node stopped
	// owning the partition since it began (the record was not committed,
	// and never will be), or the turn's deadline passed.
	ErrTurnEnded = errs.New(errs.Unavailable, "the key's turn ended before its record was committed (ownership moved, or its deadline passed)")
	// ErrTurnQueueFull refuses a write or a turn whose key already has
	// TurnQueueMax waiting behind its turn.
	ErrTurnQueueFull = errs.New(errs.ResourceExhausted, "too many writes waiting for the key's turn")
)

// turn is one key's turn: who holds it, in which epoch, until when, and
// what waits behind it, in arrival order.
type turn struct {
	id       uint64 // the TurnBegin's token
	epoch    Epoch
	deadline int64 // Unix nanoseconds
	waiting  []queued
}

// turnKey is the key whose turn a write to key waits for: its top-level
// key, the one the partitioner hashes, so that a write to a path inside a
// value waits for the value's turn.
func turnKey(key string) string {
	top, _, _ := strings.Cut(key, string(rune(ring.DefaultSeparator)))
	return top
}

// writeTurn handles, on an active owner, a write whose key may be held by a
// turn, or a turn's begin or end.
func (e *Engine) writeTurn(pt *part, w *write, o origin) error {
	tk := turnKey(w.key)
	t := pt.turns[tk]
	switch {
	case w.turn == TurnEnd:
		return e.endTurn(pt, tk, t, w, o)
	case t != nil:
		if len(t.waiting) >= e.cfg.turnQueueMax {
			return ErrTurnQueueFull
		}
		// Held past this step: a copy of its own, not a message's bytes.
		q := queued{write: *w, origin: o}
		q.key, q.value = strings.Clone(w.key), bytes.Clone(w.value)
		t.waiting = append(t.waiting, q)
		return nil
	case w.turn == TurnBegin:
		if done, err := e.beginDuplicate(pt, w, o); done {
			return err
		}
		e.grantTurn(pt, tk, w, o, nil)
		return nil
	}
	return e.commit(pt, w, o)
}

// beginDuplicate answers a turn asked for a verb whose writer's sequence
// was committed before, with its first reply, rather than granting it
// (rule 16): done says it was answered.
func (e *Engine) beginDuplicate(pt *part, w *write, o origin) (done bool, err error) {
	if e.dd == nil || w.writer == "" {
		return false, nil
	}
	return e.answerDuplicate(pt, e.dd, w.writer, w.seq, w, o)
}

// grantTurn gives the key tk's turn to the TurnBegin w, with waiting behind
// it, and tells its proposer.
func (e *Engine) grantTurn(pt *part, tk string, w *write, o origin, waiting []queued) {
	if pt.turns == nil {
		pt.turns = map[string]*turn{}
	}
	pt.turns[tk] = &turn{id: o.token, epoch: pt.accepted, deadline: w.deadline, waiting: waiting}
	e.complete(pt, o, Position{Epoch: pt.accepted, Offset: pt.log.last()}, nil)
}

// endTurn commits a turn's record, if it has one, in the turn's epoch, and
// passes the turn on, whether or not the record fits the state.
func (e *Engine) endTurn(pt *part, tk string, t *turn, w *write, o origin) error {
	if t == nil || t.id != w.turnID || t.epoch != pt.accepted {
		return ErrTurnEnded
	}
	defer e.passTurn(pt, tk, t)
	switch {
	case e.now.UnixNano() >= t.deadline:
		return ErrTurnEnded
	case w.typ == 0:
		e.complete(pt, o, pt.position(), nil)
		return nil
	case !e.hasQuorum():
		return e.noQuorum()
	}
	return e.commit(pt, w, o)
}

// passTurn ends turn t of key tk: what waited behind it runs in order, up
// to the next TurnBegin, which takes the turn with the rest behind it.
func (e *Engine) passTurn(pt *part, tk string, t *turn) {
	delete(pt.turns, tk)
	for i, q := range t.waiting {
		if e.expired(&q.write, q.origin) {
			e.complete(pt, q.origin, Position{}, ErrExpired)
			continue
		}
		if q.turn == TurnBegin {
			if done, err := e.beginDuplicate(pt, &q.write, q.origin); done {
				if err != nil {
					e.complete(pt, q.origin, Position{}, err)
				}
				continue
			}
			e.grantTurn(pt, tk, &q.write, q.origin, t.waiting[i+1:])
			return
		}
		var err error
		if !e.hasQuorum() {
			err = e.noQuorum()
		} else {
			err = e.commit(pt, &q.write, q.origin)
		}
		if err != nil {
			e.complete(pt, q.origin, Position{}, err)
		}
	}
}

// expireTurns ends the turns whose deadline has passed (their handler is
// past its caller's deadline) and fails what waited past its own.
func (e *Engine) expireTurns(pt *part) {
	for tk, t := range pt.turns {
		if e.now.UnixNano() >= t.deadline {
			e.passTurn(pt, tk, t)
			continue
		}
		kept := t.waiting[:0]
		for _, q := range t.waiting {
			if e.expired(&q.write, q.origin) {
				e.complete(pt, q.origin, Position{}, ErrExpired)
			} else {
				kept = append(kept, q)
			}
		}
		clear(t.waiting[len(kept):])
		t.waiting = kept
	}
}

// endTurns ends every turn of a partition this node stops owning: the
// writes waiting behind them were never committed, so they fail with err,
// a definite error; the holders' TurnEnds will find no turn.
func (e *Engine) endTurns(pt *part, err error) {
	for _, t := range pt.turns {
		for _, q := range t.waiting {
			e.complete(pt, q.origin, Position{}, err)
		}
	}
	pt.turns = nil
}
