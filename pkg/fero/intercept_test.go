package fero

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestInterceptors (issue 20): handler-side interceptors run around the
// handler in order, the first outermost, see the request (and its
// headers) through RequestFromContext, and may answer themselves, an
// authenticating one refusing a call without a token; call-side
// interceptors run around Resource.Call and Remote.Call in order and may
// add headers. A chain of length zero costs a call no allocation.
func TestInterceptors(t *testing.T) {
	c := newTestCluster(t, 9)
	var mu sync.Mutex
	var log []string
	note := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	logging := func(name string) Interceptor {
		return func(next Handler) Handler {
			return func(ctx context.Context, req *Request) (any, error) {
				q, ok := RequestFromContext(ctx)
				require.True(t, ok)
				require.Same(t, req, q)
				note(name + ">" + req.Verb)
				reply, err := next(ctx, req)
				note(name + "<")
				return reply, err
			}
		}
	}
	auth := func(next Handler) Handler {
		return func(ctx context.Context, req *Request) (any, error) {
			if req.Header("token") != "s3cret" {
				return nil, Errorf(CodePermissionDenied, "no token")
			}
			return next(ctx, req)
		}
	}
	handler := func(ctx context.Context, req *Request) (any, error) {
		q, _ := RequestFromContext(ctx)
		note("handler " + q.Key)
		return "hi " + req.Key, nil
	}
	withToken := func(next CallFunc) CallFunc {
		return func(ctx context.Context, verb, key string, payload, reply any) error {
			note("call " + verb)
			return next(WithHeader(ctx, "token", "s3cret"), verb, key, payload, reply)
		}
	}
	opts := []NodeOption{WithHandler(handler), WithInterceptors(logging("outer"), logging("inner"), auth)}
	a := c.open("a", opts...)
	c.open("b", opts...)
	c.settle(2)
	ctx := ctxT(t)

	// Without the token the auth interceptor refuses; the logging ones ran.
	err := retry(ctx, func() error { return a.Call(ctx, "HELLO", keyOwnedBy(a, "b", "i"), nil, nil) })
	require.Equal(t, CodePermissionDenied, CodeOf(err), "%v", err)
	mu.Lock()
	require.Equal(t, []string{"outer>HELLO", "inner>HELLO", "inner<", "outer<"}, log)
	log = nil
	mu.Unlock()

	// A client node with a call interceptor that adds the token.
	cl := c.open("cl", Client(), WithCallInterceptors(withToken))
	require.NoError(t, cl.WaitServers(ctx, 2))
	for _, owner := range []string{"a", "b"} {
		key := keyOwnedBy(a, owner, "i")
		var got string
		require.NoError(t, retry(ctx, func() error { return cl.Call(ctx, "HELLO", key, nil, &got) }))
		require.Equal(t, "hi "+key, got)
	}
	// And a Remote.
	rc, err := Dial(ctx, a.Addr(), WithCallInterceptors(withToken))
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })
	var got string
	require.NoError(t, retry(ctx, func() error { return rc.Call(ctx, "HELLO", keyOwnedBy(a, "b", "i"), nil, &got) }))
	mu.Lock()
	joined := strings.Join(log, ",")
	mu.Unlock()
	require.Contains(t, joined, "call HELLO,outer>HELLO,inner>HELLO,handler ")

	// A chain of length zero: Call costs what the call without the
	// chain does.
	tctx := WithHeader(ctx, "token", "s3cret")
	local := keyOwnedBy(a, "a", "i")
	require.NoError(t, retry(ctx, func() error { return a.Call(tctx, "HELLO", local, nil, nil) }))
	// AllocsPerRun counts the whole process's allocations, the nodes'
	// own goroutines' too, which only ever add: the least of a few runs
	// is the call's own.
	least := func(f func()) float64 {
		n := testing.AllocsPerRun(200, f)
		for range 4 {
			n = min(n, testing.AllocsPerRun(200, f))
		}
		return n
	}
	direct := least(func() { _ = a.callDirect(tctx, "HELLO", local, nil, nil) })
	chained := least(func() { _ = a.Call(tctx, "HELLO", local, nil, nil) })
	require.Equal(t, direct, chained, "allocations of a call through an empty chain of call interceptors")
}

// TestInterceptorsAroundBuiltins: with interceptors and no handler, the
// built-in writes a Remote sends go through them, headers included, and
// keep the wait level the caller asked for (Request.Next passes it on).
func TestInterceptorsAroundBuiltins(t *testing.T) {
	c := newTestCluster(t, 11)
	auth := func(next Handler) Handler {
		return func(ctx context.Context, req *Request) (any, error) {
			if req.Header("token") != "s3cret" {
				return nil, Errorf(CodePermissionDenied, "no token")
			}
			return next(ctx, req)
		}
	}
	a := c.open("a", WithInterceptors(auth))
	b := c.open("b", WithInterceptors(auth))
	c.settle(2)
	c.voting(2)
	ctx := ctxT(t)
	rc, err := Dial(ctx, a.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })
	require.Equal(t, CodePermissionDenied, CodeOf(rc.Update(ctx, "k", 1)))
	tctx := WithHeader(ctx, "token", "s3cret")
	for i := range 20 {
		key := fmt.Sprint("m", i)
		require.NoError(t, retry(tctx, func() error { return rc.Update(tctx, key, i, Majority) }))
		// Majority of two servers is both: the wait level reached the owner.
		for _, r := range []*Resource{a, b} {
			v, ok := r.Get(key)
			require.True(t, ok && v == int64(i), "%s on %s: a Majority write returned before both servers applied it", key, r.ID())
		}
	}
}
