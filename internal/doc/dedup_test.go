package doc

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestApplyBatchAllocates: a batch without a writer allocates what it did
// before the exactly-once table was kept: its pending list and changes,
// and one entry per key it sets.
func TestApplyBatchAllocates(t *testing.T) {
	s, err := New(1)
	require.NoError(t, err)
	bt := &Batch{Changes: []Change{change(t, s, update, "a", value100), change(t, s, update, "b", value100)}}
	require.NoError(t, s.ApplyBatch(0, 1, bt))
	var ver uint64 = 1
	require.Equal(t, 4.0, testing.AllocsPerRun(100, func() {
		ver++
		if err := s.ApplyBatch(0, ver, bt); err != nil {
			t.Fatal(err)
		}
	}))
}
