package workload

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/fero-go/fero/internal/chaos/history"
	"github.com/fero-go/fero/pkg/fero"
)

// Jepsen's counter and bank workloads, on the verbs `fero serve
// --jepsen-verbs` answers (cmd/fero/jepsen.go). Both test what a verb's
// turn promises: a read-modify-write of one key runs alone, and its
// writes commit as one record, at Majority, or not at all.
//
// Counter: every operation is an INCR of one of Keys by 1; after the heal,
// each counter is read through its owner (Final reads). The checker
// (check.checkCounter) bounds each final count by the INCRs acknowledged
// and those that may have happened.
//
// Bank: each client first sends BANKINIT (idempotent: the first one
// writes), then TRANSFERs between random accounts (eight in ten
// operations) and reads the whole bank through its owner (two in ten),
// then a Final read after the heal. The checker (check.checkBank) wants
// every read to hold the initial total and no negative balance.

// The bank: bankAccounts accounts of bankBalance each, named a0, a1, ...;
// transfers move 1 to maxTransfer, so some are refused for want of funds.
const (
	bankAccounts = 5
	bankBalance  = 20
	maxTransfer  = 10
	// bankReadShare of every mixTotal bank operations are reads.
	bankReadShare = 2
)

// Verbs of `fero serve --jepsen-verbs`.
const (
	verbIncr     = "INCR"
	verbTransfer = "TRANSFER"
	verbBankInit = "BANKINIT"
)

// InitialBank is the bank every client proposes with BANKINIT.
func InitialBank() map[string]int64 {
	m := make(map[string]int64, bankAccounts)
	for i := range bankAccounts {
		m[account(i)] = bankBalance
	}
	return m
}

func account(i int) string { return "a" + strconv.Itoa(i) }

// bankTicket draws a bank operation: n (drawn from mixTotal) picks a read
// or a transfer, rng the accounts and the amount.
func bankTicket(rng *rand.Rand, id uint64, bank string, n int) ticket {
	t := ticket{id: id, key: bank}
	if n < bankReadShare {
		t.f, t.via = history.Read, history.ViaOwner
		return t
	}
	from := rng.IntN(bankAccounts)
	to := (from + 1 + rng.IntN(bankAccounts-1)) % bankAccounts
	t.f, t.from, t.to, t.amount = history.Transfer, account(from), account(to), 1+rng.Int64N(maxTransfer)
	return t
}

// transferArgs is TRANSFER's payload.
type transferArgs struct {
	From   string `msgpack:"from"`
	To     string `msgpack:"to"`
	Amount int64  `msgpack:"amount"`
}

// doJepsen invokes one counter or bank operation and records it.
func (w *worker) doJepsen(ctx context.Context, t ticket) error {
	op := history.Op{Proc: w.cfg.Proc, ID: t.id, F: t.f, Via: t.via, Key: t.key, Amount: t.amount, From: t.from, To: t.to}
	return w.record(ctx, op, func(ctx context.Context, op *history.Op) error {
		switch t.f {
		case history.Incr:
			var v int64
			err := w.r.Call(ctx, verbIncr, t.key, t.amount, &v)
			if err == nil {
				op.Value = strconv.FormatInt(v, 10)
			}
			return err
		case history.Transfer:
			return w.r.Call(ctx, verbTransfer, t.key, transferArgs{From: t.from, To: t.to, Amount: t.amount}, nil)
		}
		return w.readOwner(ctx, op)
	})
}

// record writes op's invoke line, runs call with the operation's deadline,
// and writes its completion. Only a failure to record is an error.
func (w *worker) record(ctx context.Context, op history.Op, call func(context.Context, *history.Op) error) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	defer cancel()
	op.Type, op.Time = history.Invoke, history.Now()
	op.Deadline = op.Time + w.cfg.OpTimeout.Nanoseconds()
	if err := w.hist.Write(op); err != nil {
		return err
	}
	err := call(ctx, &op)
	op.Time, op.Type = history.Now(), history.OK
	if err != nil {
		op.Type = history.Classify(err).Type()
		op.Error, op.Code = err.Error(), fero.CodeOf(err).String()
	}
	return w.hist.Write(op)
}

// readOwner reads op.Key through its owner: a counter into Value, the
// bank into Balances, a CAS register into Value and Version, an array
// into Elements.
func (w *worker) readOwner(ctx context.Context, op *history.Op) error {
	switch w.cfg.Kind {
	case history.CAS:
		return w.readVersion(ctx, op)
	case history.Set:
		return w.readArray(ctx, op)
	}
	if w.cfg.Kind == history.Bank {
		var b map[string]int64
		if err := w.r.Call(ctx, fero.VerbGet, op.Key, nil, &b); err != nil {
			return err
		}
		op.Balances, op.Absent = b, b == nil
		return nil
	}
	var v *int64
	if err := w.r.Call(ctx, fero.VerbGet, op.Key, nil, &v); err != nil {
		return err
	}
	if v == nil {
		op.Absent = true
	} else {
		op.Value = strconv.FormatInt(*v, 10)
	}
	return nil
}

// bankInit sends BANKINIT until one is answered OK (each attempt is in the
// history), or gives up after a minute: the transfers then fail, and the
// checker says the bank was never read.
func (w *worker) bankInit(ctx context.Context) error {
	give := time.Now().Add(time.Minute)
	// IDs apart from the tickets' 1, 2, ... and the final reads'.
	for id := uint64(1) << 41; ; id++ {
		op := history.Op{Proc: w.cfg.Proc, ID: id, F: history.BankInit, Key: w.cfg.Keys[0], Balances: InitialBank()}
		var ok bool
		if err := w.record(ctx, op, func(ctx context.Context, op *history.Op) error {
			var b map[string]int64
			err := w.r.Call(ctx, verbBankInit, op.Key, op.Balances, &b)
			op.Balances, ok = b, err == nil
			return err
		}); err != nil {
			return err
		}
		if ok || ctx.Err() != nil || time.Now().After(give) {
			return nil
		}
		time.Sleep(200 * time.Millisecond) // between attempts, not a wait for a condition
	}
}

// finalReads reads every key (counters, registers, arrays) or the bank
// through its owner once the cluster has healed, retrying each until one read is answered
// or 30s have passed.
func (w *worker) finalReads(ctx context.Context) error {
	keys := w.cfg.Keys
	if w.cfg.Kind == history.Bank {
		keys = keys[:1]
	}
	// IDs after every ticket's: the ticket count is below 1<<40.
	id := uint64(1) << 40
	for _, k := range keys {
		give := time.Now().Add(30 * time.Second)
		for {
			id++
			op := history.Op{Proc: w.cfg.Proc, ID: id, F: history.Read, Via: history.ViaOwner, Key: k, Final: true}
			var ok bool
			if err := w.record(ctx, op, func(ctx context.Context, op *history.Op) error {
				err := w.readOwner(ctx, op)
				ok = err == nil
				return err
			}); err != nil {
				return err
			}
			if ok || ctx.Err() != nil || time.Now().After(give) {
				break
			}
			time.Sleep(200 * time.Millisecond) // between attempts
		}
	}
	return nil
}
