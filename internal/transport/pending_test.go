package transport

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPendingTableMatchesMap drives the table and a plain map with the
// same random puts and takes, including ids that collide on a slot.
func TestPendingTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab pendingTable
	ref := map[uint64]*pending{}
	next := uint64(0)
	for step := 0; step < 200000; step++ {
		if rng.IntN(3) > 0 || len(ref) == 0 {
			next += 1 + uint64(rng.IntN(3)) // sometimes skip, as cancelled calls do
			if rng.IntN(50) == 0 {
				next += tableSlots // land on an occupied slot
			}
			p := &pending{}
			tab.put(next, p)
			ref[next] = p
			continue
		}
		// Take a random live id, or one that is not there.
		var id uint64
		for k := range ref {
			id = k
			break
		}
		if rng.IntN(10) == 0 {
			id = next + 12345
		}
		assert.Same(t, ref[id], tab.get(id))
		got := tab.take(id)
		require.Samef(t, ref[id], got, "id %d", id)
		delete(ref, id)
		require.Equal(t, len(ref), tab.n)
	}
	all := tab.drain()
	assert.Len(t, all, len(ref))
	assert.Zero(t, tab.n)
	assert.Nil(t, tab.take(next))
}
