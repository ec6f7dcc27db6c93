package doc

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fero-go/fero/internal/errs"
	"github.com/stretchr/testify/require"
)

// randomChange returns a change over a small vocabulary of keys, so that
// changes collide, nest, and often fail.
func randomChange(r *rand.Rand) Change {
	segs := []string{"x", "y", "0", "1", "2", "-", "00"}
	path := string(rune('a' + r.IntN(6)))
	for range r.IntN(4) {
		path += "." + segs[r.IntN(len(segs))]
	}
	switch r.IntN(5) {
	case 0, 1:
		return Change{Type: update, Key: path, Value: appendValue(nil, smallValue(r, 2))}
	case 2, 3:
		return Change{Type: add, Key: path, Value: appendValue(nil, smallValue(r, 2))}
	}
	return Change{Type: remove, Key: path}
}

// smallValue returns a random canonical value, biased to containers.
func smallValue(r *rand.Rand, depth int) any {
	if depth > 0 {
		switch r.IntN(4) {
		case 0:
			a := make([]any, r.IntN(4))
			for i := range a {
				a[i] = smallValue(r, depth-1)
			}
			return a
		case 1:
			m := map[string]any{}
			for range r.IntN(4) {
				m[[]string{"x", "y", "0", "1"}[r.IntN(4)]] = smallValue(r, depth-1)
			}
			return m
		}
	}
	switch r.IntN(6) {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return int64(r.IntN(2000) - 1000)
	case 3:
		return r.Float64()
	case 4:
		return []byte{byte(r.IntN(256))}
	}
	return strings.Repeat("v", r.IntN(40))
}

// TestRandomChangesConverge applies random changes to an owner store, the
// successful ones to a replica that restarts from snapshots midway, and
// checks that both reach byte-identical state, that no replica ever meets
// an error, and that a failed change leaves the owner as it was.
func TestRandomChangesConverge(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 99))
		owner, replica := newStore(t), newStore(t)
		half := 0
		for i := range 1500 {
			c := randomChange(r)
			p := partOf(owner, c.Key)
			before := owner.Digest()
			checked := owner.Check(p, c)
			err := owner.Apply(p, c)
			require.Equal(t, checked, err)
			if err != nil {
				code := errs.CodeOf(err)
				require.True(t, code == errs.InvalidArgument || code == errs.FailedPrecondition, "%v", err)
				require.Equal(t, before, owner.Digest(), "failed %+v changed the state", c)
				continue
			}
			if c.Type == update {
				got, ok := owner.GetBytes(c.Key)
				require.True(t, ok)
				require.Equal(t, c.Value, got)
			}
			require.NoError(t, replica.Apply(p, c), "a replica met an error for a committed change")
			if i >= 750 && half == 0 {
				// The replica restarts from a snapshot of every partition.
				restarted := newStore(t)
				for p, b := range snapshots(t, replica) {
					require.NoError(t, restarted.Restore(p, b))
				}
				replica, half = restarted, i
			}
		}
		require.NotZero(t, half)
		require.Equal(t, owner.Digest(), replica.Digest(), "seed %d", seed)
		require.Equal(t, snapshots(t, owner), snapshots(t, replica), "seed %d", seed)
		require.Equal(t, owner.Len(), replica.Len())
	}
}

// TestConcurrentReadsDuringWrites runs readers of every kind against
// writers on several partitions (run it with -race). Each writer's
// top-level value is replaced whole, so a reader must never see a torn one.
func TestConcurrentReadsDuringWrites(t *testing.T) {
	s := newStore(t)
	keys := []string{"w0", "w1", "w2", "w3"}
	for _, k := range keys {
		mustApply(t, s, update, k, map[string]any{"x": 0, "y": 0, "list": []any{}})
	}
	var writers, readers sync.WaitGroup
	stop := make(chan struct{})
	for w, k := range keys {
		writers.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range 1000 {
				n := int64(i)
				mustApply(t, s, update, k, map[string]any{"x": n, "y": n, "list": []any{n}})
				mustApply(t, s, add, k+".list.-", n)
				_ = apply(s, randomChange(r)) // keys a to f: collide with each other
			}
		})
	}
	// Restore and Clear a partition that holds none of the writers' keys.
	free := -1
	for p := range testPartitions {
		if !slices.ContainsFunc(keys, func(k string) bool { return partOf(s, k) == p }) {
			free = p
			break
		}
	}
	require.GreaterOrEqual(t, free, 0)
	writers.Go(func() {
		for i := range 200 {
			b, err := s.Snapshot(free)
			require.NoError(t, err)
			require.NoError(t, s.Restore(free, b))
			if i%50 == 0 {
				require.NoError(t, s.Clear(free))
			}
		}
	})
	for range 4 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, k := range keys {
					v, ok := s.Get(k)
					require.True(t, ok)
					m := v.(map[string]any)
					require.Equal(t, m["x"], m["y"], "torn read of %s", k)
					var into struct{ X, Y int64 }
					_, err := s.GetInto(k, &into)
					require.NoError(t, err)
					_, _ = s.Get(k + ".list.0")
				}
				for range s.All() {
				}
				_, _ = s.Snapshot(partOf(s, "a"))
				_ = s.Digest()
				_ = s.Len()
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()
}
