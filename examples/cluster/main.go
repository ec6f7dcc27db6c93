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
	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/node"
	"github.com/fero-go/fero/internal/partition"
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
	var seeds []string
	if seed != "" {
		seeds = []string{seed}
	}
	n, err := node.Start(ctx, node.Config{
		ID: id, Resource: "users",
		Membership: []membership.Option{
			membership.WithBind("127.0.0.1:0"), membership.WithPreset(membership.PresetLocal),
			membership.WithoutMulticast(), membership.WithSeeds(seeds...),
		},
	})
	if err != nil {
		return err
	}
	defer n.Close()
	fmt.Printf("gossip %s data %s\n", n.Membership().Local().Gossip, n.Addr())

	report := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	start := time.Now()
	if err := waitFor(ctx, 30*time.Second, func() bool {
		m := n.Map()
		return m != nil && len(m.Members()) == nodes
	}); err != nil {
		report("error: never saw all %d nodes: %v", nodes, err)
		return nil
	}
	m := n.Map()
	report("sees %d servers after %v; owns %d of %d partitions", nodes, time.Since(start).Round(time.Millisecond), len(m.Owned(id)), m.Partitions())

	if id == "node-0" {
		var b doc.Builder
		t := time.Now()
		for i := 0; i < keys; i++ {
			c, err := b.Update(fmt.Sprintf("user%d", i), map[string]any{"name": fmt.Sprintf("user %d", i), "logins": i})
			if err != nil {
				return err
			}
			if err := writeRetrying(ctx, n, c); err != nil {
				report("error: write %d: %v", i, err)
				return nil
			}
		}
		report("wrote %d keys, each acknowledged by a majority of its replicas, in %v", keys, time.Since(t).Round(time.Millisecond))
	}
	if err := waitFor(ctx, 30*time.Second, func() bool { return n.Store().Len() == keys }); err != nil {
		report("error: holds %d of %d keys: %v", n.Store().Len(), keys, err)
		return nil
	}
	v, _ := n.Store().Get("user7.name")
	report("holds all %d keys (digest %016x); reads user7.name = %q locally", keys, n.Store().Digest(), v)
	fmt.Println("done")
	// Serve until the demo closes stdin: other nodes may still sync.
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// writeRetrying writes with a majority ack, retrying while ownership
// settles (owners syncing after a join answer Unavailable).
func writeRetrying(ctx context.Context, n *node.Node, c doc.Change) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		_, err := n.Write(ctx, c, partition.WaitMajority, 0)
		if err == nil || errs.CodeOf(err) != errs.Unavailable {
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
