// Package origsut puts the original fero, the Node.js library that fero
// re-thinks (npm's fero@1.7.1), under the benchmark harness as a
// [bench.System], so that fero's figures can be quoted as ratios to the
// original's measured in the same run, on the same machine.
//
// What is measured: the stateful path with the original's default handler.
// Every record is cache.update("k<n>", value) on a client node: an UPDATE
// change record that the server (which owns every partition: there is one
// server) appends to its partition's log and applies to its copy, commits
// to every client, whose copy applies it, and answers. Keys cycle through
// [Keys], as in fero's adapter (bench/ferosut); the value is a string of
// the trial's size in bytes. The original's constants keep their defaults,
// so its servers and clients keep every change in memory (partitions.history.max
// is Infinity): their peak RSS grows with the records.
//
// The original is installed with npm into the user's cache directory
// ([Dir]) on first use, and found there afterwards: fero-bench prepares
// it before a run's first trial ([System.Prepare]) and fails at once with
// a clear message where Node or npm is missing or the install fails
// (offline, say). The tests (this package's and fero-bench's) skip there,
// and also where the original is not in the cache yet unless
// FERO_BENCH_NPM=1 ([InstallEnv]) lets them install it, so that make test
// on a fresh machine never depends on npm's registry. Two small Node
// scripts, embedded here and written beside the install, are its server
// and its client.
//
// The bridge. A server process runs the original's server as a child
// (node server.js), as Redis is run by bench/redissut: the harness counts
// its CPU and peak RSS as the server's. A client process cannot drive the
// original record by record from Go without a hop of its own (Go to Node
// and back for every record), which the figures would charge to the
// original, and the Node side's CPU would escape the client's count. So
// the client is a program of its own: fero-bench's client process runs
// [System.RunClient] instead of dialling a [bench.Conn]; it starts node
// client.js, which runs the client's whole share of the trial inside the
// original's client node and reports its milestones (and round trip
// latencies) on stdout, and hands the harness the same result a Go client
// would, with the Node process's CPU counted as the client's. The
// milestones are the original's own, counted as its own benchmark
// (tests/integration/speed/sync) counts them, from the client node's
// events rather than with send(…).on('reply') per request, which would
// leave a listener per request behind. Before it says ready, the client
// checks that one record's commit reached its copy by the time the reply
// came, warms up, and waits until every warm-up request is answered (the
// original answers one-way records too):
//
//   - oneway: tacks when the original's outbox has handed the last record
//     to the socket ("tack" events), yacks when the server's count of the
//     requests it received reaches every one ("ack" events). This is
//     receipt, as the harness's oneway note says; fero's own yacks wait
//     for the owner to commit, so they promise more.
//   - reqreply: the same tacks, and sacks when every reply is back, with at
//     most the trial's window of requests in flight. A reply comes after
//     the commit, on the same connection, so by then every record is
//     applied in the client's copy as well.
//   - roundtrip: sequential requests, each latency from cache.update to its
//     reply. The original hands every batch of received messages to its
//     handlers from a zero-delay setTimeout (about a millisecond in Node),
//     on the server and again on the client: its round trips take
//     milliseconds by design, which its own latency test (acks, not
//     replies) does not show.
//
// Unsupported ([System.Supports]): fero-bench leaves these trials out of
// a run, saying so, and refuses a run in which the original can run none:
//
//   - rate: the open-loop generator is the harness's Go one (bench.OpenLoop),
//     which schedules each send from its own goroutine. Inside Node it
//     would share the one event loop with the replies it times, so it
//     would not be the same measurement, and approximating it would be
//     quoted as if it were.
//   - more than one server: a server of the original forwards a request
//     for a key it does not own with owner.send(…).on('reply'), which adds
//     a reply listener per forwarded request that is never removed, so
//     every reply costs more than the one before; and it answers each
//     forwarded request twice (a "subscribe" notice, then the reply). Tried
//     with two servers, 5,000 requests stalled. One server owns every
//     partition and takes no such path.
package origsut

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/fero-go/fero/bench"
)

// Keys is how many distinct keys the records cycle through, as in
// bench/ferosut.
const Keys = 10000

// startTimeout bounds how long Serve waits for the original's server to
// print its address.
const startTimeout = 30 * time.Second

// System is the original fero 1.7.1 as a system under test.
type System struct{}

var _ bench.System = System{}

// ErrUnsupported is wrapped by the error of a scenario or a configuration
// the original cannot be measured in; see the package comment for why.
var ErrUnsupported = errors.New("origsut: not measurable with the original fero " + Version)

// Supports says whether a trial of scenario s with servers servers can be
// measured, and if not, why.
func (System) Supports(s bench.Scenario, servers int) error {
	switch s {
	case bench.OneWay, bench.RequestReply, bench.RoundTrip:
	case bench.FixedRate:
		return fmt.Errorf("%w: scenario rate: the open-loop generator is the harness's Go one, and inside Node it would share the event loop with the replies it times", ErrUnsupported)
	default:
		return fmt.Errorf("%w: scenario %q", ErrUnsupported, s)
	}
	if servers != 1 {
		return fmt.Errorf("%w: %d servers: with more than one, a server forwards requests for keys it does not own with a reply listener per request that is never removed, so it slows with every request (5,000 stalled with two); use -c 1", ErrUnsupported, servers)
	}
	return nil
}

// Prepare installs the original into the cache unless it is there
// already, and writes the Node scripts beside it. fero-bench calls it
// once, before a run's first trial, so that a missing Node or npm, or an
// install that fails, ends the run at once with the reason, wrapping
// [ErrUnavailable].
func (System) Prepare(ctx context.Context) error {
	_, err := prepare(ctx)
	return err
}

// serverArgs is server.js's argument.
type serverArgs struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// Serve runs one server of the original on opts.Addr until ctx is done,
// and reports the address it listens on. It returns nil when the server
// stops because ctx ended, and an error with the end of its output if it
// exits on its own.
func (s System) Serve(ctx context.Context, opts bench.ServeOptions, ready func(addr string)) error {
	if err := s.Supports(bench.OneWay, len(opts.Peers)+1); err != nil {
		return err
	}
	in, err := prepare(ctx)
	if err != nil {
		return err
	}
	host, portStr, err := net.SplitHostPort(opts.Addr)
	if err != nil {
		return fmt.Errorf("origsut: address %q: %w", opts.Addr, err)
	}
	port, err := net.LookupPort("tcp", portStr)
	if err != nil {
		return fmt.Errorf("origsut: address %q: %w", opts.Addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	arg, err := json.Marshal(serverArgs{Host: host, Port: port})
	if err != nil {
		return fmt.Errorf("origsut: %w", err)
	}
	p, err := startNode(in.node, in.dir, serverScript, arg, false)
	if err != nil {
		return err
	}
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case addr, ok := <-p.lines:
		if !ok {
			<-p.exited
			return p.exitError("the original's server exited before it listened")
		}
		ready(strings.TrimSpace(addr))
	case <-t.C:
		return errors.Join(fmt.Errorf("origsut: the original's server did not listen within %v; stderr:\n%s", startTimeout, p.stderr), p.stop())
	case <-ctx.Done():
		return errors.Join(fmt.Errorf("origsut: stopped while the original's server started: %w", ctx.Err()), p.stop())
	}
	select {
	case <-p.exited:
		return p.exitError("the original's server exited")
	case <-ctx.Done():
		return p.stop()
	}
}

// Dial fails: the original's client is a Node program that runs each
// scenario itself (RunClient), not a connection that Go drives.
func (System) Dial(context.Context, bench.DialOptions) (bench.Conn, error) {
	return nil, fmt.Errorf("origsut: the original's client runs each scenario itself in Node (System.RunClient); it has no Go connection to dial")
}
