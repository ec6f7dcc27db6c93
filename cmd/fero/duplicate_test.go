package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDuplicateIDRefused (issue 43): a server started with the --id of a
// live member logged an error and kept running beside it. Now it exits
// at start, saying which address runs that ID. A quick restart of a
// killed server at new addresses, whose previous life gossip still lists,
// is not a duplicate: it starts.
func TestDuplicateIDRefused(t *testing.T) {
	a := serve(t, "kv", "--id", "x1")
	b := serve(t, "kv", "--id", "x2", "--seeds", a.gossip)
	require.Contains(t, b.first, "node x2 ")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dup := exec.CommandContext(ctx, os.Args[0], "serve", "kv", "--id", "x2", "--seeds", a.gossip, "--in-memory")
	dup.Env = append(os.Environ(), childEnv+"=1")
	var out bytes.Buffer
	dup.Stdout, dup.Stderr = &out, &out
	err := dup.Run()
	require.Error(t, err, "a second x2 kept running: %s", out.String())
	require.NoError(t, ctx.Err(), "a second x2 kept running until the test's deadline: %s", out.String())
	require.Contains(t, out.String(), `another live node already runs as "x2"`)
	require.Contains(t, out.String(), b.gossip, "it names the address of the live one")

	// Killed, and started again at once at new addresses: its previous
	// life does not answer, so it is no duplicate.
	require.NoError(t, b.cmd.Process.Kill())
	_ = b.cmd.Wait()
	again := serve(t, "kv", "--id", "x2", "--seeds", a.gossip)
	require.Contains(t, again.first, "node x2 ")
}
