package ring

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/buraksezer/consistent"
	"github.com/stretchr/testify/require"
)

func ids(n int, prefix string) []Member {
	out := make([]Member, n)
	for i := range out {
		out[i] = Member{ID: fmt.Sprintf("%s-%d", prefix, i), Incarnation: uint64(i) + 1}
	}
	return out
}

func mustBuild(t testing.TB, r *Ring, ms []Member) *Map {
	t.Helper()
	m, err := r.Build(ms)
	require.NoError(t, err)
	return m
}

func encode(t testing.TB, m *Map) []byte {
	t.Helper()
	b, err := m.MarshalBinary()
	require.NoError(t, err)
	return b
}

// TestNewValidates: every out-of-range option is refused with
// ErrInvalidOption, once, at construction.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	bad := map[string]Option{
		"partitions 0":    WithPartitions(0),
		"partitions huge": WithPartitions(MaxPartitions + 1),
		"vnodes 1":        WithVNodes(1),
		"vnodes huge":     WithVNodes(MaxVNodes + 1),
		"load below 1":    WithLoad(0.9),
		"load NaN":        WithLoad(math.NaN()),
		"replicas -1":     WithReplicas(-1),
		"replicas huge":   WithReplicas(MaxReplicas + 1),
		"nil partitioner": WithPartitioner(nil),
	}
	for name, o := range bad {
		_, err := New(o)
		require.ErrorIs(t, err, ErrInvalidOption, name)
	}
	r, err := New(WithLoad(math.Inf(1)), WithPartitions(1), WithVNodes(2), WithReplicas(0))
	require.NoError(t, err)
	require.Equal(t, 1, r.Partitions())
}

// TestBuildSameMapEverywhere is the property test: the same member set, in
// any order, built by independent Ring values (as on different nodes), gives
// byte-identical maps with the same version.
func TestBuildSameMapEverywhere(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 60 {
		n := 1 + rng.IntN(40)
		ms := make([]Member, n)
		for i := range ms {
			ms[i] = Member{ID: fmt.Sprintf("m%x", rng.Uint64()), Incarnation: rng.Uint64(), Client: rng.IntN(5) == 0}
		}
		load := []float64{1, 1.25, 2, math.Inf(1)}[trial%4]
		opts := []Option{WithLoad(load), WithVNodes(2 + rng.IntN(300)), WithReplicas(rng.IntN(4))}
		var want []byte
		var wantVersion uint64
		for node := range 4 {
			r, err := New(opts...)
			require.NoError(t, err)
			shuffled := slices.Clone(ms)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			m := mustBuild(t, r, shuffled)
			if node == 0 {
				want, wantVersion = encode(t, m), m.Version()
				continue
			}
			require.Equal(t, want, encode(t, m), "trial %d node %d", trial, node)
			require.Equal(t, wantVersion, m.Version())
		}
	}
}

// TestFastPathMatchesConsistent: when the load bound does not bind, Build
// skips consistent; the result must equal consistent's own placement, and
// when it binds the result is consistent's.
func TestFastPathMatchesConsistent(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 3))
	trials := 40
	if testing.Short() {
		trials = 12
	}
	for trial := range trials {
		n := 1 + rng.IntN(30)
		ms := make([]Member, n)
		for i := range ms {
			ms[i] = Member{ID: fmt.Sprintf("n%x", rng.Uint64())}
		}
		load := []float64{1.1, 1.25, 1.5, 2, math.Inf(1)}[trial%5]
		vn := []int{10, 50, 200}[trial%3]
		fast, err := New(WithLoad(load), WithVNodes(vn))
		require.NoError(t, err)
		slow := *fast
		slow.forceConsistent = true
		require.Equal(t, encode(t, mustBuild(t, &slow, ms)), encode(t, mustBuild(t, fast, ms)),
			"trial %d n=%d load=%v vnodes=%d", trial, n, load, vn)
	}
}

// TestEdgeCases: no members, one member, everyone leaving, a client-only
// cluster, more members than partitions and an infeasible load bound all
// produce a usable map instead of a panic (consistent divides by the member
// count and panics when the bound leaves no room).
func TestEdgeCases(t *testing.T) {
	t.Parallel()
	r, err := New()
	require.NoError(t, err)

	empty := mustBuild(t, r, nil)
	_, ok := empty.OwnerOfKey("k")
	require.False(t, ok)
	require.Empty(t, empty.Replicas(0))
	require.Equal(t, DefaultPartitions, empty.Partitions())

	one := mustBuild(t, r, ids(1, "solo"))
	for p := range one.Partitions() {
		o, ok := one.Owner(p)
		require.True(t, ok)
		require.Equal(t, "solo-0", o.ID)
		require.Empty(t, one.Replicas(p))
	}
	require.Len(t, one.Owned("solo-0"), DefaultPartitions)

	three := mustBuild(t, r, ids(3, "s"))
	gone := mustBuild(t, r, nil)
	moves := Diff(three, gone)
	require.Len(t, moves, DefaultPartitions)
	for _, mv := range moves {
		require.Empty(t, mv.To)
		require.NotEmpty(t, mv.From)
	}

	clients := ids(5, "c")
	for i := range clients {
		clients[i].Client = true
	}
	co := mustBuild(t, r, clients)
	_, ok = co.Owner(0)
	require.False(t, ok)
	require.Equal(t, empty.Version(), co.Version(), "clients do not change the map")

	mixed := mustBuild(t, r, append(slices.Clone(clients), ids(2, "s")...))
	for p := range mixed.Partitions() {
		o, ok := mixed.Owner(p)
		require.True(t, ok)
		require.False(t, o.Client)
		for _, rep := range mixed.Replicas(p) {
			require.False(t, rep.Client)
		}
	}

	_, ok = one.Owner(-1)
	require.False(t, ok)
	_, ok = one.Owner(DefaultPartitions)
	require.False(t, ok)
	require.Nil(t, one.Replicas(DefaultPartitions))

	// More members than partitions, and a bound too tight to fit.
	for _, opts := range [][]Option{
		{WithPartitions(7)},
		{WithPartitions(7), WithLoad(1)},
		{WithLoad(1)},
		{WithPartitions(1), WithVNodes(2)},
	} {
		r, err := New(opts...)
		require.NoError(t, err)
		for _, n := range []int{1, 2, 3, 6, 7, 8, 20, 136, 137, 300} {
			m := mustBuild(t, r, ids(n, "x"))
			loads := map[string]int{}
			for p := range m.Partitions() {
				o, ok := m.Owner(p)
				require.True(t, ok)
				loads[o.ID]++
			}
			require.LessOrEqual(t, len(loads), n)
		}
	}

	_, err = r.Build([]Member{{ID: ""}})
	require.ErrorIs(t, err, ErrInvalidMember)
	_, err = r.Build([]Member{{ID: "a"}, {ID: "a", Incarnation: 2}})
	require.ErrorIs(t, err, ErrInvalidMember)
	_, err = r.Build([]Member{{ID: "a"}, {ID: "a", Client: true}})
	require.ErrorIs(t, err, ErrInvalidMember)
}

// TestReplicas: each partition lists min(replicas, servers-1) distinct
// members other than the owner, and the first replica is usually who owns
// the partition once the owner leaves, so handoff goes to a node that
// already has the data.
func TestReplicas(t *testing.T) {
	t.Parallel()
	r, err := New(WithReplicas(3))
	require.NoError(t, err)
	for _, n := range []int{2, 3, 4, 10} {
		ms := ids(n, "r")
		m := mustBuild(t, r, ms)
		for p := range m.Partitions() {
			o, _ := m.Owner(p)
			reps := m.Replicas(p)
			require.Len(t, reps, min(3, n-1))
			seen := map[string]bool{o.ID: true}
			for _, rep := range reps {
				require.False(t, seen[rep.ID], "partition %d lists %s twice or lists the owner", p, rep.ID)
				seen[rep.ID] = true
			}
		}
		// Remove each member in turn: count how often the new owner of its
		// partitions was their first replica.
		hit, total := 0, 0
		for i := range ms {
			rest := slices.Delete(slices.Clone(ms), i, i+1)
			after := mustBuild(t, r, rest)
			for _, p := range m.Owned(ms[i].ID) {
				total++
				if no, _ := after.Owner(p); no.ID == m.Replicas(p)[0].ID {
					hit++
				}
			}
		}
		require.GreaterOrEqual(t, float64(hit)/float64(total), 0.95, "n=%d: first replica became owner %d/%d", n, hit, total)
	}
}

// TestVersion: the version names the server set with incarnations and the
// options; it ignores order and clients, and changes on a restart.
func TestVersion(t *testing.T) {
	t.Parallel()
	r, err := New()
	require.NoError(t, err)
	ms := ids(4, "v")
	v1 := mustBuild(t, r, ms).Version()
	cheap, err := r.Version(ms)
	require.NoError(t, err)
	require.Equal(t, v1, cheap, "Ring.Version agrees with Build")
	require.Equal(t, v1, mustBuild(t, r, []Member{ms[3], ms[1], ms[0], ms[2]}).Version())
	require.Equal(t, v1, mustBuild(t, r, append(slices.Clone(ms), Member{ID: "cl", Client: true})).Version())

	restarted := slices.Clone(ms)
	restarted[2].Incarnation++
	m2 := mustBuild(t, r, restarted)
	require.NotEqual(t, v1, m2.Version())
	require.Empty(t, Diff(mustBuild(t, r, ms), m2), "a restart with the same ID moves nothing")

	r2, err := New(WithVNodes(100))
	require.NoError(t, err)
	require.NotEqual(t, v1, mustBuild(t, r2, ms).Version())
}

// TestDiff: Diff names exactly the partitions whose owner changed, with the
// old and new owner, and joining moves partitions only to the joiner.
func TestDiff(t *testing.T) {
	t.Parallel()
	r, err := New()
	require.NoError(t, err)
	before := mustBuild(t, r, ids(3, "d"))
	after := mustBuild(t, r, ids(4, "d"))
	moves := Diff(before, after)
	require.NotEmpty(t, moves)
	for _, mv := range moves {
		from, _ := before.Owner(mv.Partition)
		to, _ := after.Owner(mv.Partition)
		require.Equal(t, from.ID, mv.From)
		require.Equal(t, to.ID, mv.To)
		require.Equal(t, "d-3", mv.To)
	}
	moved := map[int]bool{}
	for _, mv := range moves {
		moved[mv.Partition] = true
	}
	for p := range after.Partitions() {
		if !moved[p] {
			a, _ := before.Owner(p)
			b, _ := after.Owner(p)
			require.Equal(t, a.ID, b.ID)
		}
	}
	require.Empty(t, Diff(after, after))
	require.Len(t, Diff(nil, after), DefaultPartitions)
}

// TestPartitioner: the default groups keys by their top-level segment;
// resources sharing a partitioner and members co-locate a key; a custom
// partitioner is used as given.
func TestPartitioner(t *testing.T) {
	t.Parallel()
	users, err := New()
	require.NoError(t, err)
	sessions, err := New()
	require.NoError(t, err)
	ms := ids(5, "p")
	um, sm := mustBuild(t, users, ms), mustBuild(t, sessions, ms)
	require.Equal(t, um.Partition("42"), um.Partition("42.name"))
	require.Equal(t, um.Partition("42"), um.Partition("42.address.city"))
	for i := range 200 {
		k := fmt.Sprintf("user%d", i)
		uo, _ := um.OwnerOfKey(k + ".profile")
		so, _ := sm.OwnerOfKey(k)
		require.Equal(t, uo, so)
	}
	spread := map[int]bool{}
	for i := range 1000 {
		spread[um.Partition(fmt.Sprint(i))] = true
	}
	require.Greater(t, len(spread), DefaultPartitions*9/10, "keys spread over partitions")

	byTenant, err := New(WithPartitioner(TopLevel('/')), WithPartitions(16))
	require.NoError(t, err)
	tm := mustBuild(t, byTenant, ms)
	require.Equal(t, tm.Partition("acme/a.b"), tm.Partition("acme/c"))

	fixed, err := New(WithPartitioner(PartitionerFunc(func(string) uint64 { return 5 })))
	require.NoError(t, err)
	require.Equal(t, 5, mustBuild(t, fixed, ms).Partition("anything"))
}

// TestLookupsDoNotAllocate pins the hot path's zero allocations.
func TestLookupsDoNotAllocate(t *testing.T) {
	r, err := New()
	require.NoError(t, err)
	m := mustBuild(t, r, ids(10, "a"))
	key := "user1234.profile.name"
	var sink int
	allocs := testing.AllocsPerRun(1000, func() {
		o, _ := m.OwnerOfKey(key)
		sink += len(o.ID) + len(m.Replicas(m.Partition(key)))
	})
	require.Zero(t, allocs)
	require.NotZero(t, sink)
}

func TestErrorsArePrefixed(t *testing.T) {
	t.Parallel()
	for _, e := range []error{ErrInvalidOption, ErrInvalidMember} {
		require.Regexp(t, `^fero: `, e.Error())
	}
	_, err := New(WithVNodes(0))
	require.True(t, errors.Is(err, ErrInvalidOption))
}

func BenchmarkPartition(b *testing.B) {
	r, _ := New()
	m := mustBuild(b, r, ids(10, "b"))
	b.ReportAllocs()
	var sink int
	for b.Loop() {
		sink += m.Partition("user1234.profile.name")
	}
	_ = sink
}

func BenchmarkOwnerOfKey(b *testing.B) {
	r, _ := New()
	m := mustBuild(b, r, ids(10, "b"))
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("user%d.profile", i)
	}
	b.ReportAllocs()
	var sink int
	i := 0
	for b.Loop() {
		o, _ := m.OwnerOfKey(keys[i&1023])
		sink += len(o.ID)
		i++
	}
	_ = sink
}

func BenchmarkReplicas(b *testing.B) {
	r, _ := New()
	m := mustBuild(b, r, ids(10, "b"))
	b.ReportAllocs()
	var sink int
	i := 0
	for b.Loop() {
		sink += len(m.Replicas(i % DefaultPartitions))
		i++
	}
	_ = sink
}

// BenchmarkConsistentLocateKey is the baseline the precomputed table avoids.
func BenchmarkConsistentLocateKey(b *testing.B) {
	cm := make([]consistent.Member, 10)
	for i := range cm {
		cm[i] = ringMember(fmt.Sprintf("b-%d", i))
	}
	c := consistent.New(cm, consistent.Config{Hasher: xxHasher{}, PartitionCount: DefaultPartitions, ReplicationFactor: DefaultVNodes, Load: DefaultLoad})
	key := []byte("user1234.profile.name")
	b.ReportAllocs()
	var sink int
	for b.Loop() {
		sink += len(c.LocateKey(key).String())
	}
	_ = sink
}

func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{3, 16, 100} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r, _ := New()
			ms := ids(n, "b")
			b.ReportAllocs()
			for b.Loop() {
				_, _ = r.Build(ms)
			}
		})
	}
}
