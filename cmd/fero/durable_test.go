package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
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

// TestServeKeepsDataByDefault: three `fero serve` processes started side
// by side in one directory, with neither --data-dir nor --id, each take a
// data directory of their own under fero-data/RESOURCE; killed together
// with SIGKILL and started again the same way, they come back with their
// identities and every acknowledged write.
func TestServeKeepsDataByDefault(t *testing.T) {
	dir := t.TempDir()
	var data, gossip []string
	for range 3 {
		data, gossip = append(data, freeAddr(t)), append(gossip, freeAddr(t))
	}
	start := func() ([]*server, []string) {
		var ss []*server
		var ids []string
		for i := range 3 {
			s := serveIn(t, dir, "kv", "--listen", data[i], "--bind", gossip[i],
				"--seeds", strings.Join(gossip, ","), "--partitions", "31", "--log-level", "error")
			ss = append(ss, s)
			ids = append(ids, strings.Fields(s.first)[2])
		}
		return ss, ids
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ss, ids := start()
	checkCluster(ctx, t, ss, nil)
	r, err := fero.Dial(ctx, data[0])
	require.NoError(t, err)
	acked := map[string]int{}
	for i := range 200 {
		key := fmt.Sprintf("k%d", i)
		require.NoError(t, retryIdempotent(ctx, func() error { return r.Update(ctx, key, i, fero.Majority) }))
		acked[key] = i
	}
	require.NoError(t, r.Close())
	for _, s := range ss {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	for i := range 3 {
		require.DirExists(t, filepath.Join(dir, "fero-data", "kv", fmt.Sprint(i)))
	}
	ss, again := start()
	require.Equal(t, ids, again, "each server takes back its directory's identity")
	checkCluster(ctx, t, ss, acked)
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
		var ok bool
		// A read goes through the owner, which may still be syncing the
		// partition after the restart.
		err := retryUnavailable(ctx, func() (err error) { ok, err = r.Get(ctx, key, &got); return err })
		require.NoError(t, err, key)
		require.True(t, ok, "acknowledged write %s lost", key)
		require.Equal(t, want, got, key)
	}
}

// lazy formats as what its function returns when the message is printed
// (a require.Eventually message is formatted after the last try).
type lazy func() string

func (f lazy) String() string { return f() }

// restartKeys is how many keys TestRestartLoadsFromDisk loads: 20,000,
// or FERO_RESTART_KEYS (the published figure uses 1,000,000), each with a
// value of FERO_RESTART_VALUE bytes (90 by default).
func restartKeys(t *testing.T) int {
	if s := os.Getenv("FERO_RESTART_KEYS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "FERO_RESTART_KEYS")
		return n
	}
	return 20_000
}

// TestRestartLoadsFromDisk (issue 18): one of three servers holding N keys
// is killed while writes go on, and restarted on its data directory; it
// serves again once it has loaded its disk and fetched the tail it missed.
// Then the same with its directory wiped, which is a full resync from the
// peers (what every restart was before data directories). The test logs
// both times; it asserts only that each ends with the same copy as the
// peers.
func TestRestartLoadsFromDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("loads keys into real processes; runs without -short")
	}
	keys := restartKeys(t)
	size := 90
	if s := os.Getenv("FERO_RESTART_VALUE"); s != "" {
		var err error
		size, err = strconv.Atoi(s)
		require.NoError(t, err, "FERO_RESTART_VALUE")
	}
	value := strings.Repeat("v", size)
	ids := []string{"n1", "n2", "n3"}
	var data, gossip, dirs []string
	for range ids {
		data, gossip = append(data, freeAddr(t)), append(gossip, freeAddr(t))
		dirs = append(dirs, t.TempDir())
	}
	// FERO_RESTART_PPROF=DIR: n2 serves the profiler, and each restart
	// writes a CPU profile of its first FERO_RESTART_PPROF_SECONDS (10)
	// to DIR/restart-<i>.pprof.
	// The new server n4 serves it too, and writes DIR/join.pprof.
	profDir, profAddr, profAddr4 := os.Getenv("FERO_RESTART_PPROF"), "", ""
	if profDir != "" {
		profAddr, profAddr4 = freeAddr(t), freeAddr(t)
	}
	level := "error" // FERO_RESTART_LOG_LEVEL: the servers' --log-level
	if l := os.Getenv("FERO_RESTART_LOG_LEVEL"); l != "" {
		level = l
	}
	start := func(i int, disk bool) *server {
		args := []string{"kv", "--id", ids[i], "--listen", data[i], "--bind", gossip[i],
			"--seeds", strings.Join(gossip, ","), "--log-level", level}
		if disk {
			args = append(args, "--data-dir", dirs[i])
		}
		if i == 1 && profAddr != "" {
			args = append(args, "--pprof", profAddr)
		}
		if i == 3 && profAddr4 != "" {
			args = append(args, "--pprof", profAddr4)
		}
		return serve(t, args...)
	}
	ss := []*server{start(0, true), start(1, true), start(2, true)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	load := func(prefix string, n int) {
		var wg sync.WaitGroup
		const writers = 64
		for w := range writers {
			wg.Go(func() {
				r, err := fero.Dial(ctx, data[w%2*2]) // n1 and n3: n2 is the one restarted
				require.NoError(t, err)
				defer r.Close()
				for i := w; i < n; i += writers {
					key := fmt.Sprintf("%s%07d", prefix, i)
					// The same value again is harmless, so an indefinite
					// error is retried too: a write forwarded to n2 as it
					// is killed is answered "aborted: connection lost".
					require.NoError(t, retryIdempotent(ctx, func() error { return r.Update(ctx, key, value) }), key)
				}
			})
		}
		wg.Wait()
	}
	waitReady(ctx, t, ss)
	began := time.Now()
	load("k", keys)
	t.Logf("loaded %d keys of ~%d bytes in %v", keys, size+10, time.Since(began).Round(time.Millisecond))

	for i, how := range []string{
		"on its data directory (load plus the tail)",
		"with its directory wiped (a full resync from the peers, kept on disk)",
		"without a data directory (a full resync into memory)",
	} {
		_ = ss[1].cmd.Process.Kill()
		_ = ss[1].cmd.Wait()
		load(fmt.Sprintf("down-%d-", i), keys/100) // the tail n2 misses
		if i == 1 {
			require.NoError(t, os.RemoveAll(dirs[1]))
		}
		began := time.Now()
		ss[1] = start(1, i < 2)
		var prof sync.WaitGroup
		if profAddr != "" {
			prof.Go(func() { saveProfile(t, profAddr, filepath.Join(profDir, fmt.Sprintf("restart-%d.pprof", i))) })
		}
		waitCaughtUp(ctx, t, ss, 1)
		took := time.Since(began)
		prof.Wait()
		ref, err := remoteStatus(ctx, ss[0].data)
		require.NoError(t, err)
		t.Logf("restart of n2 %s: serving the same copy as its peers (%d keys) after %v", how, ref.Keys, took.Round(time.Millisecond))
		logCatchUp(ctx, t, "n2", ss[1].data)
	}

	// A new server joins: it catches up by snapshot plus tail, kept on
	// its own data directory (FERO_JOIN_MEMORY=1: into memory, which
	// tells the disk's share of the time from the network's). The rate counts keys and values (the
	// payload), from the moment it printed its addresses (it has joined
	// the gossip) until it votes with the peers' copy.
	ids = append(ids, "n4")
	data, gossip, dirs = append(data, freeAddr(t)), append(gossip, freeAddr(t)), append(dirs, t.TempDir())
	for i := range 3 {
		if st, err := remoteStatus(ctx, ss[i].data); err == nil && st.Disk != nil {
			d := st.Disk
			t.Logf("%s before the join: %.2f s writing, %d snapshots of %.0f MB (%.2f s)", ids[i], d.WriteSeconds, d.Snapshots, float64(d.SnapshotBytes)/1e6, d.SnapshotSeconds)
		}
	}
	cpu0 := make([][2]float64, 3)
	for i := range 3 {
		cpu0[i][0], cpu0[i][1] = cpuSeconds(ss[i].cmd.Process.Pid)
	}
	began = time.Now()
	ss = append(ss, start(3, os.Getenv("FERO_JOIN_MEMORY") == ""))
	joined := time.Now()
	var prof sync.WaitGroup
	if profAddr4 != "" {
		prof.Go(func() { saveProfile(t, profAddr4, filepath.Join(profDir, "join.pprof")) })
	}
	waitCaughtUp(ctx, t, ss, 3)
	took, caught := joined.Sub(began), time.Since(joined)
	for i := range 4 {
		t.Logf("%s: RSS %.0f MB", ids[i], rssMB(t, ss[i].cmd.Process.Pid))
		u, s := cpuSeconds(ss[i].cmd.Process.Pid)
		if i < 3 {
			u, s = u-cpu0[i][0], s-cpu0[i][1]
		}
		t.Logf("%s used %.2f s of CPU during the join (%.2f s user, %.2f s system)", ids[i], u+s, u, s)
	}
	prof.Wait()
	ref, err := remoteStatus(ctx, ss[0].data)
	require.NoError(t, err)
	payload := float64(ref.Keys) * float64(size+10) // keys are 8-10 bytes: the estimate is within 1%
	t.Logf("new server n4: started and joined in %v, then caught up with %d keys (~%.0f MB of keys and values) in %v: %.0f MB/s",
		took.Round(time.Millisecond), ref.Keys, payload/1e6, caught.Round(time.Millisecond), payload/1e6/caught.Seconds())
	logCatchUp(ctx, t, "n4", ss[3].data)
	for i := range 3 {
		if st, err := remoteStatus(ctx, ss[i].data); err == nil && st.Disk != nil {
			d := st.Disk
			t.Logf("%s since start: %.2f s writing, %d snapshots of %.0f MB (%.2f s)", ids[i], d.WriteSeconds, d.Snapshots, float64(d.SnapshotBytes)/1e6, d.SnapshotSeconds)
		}
	}
}

// cpuSeconds is the CPU time, user and system, process pid has used, or
// 0 where /proc cannot tell.
func cpuSeconds(pid int) (user, system float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// The fields after the command's closing parenthesis; utime and
	// stime are the 12th and 13th of them.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return u / 100, s / 100 // clock ticks; 100 a second on Linux
}

// logCatchUp logs what a server's catching up took (its status's counters).
func logCatchUp(ctx context.Context, t *testing.T, id, addr string) {
	st, err := remoteStatus(ctx, addr)
	if err != nil || st.CatchUp == nil {
		t.Logf("%s: no catch-up counters (%v)", id, err)
		return
	}
	c := st.CatchUp
	t.Logf("%s caught up with %d partitions restored from %d snapshot replies (%.0f MB), %d stale, %d Busy, %d fetches unanswered in time",
		id, c.Restored, c.Pieces, float64(c.PieceBytes)/1e6, c.Stale, c.Busy, c.Retries)
	if d := st.Disk; d != nil {
		t.Logf("%s's driver spent %.2f s writing to its disk (%.2f s of it saving %d snapshots of %.0f MB), %d fsyncs of write groups",
			id, d.WriteSeconds, d.SnapshotSeconds, d.Snapshots, float64(d.SnapshotBytes)/1e6, d.Syncs)
	}
}

// saveProfile saves a CPU profile of FERO_RESTART_PPROF_SECONDS (10) from
// the profiler at addr to path.
func saveProfile(t *testing.T, addr, path string) {
	secs := 10
	if s := os.Getenv("FERO_RESTART_PPROF_SECONDS"); s != "" {
		secs, _ = strconv.Atoi(s)
	}
	hc := &http.Client{Timeout: time.Duration(secs)*time.Second + time.Minute}
	resp, err := hc.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
	if err != nil {
		t.Logf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Logf("profile: %v", err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		t.Logf("profile: %v", err)
	}
}

// retryIdempotent retries a write that may be sent again harmlessly (the
// same value to the same key) on unavailable and on indefinite errors:
// a write forwarded to a server as it is killed is answered aborted, and
// one caught in a failover may time out.
func retryIdempotent(ctx context.Context, write func() error) error {
	return retryUnavailable(ctx, func() error {
		err := write()
		if c := fero.CodeOf(err); (c == fero.CodeAborted || c == fero.CodeDeadlineExceeded) && ctx.Err() == nil {
			return fero.Errorf(fero.CodeUnavailable, "retry: %v", err)
		}
		return err
	})
}

func retryUnavailable(ctx context.Context, write func() error) error {
	for {
		err := write()
		if err == nil || fero.CodeOf(err) != fero.CodeUnavailable {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReady waits until the servers own every partition between them.
func waitReady(ctx context.Context, t *testing.T, ss []*server) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, s := range ss {
			st, err := remoteStatus(ctx, s.data)
			if err != nil || len(st.Members) != len(ss) || !st.Voting {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond)
}

// waitCaughtUp polls ss[i] until it votes and holds the digest of ss[0].
func waitCaughtUp(ctx context.Context, t *testing.T, ss []*server, i int) {
	t.Helper()
	var last string
	// FERO_RESTART_TRACE=1 logs the catching-up server's progress every
	// half second.
	trace, began, traced := os.Getenv("FERO_RESTART_TRACE") != "", time.Now(), time.Now()
	require.Eventually(t, func() bool {
		ref, err := remoteStatus(ctx, ss[0].data)
		if err != nil {
			return false
		}
		st, err := remoteStatus(ctx, ss[i].data)
		if err != nil {
			last = err.Error()
			return false
		}
		if trace && time.Since(traced) >= 500*time.Millisecond && st.CatchUp != nil {
			traced = time.Now()
			c := st.CatchUp
			t.Logf("%5.1f s: %d keys of %d, %d restored, %d replies (%.0f MB), %d stale, %d busy, %d unanswered",
				time.Since(began).Seconds(), st.Keys, ref.Keys, c.Restored, c.Pieces, float64(c.PieceBytes)/1e6, c.Stale, c.Busy, c.Retries)
		}
		last = fmt.Sprintf("voting %v, %d keys of %d", st.Voting, st.Keys, ref.Keys)
		return st.Voting && st.Keys == ref.Keys && st.Digest == ref.Digest
	}, 10*time.Minute, 20*time.Millisecond, "%v", lazy(func() string { return last }))
}

func remoteStatus(ctx context.Context, addr string) (*fero.NodeStatus, error) {
	r, err := fero.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Status(ctx)
}
