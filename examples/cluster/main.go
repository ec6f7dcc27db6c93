// Command cluster is the quick-start demo of a fero cluster: it starts
// three server processes on this machine. They find each other by gossip
// on loopback, agree on who owns each of the resource's partitions, and
// replicate every commit to every copy. One node writes; every node then
// holds the same state, which each reads locally.
//
//	go run ./examples/cluster          # or: make demo
//	go run ./examples/cluster -nodes 5 -keys 1000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if *child {
		err = runNode(ctx, *id, *seed, *nodes, *keys)
	} else {
		err = runDemo(ctx, *nodes, *keys)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// runDemo starts the nodes, each joining the first, and relays what they
// report until each says it is done.
func runDemo(ctx context.Context, n, keys int) error {
	if n < 1 {
		return fmt.Errorf("need at least 1 node, got %d", n)
	}
	fmt.Printf("starting %d fero server processes for resource \"users\" on 127.0.0.1\n", n)
	var children []*procs.Child
	defer func() {
		for _, c := range children {
			c.Stop() // a node leaves the cluster when its stdin closes
		}
	}()
	seed := ""
	for i := 0; i < n; i++ {
		args := []string{"-node", "-id", fmt.Sprintf("node-%d", i), "-nodes", strconv.Itoa(n), "-keys", strconv.Itoa(keys)}
		if seed != "" {
			args = append(args, "-seed", seed)
		}
		c, err := procs.Start(ctx, args...)
		if err != nil {
			return fmt.Errorf("node-%d: %w", i, err)
		}
		children = append(children, c)
		f := strings.Fields(c.First) // "gossip <addr> data <addr>"
		if len(f) != 4 {
			return fmt.Errorf("node-%d: unexpected first line %q", i, c.First)
		}
		if seed == "" {
			seed = f[1]
		}
		fmt.Printf("  node-%d (pid %d): gossip %s, data %s\n", i, c.Cmd.Process.Pid, f[1], f[3])
	}
	if procs.Relay(children, func(i int) string { return fmt.Sprintf("node-%d:", i) }) {
		return fmt.Errorf("a node failed")
	}
	return nil
}

// runNode runs one server node: it waits until it sees every node, the
// first node writes, and every node waits until it holds every key.
func runNode(ctx context.Context, id, seed string, nodes, keys int) error {
	opts := []fero.Option{
		fero.WithID(id), fero.WithBind("127.0.0.1:0"), fero.WithPreset(fero.PresetLocal), fero.WithoutMulticast(),
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

	if id == "node-0" {
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
