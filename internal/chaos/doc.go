// Package chaos owns fero's fault harness: it runs real `fero serve`
// processes, each in a Linux network namespace of its own, injects faults
// into their network and their processes on a seeded schedule, and drives
// one run per seed from an empty network to a checked history. It
// implements the suite of issue 16; the promises it tests are those of
// docs/engine.md. The workload client (package workload) and the checker
// (package check) are separate packages under this one; the runner only
// starts the one and calls the other through [Config.Check].
//
// A run, for one seed:
//
//	Net      a bridge in a namespace of its own, one namespace per node
//	         (servers n1…, a spare server for joins, clients c1…), each
//	         joined to the bridge by a veth pair, on a /24 that exists only
//	         inside those namespaces
//	Cluster  starts `fero serve` in each server's namespace (`ip netns
//	         exec`), one log file and one `fero tail` per node, and knows
//	         every PID it started; restarts and leaves return at once, so
//	         a node restarted into a partition (its joins time out) never
//	         holds up the schedule
//	Schedule a list of timed start/stop steps of faults, generated from the
//	         seed alone (math/rand/v2's PCG), printed as text; or a fixed
//	         scenario (paused-owner, long-split: issue 16's regression
//	         cases; oneway: issue 42's), where the seed varies only the
//	         workload's keys and ops
//	Via      the oneway scenario's writers through each server (Remotes
//	         dialed from a client's namespace) and CheckVia, the one-way
//	         fault's availability checker (via.go)
//	Injector applies each step: drop rules (nftables, in each receiving
//	         node's namespace), link shaping (tc: netem, or tbf), signals
//	         (SIGKILL and restart, SIGSTOP and SIGCONT, SIGTERM to leave,
//	         a spare's start to join)
//	Runner   net up, cluster up, workload clients up, schedule, heal, wait
//	         until every server's digest agrees, stop the clients, collect
//	         histories, traces and logs into one directory, check
//
// # Decisions
//
// Shelling out. The harness runs ip(8), nft(8) and tc(8) rather than
// talking netlink through a library (vishvananda/netlink, google/nftables).
// Entering a namespace from Go means a goroutine locked to a thread that
// setns'es, which is easy to get subtly wrong; the rules it installs are
// plain text that tests compare and a failure report can show; and it adds
// no dependency to fero's go.mod. The only place it enters a namespace
// itself is [Net.Dial] and [Net.Listen], for tests, on a thread it throws
// away.
//
// Drops happen on input. A fault that cuts A from B drops, in B's
// namespace, what arrives from A. Dropping on output would make the
// sender's own socket calls fail at once (EPERM), which a real network
// never does: a cut link is silent, and timeouts are what fero must handle.
// A one-way fault (A's packets to B lost, not B's to A) is the same rule on
// one side only.
//
// Loss by nftables, shaping by tc. Packet loss is an nftables rule with
// `numgen random`, which every kernel with nftables has. Delay, jitter and
// reordering need the netem queueing discipline, which some kernels are
// built without (the one this was written on is); [Net.Netem] probes for
// it, and the runner leaves those kinds out of the schedule when it is
// missing, saying so in the schedule's header. A slow link (tbf, a rate
// limit whose queue adds delay under load) stands in on such kernels.
//
// Ownership of leftovers. Every name the harness creates starts with
// `fchaos-<pid>-<run>-`, where pid is the harness process. A run that was
// killed leaves its namespaces behind; the next [NewNet] removes those
// whose pid is gone (and ends the processes still inside them, which that
// run started), and leaves alone those of a harness that still runs.
// Children get SIGKILL when the harness dies (Pdeathsig), so a kill -9 of
// the harness leaves namespaces but no processes.
//
// Process faults keep a majority. At any moment, process faults (kill,
// pause, leave) touch at most a minority of the servers the run started
// with, so a schedule never stops the whole cluster and tests nothing.
// Network faults have no such limit and overlap freely: their drop rules
// are unioned per node.
package chaos
