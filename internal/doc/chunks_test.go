package doc

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSnapshotChunks: a partition sent in pieces of about max bytes
// restores, piece by piece, to the same state as its whole snapshot; the
// partition is unchanged until the staged restore is swapped in.
func TestSnapshotChunks(t *testing.T) {
	src, err := New(1)
	require.NoError(t, err)
	for i := range 1000 {
		mustApply(t, src, update, fmt.Sprint("key", i), map[string]any{"i": i, "pad": "0123456789"})
	}
	pieces, err := src.SnapshotChunks(0, 1000)
	require.NoError(t, err)
	require.Greater(t, len(pieces), 20)
	for _, b := range pieces {
		require.LessOrEqual(t, len(b), 1000)
	}

	dst, err := New(1)
	require.NoError(t, err)
	mustApply(t, dst, update, "old", 1)
	before := dst.Digest()
	for i, b := range pieces {
		require.NoError(t, dst.StageChunk(0, b, i == 0))
		require.Equal(t, before, dst.Digest(), "nothing shows before the swap")
	}
	require.ErrorIs(t, dst.StageChunk(0, pieces[3], false), ErrSnapshot, "a key in two pieces")
	require.NoError(t, dst.RestoreStaged(0))
	require.Equal(t, src.Digest(), dst.Digest())
	require.Equal(t, 1000, dst.Len())
	require.ErrorIs(t, dst.RestoreStaged(0), ErrSnapshot, "nothing staged any more")

	// A first piece starts over; a dropped restore leaves nothing.
	require.NoError(t, dst.StageChunk(0, pieces[1], true))
	require.NoError(t, dst.StageChunk(0, pieces[0], true))
	dst.DropStaged(0)
	require.ErrorIs(t, dst.RestoreStaged(0), ErrSnapshot)

	// An empty partition is one piece, of no keys.
	empty, err := New(1)
	require.NoError(t, err)
	pieces, err = empty.SnapshotChunks(0, 1000)
	require.NoError(t, err)
	require.Equal(t, [][]byte{{0x92, snapshotFormatV1, 0x80}}, pieces)
}
