// Package check owns the fault suite's checkers: it reads the histories
// and traces the workload processes wrote (internal/chaos/history) and
// reports every broken promise as an [Anomaly], with the shortest slice of
// the history that shows it.
//
// # Which operations are checked for linearizability, and why
//
// Each key is a register that starts absent; porcupine searches each key's
// operations (with a time limit: a search that runs out is reported as
// "unknown", never as a pass). A write enters the model according to what
// its answer promises:
//
//   - a Majority write answered ok must have taken effect between its
//     invocation and its answer;
//   - a Majority write answered info (indefinite), or never answered, may
//     have taken effect between its invocation and its answer, or never
//     (rule 11: a write takes effect before its caller is answered, or
//     never). It is a "maybe-write": the model steps to both states. A
//     write whose context was canceled, or that was never answered (its
//     process died), may take effect until its deadline, so its window
//     ends there;
//   - an Ack write, ok or info, is a maybe-write too: the owner committed
//     it before answering, but it is not promised to survive the owner's
//     crash, so "never" must stay possible;
//   - a NoWait write is a maybe-write whose window ends at its deadline
//     (rule 11: its context's deadline, recorded on its invoke line), or
//     earlier when some copy held it before (its trace line's time: the
//     owner committed it before that). Its answer only says it was queued,
//     so the answer bounds nothing;
//   - a write answered fail (definite) never happened, and is left out.
//
// A maybe-write that no read returned is left out too: "never" is always a
// place for it, so it cannot make a history illegal, and each one left in
// multiplies the search.
//
// Reads through the owner (a GET request) are checked as reads: fero
// answers them from the owner's copy, so they are linearizable if the
// owner holds every write acknowledged before the read, and only writes
// that will survive. Reads of a process's own copy are not: a copy may
// lag, so they get only a weaker check (a local read returns a value that
// some write invoked before the read returned, and no write that failed).
// Failed reads saw nothing and are left out.
//
// # The promise each checker proves
//
//	checker                          promise (docs/engine.md)
//	checkLinearizable                Majority writes and owner reads are linearizable per key
//	checkMajorityWrites              no Majority-acked write lost or overwritten by an older one
//	checkAppliedAfterAnswer          rule 11: a write takes effect before its answer (or, for
//	                                 NoWait and canceled writes, its deadline), or never;
//	                                 rule 12: a definite error means the write was never applied
//	checkCopies                      every copy identical after the heal: the clients' digests
//	                                 and values, and each client's copy with the owners' (GET)
//	checkOffsets                     each copy applies a partition's commits in offset order, gap-free
//	checkDropped                     dropped events only for writes never acknowledged at Majority
//
// The checkers that need a partition's commit order read it from the
// traces, not from clocks: each trace is one copy's change stream, and
// every copy applies a partition's commits in one order (invariant 2).
// Clocks (CLOCK_MONOTONIC, shared by the processes of one machine) only
// say which operation was invoked after which was answered.
package check
