package workload

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/chaos/check"
	"github.com/fero-go/fero/internal/chaos/history"
)

// server is one `fero serve` process.
type server struct {
	id, gossip string
	cmd        *exec.Cmd
	done       chan struct{}
}

var addrLine = regexp.MustCompile(`^fero: node (\S+) of "[^"]*": gossip (\S+) data (\S+)$`)

func buildFero(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "fero")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/fero-go/fero/cmd/fero").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// startServer starts a server and waits for its address line; its log goes
// to dir/<id>.log.
func startServer(t *testing.T, bin, dir, id, seed string) *server {
	args := []string{"serve", "smoke", "--id", id, "--preset", "lan", "--multicast=false",
		"--listen", "127.0.0.1:0", "--bind", "127.0.0.1:0", "--log-level", "info", "--in-memory"}
	if seed != "" {
		args = append(args, "--seeds", seed)
	}
	cmd := exec.Command(bin, args...)
	logf, err := os.Create(filepath.Join(dir, id+".log"))
	require.NoError(t, err)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	s := &server{id: id, cmd: cmd, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-s.done
		}
	})
	select {
	case l := <-lines:
		m := addrLine.FindStringSubmatch(l)
		require.NotNil(t, m, "address line: %q", l)
		s.gossip = m[2]
	case <-s.done:
		t.Fatalf("%s exited before printing its address", id)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s printed no address in 30s", id)
	}
	return s
}

// smoke runs two workload processes' worth of clients against three
// servers for d, calling fault (if any) a third of the way in, and returns
// the checkers' report.
func smoke(t *testing.T, d time.Duration, fault func(servers []*server)) check.Report {
	return smokeKind(t, history.Register, d, fault)
}

// smokeKind runs two clients of workload kind against three servers for
// d, with fault (if any) a third of the way in, and checks the histories.
func smokeKind(t *testing.T, kind string, d time.Duration, fault func(servers []*server)) check.Report {
	if testing.Short() {
		t.Skip("starts three fero processes and runs for several seconds")
	}
	dir := os.Getenv("FERO_CHAOS_DIR") // keep the files to look at them
	if dir == "" {
		dir = t.TempDir()
	}
	bin := buildFero(t)
	first := startServer(t, bin, dir, "s1", "")
	servers := []*server{first, startServer(t, bin, dir, "s2", first.gossip), startServer(t, bin, dir, "s3", first.gossip)}

	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+2*time.Minute)
	defer cancel()
	var wg, opsDone sync.WaitGroup
	errs := make([]error, 2)
	pws := make([]*io.PipeWriter, len(errs))
	for i := range errs {
		pr, pw := io.Pipe()
		pws[i] = pw
		opsDone.Add(1)
		var once sync.Once
		cfg := Config{
			Resource: "smoke", Kind: kind, Seeds: []string{first.gossip}, Bind: "127.0.0.1:0", Listen: "127.0.0.1:0",
			ID: fmt.Sprintf("c%d", i+1), Proc: i + 1, Keys: keys, Rate: 60, Duration: d, Seed: 1,
			Out: filepath.Join(dir, fmt.Sprintf("p%d%s", i+1, history.HistorySuffix)), Servers: 3, Stdin: pr,
			OpsDone: func() { once.Do(opsDone.Done) },
		}
		wg.Go(func() {
			errs[i] = Run(ctx, cfg)
			once.Do(opsDone.Done) // Run failed before its operations ended
		})
	}
	// There is nothing to heal: once every client has made its last
	// operation, each writes its final line as soon as its copy agrees
	// with the owners.
	go func() {
		opsDone.Wait()
		for _, pw := range pws {
			pw.Close()
		}
	}()
	if fault != nil {
		select {
		case <-time.After(d / 3):
			fault(servers)
		case <-ctx.Done():
		}
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	rep, err := check.Run(dir)
	require.NoError(t, err)
	t.Logf("files in %s\n%s", dir, rep)
	return rep
}

// TestSmoke: with no fault, the checkers find nothing.
func TestSmoke(t *testing.T) {
	rep := smoke(t, 10*time.Second, nil)
	require.True(t, rep.Passed(), "%s", rep)
	require.Greater(t, rep.OK, 500)
	require.Zero(t, rep.Unknown)
}

// TestSmokeCASAndSet: the cas and set workloads, with no fault, pass
// their checkers.
func TestSmokeCASAndSet(t *testing.T) {
	for _, kind := range []string{history.CAS, history.Set} {
		t.Run(kind, func(t *testing.T) {
			rep := smokeKind(t, kind, 5*time.Second, nil)
			require.Equal(t, kind, rep.Workload)
			require.True(t, rep.Passed(), "%s", rep)
			require.Greater(t, rep.OK, 200)
		})
	}
}

// The fault variants report what fero does today (issue 16), which is
// not yet what it promises: set FERO_CHAOS_SMOKE_FAULTS=1 to run them.
func faultVariant(t *testing.T) {
	if os.Getenv("FERO_CHAOS_SMOKE_FAULTS") == "" {
		t.Skip("set FERO_CHAOS_SMOKE_FAULTS=1")
	}
}

// TestSmokeSIGKILL kills one server a third of the way in.
func TestSmokeSIGKILL(t *testing.T) {
	faultVariant(t)
	rep := smoke(t, 20*time.Second, func(servers []*server) {
		require.NoError(t, servers[1].cmd.Process.Signal(syscall.SIGKILL))
		t.Logf("killed s2 (pid %d)", servers[1].cmd.Process.Pid)
	})
	require.True(t, rep.Passed(), "%s", rep)
}

// TestSmokeSIGSTOP pauses one server past gossip's dead timeout, then lets
// it go on: the paused-owner case.
func TestSmokeSIGSTOP(t *testing.T) {
	faultVariant(t)
	rep := smoke(t, 45*time.Second, func(servers []*server) {
		p := servers[1].cmd.Process
		require.NoError(t, p.Signal(syscall.SIGSTOP))
		t.Logf("paused s2 (pid %d)", p.Pid)
		time.Sleep(20 * time.Second) // the fault's length, not a wait for a condition
		require.NoError(t, p.Signal(syscall.SIGCONT))
		t.Logf("resumed s2")
	})
	require.True(t, rep.Passed(), "%s", rep)
}
