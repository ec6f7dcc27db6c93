package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/partition"
)

// publisher is a node with only what publish uses: the change streams
// and the store that says what a key's partition is. Tests and the
// benchmark call publish on it directly, as the driver would, so that
// they measure the dispatch alone.
func publisher(tb testing.TB) *Node {
	tb.Helper()
	store, err := doc.New(32)
	require.NoError(tb, err)
	n := &Node{store: store}
	n.subs.all = map[*Subscription]struct{}{}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	tb.Cleanup(n.cancel)
	return n
}

func applied(key string) partition.Event {
	return partition.Event{Kind: partition.EventApplied, Partition: 0, Entry: partition.Entry{Key: key, Offset: 1}}
}

// received drains what s holds without waiting: publish sends before it
// returns, so whatever was for s is in its buffer.
func received(s *Subscription) []string {
	var keys []string
	for {
		select {
		case c := <-s.C():
			keys = append(keys, c.Entry.Key)
		default:
			return keys
		}
	}
}

// TestPrefixMatchesOnPathBoundaries: a prefix matches its own key and the
// paths under it, never a key that merely starts with the same bytes.
func TestPrefixMatchesOnPathBoundaries(t *testing.T) {
	n := publisher(t)
	keys := []string{"carts", "cart", "cartsx", "carts.ada", "carts.adam", "carts.ada.items.3", "carts.bob", "users.ada"}
	for _, tc := range []struct {
		prefixes []string
		want     []string
	}{
		{[]string{"carts.ada"}, []string{"carts.ada", "carts.ada.items.3"}},
		{[]string{"carts.ada."}, []string{"carts.ada", "carts.ada.items.3"}},
		{[]string{"carts"}, []string{"carts", "carts.ada", "carts.adam", "carts.ada.items.3", "carts.bob"}},
		{[]string{"cart"}, []string{"cart"}},
		{[]string{"carts.ada.items.3"}, []string{"carts.ada.items.3"}},
		{[]string{"carts.ad"}, nil},
		{[]string{""}, keys},
		{nil, keys},
		// A union: carts.ada lies under carts, so its changes come once.
		{[]string{"carts.ada", "users", "carts", "carts"}, []string{"carts", "carts.ada", "carts.adam", "carts.ada.items.3", "carts.bob", "users.ada"}},
		{[]string{"carts.bob", "carts.ada"}, []string{"carts.ada", "carts.ada.items.3", "carts.bob"}},
	} {
		s := n.Subscribe(len(keys)+1, Drop, tc.prefixes...)
		for _, k := range keys {
			n.publish(applied(k))
		}
		assert.Equal(t, tc.want, received(s), "prefixes %q", tc.prefixes)
		s.Close()
	}
	assert.Empty(t, n.subs.all)
	assert.Empty(t, n.subs.idx.every)
	assert.Empty(t, n.subs.idx.byPath, "closed streams leave the index")
	assert.Empty(t, n.subs.idx.byPartition)
}

// TestPrefixedRestoreAndDrop: a dropped change is filtered by its key; a
// restore reaches the streams whose prefix lies in the restored
// partition, and every unfiltered stream.
func TestPrefixedRestoreAndDrop(t *testing.T) {
	n := publisher(t)
	ada, bob, every := n.Subscribe(8, Drop, "carts.ada"), n.Subscribe(8, Drop, "carts.bob"), n.Subscribe(8, Drop)
	users := n.Subscribe(8, Drop, "users")
	defer ada.Close()
	defer bob.Close()
	defer every.Close()
	defer users.Close()
	carts := n.store.PartitionOf("carts")
	require.NotEqual(t, carts, n.store.PartitionOf("users"), "the test needs carts and users in different partitions")

	n.publish(partition.Event{Kind: partition.EventDropped, Partition: carts, Entry: partition.Entry{Key: "carts.ada.items", Offset: 2}})
	n.publish(partition.Event{Kind: partition.EventRestored, Partition: carts})
	kinds := func(s *Subscription) []partition.EventKind {
		var ks []partition.EventKind
		for len(s.C()) > 0 {
			ks = append(ks, (<-s.C()).Kind)
		}
		return ks
	}
	assert.Equal(t, []partition.EventKind{partition.EventDropped, partition.EventRestored}, kinds(ada))
	assert.Equal(t, []partition.EventKind{partition.EventRestored}, kinds(bob), "carts.bob lives in the restored partition")
	assert.Equal(t, []partition.EventKind{partition.EventDropped, partition.EventRestored}, kinds(every))
	assert.Empty(t, kinds(users), "users lives in another partition")
}

// TestNonMatchingTrafficNeverReachesAPrefixedStream: a stream that never
// reads, with a buffer of one, sees 10,000 changes to other keys go by
// without filling, dropping or slowing anything, whether it drops or
// blocks; the one change for it then arrives.
func TestNonMatchingTrafficNeverReachesAPrefixedStream(t *testing.T) {
	for _, overflow := range []Overflow{Drop, Block} {
		n := publisher(t)
		idle := n.Subscribe(1, overflow, "carts.ada")
		flowed := make(chan struct{})
		go func() {
			defer close(flowed)
			for i := range 10000 {
				n.publish(applied(fmt.Sprintf("carts.user%d", i)))
			}
		}()
		select {
		case <-flowed:
		case <-time.After(20 * time.Second):
			t.Fatalf("overflow %d: publishing waited for a stream the changes are not for", overflow)
		}
		assert.Zero(t, idle.Dropped(), "overflow %d", overflow)
		assert.Zero(t, n.subs.drops.Load())
		assert.Empty(t, idle.C(), "non-matching changes reached the stream")
		n.publish(applied("carts.ada"))
		assert.Equal(t, []string{"carts.ada"}, received(idle))
		idle.Close()
	}
}

// TestPublishLooksOnlyAtMatchingStreams: with a thousand streams on
// distinct prefixes, a change is handed to the one whose prefix it is
// under, and publishing allocates nothing.
func TestPublishLooksOnlyAtMatchingStreams(t *testing.T) {
	n := publisher(t)
	for i := range 1000 {
		defer n.Subscribe(1, Drop, fmt.Sprintf("carts.user%d", i)).Close()
	}
	every := n.Subscribe(1, Drop)
	defer every.Close()
	ch := Change{Kind: partition.EventApplied, Entry: partition.Entry{Key: "carts.user7.items.2"}}
	got := n.matching(nil, &ch)
	require.Len(t, got, 2)
	assert.Equal(t, every, got[0])
	assert.Equal(t, []string{"carts.user7"}, got[1].prefixes)

	ev := applied("carts.nobody.items")
	n.publish(ev)
	if !raceEnabled {
		assert.Zero(t, testing.AllocsPerRun(100, func() { n.publish(ev) }), "publishing allocates")
	}
}

// BenchmarkPublishPrefixed publishes a change with 1, 100 and 1000
// streams on distinct prefixes under one top-level key (carts.user<i>),
// the case an index by top-level key would scan whole. "none" publishes a
// change no stream matches, "one" a change one stream takes (and the
// benchmark reads); "unfiltered" is the same number of streams without a
// prefix, for scale: each takes every change, and since nothing reads
// them, their buffers stay full and publish counts a drop for each.
func BenchmarkPublishPrefixed(b *testing.B) {
	for _, watchers := range []int{1, 100, 1000} {
		for _, mode := range []string{"none", "one", "unfiltered"} {
			b.Run(fmt.Sprintf("watchers=%d/match=%s", watchers, mode), func(b *testing.B) {
				n := publisher(b)
				subs := make([]*Subscription, watchers)
				for i := range subs {
					if mode == "unfiltered" {
						subs[i] = n.Subscribe(1, Drop)
					} else {
						subs[i] = n.Subscribe(1, Drop, fmt.Sprintf("carts.user%d", i))
					}
				}
				ev := applied("carts.nobody.items.3")
				if mode != "none" {
					ev = applied("carts.user0.items.3")
				}
				b.ReportAllocs()
				for b.Loop() {
					n.publish(ev)
					if mode == "one" {
						<-subs[0].C()
					}
				}
				for _, s := range subs {
					s.Close()
				}
			})
		}
	}
}
