package ring

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// movement is what joining the N-th member did, averaged over trials.
type movement struct {
	n                 int
	meanRatio         float64 // moved fraction / (1/N), mean over trials
	maxRatio          float64 // worst trial
	meanOldOld        float64 // fraction of partitions moved between old members
	maxLoadRatio      float64 // worst owner load / (P/N)
	trialsOverBound   int     // trials whose ratio exceeded 1.25
	trials, partition int
}

// measureMovement joins members one by one (IDs drawn from a seeded source)
// and records, for each N, how many partitions changed owner and how many of
// those moved between members that were there before.
func measureMovement(t testing.TB, r *Ring, maxN, trials int, seed uint64) []movement {
	rng := rand.New(rand.NewPCG(seed, 0))
	out := make([]movement, maxN+1)
	for n := range out {
		out[n].n = n
		out[n].trials = trials
		out[n].partition = r.Partitions()
	}
	for range trials {
		var members []Member
		prev, err := r.Build(nil)
		require.NoError(t, err)
		for n := 1; n <= maxN; n++ {
			id := fmt.Sprintf("node-%016x", rng.Uint64())
			members = append(members, Member{ID: id})
			next, err := r.Build(members)
			require.NoError(t, err)
			if n >= 2 {
				moves := Diff(prev, next)
				oldOld := 0
				for _, mv := range moves {
					if mv.To != id {
						oldOld++
					}
				}
				p := float64(r.Partitions())
				ratio := float64(len(moves)) / p * float64(n)
				o := &out[n]
				o.meanRatio += ratio / float64(trials)
				o.maxRatio = math.Max(o.maxRatio, ratio)
				o.meanOldOld += float64(oldOld) / p / float64(trials)
				if ratio > 1.25 {
					o.trialsOverBound++
				}
				loads := map[string]int{}
				for q := range r.Partitions() {
					ow, _ := next.Owner(q)
					loads[ow.ID]++
				}
				for _, l := range loads {
					o.maxLoadRatio = math.Max(o.maxLoadRatio, float64(l)/(p/float64(n)))
				}
			}
			prev = next
		}
	}
	return out[2:]
}

func formatMovement(title string, rows []movement) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%d partitions, %d trials)\n", title, rows[0].partition, rows[0].trials)
	fmt.Fprintf(&b, "%3s %9s %9s %9s %10s %9s %6s\n", "N", "1/N", "moved/1/N", "worst", "old→old", "maxload", ">1.25")
	for _, r := range rows {
		fmt.Fprintf(&b, "%3d %8.2f%% %9.3f %9.3f %9.2f%% %9.2f %6d\n",
			r.n, 100/float64(r.n), r.meanRatio, r.maxRatio, 100*r.meanOldOld, r.maxLoadRatio, r.trialsOverBound)
	}
	return b.String()
}

// TestMovementDefaults pins the property the defaults were chosen for:
// joining the N-th member moves on average within 1.25x of 1/N of the
// partitions, and never moves a partition between members already there.
func TestMovementDefaults(t *testing.T) {
	t.Parallel()
	r, err := New()
	require.NoError(t, err)
	trials := 40
	if testing.Short() {
		trials = 10
	}
	rows := measureMovement(t, r, 16, trials, 1)
	t.Log("\n" + formatMovement("defaults", rows))
	for _, row := range rows {
		require.LessOrEqualf(t, row.meanRatio, 1.25, "N=%d", row.n)
		require.Zerof(t, row.meanOldOld, "N=%d: partitions moved between old members", row.n)
	}
}

// TestMovementTable prints the table for the option grid that was tried
// when picking the defaults. Run with FERO_RING_TABLE=1 (slow).
func TestMovementTable(t *testing.T) {
	if os.Getenv("FERO_RING_TABLE") == "" {
		t.Skip("set FERO_RING_TABLE=1 to print the option grid")
	}
	for _, load := range []float64{1.25, 1.5, 2, 3, math.Inf(1)} {
		for _, vn := range []int{20, 200, 1000} {
			r, err := New(WithLoad(load), WithVNodes(vn))
			require.NoError(t, err)
			rows := measureMovement(t, r, 16, 100, 1)
			t.Log("\n" + formatMovement(fmt.Sprintf("load=%v vnodes=%d", load, vn), rows))
		}
	}
}
