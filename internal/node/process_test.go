package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/ring"
)

const childEnv = "FERO_NODE_TEST_CHILD" // "id seed": run as a server node

// runChild runs a server node until it is killed or its stdin closes,
// printing "ready <gossip>" once, then "state <len> <digest>" whenever its
// copy changes.
func runChild(spec string) int {
	id, seed, _ := strings.Cut(spec, " ")
	n, err := Start(context.Background(), processConfig(id, false, seed))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer n.Close()
	fmt.Printf("ready %s\n", n.Membership().Local().Gossip)
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString(0) // returns when stdin closes
		n.Close()
		os.Exit(0)
	}()
	last := ""
	for {
		s := fmt.Sprintf("state %d %016x", n.Store().Len(), n.Store().Digest())
		if s != last {
			fmt.Println(s)
			last = s
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processConfig is a node on real loopback sockets, gossip included, with
// failure detection tuned for a test.
func processConfig(id string, client bool, seed string) Config {
	var seeds []string
	if seed != "" {
		seeds = []string{seed}
	}
	return Config{
		ID: id, Resource: "proc", Client: client,
		Membership: []membership.Option{
			membership.WithBind("127.0.0.1:0"), membership.WithPreset(membership.PresetLocal),
			membership.WithoutMulticast(), membership.WithSeeds(seeds...), membership.WithLeaveTimeout(time.Second),
		},
		Ring: []ring.Option{ring.WithPartitions(64)},
		Tick: 20 * time.Millisecond,
	}
}

type childNode struct {
	id     string
	cmd    *exec.Cmd
	gossip string
	mu     sync.Mutex
	state  string // last "state …" line
}

func (c *childNode) lastState() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

func startChild(t *testing.T, id, seed string) *childNode {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), childEnv+"="+id+" "+seed)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &childNode{id: id, cmd: cmd}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	out := bufio.NewScanner(stdout)
	require.True(t, out.Scan(), "child %s exited before it was ready", id)
	c.gossip = strings.TrimPrefix(out.Text(), "ready ")
	go func() {
		for out.Scan() {
			c.mu.Lock()
			c.state = out.Text()
			c.mu.Unlock()
		}
	}()
	return c
}

// TestProcessesJoinAndSIGKILL: three server processes and an in-process
// client; majority-acked writes stream from the client while a fourth
// process joins and the second is killed with SIGKILL. Afterwards every
// surviving process holds exactly the client's state, which holds every
// acked write.
func TestProcessesJoinAndSIGKILL(t *testing.T) {
	first := startChild(t, "p0", "")
	children := []*childNode{first, startChild(t, "p1", first.gossip), startChild(t, "p2", first.gossip)}
	cl, err := Start(ctxT(t), processConfig("client", true, first.gossip))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	require.Eventually(t, func() bool { m := cl.Map(); return m != nil && len(m.Members()) == 3 }, 30*time.Second, 20*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var b doc.Builder
	acked := map[string]int{}
	const total = 2000
	for i := 0; i < total; i++ {
		switch i {
		case total / 3:
			children = append(children, startChild(t, "p3", first.gossip))
		case 2 * total / 3:
			require.NoError(t, children[1].cmd.Process.Signal(syscall.SIGKILL))
			t.Logf("killed p1 (pid %d) after %d writes", children[1].cmd.Process.Pid, i)
		}
		key := fmt.Sprintf("k%d", i%500)
		c, err := b.Update(key, i)
		require.NoError(t, err)
		require.NoError(t, write(ctx, cl, c, partition.WaitMajority), "write %d", i)
		acked[key] = i
	}
	for key, want := range acked {
		var got int
		ok, err := cl.Store().GetInto(key, &got)
		require.NoError(t, err)
		require.True(t, ok && got == want, "client: %s = %d (present %v), want %d", key, got, ok, want)
	}
	want := fmt.Sprintf("state %d %016x", cl.Store().Len(), cl.Store().Digest())
	survivors := []*childNode{children[0], children[2], children[3]}
	assert.Eventually(t, func() bool {
		for _, c := range survivors {
			if c.lastState() != want {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "want %q; p0 %q, p2 %q, p3 %q", want,
		survivors[0].lastState(), survivors[1].lastState(), survivors[2].lastState())
}
