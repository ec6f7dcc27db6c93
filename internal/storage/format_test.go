package storage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFormat: a new directory is written in this build's format; one
// written before the FORMAT file existed (format 1) opens, with its data,
// and is marked; one a newer build wrote is refused before anything is
// read, naming both formats; a damaged FORMAT is corruption.
func TestFormat(t *testing.T) {
	dir := t.TempDir()
	format := filepath.Join(dir, formatFile)
	open := func() (Store, error) { return OpenSegmentLog(dir, Options{}) }

	s, err := open()
	require.NoError(t, err)
	require.NoError(t, s.Append(1, []Entry{{Offset: 1, Key: "k", Value: []byte("v")}}))
	require.NoError(t, s.Close())
	b, err := os.ReadFile(format)
	require.NoError(t, err)
	assert.Equal(t, "fero-data 1\n", string(b))

	// As a directory of a build before the file: upgraded in place.
	require.NoError(t, os.Remove(format))
	s, err = open()
	require.NoError(t, err)
	es, err := s.Entries(1, 1, 1, 0)
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.NoError(t, s.Close())
	assert.FileExists(t, format)

	// A newer build's: refused, and left as it was.
	require.NoError(t, os.WriteFile(format, []byte("fero-data 7\n"), 0o644))
	_, err = open()
	require.ErrorIs(t, err, ErrNewerFormat)
	assert.Contains(t, err.Error(), "data format 7")
	assert.Contains(t, err.Error(), "reads formats 1 to 1")
	b, err = os.ReadFile(format)
	require.NoError(t, err)
	assert.Equal(t, "fero-data 7\n", string(b))

	require.NoError(t, os.WriteFile(format, []byte("something else"), 0o644))
	_, err = open()
	require.ErrorIs(t, err, ErrCorrupt)
}
