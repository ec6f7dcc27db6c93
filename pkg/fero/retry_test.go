package fero

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCallRetryAndTimeout (issue 20): a client's retry policy sends a call
// again after a definite failure of a code it names, with backoff, up to
// its attempts, and never after an indefinite one (CodeAborted) or a code
// it does not name; a client's call timeout reaches the owner's handler as
// its deadline. Both work on a Resource and on a Remote.
func TestCallRetryAndTimeout(t *testing.T) {
	c := newTestCluster(t, 15)
	var mu sync.Mutex
	attempts := map[string]int{}
	deadlines := map[string]time.Duration{}
	handler := func(ctx context.Context, req *Request) (any, error) {
		mu.Lock()
		attempts[req.Key]++
		n := attempts[req.Key]
		if dl, ok := ctx.Deadline(); ok {
			deadlines[req.Key] = time.Until(dl)
		}
		mu.Unlock()
		switch req.Verb {
		case "FLAKY": // unavailable twice, then fine
			if n <= 2 {
				return nil, Errorf(CodeUnavailable, "not now (%d)", n)
			}
			return n, nil
		case "ABORT":
			return nil, Errorf(CodeAborted, "may have happened")
		case "REFUSE":
			return nil, Errorf(CodeFailedPrecondition, "no")
		}
		return nil, nil
	}
	a := c.open("a", WithHandler(handler))
	c.settle(1)
	ctx := ctxT(t)
	policy := RetryPolicy{Attempts: 4, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
	cl := c.open("cl", Client(), WithCallRetry(policy), WithCallTimeout(2*time.Second))
	require.NoError(t, cl.WaitServers(ctx, 1))
	rc, err := Dial(ctx, a.Addr(), WithCallRetry(policy))
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })
	count := func(key string) int { mu.Lock(); defer mu.Unlock(); return attempts[key] }

	for _, caller := range []struct {
		name string
		c    Caller
	}{{"client node", cl}, {"remote", rc}} {
		key := func(s string) string { return fmt.Sprintf("%s-%s", caller.name, s) }
		var n int
		require.NoError(t, caller.c.Call(ctx, "FLAKY", key("flaky"), nil, &n), caller.name)
		require.Equal(t, 3, n, caller.name)
		require.Error(t, caller.c.Call(ctx, "ABORT", key("abort"), nil, nil))
		require.Equal(t, 1, count(key("abort")), "%s: an indefinite failure was retried", caller.name)
		require.Error(t, caller.c.Call(ctx, "REFUSE", key("refuse"), nil, nil))
		require.Equal(t, 1, count(key("refuse")), "%s: a code the policy does not name was retried", caller.name)
	}
	// Out of attempts: the last failure comes back.
	short := c.open("short", Client(), WithCallRetry(RetryPolicy{Attempts: 2, Backoff: time.Millisecond}))
	require.NoError(t, short.WaitServers(ctx, 1))
	err = short.Call(ctx, "FLAKY", "short-flaky", nil, nil)
	require.Equal(t, CodeUnavailable, CodeOf(err))
	require.Equal(t, 2, count("short-flaky"))

	// The client's timeout is the handler's deadline (the test's own
	// context has a later one).
	require.NoError(t, cl.Call(ctx, "NOOP", "timeout", nil, nil))
	mu.Lock()
	left := deadlines["timeout"]
	mu.Unlock()
	require.True(t, left > time.Second && left <= 2*time.Second, "the handler's deadline is %v away", left)
}
