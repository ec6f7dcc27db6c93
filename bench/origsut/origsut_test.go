package origsut

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fero-go/fero/bench"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// needOriginal skips the test where Node is missing, or where the original
// is not in the cache and InstallEnv does not allow installing it: make
// test must not depend on npm's registry. It returns the installation.
func needOriginal(t *testing.T) installation {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not installed (apt-get install nodejs npm):", err)
	}
	if !Installed() && os.Getenv(InstallEnv) == "" {
		dir, _ := Dir()
		t.Skipf("the original fero %s is not in the cache (%s): set %s=1 to let the tests install it with npm", Version, dir, InstallEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	in, err := prepare(ctx)
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	require.NoError(t, err)
	return in
}

// serve runs a server of the original that the test's cleanup stops,
// checking that Serve then returns nil.
func serve(t *testing.T) string {
	t.Helper()
	needOriginal(t)
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- System{}.Serve(ctx, bench.ServeOptions{Addr: "127.0.0.1:0"}, func(a string) { addrc <- a })
	}()
	select {
	case addr := <-addrc:
		t.Cleanup(func() {
			cancel()
			require.NoError(t, <-errc)
		})
		return addr
	case err := <-errc:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(startTimeout):
		cancel()
		t.Fatal("serve: not ready")
	}
	panic("unreachable")
}

// harness plays the parent of a client process: it runs RunClient with
// spec, starts it as soon as it is ready and returns its messages from
// ready on, ending with the result or the error.
func harness(t *testing.T, spec bench.ClientSpec) []bench.ClientMessage {
	t.Helper()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	errc := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		err := System{}.RunClient(ctx, spec, stdinR, stdoutW)
		stdoutW.Close()
		errc <- err
	}()
	var msgs []bench.ClientMessage
	sc := bufio.NewScanner(stdoutR)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m bench.ClientMessage
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		msgs = append(msgs, m)
		if m.Ready {
			at := time.Now().Add(10 * time.Millisecond).UnixNano()
			_, err := io.WriteString(stdinW, "go "+strconv.FormatInt(at, 10)+"\n")
			require.NoError(t, err)
		}
	}
	// The parent closes the client's stdin once it has the result.
	stdinW.Close()
	require.NoError(t, <-errc)
	return msgs
}

func milestones(t *testing.T, r *bench.ClientResult) map[string]time.Duration {
	t.Helper()
	out := map[string]time.Duration{}
	for _, m := range r.Milestones {
		out[m.Name] = m.Nanos
	}
	return out
}

// TestClientRunsEachScenario runs a tiny trial of each supported scenario
// end to end: the original's server under Serve, its client under
// RunClient, and the harness's protocol between them and the test.
func TestClientRunsEachScenario(t *testing.T) {
	addr := serve(t)
	base := bench.ClientSpec{
		System: "fero-" + Version, Dial: bench.DialOptions{Servers: []string{addr}, Index: 0}, Size: 100,
		Records: 2000, WarmupRecords: 200, Window: 100, Count: 50, WarmupCount: 5,
		ProgressEvery: 20 * time.Millisecond,
	}
	for _, s := range []bench.Scenario{bench.OneWay, bench.RequestReply, bench.RoundTrip} {
		t.Run(string(s), func(t *testing.T) {
			spec := base
			spec.Scenario = s
			msgs := harness(t, spec)
			require.NotEmpty(t, msgs)
			assert.True(t, msgs[0].Ready)
			assert.Positive(t, msgs[0].Connected)
			last := msgs[len(msgs)-1]
			require.Empty(t, last.Err)
			require.NotNil(t, last.Result)
			r := last.Result
			assert.Zero(t, r.Errors)
			assert.Positive(t, r.CPU.Total())
			assert.Positive(t, r.Window)
			switch s {
			case bench.OneWay:
				ms := milestones(t, r)
				assert.Equal(t, []string{bench.Tacks, bench.Yacks}, []string{r.Milestones[0].Name, r.Milestones[1].Name})
				assert.Positive(t, ms[bench.Tacks])
				assert.GreaterOrEqual(t, ms[bench.Yacks], ms[bench.Tacks])
				assert.Equal(t, int64(2000), r.Records)
				assert.Equal(t, int64(2000*100), r.Bytes)
			case bench.RequestReply:
				ms := milestones(t, r)
				assert.Equal(t, []string{bench.Tacks, bench.Sacks}, []string{r.Milestones[0].Name, r.Milestones[1].Name})
				assert.GreaterOrEqual(t, ms[bench.Sacks], ms[bench.Tacks])
				assert.Equal(t, int64(2000), r.Records)
			case bench.RoundTrip:
				assert.Equal(t, int64(50), r.Records)
				h, err := bench.DecodeRecorder(r.Histograms[bench.HistLatency])
				require.NoError(t, err)
				assert.Equal(t, int64(50), h.Count())
			}
		})
	}
}

// TestClientStopsWhenTheHarnessGoes: stdin closing before the start ends
// the client with an error, and its Node process with it.
func TestClientStopsWhenTheHarnessGoes(t *testing.T) {
	addr := serve(t)
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	spec := bench.ClientSpec{Scenario: bench.RequestReply, Dial: bench.DialOptions{Servers: []string{addr}}, Size: 10, Records: 10, Window: 10}
	errc := make(chan error, 1)
	go func() {
		err := System{}.RunClient(context.Background(), spec, stdinR, stdoutW)
		stdoutW.Close()
		errc <- err
	}()
	sc := bufio.NewScanner(stdoutR)
	require.True(t, sc.Scan())
	assert.Contains(t, sc.Text(), `"ready":true`)
	stdinW.Close()
	require.True(t, sc.Scan())
	assert.Contains(t, sc.Text(), "stdin closed before go", "the harness reads the reason on stdout")
	assert.ErrorContains(t, <-errc, "stdin closed before go")
}

func TestServeStopsNodeWhenCancelled(t *testing.T) {
	needOriginal(t)
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- System{}.Serve(ctx, bench.ServeOptions{Addr: "127.0.0.1:0"}, func(a string) { addrc <- a })
	}()
	addr := <-addrc
	c, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err, "the original's server listens on the address it reported")
	c.Close()
	cancel()
	require.NoError(t, <-errc)
	// Serve returned after Node was reaped, so its port is closed.
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("the original's server still accepts connections after Serve returned")
	}
}

func TestSupports(t *testing.T) {
	for _, s := range []bench.Scenario{bench.OneWay, bench.RequestReply, bench.RoundTrip} {
		assert.NoError(t, System{}.Supports(s, 1), s)
		err := System{}.Supports(s, 2)
		assert.ErrorIs(t, err, ErrUnsupported, s)
		assert.ErrorContains(t, err, "use -c 1")
	}
	err := System{}.Supports(bench.FixedRate, 1)
	assert.ErrorIs(t, err, ErrUnsupported)
	assert.ErrorContains(t, err, "scenario rate")
	// Refused before anything starts: no Node needed.
	err = System{}.Serve(context.Background(), bench.ServeOptions{Addr: "127.0.0.1:0", Index: 1, Peers: []string{"127.0.0.1:1"}}, func(string) {
		t.Error("ready called")
	})
	assert.ErrorIs(t, err, ErrUnsupported)
	_, err = System{}.Dial(context.Background(), bench.DialOptions{Servers: []string{"127.0.0.1:1"}})
	assert.ErrorContains(t, err, "RunClient")
}

func TestInstallsUnderTheUserCacheDirectory(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/nonexistent/cache")
	dir, err := Dir()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join("/nonexistent/cache", "fero-bench", "npm", "fero@"+Version), dir)
	assert.False(t, Installed())
}

func TestWriteIfChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.js")
	require.NoError(t, writeIfChanged(path, []byte("a")))
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, writeIfChanged(path, []byte("a")))
	st2, err := os.Stat(path)
	require.NoError(t, err)
	assert.True(t, os.SameFile(st, st2), "unchanged: not rewritten")
	require.NoError(t, writeIfChanged(path, []byte("b")))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "b", string(b))
	left, err := filepath.Glob(filepath.Join(filepath.Dir(path), "*.tmp-*"))
	require.NoError(t, err)
	assert.Empty(t, left)
}

// TestUsageCountsAReapedScript: client.js may exit once it has sent its
// result, and be reaped before the client reads its usage; its CPU still
// counts (it was left out, and a result's CPU came out negative).
func TestUsageCountsAReapedScript(t *testing.T) {
	p, err := startNode("/bin/sh", t.TempDir(), "-c", []byte(`i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done`), false)
	require.NoError(t, err)
	<-p.exited
	script := p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
	require.Positive(t, script)
	self, err := bench.SelfUsage()
	require.NoError(t, err)
	u, err := (&nodeClient{p: p}).usage()
	require.NoError(t, err)
	require.GreaterOrEqual(t, u.CPU.Total(), self.CPU.Total()+script)
}
