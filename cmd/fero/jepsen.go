package main

import (
	"context"
	"strings"

	"github.com/fero-go/fero/pkg/fero"
)

// The fault suite's test verbs (--jepsen-verbs), for its counter and bank
// workloads (internal/chaos/workload). Each is a read-modify-write that is
// only safe because it runs in its key's turn (pkg/fero's Handler): its
// reads see every earlier write to the key, and its writes commit as one
// record, at Majority, or not at all. They are written against pkg/fero's
// public API only, as a service would write them.
const (
	// verbIncr: INCR key, payload n (default 1): the integer at key (0 if
	// absent) plus n is written back and replied.
	verbIncr = "INCR"
	// verbTransfer: TRANSFER bank, payload {from, to, amount}: moves
	// amount between two accounts (sub-keys of bank, so one partition and
	// one turn), refused with CodeFailedPrecondition if from holds less.
	// Replies {from: balance, to: balance} after the move.
	verbTransfer = "TRANSFER"
	// verbBankInit: BANKINIT bank, payload {account: balance}: writes the
	// accounts if bank is absent, else leaves it; either way replies the
	// bank as it then stands. Every client may send it; one writes.
	verbBankInit = "BANKINIT"
)

// transferArgs is TRANSFER's payload.
type transferArgs struct {
	From   string `msgpack:"from"`
	To     string `msgpack:"to"`
	Amount int64  `msgpack:"amount"`
}

// jepsenHandler answers INCR, TRANSFER and BANKINIT; every other verb
// takes its built-in path.
func jepsenHandler(ctx context.Context, req *fero.Request) (any, error) {
	r := req.Resource()
	switch req.Verb {
	case verbIncr:
		n := int64(1)
		if len(req.Payload) > 0 {
			if err := req.Decode(&n); err != nil {
				return nil, err
			}
		}
		var v int64
		if _, err := r.GetInto(req.Key, &v); err != nil {
			return nil, fero.Errorf(fero.CodeFailedPrecondition, "INCR %q: not an integer: %v", req.Key, err)
		}
		v += n
		if err := r.Update(ctx, req.Key, v, fero.Majority); err != nil {
			return nil, err
		}
		return v, nil
	case verbTransfer:
		var t transferArgs
		if err := req.Decode(&t); err != nil {
			return nil, err
		}
		if t.From == t.To || t.Amount <= 0 || !plainAccount(t.From) || !plainAccount(t.To) {
			return nil, fero.Errorf(fero.CodeInvalidArgument, "TRANSFER %q: want two accounts and an amount > 0, got %+v", req.Key, t)
		}
		from, to := req.Key+"."+t.From, req.Key+"."+t.To
		var a, b int64
		okA, errA := r.GetInto(from, &a)
		okB, errB := r.GetInto(to, &b)
		switch {
		case errA != nil || errB != nil:
			return nil, fero.Errorf(fero.CodeFailedPrecondition, "TRANSFER %q: balances not integers: %v, %v", req.Key, errA, errB)
		case !okA || !okB:
			return nil, fero.Errorf(fero.CodeFailedPrecondition, "TRANSFER %q: no account %q or %q", req.Key, t.From, t.To)
		case a < t.Amount:
			return nil, fero.Errorf(fero.CodeFailedPrecondition, "TRANSFER %q: %s holds %d, less than %d", req.Key, t.From, a, t.Amount)
		}
		// Two writes, one record: the turn commits both or neither.
		if err := r.Update(ctx, from, a-t.Amount, fero.Majority); err != nil {
			return nil, err
		}
		if err := r.Update(ctx, to, b+t.Amount, fero.Majority); err != nil {
			return nil, err
		}
		return map[string]int64{t.From: a - t.Amount, t.To: b + t.Amount}, nil
	case verbBankInit:
		var cur map[string]int64
		ok, err := r.GetInto(req.Key, &cur)
		if err != nil {
			return nil, fero.Errorf(fero.CodeFailedPrecondition, "BANKINIT %q: not a bank: %v", req.Key, err)
		}
		if ok {
			return cur, nil
		}
		var init map[string]int64
		if err := req.Decode(&init); err != nil {
			return nil, err
		}
		for name, v := range init {
			if !plainAccount(name) || v < 0 {
				return nil, fero.Errorf(fero.CodeInvalidArgument, "BANKINIT %q: account %q = %d", req.Key, name, v)
			}
		}
		if err := r.Update(ctx, req.Key, init, fero.Majority); err != nil {
			return nil, err
		}
		return init, nil
	}
	return req.Next(ctx)
}

// plainAccount: an account name is one path segment.
func plainAccount(s string) bool { return s != "" && !strings.ContainsAny(s, ".[]") }
