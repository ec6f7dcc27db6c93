package fero

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRequestHeaders (issue 20): headers a caller puts in its context
// reach the owner's handler, whether the owner is this node, another
// server, or the owner behind the node a Remote reached; names are
// case-insensitive; reserved and malformed names, and oversized values,
// fail the call with CodeInvalidArgument and nothing is sent.
func TestRequestHeaders(t *testing.T) {
	c := newTestCluster(t, 7)
	handler := func(ctx context.Context, req *Request) (any, error) {
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
	keyOwnedBy := func(id string) string {
		for i := 0; ; i++ {
			k := fmt.Sprint("h", i)
			if o, ok := a.node().Map().OwnerOfKey(k); ok && o.ID == id {
				return k
			}
		}
	}
	hctx := WithHeader(WithHeader(ctx, "Tenant", "acme"), "x-request-id", "r1")
	want := "acme|tenant=acme,x-request-id=r1"
	for _, owner := range []string{"a", "b"} {
		var got string
		require.NoError(t, retry(ctx, func() error { return a.Call(hctx, "WHO", keyOwnedBy(owner), nil, &got) }))
		require.Equal(t, want, got, "owner %s", owner)
	}
	rc, err := Dial(ctx, b.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })
	var got string
	require.NoError(t, retry(ctx, func() error { return rc.Call(hctx, "WHO", keyOwnedBy("a"), nil, &got) }))
	require.Equal(t, want, got, "through a Remote and a forward")
	require.NoError(t, retry(ctx, func() error { return a.Call(ctx, "WHO", keyOwnedBy("b"), nil, &got) }))
	require.Equal(t, "|", got, "no headers")

	for _, bad := range []context.Context{
		WithHeader(ctx, "fero-timeout", "1"),
		WithHeader(ctx, "traceparent", "x"),
		WithHeader(ctx, "bad name", "x"),
		WithHeader(ctx, "", "x"),
		WithHeader(ctx, strings.Repeat("n", 65), "x"),
		WithHeader(ctx, "big", strings.Repeat("v", 1025)),
	} {
		require.Equal(t, CodeInvalidArgument, CodeOf(a.Call(bad, "WHO", keyOwnedBy("b"), nil, nil)))
		require.Equal(t, CodeInvalidArgument, CodeOf(rc.Call(bad, "WHO", keyOwnedBy("a"), nil, nil)))
	}
}
