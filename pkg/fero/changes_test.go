package fero

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChangeStreams: a client's stream sees every commit; across the
// servers, each change is in exactly one Commits stream; a reactive chain
// from one resource drives writes to another; a slow Drop subscriber
// counts what it missed.
func TestChangeStreams(t *testing.T) {
	c := newTestCluster(t, 4)
	a, b := c.open("a"), c.open("b")
	client := c.open("client", Client())
	c.settle(2)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()

	const n = 200
	var wg sync.WaitGroup
	seen := make(chan Change, 4*n)
	commits := map[string]int{}
	var mu sync.Mutex
	var primed [3]atomic.Bool // each stream has seen a priming write
	stream := func(i int, seq func(func(Change) bool), record func(Change)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ch := range seq {
				if strings.HasPrefix(ch.Key, "prime") {
					primed[i].Store(true)
					continue
				}
				record(ch)
			}
		}()
	}
	stream(0, client.Changes(ctx, Buffer(4*n), OnOverflow(Block)), func(ch Change) { seen <- ch })
	for i, r := range []*Resource{a, b} {
		stream(i+1, r.Commits(ctx, Buffer(4*n)), func(ch Change) {
			require.Equal(t, Committed, ch.Kind)
			mu.Lock()
			commits[ch.Key]++
			mu.Unlock()
		})
	}
	// A stream subscribes when its loop starts: write until each has seen
	// a write, so none of the writes below can come before it.
	prime(t, client, func() bool { return primed[0].Load() && primed[1].Load() && primed[2].Load() })
	for i := range n {
		require.NoError(t, retry(ctx, func() error { return client.Update(ctx, fmt.Sprint("k", i), i, Majority) }))
	}
	got := map[string]int{}
	deadline := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case ch := <-seen:
			require.Equal(t, Applied, ch.Kind)
			require.Equal(t, Update, ch.Type)
			var v int
			require.NoError(t, ch.Decode(&v))
			got[ch.Key] = v
			assert.NotZero(t, ch.Offset)
		case <-deadline:
			t.Fatalf("the client saw %d of %d changes", len(got), n)
		}
	}
	for i := range n {
		assert.Equal(t, i, got[fmt.Sprint("k", i)])
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(commits) == n
	}, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	for k, times := range commits {
		assert.Equal(t, 1, times, "%s committed %d times across the servers", k, times)
	}
	mu.Unlock()
	cancel()
	wg.Wait() // every iterator ended with its context

	// A subscriber that never reads, with a buffer of 1, drops and counts.
	slow := client.Subscribe(Buffer(1))
	ctx2 := ctxT(t)
	for i := range 20 {
		require.NoError(t, retry(ctx2, func() error { return a.Update(ctx2, fmt.Sprint("d", i), i, Majority) }))
	}
	require.Eventually(t, func() bool { return slow.Dropped() >= 18 }, 10*time.Second, 10*time.Millisecond, "dropped %d", slow.Dropped())
	slow.Close()
	slow.Close()
	for range slow.C() {
	}
}

// TestReactiveChain: one resource's changes drive writes to another, as
// the original's notifications service does.
func TestReactiveChain(t *testing.T) {
	users := newTestCluster(t, 5)
	u := users.open("users-a")
	users.settle(1)
	mail := newTestCluster(t, 6)
	outbox := mail.open("mail-a")
	mail.settle(1)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()

	done := make(chan struct{})
	var primed atomic.Bool
	go func() {
		defer close(done)
		for ch := range u.Changes(ctx, OnOverflow(Block)) {
			if strings.HasPrefix(ch.Key, "prime") {
				primed.Store(true)
				continue
			}
			if ch.Type != Add {
				continue // only new users get a welcome mail
			}
			var user struct {
				Email string `msgpack:"email"`
			}
			if ch.Decode(&user) != nil || user.Email == "" {
				continue
			}
			_ = outbox.Push(ctx, "welcome", user.Email)
		}
	}()
	prime(t, u, primed.Load)
	for i := range 5 {
		require.NoError(t, retry(ctx, func() error {
			return u.Add(ctx, fmt.Sprint("user", i), map[string]any{"email": fmt.Sprintf("u%d@example.com", i)})
		}))
		require.NoError(t, retry(ctx, func() error { return u.Update(ctx, fmt.Sprint("user", i, ".seen"), true) }))
	}
	require.Eventually(t, func() bool {
		v, _ := outbox.Get("welcome")
		l, _ := v.([]any)
		return len(l) == 5
	}, 10*time.Second, 10*time.Millisecond)
	v, _ := outbox.Get("welcome")
	assert.Equal(t, []any{"u0@example.com", "u1@example.com", "u2@example.com", "u3@example.com", "u4@example.com"}, v)
	cancel()
	<-done
}

// prime writes keys "prime0" … "prime99" in turn through r until seen reports
// that the streams under test have started.
func prime(t *testing.T, r *Resource, seen func() bool) {
	t.Helper()
	ctx := ctxT(t)
	// Bounded by time, not by count: on a loaded machine the stream's
	// goroutine may start after many fast writes.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; !seen(); i++ {
		require.NoError(t, retry(ctx, func() error { return r.Update(ctx, fmt.Sprint("prime", i%100), i, Majority) }))
		require.True(t, time.Now().Before(deadline), "the streams never started (%d writes)", i+1)
	}
}

// TestSubscribeThenRange: a subscription opened before a write sees it,
// however late the loop starts.
func TestSubscribeThenRange(t *testing.T) {
	c := newTestCluster(t, 13)
	a := c.open("a")
	c.settle(1)
	ctx := ctxT(t)
	sub := a.Subscribe(Buffer(16))
	require.NoError(t, retry(ctx, func() error { return a.Update(ctx, "first", 1) }))
	for ch := range sub.All(ctx) {
		assert.Equal(t, "first", ch.Key)
		assert.Equal(t, Committed, ch.Kind)
		break
	}
	_, open := <-sub.C()
	assert.False(t, open, "breaking the loop closes the subscription")
}
