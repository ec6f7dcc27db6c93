package fero

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An attached client proves a client token, not the cluster secret: it
// learns the servers from one of them, writes, reads its own writes and
// everybody's, and a client with no token or a wrong one is refused.
func TestAttachedClient(t *testing.T) {
	secret, token := bytes.Repeat([]byte("s"), 32), bytes.Repeat([]byte("t"), 32)
	c := newTestCluster(t, 1)
	creds := []NodeOption{WithClusterSecret(secret), WithClientTokens(token)}
	a := c.open("a", creds...)
	b := c.open("b", creds...)
	c.settle(2)
	ctx := ctxT(t)
	// Written before the client attaches: it catches up.
	for i := range 20 {
		require.NoError(t, retry(ctx, func() error { return a.Update(ctx, fmt.Sprint("before", i), i, Majority) }))
	}
	open := func(opts ...NodeOption) (*Resource, error) {
		return Open(ctx, "test", append([]NodeOption{
			Client(), WithLogger(testLogger(t)), WithPartitions(32), WithSyncTimeout(500 * time.Millisecond),
			WithTick(20 * time.Millisecond), WithAttach(a.Addr()),
		}, opts...)...)
	}

	_, err := open()
	require.Error(t, err, "no token")
	require.Equal(t, CodePermissionDenied, CodeOf(err), "%v", err)
	_, err = open(WithToken(bytes.Repeat([]byte("x"), 32)))
	require.Equal(t, CodePermissionDenied, CodeOf(err), "%v", err)
	_, err = open(WithToken(token), WithClusterSecret(secret))
	require.Equal(t, CodeInvalidArgument, CodeOf(err), "an attached client gossips not: %v", err)

	cl, err := open(WithToken(token))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	require.Eventually(t, func() bool {
		m := cl.node().Map()
		return m != nil && len(m.Members()) == 2
	}, 20*time.Second, 10*time.Millisecond, "the client learns both servers")

	// Its writes reach the servers; theirs reach its copy.
	for i, k := range []string{keyOwnedBy(a, "a", "k"), keyOwnedBy(a, "b", "k")} {
		require.NoError(t, retry(ctx, func() error { return cl.Update(ctx, k, i, Majority) }))
		for _, r := range []*Resource{a, b, cl} {
			require.Eventually(t, func() bool { _, ok := r.Get(k); return ok }, 10*time.Second, 5*time.Millisecond)
		}
	}
	require.NoError(t, retry(ctx, func() error { return b.Update(ctx, "from-b", "hi", Majority) }))
	require.Eventually(t, func() bool { v, ok := cl.Get("from-b"); return ok && v == "hi" }, 10*time.Second, 5*time.Millisecond)
	c.converged([]*Resource{a, b, cl}, 23)
}
