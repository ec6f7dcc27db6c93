// Package ferotest runs a cluster of fero nodes inside one test process,
// so that a service built on fero can be tested against real nodes
// (its handlers, its Connect store, its clients) without ports to
// allocate, processes to spawn, or sleeps to guess.
//
//	func TestUsers(t *testing.T) {
//		c := ferotest.NewCluster(t, "users",
//			ferotest.WithNodeOptions(fero.WithHandler(svc.Handle)))
//		client := c.Add(fero.Client())
//		c.WaitSettled()
//		err := client.Call(ctx, "REGISTER", "ada", req, &reply)
//		…
//	}
//
// # What a cluster runs
//
// [NewCluster] starts three servers of the named resource (see
// [WithServers]) and waits until they have settled; [Cluster.Add] opens
// more nodes, servers or clients, each with the options the test gives.
// Every node is a real [fero.Resource], opened with [fero.Open]:
//
//   - Gossip runs over an in-memory network shared by the cluster's nodes:
//     no UDP to lose on a loaded machine, and links the kit can cut.
//   - The data plane (requests, writes, commits, catch-up) runs over TCP
//     on loopback, each node listening on 127.0.0.1:0, but every node
//     dials its peers through a dialer the kit gives it
//     ([fero.WithDialer]), which runs each connection through a link the
//     kit can cut and slow. Every connection between two nodes is dialed
//     by one of them, so the links hold all of them, whichever end
//     accepted. The kit's dialer replaces one a test gives.
//
// Each node gets, before the test's options, timings fit for tests:
// loopback gossip without multicast, failure detection within a few
// seconds (probes every 500ms, a suspect declared dead after 2 to 4s,
// push/pull every 2s: fast enough for a test, slow enough that a -race
// run on a loaded two-core machine does not suspect live members; replace
// them with fero.WithGossipTuning), a 1s leave timeout,
// a 20ms engine tick, a 500ms sync timeout, 32 partitions, and a logger
// that writes warnings and errors to the test's log (see [WithLogLevel])
// and goes quiet when the test ends. The options of [WithNodeOptions]
// come next, then the ones given to Add, so a test overrides any
// default: fero.WithPartitions(271), fero.WithLogger(l), fero.WithID("a").
// Ring options (partitions, vnodes, replicas, partitioner) must be the
// same on every node: give them with WithNodeOptions. Nodes are named
// node-1, node-2, … in the order they were added unless the test gives
// fero.WithID.
//
// Each node after the first is given every open node as a seed, so a node
// joins whichever of them is alive. The first node founds the cluster (it
// logs a warning saying that a server without seeds does so).
//
// Every node is closed when the test ends (testing.TB.Cleanup), in the
// reverse order of opening, and Close waits for the node's goroutines,
// with one exception: memberlist's Shutdown does not wait for a probe in
// flight, which ends by itself within a probe interval or so. A leak
// check such as goleak therefore finds nothing once it has given that
// probe a few seconds: retry goleak.Find until a deadline
// (examples/inventory/leak_test.go does), rather than call it once.
//
// # Waiting without sleeping
//
// The waits poll the nodes every 20ms and fail the test, saying what was
// missing, if their condition does not hold within the wait timeout (30s;
// see [WithWaitTimeout]):
//
//   - [Cluster.WaitSettled]: every node sees every open node alive and
//     routes by the same map of the open servers, every server's vote
//     counts and its configuration
//     lists every open server, and every partition has an owner that
//     has finished syncing and that every node follows. After it, writes
//     go through at once: none is refused because an owner is still
//     syncing or an epoch changed. It needs the open servers to hold a
//     majority of the cluster's configuration (a closed server stays in
//     the configuration until it is forgotten; see [fero.Resource.Forget]).
//   - [Cluster.WaitConverged]: every open node holds the same data (the
//     same [fero.Resource.Digest]). Call it once the writes it should see
//     have returned; a write that returned at [fero.Ack] may still be on
//     its way to the other copies, and this waits for it.
//
// The waits read each node's status through a [fero.Remote] dialed to the
// node's data-plane address with those of the node's own options that
// fero.Dial takes too (each a fero.Option; one inside a fero.Options
// bundle, a NodeOption, is not), so a node opened with
// fero.WithClusterSecret or fero.WithTLS is reached with them; a node
// that only accepts client tokens (fero.WithClientTokens) needs
// fero.WithToken among its options too. These connections do not go
// through the kit's links: no partition or delay hides a node from the
// waits.
//
// # Who answered
//
// [WatchCommits] follows the servers' change streams and records, per
// key, the nodes that committed its changes as owner, so that a test can
// check that a request ran on the owner of its key: Committers.Of(key)
// is the one server that owns it while the owner does not change.
//
// # Faults
//
// [Cluster.Partition] splits the cluster into groups and [Cluster.Heal]
// joins it again. A partition cuts every link between groups, gossip and
// data: memberlist's packets and streams from one group to another are
// lost, the data connections between them are closed, and a node's dial
// to a node of another group is refused at once. Each side's membership
// declares the other side dead (within a few seconds with the kit's
// timings), each side's partition map shrinks to its own servers, and the
// engine acts on it:
//
//   - a group holding a majority of the cluster's configuration takes
//     over every partition and accepts writes, [fero.Majority] ones
//     included;
//   - a group without one refuses every write with fero.CodeUnavailable,
//     whatever its map says it owns, and so does a client node in it:
//     it routes to that group's servers;
//   - reads ([fero.Resource.Get]) stay local and keep answering, on both
//     sides, with what each copy holds, and nothing written on one side
//     reaches the other until the heal.
//
// Partition returns only once every node sees exactly the nodes of its
// own group alive and routes by their map, and a group with a majority
// has settled as WaitSettled defines. [Cluster.Cut] makes the same cut
// and returns at once, for a test of the seconds before the sides notice:
// nodes still route by the old map, so a request or write sent to an
// owner across the cut fails, and a commit does not reach the copies
// across it. Heal restores every link, lets the nodes dial again, and
// returns once the whole cluster has settled; the sides then catch up
// with each other ([Cluster.WaitConverged] waits for it).
//
// A partition cuts only what the nodes dial: a [fero.Remote] the test
// opens with fero.Dial reaches any node of either side, and a write it
// sends to a node of the minority side is refused like one made there.
//
// [Cluster.Slow] adds a latency to the data links of the nodes it is
// given: every byte such a node sends to, or receives from, another node
// arrives that much later, in order, on the connections open and those
// dialed later, until Slow(0) restores them. A request's round trip
// over a link slowed by d takes at least 2d. Gossip is not slowed: the
// in-memory network delivers at once, so a slow node is not suspected.
//
// There is no crash: [Cluster.Remove] closes a node, which leaves the
// cluster gracefully. To make the others see a failure instead, isolate
// the node first (Partition with it alone in a group) and then Remove it.
//
// # Concurrency
//
// [Cluster.Nodes], [Cluster.Servers] and [Cluster.Node] may be called
// from any goroutine. The other methods fail the test with
// testing.TB.Fatalf when they cannot do what they are asked (a node that
// does not open, a wait that times out), so call them from the test's
// goroutine.
package ferotest
