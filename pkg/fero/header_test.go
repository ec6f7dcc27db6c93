package fero

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// TestRequestHeaders (issue 20): headers a caller puts in its context
// reach the owner's handler, whether the owner is this node, another
// server, or the owner behind the node a Remote reached; names are
// case-insensitive; reserved and malformed names, and oversized values,
// fail the call with CodeInvalidArgument and nothing is sent.
func TestRequestHeaders(t *testing.T) {
	c := newTestCluster(t, 7)
	handler := func(ctx context.Context, req *Request) (any, error) {
		if req.Verb == "NESTED" {
			// A handler's own calls do not send its caller's headers on,
			// whether the caller is local or not.
			var key, got string
			if err := req.Decode(&key); err != nil {
				return nil, err
			}
			err := req.Resource().Call(ctx, "WHO", key, nil, &got)
			return got, err
		}
		if req.Verb != "WHO" {
			return req.Next(ctx)
		}
		var all []string
		for k, v := range req.Headers() {
			all = append(all, k+"="+v)
		}
		return req.Header("Tenant") + "|" + strings.Join(all, ","), nil
	}
	a, b := c.open("a", WithHandler(handler)), c.open("b", WithHandler(handler))
	c.settle(2)
	ctx := ctxT(t)
	hctx := WithHeader(WithHeader(ctx, "Tenant", "acme"), "x-request-id", "r1")
	want := "acme|tenant=acme,x-request-id=r1"
	for _, owner := range []string{"a", "b"} {
		var got string
		require.NoError(t, retry(ctx, func() error { return a.Call(hctx, "WHO", keyOwnedBy(a, owner, "h"), nil, &got) }))
		require.Equal(t, want, got, "owner %s", owner)
	}
	rc, err := Dial(ctx, b.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })
	var got string
	require.NoError(t, retry(ctx, func() error { return rc.Call(hctx, "WHO", keyOwnedBy(a, "a", "h"), nil, &got) }))
	require.Equal(t, want, got, "through a Remote and a forward")
	require.NoError(t, retry(ctx, func() error { return a.Call(ctx, "WHO", keyOwnedBy(a, "b", "h"), nil, &got) }))
	require.Equal(t, "|", got, "no headers")
	for _, owner := range []string{"a", "b"} {
		nested := keyOwnedBy(a, owner, "n")
		require.NoError(t, retry(ctx, func() error { return a.Call(hctx, "NESTED", nested, keyOwnedBy(a, "b", "h"), &got) }))
		require.Equal(t, "|", got, "the handler on %s sent its caller's headers on", owner)
	}

	for _, bad := range []context.Context{
		WithHeader(ctx, "fero-timeout", "1"),
		WithHeader(ctx, "traceparent", "x"),
		WithHeader(ctx, "bad name", "x"),
		WithHeader(ctx, "", "x"),
		WithHeader(ctx, strings.Repeat("n", 65), "x"),
		WithHeader(ctx, "big", strings.Repeat("v", 1025)),
	} {
		require.Equal(t, CodeInvalidArgument, CodeOf(a.Call(bad, "WHO", keyOwnedBy(a, "b", "h"), nil, nil)))
		require.Equal(t, CodeInvalidArgument, CodeOf(rc.Call(bad, "WHO", keyOwnedBy(a, "a", "h"), nil, nil)))
	}
}

// TestReplyHeaders (issue 20): headers a handler sets on its reply reach
// a caller that asks for them, from a local owner, another server, and
// through a forward to a Remote, with Call and CallAsync; a header that
// breaks the rules is refused in the handler.
func TestReplyHeaders(t *testing.T) {
	c := newTestCluster(t, 17)
	handler := func(ctx context.Context, req *Request) (any, error) {
		if err := req.SetReplyHeader("X-Quota-Left", "41"); err != nil {
			return nil, err
		}
		if err := req.SetReplyHeader("served-by", req.Resource().ID()); err != nil {
			return nil, err
		}
		require.Equal(t, CodeInvalidArgument, CodeOf(req.SetReplyHeader("fero-x", "no")))
		return "ok", nil
	}
	a := c.open("a", WithHandler(handler))
	c.open("b", WithHandler(handler))
	c.settle(2)
	ctx := ctxT(t)
	rc, err := Dial(ctx, a.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })
	for _, owner := range []string{"a", "b"} {
		for name, call := range map[string]func(context.Context, string) error{
			"Call":        func(ctx context.Context, key string) error { return a.Call(ctx, "Q", key, nil, nil) },
			"Remote.Call": func(ctx context.Context, key string) error { return rc.Call(ctx, "Q", key, nil, nil) },
			"CallAsync": func(ctx context.Context, key string) error {
				errc := make(chan error, 1)
				if err := a.CallAsync(ctx, "Q", key, nil, func(_ msgpack.RawMessage, err error) { errc <- err }); err != nil {
					return err
				}
				return <-errc
			},
		} {
			key := keyOwnedBy(a, owner, "h")
			var h ReplyHeader
			require.NoError(t, retry(ctx, func() error { h = ReplyHeader{}; return call(WithReplyHeader(ctx, &h), key) }), "%s to %s", name, owner)
			require.Equal(t, "41", h.Get("x-quota-left"), "%s to %s", name, owner)
			require.Equal(t, owner, h.Get("Served-By"), "%s to %s", name, owner)
			n := 0
			for range h.All() {
				n++
			}
			require.Equal(t, 2, n)
		}
	}
	// A caller that does not ask gets its reply all the same.
	var got string
	require.NoError(t, retry(ctx, func() error { return rc.Call(ctx, "Q", keyOwnedBy(a, "b", "h"), nil, &got) }))
	require.Equal(t, "ok", got)
}
