package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/pkg/fero"
)

// freeAddr returns a loopback address whose port is free for TCP and UDP
// (gossip takes both) at the time of the call.
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		_ = l.Close()
		if err == nil {
			_ = u.Close()
			return addr
		}
	}
	t.Fatal("no free port for TCP and UDP")
	return ""
}

// sigkillRounds is how many times TestWholeClusterSIGKILL kills the whole
// cluster: 2 in make test, FERO_SIGKILL_ROUNDS (make chaos runs 20).
func sigkillRounds(t *testing.T) int {
	if s := os.Getenv("FERO_SIGKILL_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "FERO_SIGKILL_ROUNDS")
		return n
	}
	return 2
}

// TestWholeClusterSIGKILL (issue 18): three real `fero serve` processes
// with --data-dir and --fsync group take Majority writes from four
// writers; at a random moment all three are killed with SIGKILL and
// restarted on their directories. Every write that was acknowledged is
// there after each restart, and every node holds the same copy.
func TestWholeClusterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real processes; runs without -short")
	}
	const parts = 31
	ids := []string{"n1", "n2", "n3"}
	var data, gossip, dirs []string
	for range ids {
		data, gossip = append(data, freeAddr(t)), append(gossip, freeAddr(t))
		dirs = append(dirs, t.TempDir())
	}
	start := func() []*server {
		var ss []*server
		for i, id := range ids {
			ss = append(ss, serve(t, "kv", "--id", id, "--listen", data[i], "--bind", gossip[i],
				"--seeds", strings.Join(gossip, ","), "--data-dir", dirs[i], "--fsync", "group",
				"--partitions", fmt.Sprint(parts), "--log-level", "error"))
		}
		return ss
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	acked := map[string]int{} // every key whose Majority write was acknowledged → its value
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	rounds := sigkillRounds(t)
	for round := 0; round <= rounds; round++ {
		ss := start()
		checkCluster(ctx, t, ss, acked)
		if round == rounds {
			break
		}
		// Writers until the kill: each its own connection, to each node in turn.
		stop := make(chan struct{})
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := fero.Dial(ctx, data[w%3])
				if err != nil {
					return
				}
				defer r.Close()
				for n := 0; n < 100_000; n++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("r%d-w%d-%d", round, w, n)
					wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
					err := r.Update(wctx, key, n, fero.Majority)
					wcancel()
					if err == nil {
						mu.Lock()
						acked[key] = n
						mu.Unlock()
					} else {
						select {
						case <-stop:
							return
						case <-time.After(20 * time.Millisecond):
						}
					}
				}
			}()
		}
		time.Sleep(time.Duration(300+rng.IntN(1500)) * time.Millisecond)
		for _, s := range ss {
			_ = s.cmd.Process.Kill()
		}
		close(stop)
		for _, s := range ss {
			_ = s.cmd.Wait()
		}
		wg.Wait()
		t.Logf("round %d: %d writes acknowledged so far", round, len(acked))
	}
	require.NotEmpty(t, acked)
}

// checkCluster waits until the three servers own every partition and hold
// the same copy, then reads every acknowledged write back through the
// owners.
func checkCluster(ctx context.Context, t *testing.T, ss []*server, acked map[string]int) {
	t.Helper()
	var last string
	require.Eventually(t, func() bool {
		digests := map[uint64]bool{}
		for _, s := range ss {
			r, err := fero.Dial(ctx, s.data)
			if err != nil {
				last = err.Error()
				return false
			}
			st, err := r.Status(ctx)
			_ = r.Close()
			if err != nil {
				last = err.Error()
				return false
			}
			owned := 0
			for _, m := range st.Members {
				owned += m.Owned
			}
			if st.Disk == nil || st.Disk.Err != "" {
				t.Fatalf("%s reports no healthy data dir: %+v", s.data, st.Disk)
			}
			if len(st.Members) != 3 || owned != 31 || !st.Voting || st.Keys < len(acked) {
				last = fmt.Sprintf("%s: %d members owning %d, voting %v, %d keys of %d acked", s.data, len(st.Members), owned, st.Voting, st.Keys, len(acked))
				return false
			}
			digests[st.Digest] = true
		}
		last = fmt.Sprintf("%d different copies", len(digests))
		return len(digests) == 1
	}, 60*time.Second, 100*time.Millisecond, "the cluster did not come back whole: %v", lazy(func() string { return last }))

	r, err := fero.Dial(ctx, ss[0].data)
	require.NoError(t, err)
	defer r.Close()
	for key, want := range acked {
		var got int
		ok, err := r.Get(ctx, key, &got)
		require.NoError(t, err, key)
		require.True(t, ok, "acknowledged write %s lost", key)
		require.Equal(t, want, got, key)
	}
}

// lazy formats as what its function returns when the message is printed
// (a require.Eventually message is formatted after the last try).
type lazy func() string

func (f lazy) String() string { return f() }
