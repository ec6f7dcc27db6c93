// Command cluster is the quick-start demo of a fero cluster: it starts
// three server processes on this machine, each keeping its partitions in
// a data directory. They find each other by gossip on loopback, agree on
// who owns each of the resource's partitions, and replicate every commit
// to every copy. One node writes; every node then holds the same state,
// which each reads locally. Then the demo kills all three with SIGKILL (a
// power cut) and starts them again on their directories: every write is
// still there.
//
//	go run ./examples/cluster          # or: make demo
//	go run ./examples/cluster -nodes 5 -keys 1000 -data /tmp/demo
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fero-go/fero/examples/internal/procs"
	"github.com/fero-go/fero/pkg/fero"
)

func main() {
	child := flag.Bool("node", false, "run as one node (the demo starts these itself)")
	id := flag.String("id", "", "node ID (with -node)")
	seed := flag.String("seed", "", "gossip address of a node to join (with -node)")
	nodes := flag.Int("nodes", 3, "server processes to start")
	keys := flag.Int("keys", 100, "keys the first node writes")
	data := flag.String("data", "", "directory for the nodes' data directories (default: a temporary one, removed at the end)")
	restarted := flag.Bool("restarted", false, "the node restarts on its data directory and writes nothing (with -node)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if *child {
		err = runNode(ctx, *id, *seed, *data, *nodes, *keys, *restarted)
	} else {
		err = runDemo(ctx, *nodes, *keys, *data)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// runDemo starts the nodes, each joining the first, and relays what they
// report until each says it is done; then it kills them all and starts
// them again on their data directories.
func runDemo(ctx context.Context, n, keys int, data string) error {
	if n < 1 {
		return fmt.Errorf("need at least 1 node, got %d", n)
	}
	if data == "" {
		tmp, err := os.MkdirTemp("", "fero-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		data = tmp
	}
	fmt.Printf("starting %d fero server processes for resource \"users\" on 127.0.0.1, data in %s\n", n, data)
	children, err := startNodes(ctx, n, keys, data, false)
	if err != nil {
		return err
	}
	if procs.Relay(children, func(i int) string { return fmt.Sprintf("node-%d:", i) }) {
		stopAll(children)
		return fmt.Errorf("a node failed")
	}
	fmt.Printf("killing all %d processes with SIGKILL (a power cut), then starting them again on their data directories\n", n)
	for _, c := range children {
		_ = c.Cmd.Process.Kill()
	}
	stopAll(children)
	if children, err = startNodes(ctx, n, keys, data, true); err != nil {
		return err
	}
	defer stopAll(children)
	if procs.Relay(children, func(i int) string { return fmt.Sprintf("node-%d:", i) }) {
		return fmt.Errorf("a node failed")
	}
	return nil
}

func stopAll(children []*procs.Child) {
	for _, c := range children {
		c.Stop() // a node leaves the cluster when its stdin closes
	}
}

// startNodes starts n nodes, each joining the first, on their data
// directories under data.
func startNodes(ctx context.Context, n, keys int, data string, restarted bool) (children []*procs.Child, err error) {
	defer func() {
		if err != nil {
			stopAll(children)
		}
	}()
	seed := ""
	for i := 0; i < n; i++ {
		args := []string{"-node", "-id", fmt.Sprintf("node-%d", i), "-nodes", strconv.Itoa(n), "-keys", strconv.Itoa(keys),
			"-data", filepath.Join(data, fmt.Sprintf("node-%d", i))}
		if seed != "" {
			args = append(args, "-seed", seed)
		}
		if restarted {
			args = append(args, "-restarted")
		}
		c, err := procs.Start(ctx, args...)
		if err != nil {
			return children, fmt.Errorf("node-%d: %w", i, err)
		}
		children = append(children, c)
		f := strings.Fields(c.First) // "gossip <addr> data <addr>"
		if len(f) != 4 {
			return children, fmt.Errorf("node-%d: unexpected first line %q", i, c.First)
		}
		if seed == "" {
			seed = f[1]
		}
		fmt.Printf("  node-%d (pid %d): gossip %s, data %s\n", i, c.Cmd.Process.Pid, f[1], f[3])
	}
	return children, nil
}

// runNode runs one server node: it waits until it sees every node, the
// first node writes, and every node waits until it holds every key.
func runNode(ctx context.Context, id, seed, data string, nodes, keys int, restarted bool) error {
	opts := []fero.NodeOption{
		fero.WithID(id), fero.WithBind("127.0.0.1:0"), fero.WithPreset(fero.PresetLocal), fero.WithoutMulticast(),
		fero.WithDataDir(data), // fsync per write group: an acknowledged write is on disk
	}
	if seed != "" {
		opts = append(opts, fero.WithSeeds(seed))
	}
	users, err := fero.Open(ctx, "users", opts...)
	if err != nil {
		return err
	}
	defer users.Close()
	fmt.Printf("gossip %s data %s\n", users.GossipAddr(), users.Addr())

	report := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := users.WaitServers(wctx, nodes); err != nil {
		report("error: %v", err)
		return nil
	}
	owned := 0
	for _, m := range users.Members() {
		if m.ID == id {
			owned = m.Owned
		}
	}
	report("sees %d servers after %v; owns %d partitions", nodes, time.Since(start).Round(time.Millisecond), owned)

	if restarted {
		report("restarted on its data directory; holds %d keys", users.Len())
	}
	if id == "node-0" && !restarted {
		t := time.Now()
		for i := 0; i < keys; i++ {
			user := map[string]any{"name": fmt.Sprintf("user %d", i), "logins": i}
			if err := writeRetrying(wctx, func() error { return users.Update(wctx, fmt.Sprintf("user%d", i), user, fero.Majority) }); err != nil {
				report("error: write %d: %v", i, err)
				return nil
			}
		}
		report("wrote %d keys, each acknowledged by a majority of its replicas, in %v", keys, time.Since(t).Round(time.Millisecond))
	}
	if err := waitFor(ctx, 30*time.Second, func() bool { return users.Len() == keys }); err != nil {
		report("error: holds %d of %d keys: %v", users.Len(), keys, err)
		return nil
	}
	v, _ := users.Get("user7.name")
	report("holds all %d keys (digest %016x); reads user7.name = %q locally", keys, users.Digest(), v)
	fmt.Println("done")
	// Serve until the demo closes stdin: other nodes may still sync.
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// writeRetrying retries a write while ownership settles (owners syncing
// after a join answer CodeUnavailable).
func writeRetrying(ctx context.Context, write func() error) error {
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

func waitFor(ctx context.Context, within time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}
