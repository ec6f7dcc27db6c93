package fero

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRemote: a process outside the cluster writes, reads and tails
// through one node, which forwards what it does not own.
func TestRemote(t *testing.T) {
	c := newTestCluster(t, 10)
	a, b := c.open("a"), c.open("b")
	c.settle(2)
	ctx := ctxT(t)
	rc, err := Dial(ctx, a.Addr())
	require.NoError(t, err)
	defer rc.Close()

	tailCtx, stopTail := context.WithCancel(ctx)
	defer stopTail()
	tailed := make(chan TailChange, 100)
	tailDone := make(chan error, 1)
	go func() {
		defer close(tailDone)
		for ch, err := range rc.Tail(tailCtx) {
			if err != nil {
				tailDone <- err
				return
			}
			tailed <- ch
		}
	}()

	for i := range 20 {
		require.NoError(t, retry(ctx, func() error { return rc.Update(ctx, fmt.Sprint("k", i), i) }))
	}
	for i := range 20 {
		var v int
		ok, err := rc.Get(ctx, fmt.Sprint("k", i), &v)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, i, v)
	}
	var v int
	ok, err := rc.Get(ctx, "missing", &v)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, CodeFailedPrecondition, CodeOf(rc.Add(ctx, "k1", 5)))
	require.NoError(t, rc.Remove(ctx, "k1"))
	assert.Equal(t, CodeUnimplemented, CodeOf(rc.Call(ctx, "NOPE", "k2", nil, nil)))
	c.converged([]*Resource{a, b}, 19)

	st, err := rc.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, "a", st.ID)
	assert.Equal(t, "test", st.Resource)
	assert.Equal(t, 19, st.Keys)
	assert.Equal(t, a.Digest(), st.Digest)
	require.Len(t, st.Members, 2)
	assert.Equal(t, 32, st.Members[0].Owned+st.Members[1].Owned)
	assert.Equal(t, 32, st.Partitions)

	// The tail started before the writes, but it may have subscribed
	// after the first of them: it sees a suffix of the 21 changes, in
	// order per partition, and certainly the last ones.
	deadline := time.After(10 * time.Second)
	var last TailChange
	for last.Key != "k1" || last.Type != Remove {
		select {
		case last = <-tailed:
		case err := <-tailDone:
			t.Fatalf("tail ended: %v", err)
		case <-deadline:
			t.Fatal("the tail never showed the remove")
		}
	}
	stopTail()
	for range tailDone {
		t.Fatal("a cancelled tail reported an error")
	}
}
