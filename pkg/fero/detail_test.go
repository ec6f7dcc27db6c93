package fero

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

type outOfStock struct {
	SKU  string `msgpack:"sku"`
	Left int    `msgpack:"left"`
}

// TestErrorDetails (issue 20): a handler's error details reach the caller
// with the code and the message, from a local owner, from another server,
// and through a forwarding node to a Remote; a sentinel stays unchanged
// by WithDetail.
func TestErrorDetails(t *testing.T) {
	c := newTestCluster(t, 13)
	sentinel := NewError(CodeFailedPrecondition, "out of stock")
	handler := func(ctx context.Context, req *Request) (any, error) {
		d, err := NewErrorDetail("shop.OutOfStock", outOfStock{SKU: req.Key, Left: 0})
		if err != nil {
			return nil, err
		}
		hint, _ := NewErrorDetail("shop.RetryAfter", 30)
		return nil, sentinel.WithDetail(d).WithDetail(hint)
	}
	a := c.open("a", WithHandler(handler))
	c.open("b", WithHandler(handler))
	c.settle(2)
	ctx := ctxT(t)
	check := func(err error, key, how string) {
		t.Helper()
		require.Equal(t, CodeFailedPrecondition, CodeOf(err), "%s: %v", how, err)
		ds := ErrorDetails(err)
		require.Len(t, ds, 2, how)
		require.Equal(t, "shop.OutOfStock", ds[0].Type)
		var o outOfStock
		require.NoError(t, DecodeErrorDetail(ds[0], &o))
		require.Equal(t, outOfStock{SKU: key}, o, how)
		var wait int
		require.NoError(t, DecodeErrorDetail(ds[1], &wait))
		require.Equal(t, 30, wait, how)
	}
	rc, err := Dial(ctx, a.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })
	for _, owner := range []string{"a", "b"} {
		key := keyOwnedBy(a, owner, "d")
		check(retryCode(ctx, func() error { return a.Call(ctx, "BUY", key, nil, nil) }), key, "a call to "+owner)
		check(retryCode(ctx, func() error { return rc.Call(ctx, "BUY", key, nil, nil) }), key, "a Remote's call to "+owner)
	}
	require.Empty(t, sentinel.Details(), "WithDetail changed the sentinel")
	_, err = NewErrorDetail("", 1)
	require.Equal(t, CodeInvalidArgument, CodeOf(err))
}

// retryCode calls f until it fails with something other than
// CodeUnavailable (the cluster still settling), and returns that.
func retryCode(ctx context.Context, f func() error) error {
	var err error
	_ = retry(ctx, func() error {
		err = f()
		if CodeOf(err) == CodeUnavailable {
			return err
		}
		return nil
	})
	return err
}
