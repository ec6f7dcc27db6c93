package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDemo runs the demo in this process: every node, the client
// included, ends with the same two sessions in its local copy, and the
// deleted one is gone everywhere.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	views, err := runDemo(ctx, &out)
	require.NoError(t, err, "transcript:\n%s", out.String())
	t.Logf("demo took %v:\n%s", time.Since(start), out.String())

	require.Len(t, views, 4)
	want := views["client"]
	require.Len(t, want, 2)
	users := map[string]bool{}
	for token, s := range want {
		assert.Len(t, token, 16)
		assert.Equal(t, sessionTTL, s.Expires.Sub(s.Created), "session %s", token)
		users[s.User] = true
	}
	assert.Equal(t, map[string]bool{"alice": true, "carol": true}, users, "bob's session was deleted")
	for _, name := range []string{"server-1", "server-2", "server-3"} {
		assert.Equal(t, want, views[name], "%s sees what the client sees", name)
	}
	assert.Contains(t, out.String(), "server-3 deletes bob's session")
}
