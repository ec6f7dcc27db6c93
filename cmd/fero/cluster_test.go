package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/pkg/fero"
)

// TestRestartedFounderGivesWay (docs/engine.md rule 9, cluster identity),
// on real processes: n1 is the quick start's first server, without seeds
// or a data directory; n2 and n3 join it. n1 is killed and comes back cut
// off from the others (on new ports, which no one knows), founds a
// cluster of its own and takes writes alone, while n2 and n3 take theirs.
// When n2 restarts on its data directory with the new n1 as a seed, the
// two clusters meet: n1's gives way, every write the real cluster acked
// stands on all three, and the writes n1 took alone are gone.
func TestRestartedFounderGivesWay(t *testing.T) {
	const parts = 31
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g1, g2, g3 := freeAddr(t), freeAddr(t), freeAddr(t)
	d1, d2, d3 := freeAddr(t), freeAddr(t), freeAddr(t)
	dir2, dir3 := t.TempDir(), t.TempDir()
	common := []string{"kv", "--partitions", fmt.Sprint(parts), "--log-level", "error"}
	n1 := serve(t, append(common, "--id", "n1", "--listen", d1, "--bind", g1)...)
	n2 := serve(t, append(common, "--id", "n2", "--listen", d2, "--bind", g2, "--seeds", g1, "--data-dir", dir2)...)
	n3 := serve(t, append(common, "--id", "n3", "--listen", d3, "--bind", g3, "--seeds", g1, "--data-dir", dir3)...)
	waitReady(ctx, t, []*server{n1, n2, n3})
	st, err := remoteStatus(ctx, d2)
	require.NoError(t, err)
	cluster := st.Cluster
	require.True(t, strings.HasPrefix(cluster, "n1@"), "the cluster is named %q, want after its founder n1", cluster)

	write := func(addr, key string, v int) {
		t.Helper()
		r, err := fero.Dial(ctx, addr)
		require.NoError(t, err)
		defer r.Close()
		require.NoError(t, retryIdempotent(ctx, func() error {
			wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
			defer wcancel()
			return r.Update(wctx, key, v, fero.Majority)
		}), key)
	}
	acked := map[string]int{}
	for i := range 60 {
		write(d2, fmt.Sprintf("k%d", i), 1)
		acked[fmt.Sprintf("k%d", i)] = 1
	}

	// n1 comes back cut off, alone: a cluster of its own.
	require.NoError(t, n1.cmd.Process.Kill())
	_ = n1.cmd.Wait()
	g1b, d1b := freeAddr(t), freeAddr(t)
	n1 = serve(t, append(common, "--id", "n1", "--listen", d1b, "--bind", g1b)...)
	var lone string
	require.Eventually(t, func() bool {
		st, err := remoteStatus(ctx, d1b)
		if err != nil || !st.Voting {
			return false
		}
		lone = st.Cluster
		return true
	}, time.Minute, 50*time.Millisecond, "the restarted n1 did not found a cluster alone")
	require.NotEqual(t, cluster, lone)
	require.True(t, strings.HasPrefix(lone, "n1@"), lone)
	for i := range 30 {
		write(d1b, fmt.Sprintf("lone%d", i), 2)
		write(d1b, fmt.Sprintf("k%d", i), 2)
	}
	for i := range 60 {
		write(d2, fmt.Sprintf("k%d", i+30), 3)
		acked[fmt.Sprintf("k%d", i+30)] = 3
	}

	// The heal: n2 restarts on its data directory, given the new n1 and
	// n3 as seeds.
	require.NoError(t, n2.cmd.Process.Kill())
	_ = n2.cmd.Wait()
	n2 = serve(t, append(common, "--id", "n2", "--listen", d2, "--bind", g2, "--seeds", g1b+","+g3, "--data-dir", dir2)...)
	ss := []*server{n1, n2, n3}
	var last string
	require.Eventually(t, func() bool {
		digests := map[uint64]bool{}
		for _, s := range ss {
			st, err := remoteStatus(ctx, s.data)
			if err != nil {
				last = err.Error()
				return false
			}
			if len(st.Members) != 3 || !st.Voting || st.Cluster != cluster || len(st.Other) > 0 {
				last = fmt.Sprintf("%s: %d members, voting %v, cluster %s, other %v", st.ID, len(st.Members), st.Voting, st.Cluster, st.Other)
				return false
			}
			digests[st.Digest] = true
		}
		last = fmt.Sprintf("%d different copies", len(digests))
		return len(digests) == 1
	}, 2*time.Minute, 100*time.Millisecond, "the clusters did not become one: %v", lazy(func() string { return last }))
	st, err = remoteStatus(ctx, d1b)
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.Yields, "n1's cluster gave way once")

	for _, s := range ss {
		r, err := fero.Dial(ctx, s.data)
		require.NoError(t, err)
		for key, want := range acked {
			var got int
			var ok bool
			err := retryUnavailable(ctx, func() (err error) { ok, err = r.Get(ctx, key, &got); return err })
			require.NoError(t, err, key)
			require.True(t, ok, "%s: acknowledged write %s lost", s.data, key)
			require.Equal(t, want, got, "%s: %s", s.data, key)
		}
		for i := range 30 {
			var ok bool
			err := retryUnavailable(ctx, func() (err error) { ok, err = r.Get(ctx, fmt.Sprintf("lone%d", i), new(int)); return err })
			require.NoError(t, err)
			require.False(t, ok, "%s: lone%d, written to n1's cluster of one, outlived it", s.data, i)
		}
		_ = r.Close()
	}
	out, err := run(ctx, "status", "--addr", d1b)
	require.NoError(t, err)
	require.Contains(t, out, "cluster: "+cluster+" (this node's cluster gave way to it 1 times)")
}
