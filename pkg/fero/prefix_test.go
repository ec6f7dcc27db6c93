package fero

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// until collects the keys sub delivers up to and including last.
func until(t *testing.T, sub *Subscription, last string) []string {
	t.Helper()
	var keys []string
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ch := <-sub.C():
			keys = append(keys, ch.Key)
			if ch.Key == last {
				return keys
			}
		case <-deadline:
			t.Fatalf("saw %q, never %q", keys, last)
		}
	}
}

// TestPrefixedChanges: a stream on carts.ada sees ada's changes and the
// paths under them, one on carts.bob sees bob's, and neither sees
// carts.adam; two prefixes make a union.
func TestPrefixedChanges(t *testing.T) {
	c := newTestCluster(t, 141)
	a := c.open("a")
	c.settle(1)
	ctx := ctxT(t)
	ada := a.Subscribe(Prefix("carts.ada"), Buffer(16))
	defer ada.Close()
	bob := a.Subscribe(Prefix("carts.bob"), Buffer(16))
	defer bob.Close()
	both := a.Subscribe(Prefix("carts.ada"), Prefix("carts.bob"), Buffer(16))
	defer both.Close()
	for _, w := range []struct {
		key string
		v   any
	}{
		{"carts.adam", 1}, {"carts.ada", map[string]any{"items": 0}}, {"carts.bob", map[string]any{}},
		{"carts.ada.items", 1}, {"cart", 3}, {"users.ada", 4}, {"carts.ada.end", 5}, {"carts.bob.end", 6},
	} {
		require.NoError(t, retry(ctx, func() error { return a.Update(ctx, w.key, w.v) }))
	}
	assert.Equal(t, []string{"carts.ada", "carts.ada.items", "carts.ada.end"}, until(t, ada, "carts.ada.end"))
	assert.Equal(t, []string{"carts.bob", "carts.bob.end"}, until(t, bob, "carts.bob.end"))
	assert.Equal(t, []string{"carts.ada", "carts.bob", "carts.ada.items", "carts.ada.end", "carts.bob.end"}, until(t, both, "carts.bob.end"))
	assert.Zero(t, ada.Dropped()+bob.Dropped()+both.Dropped())
}

// TestPrefixedBlockStreamIgnoresOtherTraffic: a Block stream with a
// buffer of one that never reads would stop the node at its third change;
// with a prefix that 10,000 writes do not match, every write goes
// through.
func TestPrefixedBlockStreamIgnoresOtherTraffic(t *testing.T) {
	c := newTestCluster(t, 142)
	a := c.open("a")
	c.settle(1)
	idle := a.Subscribe(Prefix("carts.nobody"), Buffer(1), OnOverflow(Block))
	defer idle.Close()
	ctx := ctxT(t)
	for i := range 10000 {
		require.NoError(t, retry(ctx, func() error { return a.Update(ctx, fmt.Sprint("carts.user", i), i) }), "write %d", i)
	}
	assert.Zero(t, idle.Dropped())
	select {
	case ch := <-idle.C():
		t.Fatalf("the idle stream got %s", ch)
	default:
	}
}

type cart struct {
	Items int `msgpack:"items"`
}

// TestMapWatch: a typed watch on a key yields that key's changes with
// their values as V, the zero V where there is none to decode, and
// nothing of the keys beside it.
func TestMapWatch(t *testing.T) {
	c := newTestCluster(t, 143)
	m := Typed[cart](c.open("a"))
	c.settle(1)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	type seen struct {
		kind ChangeType
		key  string
		v    cart
	}
	got := make(chan seen, 64)
	go func() {
		for ch, v := range m.Watch(ctx, "ada") {
			got <- seen{ch.Type, ch.Key, v}
		}
	}()
	// The watch subscribes when its loop starts: write until it has.
	priming := true
	for priming {
		require.NoError(t, retry(ctx, func() error { return m.Put(ctx, "ada", cart{Items: -1}) }))
		select {
		case <-got:
			priming = false
		case <-time.After(10 * time.Millisecond):
		}
	}
	require.NoError(t, m.Put(ctx, "adam", cart{Items: 9}))
	require.NoError(t, m.Put(ctx, "ada", cart{Items: 1}))
	require.NoError(t, m.Resource().Update(ctx, "ada.items", 2))
	require.NoError(t, m.Delete(ctx, "ada"))
	require.NoError(t, m.Put(ctx, "ada", cart{Items: 3}))
	want := []seen{{Update, "ada", cart{1}}, {Update, "ada.items", cart{}}, {Remove, "ada", cart{}}, {Update, "ada", cart{3}}}
	var all []seen
	deadline := time.After(20 * time.Second)
	for len(all) < len(want) {
		select {
		case s := <-got:
			if s.v.Items != -1 { // a priming write's late echo
				all = append(all, s)
			}
		case <-deadline:
			t.Fatalf("watched %v", all)
		}
	}
	assert.Equal(t, want, all)
}
