package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCallbackQueueIsFIFOAcrossGrowth(t *testing.T) {
	var q CallbackQueue
	var got []int
	mk := func(i int) func([]byte, error) { return func([]byte, error) { got = append(got, i) } }
	next := 0
	// Interleave pushes and pops so the contents wrap before each growth.
	for round := range 6 {
		for range 50 + 40*round {
			q.Push(mk(next))
			next++
		}
		for range 30 {
			f, ok := q.Pop()
			require.True(t, ok)
			f(nil, nil)
		}
	}
	for _, f := range q.Drain() {
		f(nil, nil)
	}
	_, ok := q.Pop()
	assert.False(t, ok)
	require.Len(t, got, next)
	for i, v := range got {
		require.Equal(t, i, v, "callbacks out of order")
	}
}
