package fero

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompareAndSet: UpdateIf and RemoveIf from a server, a client node
// (whose writes reach the owner as engine forwards) and a Remote (through
// a request): a stale version fails definite with FailedPrecondition and
// the current version; a version past the log is refused.
func TestCompareAndSet(t *testing.T) {
	c, a, b, ctx, rc := twoNodesAndARemote(t)
	x := c.open("x", Client())
	c.settle(2)
	for _, tc := range []struct {
		name     string
		updateIf func(ctx context.Context, key string, ver Version, v any) error
		removeIf func(ctx context.Context, key string, ver Version) error
	}{
		{"server", func(ctx context.Context, k string, ver Version, v any) error { return a.UpdateIf(ctx, k, ver, v) },
			func(ctx context.Context, k string, ver Version) error { return a.RemoveIf(ctx, k, ver) }},
		{"client", func(ctx context.Context, k string, ver Version, v any) error { return x.UpdateIf(ctx, k, ver, v) },
			func(ctx context.Context, k string, ver Version) error { return x.RemoveIf(ctx, k, ver) }},
		{"remote", func(ctx context.Context, k string, ver Version, v any) error { return rc.UpdateIf(ctx, k, ver, v) },
			func(ctx context.Context, k string, ver Version) error { return rc.RemoveIf(ctx, k, ver) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := "cas-" + tc.name
			// Absent is version 0: a create.
			require.NoError(t, retry(ctx, func() error { return tc.updateIf(ctx, k, 0, map[string]int{"n": 1}) }))
			var v map[string]int
			ok, ver, err := rc.GetVersion(ctx, k, &v)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, 1, v["n"])
			require.NotZero(t, ver)
			// A stale version: definite, with the current one.
			err = tc.updateIf(ctx, k, 0, 2)
			require.Error(t, err)
			assert.Equal(t, CodeFailedPrecondition, CodeOf(err), "%v", err)
			assert.True(t, Definite(err))
			cur, ok := VersionOf(err)
			assert.True(t, ok, "no version in %v", err)
			assert.Equal(t, ver, cur)
			// Nested paths count against their top-level key.
			require.NoError(t, tc.updateIf(ctx, k+".n", ver, 5))
			_, ver2, _ := rc.GetVersion(ctx, k, &v)
			assert.Greater(t, ver2, ver)
			// A version no write has had yet.
			err = tc.updateIf(ctx, k, ver2+1000, 3)
			assert.Equal(t, CodeInvalidArgument, CodeOf(err), "%v", err)
			err = tc.removeIf(ctx, k, ver)
			assert.Equal(t, CodeFailedPrecondition, CodeOf(err), "%v", err)
			require.NoError(t, tc.removeIf(ctx, k, ver2))
			ok, ver3, err := rc.GetVersion(ctx, k, &v)
			require.NoError(t, err)
			assert.False(t, ok)
			assert.Zero(t, ver3)
		})
	}
	_ = b
}

// TestCompareAndSetCounter: increments made by read, UpdateIf and retry
// on a mismatch, from three nodes at once, add up exactly.
func TestCompareAndSetCounter(t *testing.T) {
	c, a, b, ctx, _ := twoNodesAndARemote(t)
	x := c.open("x", Client())
	c.settle(2)
	const each = 30
	var wg sync.WaitGroup
	for _, r := range []*Resource{a, b, x} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				for {
					v, ver, _ := r.GetVersion("counter")
					n, _ := v.(int64)
					err := r.UpdateIf(ctx, "counter", ver, n+1, Majority)
					if err == nil {
						break
					}
					if CodeOf(err) != CodeFailedPrecondition && !Definite(err) {
						t.Error(err) // an indefinite failure would make the count unsure
						return
					}
					// A mismatch or a definite refusal: read again (the
					// copy catches up with the write that won).
				}
			}
		}()
	}
	wg.Wait()
	var n int
	require.NoError(t, retry(ctx, func() error { return a.Call(ctx, "GET", "counter", nil, &n) }))
	assert.Equal(t, 3*each, n, fmt.Sprint("counter after ", 3*each, " compare-and-set increments"))
}

// TestCompareAndSetThroughAHandler: a Remote's UpdateIf to servers whose
// handler falls through to the built-in write (req.Next) keeps its
// condition.
func TestCompareAndSetThroughAHandler(t *testing.T) {
	c := newTestCluster(t, 14)
	next := WithHandler(func(ctx context.Context, req *Request) (any, error) { return req.Next(ctx) })
	a := c.open("a", next)
	c.open("b", next)
	c.settle(2)
	ctx := ctxT(t)
	rc, err := Dial(ctx, a.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })
	require.NoError(t, retry(ctx, func() error { return rc.UpdateIf(ctx, "k", 0, 1) }))
	err = rc.UpdateIf(ctx, "k", 0, 2)
	assert.Equal(t, CodeFailedPrecondition, CodeOf(err), "%v", err)
	var v int
	_, _, err = rc.GetVersion(ctx, "k", &v)
	require.NoError(t, err)
	assert.Equal(t, 1, v, "the stale compare-and-set wrote")
}
