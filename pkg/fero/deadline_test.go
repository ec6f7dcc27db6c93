package fero

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDeadlineReachesTheRemoteHandler (issue 20): a caller's deadline
// reaches the owner's handler as a deadline, whether the caller is
// another server, or a Remote whose node forwards the request: the
// handler's context has the caller's deadline (give or take the trip),
// and ends with DeadlineExceeded, as a local caller's context would. A call with
// no deadline gives the handler none.
func TestDeadlineReachesTheRemoteHandler(t *testing.T) {
	c := newTestCluster(t, 5)
	type seen struct {
		deadline time.Time
		has      bool
		err      error
	}
	var mu sync.Mutex
	got := map[string]seen{}
	handler := func(ctx context.Context, req *Request) (any, error) {
		if req.Verb != "WAIT" {
			return req.Next(ctx)
		}
		dl, has := ctx.Deadline()
		if has {
			<-ctx.Done()
		}
		mu.Lock()
		got[req.Key] = seen{dl, has, ctx.Err()}
		mu.Unlock()
		return nil, ctx.Err()
	}
	rs := map[string]*Resource{}
	for _, id := range []string{"a", "b", "c"} {
		rs[id] = c.open(id, WithHandler(handler))
	}
	c.settle(3)
	ctx := ctxT(t)
	wait := func(key string) seen {
		t.Helper()
		var s seen
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			var ok bool
			s, ok = got[key]
			return ok
		}, 10*time.Second, 5*time.Millisecond, "the handler of %s never ended", key)
		return s
	}
	const timeout = 300 * time.Millisecond

	// From server a to c's handler.
	key := keyOwnedBy(rs["a"], "c", "wait-1-")
	cctx, cancel := context.WithTimeout(ctx, timeout)
	callerDeadline, _ := cctx.Deadline()
	err := rs["a"].Call(cctx, "WAIT", key, nil, nil)
	cancel()
	require.True(t, errors.Is(err, context.DeadlineExceeded) || CodeOf(err) == CodeDeadlineExceeded, "the caller: %v", err)
	s := wait(key)
	require.True(t, s.has, "the remote handler's context has no deadline")
	// The timeout travels as a duration, counted again from the
	// request's arrival (the clocks need not agree): the handler's
	// deadline is the caller's plus the trip, a fraction of a millisecond
	// here.
	require.WithinDuration(t, callerDeadline, s.deadline, 100*time.Millisecond, "the handler's deadline is the caller's, give or take the trip")
	require.ErrorIs(t, s.err, context.DeadlineExceeded, "the remote handler's context ends as the caller's deadline passes")

	// From a Remote through b, which forwards to c.
	rc, err := Dial(ctx, rs["b"].Addr())
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })
	key = keyOwnedBy(rs["a"], "c", "wait-2-")
	cctx, cancel = context.WithTimeout(ctx, timeout)
	callerDeadline, _ = cctx.Deadline()
	err = rc.Call(cctx, "WAIT", key, nil, nil)
	cancel()
	require.Error(t, err)
	s = wait(key)
	require.True(t, s.has, "through a forward, the handler's context has no deadline")
	require.WithinDuration(t, callerDeadline, s.deadline, 100*time.Millisecond)
	require.ErrorIs(t, s.err, context.DeadlineExceeded)

	// A caller that gives up long before its deadline cancels the
	// handler at once.
	key = keyOwnedBy(rs["a"], "c", "wait-4-")
	cctx, cancel = context.WithTimeout(ctx, time.Minute)
	time.AfterFunc(100*time.Millisecond, cancel)
	began := time.Now()
	require.Error(t, rs["a"].Call(cctx, "WAIT", key, nil, nil))
	s = wait(key)
	require.ErrorIs(t, s.err, context.Canceled)
	require.Less(t, time.Since(began), 30*time.Second, "the handler waited for the deadline")

	// Without a deadline the handler has none.
	key = keyOwnedBy(rs["a"], "c", "wait-3-")
	require.NoError(t, rs["a"].Call(context.Background(), "WAIT", key, nil, nil)) // returns at once: no deadline to wait for
	require.False(t, wait(key).has)
}
