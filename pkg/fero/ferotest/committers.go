package ferotest

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fero-go/fero/pkg/fero"
)

// Committers records which nodes committed changes to which keys, as
// their owners: a test checks with it that a request ran on the owner of
// its key. Each node's change stream marks the changes the node committed
// as owner of their partition (fero.Committed), and a change is committed
// by exactly one node, so the node that committed a key's writes is its
// owner at the time. Make one with [WatchCommits].
type Committers struct {
	mu sync.Mutex
	by map[string]map[string]bool // top-level key → node IDs
}

// WatchCommits follows the change streams of nodes (the servers, usually)
// from now until the test ends, recording who commits what.
func WatchCommits(tb testing.TB, nodes ...*fero.Resource) *Committers {
	c := &Committers{by: map[string]map[string]bool{}}
	var wg sync.WaitGroup
	tb.Cleanup(wg.Wait) // after the subscriptions close: cleanups run last first
	for _, r := range nodes {
		sub := r.Subscribe(fero.Buffer(4096))
		wg.Go(func() {
			for ch := range sub.C() {
				if ch.Kind == fero.Committed {
					top, _, _ := strings.Cut(ch.Key, ".")
					c.add(top, r.ID())
				}
			}
		})
		tb.Cleanup(sub.Close)
	}
	return c
}

func (c *Committers) add(key, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by[key] == nil {
		c.by[key] = map[string]bool{}
	}
	c.by[key][id] = true
}

// Of returns the IDs of the nodes that committed a change to the
// top-level key (or under it), sorted: one while its owner did not
// change, none before its first commit is seen.
func (c *Committers) Of(key string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.by[key]))
}
