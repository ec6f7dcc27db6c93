package partition

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/errs"
)

// TestExpectFormsOnlyWithEnoughServers (rule 9, issue 43): with
// WithExpect(3), two servers that see each other form no cluster, and a
// write through either is refused at once, saying why, rather than wait
// out its deadline; once the third is in their maps the three form one
// and take writes. Before WithExpect, a server whose discovery found
// nobody (DNS failing) founded a cluster alone and took writes that were
// dropped when it met the others.
func TestExpectFormsOnlyWithEnoughServers(t *testing.T) {
	n := newNetwork(t, 8, []string{"a", "b"}, WithExpect(3))
	n.settle()
	for _, id := range []string{"a", "b"} {
		for p, pt := range n.nodes[id].e.parts {
			require.False(t, pt.active, "%s owns partition %d with 2 of the 3 servers expected:\n%s", id, p, n.statusLine())
		}
		require.Contains(t, n.nodes[id].e.Forming(), "sees 2 of the 3 servers a new cluster needs")
	}
	for p := range 2 {
		_, err := n.propose("a", p, "k", "v", WaitMajority)
		require.ErrorIs(t, err, ErrNotFormed)
		require.Equal(t, errs.Unavailable, errs.CodeOf(err))
		require.Contains(t, err.Error(), "cluster not formed: this server sees 2 of the 3 servers a new cluster needs (--expect): a, b")
	}

	n.add("c", false)
	n.setMap([]string{"a", "b", "c"}, "a", "b", "c")
	n.settle()
	for _, id := range []string{"a", "b", "c"} {
		require.Empty(t, n.nodes[id].e.Forming(), id)
	}
	for p := range 8 {
		owner := n.owner(p)
		require.NotEmpty(t, owner, "partition %d has no owner:\n%s", p, n.statusLine())
		tok, err := n.propose(owner, p, "k", "v", WaitMajority)
		require.NoError(t, err)
		n.settle()
		require.NoError(t, n.nodes[owner].done[tok].Err)
	}
}

// TestExpectReplacesEverySeed: with WithExpect, the count is the rule, so
// a seed that never answers does not keep a cluster of enough servers
// from forming; without it, a server given seeds waits for every one (the
// seeds' rule) and says which it has not seen. WithExpect(1) founds a
// cluster alone, as a server without seeds does.
func TestExpectReplacesEverySeed(t *testing.T) {
	t.Run("expect 2 of 3 seeds", func(t *testing.T) {
		n := newNetwork(t, 8, []string{"a", "b"}, WithExpect(2))
		n.seeds = []string{"a", "b", "c"}
		n.setMap([]string{"a", "b"}, "a", "b")
		n.settle()
		for p := range 8 {
			require.NotEmpty(t, n.owner(p), "partition %d:\n%s", p, n.statusLine())
		}
	})
	t.Run("every seed", func(t *testing.T) {
		n := newNetwork(t, 8, []string{"a", "b"}, WithJoining())
		n.seeds = []string{"a", "b", "c"}
		n.setMap([]string{"a", "b"}, "a", "b")
		n.settle()
		require.Equal(t, "a new cluster forms once every seed is seen; seeds not seen: c", n.nodes["a"].e.Forming())
		_, err := n.propose("a", 0, "k", "v", WaitMajority)
		require.ErrorIs(t, err, ErrNotFormed)
	})
	t.Run("expect 1", func(t *testing.T) {
		n := newNetwork(t, 8, []string{"a"}, WithExpect(1))
		n.settle()
		for p := range 8 {
			require.Equal(t, "a", n.owner(p))
		}
	})
}
