package seqtab

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTableInOrder(t *testing.T) {
	var tab Table[string]
	a, b, c := tab.Add("a"), tab.Add("b"), tab.Add("c")
	assert.Equal(t, []uint64{1, 2, 3}, []uint64{a, b, c})
	v, ok := tab.Take(b)
	assert.True(t, ok)
	assert.Equal(t, "b", v)
	_, ok = tab.Take(b)
	assert.False(t, ok, "taken twice")
	id, v, ok := tab.Oldest()
	assert.Equal(t, []any{uint64(1), "a", true}, []any{id, v, ok})
	_, _ = tab.Take(a)
	id, v, _ = tab.Oldest()
	assert.Equal(t, []any{uint64(3), "c"}, []any{id, v}, "the front skips what left")
	_, ok = tab.Get(99)
	assert.False(t, ok)
	_, ok = tab.Get(0)
	assert.False(t, ok)
	_, _ = tab.Take(c)
	assert.Zero(t, tab.Len())
	_, _, ok = tab.Oldest()
	assert.False(t, ok)
	assert.Equal(t, uint64(4), tab.Add("d"), "ids keep counting after the table empties")
}

// TestTableAgainstMap drives a table and a map with the same random
// operations, across growth and wrap-around, and compares them after each.
func TestTableAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab Table[int]
	model := map[uint64]int{}
	var issued uint64
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op < 5:
			id := tab.Add(step)
			issued++
			require.Equal(t, issued, id)
			model[id] = step
		case op < 9 && issued > 0:
			// Mostly near the front, sometimes anywhere (out of order).
			id := issued - uint64(rng.IntN(int(min(issued, 300))))
			v, ok := tab.Take(id)
			mv, mok := model[id]
			require.Equal(t, mok, ok, "take %d", id)
			require.Equal(t, mv, v)
			delete(model, id)
		default:
			// Take some during a walk, as timeouts do.
			for id, v := range tab.All() {
				require.Equal(t, model[id], v)
				if rng.IntN(3) == 0 {
					_, ok := tab.Take(id)
					require.True(t, ok)
					delete(model, id)
				}
			}
		}
		require.Equal(t, len(model), tab.Len())
		ids := []uint64{}
		for id := range tab.All() {
			ids = append(ids, id)
		}
		want := make([]uint64, 0, len(model))
		for id := range model {
			want = append(want, id)
		}
		slices.Sort(want)
		require.Equal(t, want, ids, "step %d", step)
		if len(want) > 0 {
			id, v, ok := tab.Oldest()
			require.True(t, ok)
			require.Equal(t, want[0], id)
			require.Equal(t, model[id], v)
		}
	}
}

func TestStartAfter(t *testing.T) {
	var tab Table[string]
	tab.StartAfter(1 << 40)
	id := tab.Add("a")
	require.Equal(t, uint64(1<<40+1), id)
	v, ok := tab.Get(id)
	require.True(t, ok)
	require.Equal(t, "a", v)
	_, ok = tab.Get(1)
	require.False(t, ok)
	require.Panics(t, func() { tab.StartAfter(5) })
}
