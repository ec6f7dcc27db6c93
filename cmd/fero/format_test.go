package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeDataFormat (issue 43, rolling upgrades): a data directory
// carries its format; a server writes it, and one whose directory a
// newer build wrote exits at start saying so, what it reads, and what
// to do, leaving the directory as it was.
func TestServeDataFormat(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := serve(t, "kv", "--id", "f1", "--data-dir", dir)
	require.Contains(t, s.first, "node f1 ")
	format := filepath.Join(dir, "FORMAT")
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(format)
		return err == nil && string(b) == "fero-data 1\n"
	}, 30*time.Second, 10*time.Millisecond, "the server writes its data format")
	require.NoError(t, s.cmd.Process.Kill())
	_ = s.cmd.Wait()

	// As if a newer build had run here.
	require.NoError(t, os.WriteFile(format, []byte("fero-data 2\n"), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	older := exec.CommandContext(ctx, os.Args[0], "serve", "kv", "--id", "f1", "--data-dir", dir)
	older.Env = append(os.Environ(), childEnv+"=1")
	var out bytes.Buffer
	older.Stdout, older.Stderr = &out, &out
	err := older.Run()
	require.Error(t, err, "a server started on a newer data format: %s", out.String())
	require.NoError(t, ctx.Err(), "it ran until the test's deadline: %s", out.String())
	assert.Contains(t, out.String(), "is in data format 2, written by a newer fero; this build reads formats 1 to 1")
	assert.Contains(t, out.String(), "move the directory away")
	b, err := os.ReadFile(format)
	require.NoError(t, err)
	assert.Equal(t, "fero-data 2\n", string(b), "the newer directory was changed")
}
