package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/partition"
)

// TestUnmappedHoldsUntilTheMap: proposals that come before the engine's
// first map are kept in order, up to maxUnmapped, and refused once their
// deadline (or the write timeout, without one) passes. Before it, `fero
// put` against a server that had just printed its first line could be
// answered "no ring map yet" (TestPutGetOneNode failed so in CI).
func TestUnmappedHoldsUntilTheMap(t *testing.T) {
	now := time.Unix(1000, 0)
	var u unmapped
	soon := proposal{req: partition.Request{Key: "soon", Deadline: now.Add(time.Second), Token: 7}}
	later := proposal{req: partition.Request{Key: "later"}}
	require.True(t, u.hold(soon, now))
	require.True(t, u.hold(later, now))

	require.Empty(t, u.expired(now.Add(999*time.Millisecond)))
	gone := u.expired(now.Add(time.Second))
	require.Len(t, gone, 1)
	require.Equal(t, "soon", gone[0].req.Key)
	require.Zero(t, gone[0].req.Token, "a held proposal gets a new token when proposed again")

	require.Empty(t, u.expired(now.Add(partition.DefaultWriteTimeout-time.Millisecond)), "no deadline: the write timeout")
	for i := 1; i < maxUnmapped; i++ {
		require.True(t, u.hold(proposal{req: partition.Request{Key: "k"}}, now))
	}
	require.False(t, u.hold(proposal{}, now), "bounded")
	ps := u.take()
	require.Len(t, ps, maxUnmapped)
	require.Equal(t, "later", ps[0].req.Key, "oldest first")
	require.Empty(t, u.take())
	require.Len(t, u.expired(now.Add(time.Hour)), 0)
}
