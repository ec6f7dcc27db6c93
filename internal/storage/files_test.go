package storage

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWriteFileAtomicSizes: files around and past directMin (written with
// O_DIRECT from a padded, aligned buffer, then truncated) and below it
// read back as the parts written, on the test's disk and, where there is
// one, on a tmpfs, which refuses O_DIRECT and gets the buffered write.
func TestWriteFileAtomicSizes(t *testing.T) {
	dirs := []string{t.TempDir()}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "fero-storage-test")
		require.NoError(t, err)
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		dirs = append(dirs, d)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dir := range dirs {
		for _, size := range []int{0, 1, directAlign, directMin - 1, directMin, directMin + 1, 3*directMin + 777} {
			head := []byte("header of some length")
			body := make([]byte, max(size-len(head), 0))
			for i := range body {
				body[i] = byte(rng.Uint32())
			}
			require.NoError(t, writeFileAtomic(dir, "f", head, body), "%s, %d bytes", dir, size)
			got, err := os.ReadFile(filepath.Join(dir, "f"))
			require.NoError(t, err)
			require.True(t, bytes.Equal(append(head, body...), got), "%s, %d bytes: the file differs", dir, size)
			_, err = os.Stat(filepath.Join(dir, "f"+tmpSuffix))
			require.ErrorIs(t, err, os.ErrNotExist, "the temporary file is left")
		}
	}
}

func TestAlignedBuffer(t *testing.T) {
	for _, n := range []int{1, directAlign, 5 * directAlign} {
		b := alignedBuffer(n)
		require.Len(t, b, n)
		require.Zero(t, uintptrOf(b)%directAlign)
	}
}

// TestWriteDirectIsTaken: on the test's disk (ext4 on the project's
// machines), a large file does go through O_DIRECT.
func TestWriteDirectIsTaken(t *testing.T) {
	dir := t.TempDir()
	f, err := writeDirect(filepath.Join(dir, "d"), directMin+5, [][]byte{make([]byte, directMin+5)})
	require.NoError(t, err)
	if f == nil {
		t.Skipf("the file system of %s refuses O_DIRECT; the buffered write is used", dir)
	}
	require.NoError(t, f.Close())
	fi, err := os.Stat(filepath.Join(dir, "d"))
	require.NoError(t, err)
	require.EqualValues(t, directMin+5, fi.Size())
}
