// Command echo is the quick-start demo of fero's message layer: it starts
// three node processes on loopback. Each node serves calls, dials the
// other two over one multiplexed connection each, and reports what it
// measured: sequential round trips, a burst of pipelined calls and a
// stream of one-way messages confirmed by a final call.
//
//	go run ./examples/echo
//	go run ./examples/echo -nodes 5 -calls 20000
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fero-go/fero/examples/internal/procs"
	"github.com/fero-go/fero/internal/transport"
)

const (
	opEcho  uint32 = 1 // answers with the payload
	opCount uint32 = 2 // one-way: counted
	opTotal uint32 = 3 // answers with the count so far
)

func main() {
	node := flag.Bool("node", false, "run as one node (the demo starts these itself)")
	nodes := flag.Int("nodes", 3, "node processes to start")
	calls := flag.Int("calls", 10000, "calls of each kind from every node to every other")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if *node {
		err = runNode(ctx, *calls)
	} else {
		err = runDemo(ctx, *nodes, *calls)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}

// runDemo starts the nodes, tells each the others' addresses and relays
// their reports.
func runDemo(ctx context.Context, n, calls int) error {
	if n < 2 {
		return fmt.Errorf("need at least 2 nodes, got %d", n)
	}
	fmt.Printf("starting %d node processes on 127.0.0.1\n", n)
	children := make([]*procs.Child, 0, n)
	defer func() {
		for _, c := range children {
			c.Stop() // a node exits when its stdin closes
		}
	}()
	addrs := make([]string, n)
	for i := 0; i < n; i++ {
		c, err := procs.Start(ctx, "-node", "-calls", fmt.Sprint(calls))
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		children = append(children, c)
		addrs[i] = strings.TrimPrefix(c.First, "listening ")
		fmt.Printf("  node %d (pid %d) listening on %s\n", i, c.Cmd.Process.Pid, addrs[i])
	}
	for i, c := range children {
		if err := c.Send(fmt.Sprintf("%d\n%s", i, strings.Join(addrs, " "))); err != nil {
			return err
		}
	}
	fmt.Printf("each node calls every other: %d round trips, %d pipelined calls, %d one-way messages of 100 bytes\n", calls, calls, calls)
	if procs.Relay(children, func(i int) string { return fmt.Sprintf("node %d", i) }) {
		return fmt.Errorf("some calls failed")
	}
	return nil
}

// runNode serves, then calls every other node once it learns where they
// are, prints what it measured and exits after all nodes are done.
func runNode(ctx context.Context, calls int) error {
	var count atomic.Uint64
	mux := transport.NewMux()
	mux.HandleFunc(opEcho, func(r *transport.Request) { _ = r.Reply(r.Payload()) })
	mux.HandleFunc(opCount, func(*transport.Request) { count.Add(1) })
	mux.HandleFunc(opTotal, func(r *transport.Request) {
		_ = r.Reply(binary.BigEndian.AppendUint64(nil, count.Load()))
	})
	srv, err := transport.Listen("127.0.0.1:0", mux)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Printf("listening %s\n", srv.Addr())

	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return fmt.Errorf("no index on stdin")
	}
	me, err := strconv.Atoi(in.Text())
	if err != nil {
		return fmt.Errorf("bad index on stdin: %w", err)
	}
	if !in.Scan() {
		return fmt.Errorf("no peer list on stdin")
	}
	addrs := strings.Fields(in.Text())

	var wg sync.WaitGroup
	reports := make([]string, len(addrs))
	for i, addr := range addrs {
		if i == me {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := exercise(ctx, addr, calls)
			if err != nil {
				reports[i] = fmt.Sprintf("error: → node %d: %v", i, err)
				return
			}
			reports[i] = fmt.Sprintf("→ node %d: %s", i, r)
		}()
	}
	wg.Wait()
	for _, r := range reports {
		if r != "" {
			fmt.Println(r)
		}
	}
	fmt.Println("done")
	// Keep serving until the demo closes our stdin: the others may still
	// be calling us.
	for in.Scan() {
	}
	return nil
}

// exercise runs the three kinds of traffic against one peer.
func exercise(ctx context.Context, addr string, calls int) (string, error) {
	p, err := transport.Dial(ctx, addr)
	if err != nil {
		return "", err
	}
	defer p.Close()
	payload := make([]byte, 100)

	rtts := make([]time.Duration, 0, calls)
	for i := 0; i < calls; i++ {
		t := time.Now()
		if _, err := p.Call(ctx, opEcho, payload); err != nil {
			return "", err
		}
		rtts = append(rtts, time.Since(t))
	}
	slices.Sort(rtts)
	pct := func(q float64) time.Duration { return rtts[int(q*float64(len(rtts)-1))] }

	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	wg.Add(calls)
	for i := 0; i < calls; i++ {
		err := p.Go(ctx, opEcho, payload, func(_ []byte, err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		})
		if err != nil {
			return "", err
		}
	}
	wg.Wait()
	pipelined := time.Since(start)
	if failed.Load() > 0 {
		return "", fmt.Errorf("%d pipelined calls failed", failed.Load())
	}

	start = time.Now()
	for i := 0; i < calls; i++ {
		if err := p.Send(ctx, opCount, payload); err != nil {
			return "", err
		}
	}
	// Calls on one connection are handled in order: once this returns the
	// peer has handled every message sent before it.
	if _, err := p.Call(ctx, opTotal, nil); err != nil {
		return "", err
	}
	oneway := time.Since(start)
	return fmt.Sprintf("round trip p50 %v p99 %v · %d pipelined calls in %v · %d one-way messages in %v",
		pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond),
		calls, pipelined.Round(time.Microsecond), calls, oneway.Round(time.Microsecond)), nil
}
