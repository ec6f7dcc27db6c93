package gentest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/ferogen/testdata/ok/ledger"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/ledger/ledgerfero"
	"github.com/fero-go/fero/pkg/fero/ferotest"
)

// books answers the ledger: BALANCE (//fero:concurrent) reads the
// account, DEPOSIT (no directive) adds to it. Each call's handler reports
// to the test on a channel and may be held at a gate, so that the test
// can see which calls of one key overlap.
type books struct {
	ledgerfero.UnimplementedLedger
	// balance gets each BALANCE as it starts, with a channel the handler
	// waits on before it answers (nil: answer at once).
	balance chan chan struct{}
	// deposit gets each DEPOSIT as it starts, with a channel it waits on
	// before it writes and returns (nil: at once).
	deposit chan chan struct{}

	mu  sync.Mutex
	log []string // "start n" and "end n" of each DEPOSIT, n its amount
}

func (b *books) Balance(ctx context.Context, req *ledger.Account) (*ledger.Amount, error) {
	gate := make(chan struct{})
	if err := b.report(ctx, b.balance, gate); err != nil {
		return nil, err
	}
	q, _ := ledgerfero.RequestFromContext(ctx)
	var n int
	_, _ = q.Resource().GetInto(req.ID, &n)
	return &ledger.Amount{Amount: n}, nil
}

func (b *books) Deposit(ctx context.Context, req *ledger.Deposit) (*ledger.Amount, error) {
	b.note("start %d", req.Amount)
	defer b.note("end %d", req.Amount)
	gate := make(chan struct{})
	if err := b.report(ctx, b.deposit, gate); err != nil {
		return nil, err
	}
	q, _ := ledgerfero.RequestFromContext(ctx)
	var n int
	_, _ = q.Resource().GetInto(req.ID, &n)
	n += req.Amount
	return &ledger.Amount{Amount: n}, q.Resource().Update(ctx, req.ID, n)
}

// report hands the test gate, then waits for the test to close it, or
// for the call's end.
func (b *books) report(ctx context.Context, to chan chan struct{}, gate chan struct{}) error {
	select {
	case to <- gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *books) note(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.log = append(b.log, fmt.Sprintf(format, args...))
}

// TestConcurrentVerb: on a real node, two BALANCE calls of one key
// (//fero:concurrent) run at once: the first answers only once the
// second has started, and BALANCE runs while a DEPOSIT holds the key.
// Two DEPOSIT calls of the key (no directive) take turns: the second
// starts only after the first has returned.
func TestConcurrentVerb(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := &books{balance: make(chan chan struct{}), deposit: make(chan chan struct{})}
	c := ferotest.NewCluster(t, ledgerfero.LedgerResourceName, ferotest.WithServers(1),
		ferotest.WithNodeOptions(ledgerfero.RegisterLedger(b)))
	l := ledgerfero.NewLedgerClient(c.Nodes()[0])
	acct := &ledger.Account{ID: "ada"}
	// within waits for a handler to report, or fails the test at a
	// deadline: what it waits for may be stuck behind a turn.
	within := func(ch chan chan struct{}, what string) chan struct{} {
		t.Helper()
		select {
		case gate := <-ch:
			return gate
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not start within 10s", what)
			return nil
		}
	}
	type result struct {
		amount int
		err    error
	}
	balance := func() chan result {
		out := make(chan result, 1)
		go func() {
			a, err := l.Balance(ctx, acct)
			if err != nil {
				out <- result{err: err}
				return
			}
			out <- result{amount: a.Amount}
		}()
		return out
	}
	deposit := func(n int) chan result {
		out := make(chan result, 1)
		go func() {
			a, err := l.Deposit(ctx, &ledger.Deposit{ID: acct.ID, Amount: n})
			if err != nil {
				out <- result{err: err}
				return
			}
			out <- result{amount: a.Amount}
		}()
		return out
	}

	// BALANCE: the first call is held until the second has started.
	first := balance()
	gate1 := within(b.balance, "the first BALANCE")
	second := balance()
	gate2 := within(b.balance, "the second BALANCE, while the first runs,")
	close(gate2)
	close(gate1)
	for _, r := range []result{<-first, <-second} {
		require.NoError(t, r.err)
		assert.Zero(t, r.amount)
	}

	// DEPOSIT: the first holds the key's turn at its gate; BALANCE runs
	// beside it, and the second DEPOSIT does not start.
	d1 := deposit(1)
	dgate1 := within(b.deposit, "the first DEPOSIT")
	read := balance()
	close(within(b.balance, "BALANCE, while a DEPOSIT holds the key,"))
	r := <-read
	require.NoError(t, r.err)
	assert.Zero(t, r.amount, "BALANCE read before the held DEPOSIT committed")
	d2 := deposit(2)
	// A call that must not start can only be watched for a while: the
	// second DEPOSIT has that long to show it would overlap.
	select {
	case g := <-b.deposit:
		close(g)
		t.Fatal("the second DEPOSIT started while the first held the key's turn")
	case <-time.After(200 * time.Millisecond):
	}
	close(dgate1)
	close(within(b.deposit, "the second DEPOSIT, once the first returned,"))
	r1, r2 := <-d1, <-d2
	require.NoError(t, r1.err)
	require.NoError(t, r2.err)
	assert.Equal(t, 1, r1.amount)
	assert.Equal(t, 3, r2.amount, "the second DEPOSIT read the first's write")
	b.mu.Lock()
	defer b.mu.Unlock()
	assert.Equal(t, []string{"start 1", "end 1", "start 2", "end 2"}, b.log)
}
