package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/ring"
)

// An attached client that closes leaves nothing behind on the server: it
// is no longer among the attached copies, and no connection that proved
// its token is left open (neither the one it attached on nor the one it
// asks for the servers on).
func TestAttachedClientCloseLeavesNoConnection(t *testing.T) {
	srv := startFuzzNode(t, func(c *Config) {
		c.Secrets, c.Tokens = [][]byte{fuzzSecret}, [][]byte{fuzzToken}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := Start(ctx, Config{
		Resource: "fuzz", Client: true, Servers: []string{srv.Addr()}, Token: fuzzToken,
		Membership: []membership.Option{membership.WithPreset(membership.PresetLocal)},
		Ring:       []ring.Option{ring.WithPartitions(8)},
		Engine:     []partition.Option{partition.WithSyncTimeout(500 * time.Millisecond)},
		Tick:       20 * time.Millisecond,
	})
	require.NoError(t, err)
	proved := func() int {
		srv.auth.mu.Lock()
		defer srv.auth.mu.Unlock()
		return len(srv.auth.conns)
	}
	require.Eventually(t, func() bool { return len(srv.attach.set.ids()) == 1 && proved() == 2 }, 10*time.Second, 5*time.Millisecond,
		"the client attached, and asks for the servers on a connection of its own")
	require.NoError(t, cl.Close())
	require.Eventually(t, func() bool { return len(srv.attach.set.ids()) == 0 && proved() == 0 }, 10*time.Second, 5*time.Millisecond,
		"%d token connections left open on the server after the client closed", proved())
}
