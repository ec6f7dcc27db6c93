package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// childEnv makes the test binary run fero's main with its arguments, so
// the test can start real `fero serve` processes.
const childEnv = "FERO_CLI_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Args = append([]string{"fero"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type server struct {
	first  string // the first line it printed
	cmd    *exec.Cmd
	gossip string
	data   string
	out    *bufio.Scanner
}

// serve starts `fero serve` as a separate process and returns once it
// printed its addresses. Without --data-dir or --client it passes
// --in-memory, so a test leaves no data directory behind.
func serve(t *testing.T, args ...string) *server {
	t.Helper()
	if !slices.ContainsFunc(args, func(a string) bool {
		return strings.HasPrefix(a, "--data-dir") || strings.HasPrefix(a, "--client") || strings.HasPrefix(a, "--in-memory")
	}) {
		args = append(args, "--in-memory")
	}
	return serveIn(t, "", args...)
}

// serveIn is serve without the default --in-memory, run in directory dir
// ("" for the test's own).
func serveIn(t *testing.T, dir string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	s := &server{cmd: cmd, out: bufio.NewScanner(stdout)}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.True(t, s.out.Scan(), "fero serve printed nothing")
	// fero: node <id> of "<resource>": gossip <addr> data <addr>
	s.first = s.out.Text()
	f := strings.Fields(s.first)
	require.Len(t, f, 9, "first line: %q", s.out.Text())
	s.gossip, s.data = f[6], f[8]
	return s
}

// stop interrupts the server, which leaves the cluster and exits 0.
func (s *server) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGINT))
	var lines []string
	for s.out.Scan() {
		lines = append(lines, s.out.Text())
	}
	require.NoError(t, s.cmd.Wait())
	require.NotEmpty(t, lines)
	assert.Contains(t, lines[len(lines)-1], "left in")
}

// run runs one fero command in this process and returns its stdout.
func run(ctx context.Context, args ...string) (string, error) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// TestCLIAgainstRealCluster: three `fero serve` processes form a cluster;
// put, get, rm, tail and status work through any of them.
func TestCLIAgainstRealCluster(t *testing.T) {
	a := serve(t, "users", "--id", "n1", "--partitions", "31")
	b := serve(t, "users", "--id", "n2", "--partitions", "31", "--seeds", a.gossip)
	c := serve(t, "users", "--id", "n3", "--partitions", "31", "--seeds", a.gossip, "--wait-servers", "3")
	require.True(t, c.out.Scan())
	assert.Contains(t, c.out.Text(), "sees 3 servers")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The status of each node shows all three servers owning everything.
	require.Eventually(t, func() bool {
		for _, s := range []*server{a, b, c} {
			out, err := run(ctx, "status", "--addr", s.data, "--json")
			if err != nil {
				return false
			}
			var st struct {
				Members []struct {
					Owned int `json:"owned"`
				} `json:"members"`
			}
			if json.Unmarshal([]byte(out), &st) != nil || len(st.Members) != 3 {
				return false
			}
			owned := 0
			for _, m := range st.Members {
				owned += m.Owned
			}
			if owned != 31 {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond)

	tailCtx, stopTail := context.WithCancel(ctx)
	tailed := make(chan string, 1)
	go func() {
		out, _ := run(tailCtx, "tail", "--addr", c.data, "--count", "3")
		tailed <- out
	}()

	// Write through one node, read through the others.
	for i := range 10 {
		_, err := run(ctx, "put", "--addr", a.data, fmt.Sprint("user", i), fmt.Sprintf(`{"n":%d}`, i))
		require.NoError(t, err)
	}
	for i := range 10 {
		out, err := run(ctx, "get", "--addr", b.data, fmt.Sprint("user", i))
		require.NoError(t, err)
		assert.JSONEq(t, fmt.Sprintf(`{"n":%d}`, i), out)
	}
	_, err := run(ctx, "put", "--addr", c.data, "user1.tags.-", "admin")
	require.NoError(t, err)
	for _, w := range []string{"none", "ack", "majority", "replicas=2"} {
		_, err = run(ctx, "put", "--addr", a.data, "--wait", w, "waited", `"`+w+`"`)
		require.NoError(t, err, "--wait %s", w)
	}
	_, err = run(ctx, "put", "--addr", a.data, "--wait", "replicas=3", "waited", "1")
	require.ErrorContains(t, err, "more replica acks asked than the replica group has")
	_, err = run(ctx, "rm", "--addr", a.data, "--wait", "sometimes", "waited")
	require.ErrorContains(t, err, "--wait")
	_, err = run(ctx, "rm", "--addr", a.data, "--wait", "majority", "waited")
	require.NoError(t, err)
	out, err := run(ctx, "get", "--addr", a.data, "user1")
	require.NoError(t, err)
	assert.JSONEq(t, `{"n":1,"tags":["admin"]}`, out)
	_, err = run(ctx, "put", "--add", "--addr", b.data, "user2", "1")
	assert.ErrorContains(t, err, "already exists")
	_, err = run(ctx, "rm", "--addr", c.data, "user3")
	require.NoError(t, err)
	_, err = run(ctx, "get", "--addr", a.data, "user3")
	assert.ErrorContains(t, err, "not found")

	select {
	case out := <-tailed:
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 3, "tail output: %q", out)
		// The tail may subscribe after the first writes: any three of
		// them, in order, as n3 applied them.
		for _, l := range lines {
			var ch map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &ch))
			assert.Contains(t, []any{"UPDATE", "ADD", "REMOVE"}, ch["type"], l)
			assert.True(t, strings.HasPrefix(fmt.Sprint(ch["key"]), "user"), l)
			assert.NotZero(t, ch["offset"], l)
			if ch["type"] == "UPDATE" {
				assert.NotNil(t, ch["value"], "an update's value, decoded: %s", l)
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("tail printed nothing")
	}
	stopTail()

	// Every node holds the same copy, and every server has taken its vote
	// and is known to the others as a voter (a newcomer is a learner until
	// it has caught up).
	digests := map[string]bool{}
	require.Eventually(t, func() bool {
		clear(digests)
		for _, s := range []*server{a, b, c} {
			out, err := run(ctx, "status", "--addr", s.data, "--json")
			if err != nil {
				return false
			}
			var st struct {
				Keys          int    `json:"keys"`
				Digest        uint64 `json:"digest"`
				Voting        bool   `json:"voting"`
				Configuration []struct {
					Forgotten bool `json:"forgotten"`
				} `json:"configuration"`
			}
			if json.Unmarshal([]byte(out), &st) != nil || st.Keys != 9 || !st.Voting || len(st.Configuration) != 3 {
				return false
			}
			digests[fmt.Sprint(st.Digest)] = true
		}
		return len(digests) == 1
	}, 20*time.Second, 50*time.Millisecond)

	text, err := run(ctx, "status", "--addr", a.data)
	require.NoError(t, err)
	assert.Contains(t, text, "MEMBER")
	assert.Contains(t, text, "n3")
	assert.Contains(t, text, "up, opened by", "each peer's data connection")
	assert.Contains(t, text, "configuration: 3 servers (n1, n2, n3), a quorum is 2")

	// forget refuses a live server, and an ID the node never heard of
	// (a typo) unless --unknown says so (a peer may list it).
	_, err = run(ctx, "forget", "--addr", a.data, "n2")
	assert.ErrorContains(t, err, "cannot forget a live server")
	text, err = run(ctx, "forget", "--addr", a.data, "n9")
	require.Error(t, err, "forget of an unknown ID fails: %s", text)
	assert.ErrorContains(t, err, "n9: not a server node n1 knows (its servers: n1, n2, n3)")
	text, err = run(ctx, "forget", "--addr", a.data, "n9", "--unknown")
	require.NoError(t, err)
	assert.Contains(t, text, "forgot n9")

	_, err = run(ctx, "get", "k")
	if os.Getenv("FERO_ADDR") == "" {
		assert.ErrorContains(t, err, "--addr")
	}
	for _, s := range []*server{c, b, a} {
		s.stop(t)
	}
}
