// Package bench owns fero's benchmark harness: the seam a system under test
// plugs into ([System], [Conn]), the load scenarios that drive it, the
// multi-process orchestration that runs servers and clients as separate OS
// processes on one host, and the reports (human table, JSON, .hgrm files and an
// SVG latency-by-percentile chart).
//
// It follows the rules in BENCHMARKING.md:
//
//   - Three scenarios, each labelled in every output. Throughput is closed
//     loop and pipelined and reports the original's milestones: tacks (every
//     record handed to the connection), yacks (every one-way record
//     acknowledged as received) and sacks (every request's reply back).
//     Unloaded round trip is a sequential ping-pong. Fixed rate is open loop:
//     send i is due at t0 + i/R whatever happened before, and its latency is
//     measured from that intended time, so a stall in the system cannot hide
//     the requests it delayed (coordinated omission).
//   - Latencies go into HDR histograms in nanoseconds with three significant
//     figures, one histogram per recording goroutine, merged only at the end,
//     so nothing on the hot path takes a lock or samples.
//   - Warm-up is excluded and stated; timeouts are errors that keep their
//     latency.
//   - A system that keeps its records on disk names its policy ([Durable]);
//     one that counts its fsyncs ([FsyncCounter]) has them reported per
//     second and per record, read from its servers around the measured
//     window.
//
// Systems stay outside this package: bench/echo is the raw length-prefixed
// TCP echo (the floor), and other systems register the same way.
package bench
