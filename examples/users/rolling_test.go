package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/pkg/fero"
)

// TestRegisterDuringRollingRestart: three clients REGISTER each email at
// once, email after email, while every server is restarted in turn (same
// ID, same data directory): of each email's three registrations exactly
// one succeeds, and the others are conflicts. The registrations carry no
// request ID of the service's (RegisterRequest.Request), so it is fero's
// exactly-once that answers a call retried after an indefinite failure
// (the owner restarted with it in flight) with its first reply, rather
// than running REGISTER again and answering the caller's own
// registration as a conflict.
func TestRegisterDuringRollingRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	svc := NewService(time.Hour)
	ids := []string{"server-1", "server-2", "server-3"}
	dirs := map[string]string{}
	servers := map[string]*fero.Resource{}
	seeds := []string{}
	open := func(id string, extra ...fero.NodeOption) *fero.Resource {
		opts := append([]fero.NodeOption{fero.WithID(id), fero.WithPreset(fero.PresetLocal), fero.WithoutMulticast()}, extra...)
		if len(seeds) > 0 {
			opts = append(opts, fero.WithSeeds(seeds...))
		}
		r, err := fero.Open(ctx, "users", opts...)
		require.NoError(t, err, "open %s", id)
		return r
	}
	// Each server keeps its addresses across its restart, as a server
	// restarted on its host does: its seeds, the others', stay true.
	addrs := map[string][]fero.NodeOption{}
	for _, id := range ids {
		dirs[id] = t.TempDir()
		servers[id] = open(id, fero.WithHandler(svc.Handle), fero.WithDataDir(dirs[id]))
		seeds = append(seeds, servers[id].GossipAddr())
		addrs[id] = []fero.NodeOption{fero.WithBind(servers[id].GossipAddr()), fero.WithListen(servers[id].Addr())}
	}
	var clients []*fero.Resource
	for i := range 3 {
		clients = append(clients, open(fmt.Sprint("client-", i), fero.Client()))
	}
	t.Cleanup(func() {
		for _, r := range clients {
			_ = r.Close()
		}
		for _, r := range servers {
			_ = r.Close()
		}
	})
	for _, r := range append(clients, servers[ids[0]]) {
		require.NoError(t, r.WaitServers(ctx, 3))
	}
	// A rolling restart is of a formed cluster: a server restarted while
	// the cluster still forms is a learner whose guessed entry names its
	// previous life, and the forming cluster can wait for good
	// (docs/engine.md, rule 14); 1 run in 6 restarted one that early.
	require.Eventually(t, func() bool { return allVoting(ctx, servers) }, time.Minute, 10*time.Millisecond, "the cluster forms")

	type result struct {
		email string
		errs  []error
	}
	results := make(chan result, 1000)
	stop := make(chan struct{})
	var done atomic.Int64 // emails whose three registrations have ended
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			email := fmt.Sprintf("user%d@example.com", i)
			res := result{email: email, errs: make([]error, len(clients))}
			var each sync.WaitGroup
			for c, r := range clients {
				each.Add(1)
				go func() {
					defer each.Done()
					req := RegisterRequest{Email: email, Name: fmt.Sprint("client ", c), Password: password}
					for {
						cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
						err := r.Call(cctx, VerbRegister, UserKey(email), req, nil)
						ccancel()
						// A definite refusal (no owner yet, a sync under
						// way) did not run: the caller tries again, as a
						// new call.
						if err == nil || fero.CodeOf(err) != fero.CodeUnavailable || ctx.Err() != nil {
							res.errs[c] = err
							return
						}
						time.Sleep(10 * time.Millisecond)
					}
				}()
			}
			each.Wait()
			results <- res
			done.Add(1)
		}
	}()

	// Registrations run before, during and after every restart.
	atLeast := func(n int64) {
		require.Eventually(t, func() bool { return done.Load() >= n }, 2*time.Minute, time.Millisecond)
	}
	for i, id := range ids {
		atLeast(int64(5 * (i + 1)))
		require.NoError(t, servers[id].Close(), "close %s", id)
		servers[id] = open(id, append(addrs[id], fero.WithHandler(svc.Handle), fero.WithDataDir(dirs[id]))...)
		// As a rolling deploy waits for each server's readiness: the next
		// goes down only once every server votes again.
		require.Eventually(t, func() bool { return allVoting(ctx, servers) }, time.Minute, 10*time.Millisecond,
			"the servers vote again after %s restarted", id)
	}
	atLeast(done.Load() + 5)
	close(stop)
	wg.Wait()
	close(results)

	n := 0
	for res := range results {
		n++
		ok := 0
		for c, err := range res.errs {
			switch {
			case err == nil:
				ok++
			case fero.CodeOf(err) != CodeConflict:
				t.Errorf("%s, client %d: %v", res.email, c, err)
			}
		}
		assert.Equal(t, 1, ok, "%s: %d of 3 registrations succeeded (%v)", res.email, ok, res.errs)
	}
	require.Positive(t, n)
	t.Logf("%d emails registered, each by three clients at once, across three server restarts", n)
}

// allVoting reports whether every server says its vote counts.
func allVoting(ctx context.Context, servers map[string]*fero.Resource) bool {
	for _, r := range servers {
		rc, err := fero.Dial(ctx, r.Addr())
		if err != nil {
			return false
		}
		st, err := rc.Status(ctx)
		rc.Close()
		if err != nil || !st.Voting {
			return false
		}
	}
	return true
}
