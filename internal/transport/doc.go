// Package transport owns connections between fero nodes: many concurrent
// calls multiplexed over one TCP connection (optionally TLS), completing
// out of order.
//
// # Calls
//
// A caller picks the mode of each call, and pays only for that mode:
//
//   - Send: one-way. Nothing is kept in memory for it after it is queued,
//     and the callee's replies to it are discarded without being encoded.
//   - Call, Go: one request, one reply. Call blocks; Go runs a callback on
//     the connection's reader goroutine and starts no goroutine of its own.
//   - Stream: one request, a stream of replies ended by a final one.
//     Opened with StreamWindow, it is flow-controlled: the caller grants
//     room in chunks and bytes with credit frames as Recv takes chunks,
//     and the callee's ChunkWait sends only into granted room, so a slow
//     reader slows the sender instead of filling memory (flow.go). A
//     plain Stream's Chunk never waits; a reader that falls behind its
//     buffer gets ResourceExhausted.
//
// Every call takes a context. When it ends before the reply, the call
// returns the context's error at once and a cancel frame tells the callee,
// whose Request.Context is then cancelled.
//
// # Handlers
//
// The handler of incoming requests runs on the connection's reader
// goroutine, one request at a time in arrival order, so a stream of
// one-way messages is handled in the order it was sent. A request's
// payload is valid until the request is answered (a one-way message's,
// while its handler runs, for good if the handler calls Keep, or until
// it releases the Hold it took), and a
// reply passed to a Go callback until the
// callback returns: the reader then refills the same buffer, so traffic
// that is answered promptly allocates nothing for reading. A handler must not
// block: it replies at once, or hands the Request to another goroutine,
// which may reply later (a Request is safe to use from any goroutine). A
// panicking handler answers its call with an Internal error; the
// connection and the process carry on.
//
// # The outbox
//
// Each connection has one writer goroutine and an outbox of encoded frames.
// Senders encode straight into the outbox; while a write is in flight,
// frames accumulate and the next write takes them all, up to MaxBatch bytes
// per write. When the writer is idle a frame is written at once, with one
// exception: answers produced while the reader works through frames it has
// already received are written together once it has handled the last of
// them (as a server flushes when its input runs dry). There is no timer:
// batching comes only from load and never waits for input yet to come.
//
// Three senders write to an idle connection themselves instead of waking
// the writer: a Call, which is about to wait anyway; the reader once it
// has handled what it holds; and a handler answering the last request the
// reader holds, before the handler returns (there is nothing left to
// batch its answer with, and the handler may have work to do after it
// answers that its caller need not wait for). Their write is one
// non-blocking system call;
// what the socket does not take at once goes to the writer, in order, so
// no sender ever blocks in the socket. WithDirectWrites(false) turns this
// off, and TLS connections always leave writing to the writer.
//
// Close flushes the outbox for at most the close timeout, then shuts down
// its writing side and waits, for at most the close timeout again, for
// the peer to close its own: closing at once could reset the connection
// and discard frames the peer has received but not yet read.
//
// The outbox holds at most OutboxLimit bytes (256 KiB by default; one
// frame larger than that is let through alone); beyond it a sender blocks
// until there is room or its context ends, or, with the FailFast call
// option, gets ErrOutboxFull at once. A connection therefore holds at most
// about 2×OutboxLimit bytes of outgoing data (the batch being written plus
// the outbox), however slow its peer.
//
// # Connections
//
// Each side starts with an 8-byte preface ("FERO", three zero bytes, the
// protocol version) and checks the other's. A frame the reader cannot
// parse, or one over MaxFrame, closes that connection with a logged error;
// its calls fail with ErrConnLost (an Aborted error) and the server goes on
// serving every other connection.
//
// The dialing end follows its preface with an empty cancel frame (call id
// 0, which no call uses, so every version ignores it): a server closes a
// connection whose first frame has not arrived within the connect timeout,
// and an idle client must not look like a silent one.
//
// Conn is one established connection; both ends may call and serve over
// it. Peer wraps a Conn to one address and redials it with capped
// exponential backoff and full jitter when it breaks. Calls in flight on a
// broken connection fail at once with ErrConnLost; calls made while a Peer
// is reconnecting wait for the new connection (or fail fast), so nothing is
// dropped silently. A one-way Send that returned nil is at most once: it
// may be lost if the connection breaks before the bytes leave.
//
// # Limits on what a peer can make a node hold
//
// A Server's port is open to whoever can reach it, before any hello or
// secret is checked, so what an unauthenticated peer can make the server
// hold is bounded, each by an option with a default:
//
//   - Connections: at most MaxConns (4096) in all and MaxConnsPerIP (1024)
//     from one source address, loopback included. One over is reset at
//     once; refusals are logged at most once per source every 5 seconds.
//   - Strangers: with WithPreAuth (a node that takes credentials turns it
//     on), a connection is unproved until the handler calls Conn.Prove,
//     and until then it reads frames of at most 8 KiB
//     (WithAuthMaxFrame: a larger one closes it at its length prefix)
//     into blocks of at most as much, queues at most as much of answers,
//     is closed after 5 s (WithAuthTimeout), and counts against caps of
//     its own, 256 in all and 64 from one address
//     (WithMaxUnprovedConns), never against MaxConns and MaxConnsPerIP,
//     which then count proved connections: strangers cannot take their
//     places. At the cap in all a newcomer takes the place of the oldest
//     stranger of the address that holds the most, if it holds at least
//     two more than the newcomer's. Each refusal is counted in Stats.
//   - Silence: the preface and the first frame must arrive within the
//     connect timeout (10 s) of the connection being accepted.
//   - Half-sent frames: the read buffer grows with the bytes that arrive,
//     never with the length a frame declares, and once a frame has begun
//     it must arrive whole within the frame timeout (30 s), or the
//     connection is closed with a logged error. A new connection holds a
//     4 KiB read block; a busy one grows it to 64 KiB, and keeps a block
//     grown for a large frame (up to 512 KiB) for the next.
//   - Unanswered requests: a connection holds at most MaxInflight (4096)
//     calls and streams whose handler has not answered, in read blocks of
//     at most MaxInflightBytes (64 MiB) in all. A request over either
//     limit is answered at once with a ResourceExhausted error and never
//     reaches its handler; a request stops counting when it is answered or
//     its caller cancels it.
//   - Outgoing data: the outbox (above).
//
// Each is per connection or per server, not per node: a node's memory under
// attack by peers that proved themselves is bounded by their product, and
// by how fast they can send, not by any one of them; with WithPreAuth, what
// strangers can hold is bounded apart, by the unproved caps times what
// one unproved connection holds. Once connections holding 16 MiB in all
// have ended, the Server hands the memory back to the system
// (debug.FreeOSMemory, at most every 30 s; see scavenger). Keep the data
// port off networks you do not trust, or use TLS with client
// certificates.
package transport
