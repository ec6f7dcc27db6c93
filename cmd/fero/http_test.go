package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/pkg/fero"
)

// httpGet returns the status code and body of GET url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// scrape reads a server's /metrics into name → samples.
func scrape(t *testing.T, addr string) map[string][]*model.Sample {
	t.Helper()
	code, body := httpGet(t, "http://"+addr+"/metrics")
	require.Equal(t, http.StatusOK, code, body)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	out := map[string][]*model.Sample{}
	for _, mf := range fams {
		vec, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.Now()}, mf)
		require.NoError(t, err)
		for _, s := range vec {
			name := string(s.Metric[model.MetricNameLabel])
			out[name] = append(out[name], s)
		}
	}
	return out
}

// sample returns the value of the sample of name whose labels include
// every pair of want, and whether there is one.
func sample(ms map[string][]*model.Sample, name string, want ...string) (float64, bool) {
next:
	for _, s := range ms[name] {
		for i := 0; i+1 < len(want); i += 2 {
			if string(s.Metric[model.LabelName(want[i])]) != want[i+1] {
				continue next
			}
		}
		return float64(s.Value), true
	}
	return 0, false
}

// httpAddr reads the "fero: http ADDR" line a server with --http prints
// after its first.
func httpAddr(t *testing.T, s *server) string {
	t.Helper()
	require.True(t, s.out.Scan(), "no second line")
	f := strings.Fields(s.out.Text())
	require.GreaterOrEqual(t, len(f), 3, "second line: %q", s.out.Text())
	require.Equal(t, "http", f[1], "second line: %q", s.out.Text())
	return f[2]
}

// TestServeHTTP (issue 19): three fero serve processes with --http: each
// answers /healthz, turns ready on /readyz once the cluster formed, and
// its /metrics counts the writes it took by wait and result, with their
// latency, and what the node counts anyway (commits, applies, members,
// partitions by role). With two of the three killed, the survivor is not
// ready and says why.
func TestServeHTTP(t *testing.T) {
	ids := []string{"h1", "h2", "h3"}
	var gossip []string
	for range ids {
		gossip = append(gossip, freeAddr(t))
	}
	var ss []*server
	var web []string
	for i, id := range ids {
		s := serve(t, "kv", "--id", id, "--bind", gossip[i], "--seeds", strings.Join(gossip, ","),
			"--http", "127.0.0.1:0", "--log-level", "error")
		ss = append(ss, s)
		web = append(web, httpAddr(t, s))
	}
	for _, w := range web {
		code, body := httpGet(t, "http://"+w+"/healthz")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "ok\n", body)
	}
	require.Eventually(t, func() bool {
		for _, w := range web {
			if code, _ := httpGet(t, "http://"+w+"/readyz"); code != http.StatusOK {
				return false
			}
		}
		return true
	}, time.Minute, 50*time.Millisecond, "not every server turned ready")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := fero.Dial(ctx, ss[0].data)
	require.NoError(t, err)
	defer r.Close()
	const writes = 20
	for i := range writes {
		require.NoError(t, retryUnavailable(ctx, func() error {
			return r.Update(ctx, fmt.Sprintf("k%d", i), i, fero.Majority)
		}))
	}
	// A write that fails: ADD of a key that exists.
	require.Error(t, r.Add(ctx, "k0", 1, fero.Majority))

	// A remote client sends each write to its key's owner: sum the
	// servers.
	var ok, failed, timed float64
	scrapes := make([]map[string][]*model.Sample, len(web))
	for i, w := range web {
		scrapes[i] = scrape(t, w)
		v, _ := sample(scrapes[i], "fero_writes_total", "resource", "kv", "wait", "majority", "result", "ok")
		ok += v
		v, _ = sample(scrapes[i], "fero_writes_total", "wait", "majority", "result", "failed_precondition")
		failed += v
		v, _ = sample(scrapes[i], "fero_write_duration_seconds_count", "wait", "majority")
		timed += v
	}
	require.Equal(t, float64(writes), ok, "writes counted ok")
	require.Equal(t, 1.0, failed, "the refused ADD (failed_precondition)")
	require.Equal(t, float64(writes), timed, "the successful writes timed, not the refused ADD (issue 43)")
	ms := scrapes[0]
	alive, _ := sample(ms, "fero_members", "role", "server", "state", "connected")
	require.Equal(t, 3.0, alive, "members")
	var parts float64
	for _, s := range ms["fero_partitions"] {
		parts += float64(s.Value)
	}
	require.Equal(t, 271.0, parts, "partitions by role")
	owned, _ := sample(ms, "fero_partitions", "role", "owner")
	require.Len(t, ms["fero_replication_lag_offsets"], int(owned), "a lag for each partition it owns")
	require.Len(t, ms["fero_replication_lag_seconds"], int(owned))
	var commits float64
	for _, sc := range scrapes {
		c, found := sample(sc, "fero_commits_total", "resource", "kv")
		require.True(t, found)
		commits += c
	}
	require.Equal(t, float64(writes), commits, "commits across the owners")
	// The configuration, the quorum and readiness, and a dead-members
	// series at 0 before any dies (issue 43: the alert "servers of the
	// configuration not alive >= 1" needs them).
	for name, want := range map[string]float64{
		"fero_configuration_servers": 3, "fero_configuration_quorum": 2, "fero_configuration_servers_alive": 3, "fero_ready": 1,
	} {
		v, found := sample(ms, name, "resource", "kv")
		require.True(t, found, "%s exported", name)
		require.Equal(t, want, v, name)
	}
	dead, found := sample(ms, "fero_members", "role", "server", "state", "dead")
	require.True(t, found, "fero_members{state=dead} exported while none is dead")
	require.Equal(t, 0.0, dead)
	_, found = sample(ms, "go_goroutines")
	require.True(t, found, "the Go runtime's metrics")
	_, found = sample(ms, "process_resident_memory_bytes")
	require.True(t, found, "the process's metrics")

	// Two of three gone: no quorum.
	for _, s := range ss[1:] {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	// Its first answer that is not ready names the servers it misses
	// first, before the partitions it took over from them are synced or
	// gossip declares them dead; then it says it lacks a quorum.
	var body string
	require.Eventually(t, func() bool {
		var code int
		code, body = httpGet(t, "http://"+web[0]+"/readyz")
		return code == http.StatusServiceUnavailable
	}, time.Minute, 20*time.Millisecond, "the survivor stayed ready")
	require.Regexp(t, `^fero: not ready: servers of its configuration not alive: h[23] \(\w+\)(, h3 \(\w+\))?; `, body, "the missing servers first")
	require.Eventually(t, func() bool {
		var code int
		code, body = httpGet(t, "http://"+web[0]+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "sees 1 of the 3 servers of its configuration alive; a quorum is 2")
	}, time.Minute, 100*time.Millisecond, "the survivor did not say it lacks a quorum: %q", lazy(func() string { return body }))
	require.Contains(t, body, "servers of its configuration not alive: h2 (dead), h3 (dead)")
	require.Eventually(t, func() bool {
		ms = scrape(t, web[0])
		dead, _ := sample(ms, "fero_members", "role", "server", "state", "dead")
		alive, _ := sample(ms, "fero_configuration_servers_alive")
		ready, found := sample(ms, "fero_ready")
		return dead == 2 && alive == 1 && found && ready == 0
	}, time.Minute, 100*time.Millisecond, "metrics: 2 dead members, 1 of the configuration alive, not ready")
	v, _ := sample(ms, "fero_configuration_servers")
	require.Equal(t, 3.0, v, "the dead are still in the configuration")
	code, _ := httpGet(t, "http://"+web[0]+"/healthz")
	require.Equal(t, http.StatusOK, code, "alive all the same")

	// fero status says it too, with what to do.
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	out, err := run(sctx, "status", "--addr", ss[0].data)
	require.NoError(t, err)
	require.Contains(t, out, "NO QUORUM: this node sees 1 of the 3 alive")
	require.Contains(t, out, "fero forget ")
}

// TestHealthzFailsWithTheDisk (issue 43): a server whose data directory
// fills up leaves the cluster and takes no writes, and did not come back
// by itself once space was freed, while /healthz said 200, so nothing
// restarted it. Now /healthz fails (503, saying why), so the orchestrator
// restarts it; restarted, it loads its data and serves again. Needs root
// (a small tmpfs).
func TestHealthzFailsWithTheDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	args := []string{"kv", "--data-dir", dir, "--http", "127.0.0.1:0", "--log-level", "error", "--partitions", "31"}
	s := serve(t, args...)
	web := httpAddr(t, s)
	code, body := httpGet(t, "http://"+web+"/healthz")
	require.Equal(t, http.StatusOK, code, body)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	big := `"` + strings.Repeat("x", 32<<10) + `"`
	var err error
	for i := 0; i < 64; i++ {
		if _, err = run(ctx, "put", "--addr", s.data, fmt.Sprintf("big%d", i), big); err != nil {
			break
		}
	}
	require.Error(t, err, "512 KiB of disk took 64 writes of 32 KiB")
	require.Eventually(t, func() bool {
		code, body = httpGet(t, "http://"+web+"/healthz")
		return code == http.StatusServiceUnavailable
	}, 10*time.Second, 50*time.Millisecond, "/healthz still %d: %s", code, body)
	require.Contains(t, body, "its data directory failed")
	require.Contains(t, body, "restart the process")

	// Room again, and the restart the probe's failure brings.
	require.NoError(t, exec.Command("mount", "-o", "remount,size=4m", dir).Run())
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	_ = s.cmd.Wait()
	s = serve(t, args...)
	web = httpAddr(t, s)
	code, body = httpGet(t, "http://"+web+"/healthz")
	require.Equal(t, http.StatusOK, code, body)
	require.Eventually(t, func() bool {
		_, err := run(ctx, "put", "--addr", s.data, "after", "1")
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "the restarted server takes writes")
}
