// Command sessions is the original fero's most basic example: a
// distributed sessions cache. Every node of the resource "sessions" holds
// a full copy of it, so any node reads any session locally; a write goes
// to the owner of the session's partition, which commits it and fans it
// out to every copy.
//
// By default it runs the whole demo in this process: three server nodes
// and one client node (a client owns no partition but keeps a copy),
// joined by real gossip on loopback. The client and a server write
// sessions, every node reads them from its own copy, a third node deletes
// one, and every node sees that too.
//
//	go run ./examples/sessions
//
// With -serve it runs one long-lived server node instead, which prints
// every change its copy applies and puts a session for each user name
// typed on stdin. Start one, then join it from another terminal with the
// gossip address it prints, and type names in either:
//
//	go run ./examples/sessions -serve
//	go run ./examples/sessions -serve -seed 127.0.0.1:PORT
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fero-go/fero/pkg/fero"
)

// Session is one login session, stored under its token.
type Session struct {
	User    string    `msgpack:"user"`
	Created time.Time `msgpack:"created"`
	Expires time.Time `msgpack:"expires"`
}

// sessionTTL is how long a new session lasts.
const sessionTTL = time.Hour

// demoTimeout bounds the whole demo: every wait below ends with it.
const demoTimeout = 30 * time.Second

func main() {
	serve := flag.Bool("serve", false, "run one long-lived server node instead of the demo")
	seed := flag.String("seed", "", "gossip address, host:port, of a node to join (with -serve)")
	bind := flag.String("bind", "127.0.0.1:0", "gossip address to listen on (with -serve)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var err error
	if *serve {
		err = runServe(ctx, os.Stdout, os.Stdin, *bind, *seed)
	} else {
		ctx, cancel := context.WithTimeout(ctx, demoTimeout)
		defer cancel()
		_, err = runDemo(ctx, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sessions:", err)
		os.Exit(1)
	}
}

// node is one open node of the demo, with the name it prints.
type node struct {
	name     string
	sessions *fero.Map[Session]
}

// runDemo runs three servers and a client in this process, writes and
// deletes sessions, and returns what each node's copy holds at the end,
// by node name. It prints a transcript to w.
func runDemo(ctx context.Context, w io.Writer) (views map[string]map[string]Session, err error) {
	var nodes []node
	byName := map[string]*fero.Map[Session]{}
	defer func() {
		for _, n := range slices.Backward(nodes) {
			if cerr := n.sessions.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("close %s: %w", n.name, cerr))
			}
		}
	}()

	// The first node binds a free loopback port; the others join it.
	seed := ""
	for _, name := range []string{"server-1", "server-2", "server-3", "client"} {
		opts := nodeOptions(name, "127.0.0.1:0", seed)
		if name == "client" {
			opts = append(opts, fero.Client())
		}
		m, err := fero.OpenMap[Session](ctx, "sessions", opts...)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", name, err)
		}
		nodes = append(nodes, node{name, m})
		byName[name] = m
		if seed == "" {
			seed = m.Resource().GossipAddr()
		}
		fmt.Fprintf(w, "%-8s gossip %s\n", name, m.Resource().GossipAddr())
	}

	// Writing before a node routes by the whole cluster's map would only
	// send the write to a node that is about to hand the partition over.
	start := time.Now()
	for _, n := range nodes {
		if err := n.sessions.Resource().WaitServers(ctx, 3); err != nil {
			return nil, fmt.Errorf("%s: %w", n.name, err)
		}
	}
	fmt.Fprintf(w, "every node routes by the 3 servers after %v\n\n", time.Since(start).Round(time.Millisecond))

	tokens := map[string]string{} // user → token
	for _, put := range []struct{ via, user string }{
		{"client", "alice"}, {"server-1", "bob"}, {"server-2", "carol"},
	} {
		token, err := login(ctx, byName[put.via], put.user)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", put.via, err)
		}
		tokens[put.user] = token
		fmt.Fprintf(w, "%-8s puts session %s for %s\n", put.via, token, put.user)
	}
	if err := converge(ctx, nodes, 3); err != nil {
		return nil, err
	}
	fmt.Fprintln(w, "\nwhat each node reads from its own copy:")
	printViews(w, nodes)

	if err := retry(ctx, func() error {
		return byName["server-3"].Delete(ctx, tokens["bob"], fero.Majority)
	}); err != nil {
		return nil, fmt.Errorf("server-3: delete bob's session: %w", err)
	}
	fmt.Fprintf(w, "\n%-8s deletes bob's session %s\n", "server-3", tokens["bob"])
	if err := converge(ctx, nodes, 2); err != nil {
		return nil, err
	}
	fmt.Fprintln(w, "\nwhat each node reads from its own copy:")
	printViews(w, nodes)

	views = make(map[string]map[string]Session, len(nodes))
	for _, n := range nodes {
		views[n.name] = n.sessions.Snapshot()
	}
	return views, nil
}

// nodeOptions configures a node for one machine: loopback gossip timings,
// no multicast discovery, and seed (if any) as the node to join.
func nodeOptions(id, bind, seed string) []fero.NodeOption {
	opts := []fero.NodeOption{
		fero.WithID(id),
		fero.WithPreset(fero.PresetLocal),
		fero.WithoutMulticast(),
		fero.WithBind(bind),
	}
	if seed != "" {
		opts = append(opts, fero.WithSeeds(seed))
	}
	return opts
}

// login creates a session for user through m and returns its token.
func login(ctx context.Context, m *fero.Map[Session], user string) (string, error) {
	token := newToken()
	now := time.Now().UTC().Truncate(time.Second)
	s := Session{User: user, Created: now, Expires: now.Add(sessionTTL)}
	// Majority: the session survives the loss of its owner once Put
	// returns. The other copies, the client's included, apply it a moment
	// later; converge waits for that.
	if err := retry(ctx, func() error { return m.Put(ctx, token, s, fero.Majority) }); err != nil {
		return "", fmt.Errorf("put session for %s: %w", user, err)
	}
	return token, nil
}

// newToken returns a random session token of 80 bits. Its base32
// alphabet has no '.', so the token is a valid top-level key.
func newToken() string {
	return rand.Text()[:16]
}

// converge waits until every node holds n sessions and the same state.
func converge(ctx context.Context, nodes []node, n int) error {
	err := waitUntil(ctx, func() bool {
		digest := nodes[0].sessions.Resource().Digest()
		for _, nd := range nodes {
			if nd.sessions.Len() != n || nd.sessions.Resource().Digest() != digest {
				return false
			}
		}
		return true
	})
	if err != nil {
		var have []string
		for _, nd := range nodes {
			have = append(have, fmt.Sprintf("%s has %d", nd.name, nd.sessions.Len()))
		}
		return fmt.Errorf("waiting for every node to hold %d sessions (%s): %w", n, strings.Join(have, ", "), err)
	}
	return nil
}

// printViews prints the sessions each node reads from its local copy.
func printViews(w io.Writer, nodes []node) {
	for _, n := range nodes {
		all := n.sessions.Snapshot()
		var users []string
		for token, s := range all {
			users = append(users, fmt.Sprintf("%s (%s)", s.User, token))
		}
		slices.Sort(users)
		fmt.Fprintf(w, "  %-8s %d sessions: %s\n", n.name, len(all), strings.Join(users, ", "))
	}
}

// runServe runs one server node until ctx ends: it prints its addresses
// and every change its copy applies, and puts a session for each user name
// read from in.
func runServe(ctx context.Context, w io.Writer, in io.Reader, bind, seed string) error {
	sessions, err := fero.OpenMap[Session](ctx, "sessions", nodeOptions("", bind, seed)...)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer sessions.Close()
	r := sessions.Resource()
	fmt.Fprintf(w, "node %s: gossip %s, data %s\n", r.ID(), r.GossipAddr(), r.Addr())
	fmt.Fprintf(w, "join it with: go run ./examples/sessions -serve -seed %s\n", r.GossipAddr())
	fmt.Fprintln(w, "type a user name to put a session for it; Ctrl-C to stop")

	go func() {
		lines := bufio.NewScanner(in)
		for lines.Scan() {
			user := strings.TrimSpace(lines.Text())
			if user == "" {
				continue
			}
			wctx, cancel := context.WithTimeout(ctx, demoTimeout)
			if _, err := login(wctx, sessions, user); err != nil {
				fmt.Fprintln(w, "error:", err)
			}
			cancel()
		}
	}()

	for c := range sessions.Changes(ctx) {
		var s Session
		switch {
		case c.Type == fero.Remove:
			fmt.Fprintf(w, "%s %s\n", c.Type, c.Key)
		case c.Decode(&s) == nil:
			fmt.Fprintf(w, "%s %s: %s until %s\n", c.Type, c.Key, s.User, s.Expires.Local().Format(time.Kitchen))
		default:
			fmt.Fprintln(w, c)
		}
	}
	return nil
}

// retry runs write until it succeeds, fails for a reason that is not
// transient (see retryable), or ctx ends. A node answers Unavailable while
// the cluster settles: an owner that just gained a partition syncs it with
// the other copies first, and a node that has not yet seen a quorum of
// servers refuses writes.
func retry(ctx context.Context, write func() error) error {
	for {
		err := write()
		if err == nil || !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitUntil polls cond until it holds or ctx ends.
func waitUntil(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// retryable reports whether err says "not now" (CodeUnavailable): an
// owner syncing after a membership change, or no owner yet.
func retryable(err error) bool { return fero.CodeOf(err) == fero.CodeUnavailable }
