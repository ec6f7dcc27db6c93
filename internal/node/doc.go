// Package node owns a running fero node: it ties membership, the ring,
// the transport, the partition engine and the document store together.
//
// One goroutine (the driver) steps the engine: it hands it the ring map
// whenever the view of live members changes, the messages peers send,
// the writes proposed locally and a periodic tick, and then does what the
// engine asks: messages go out over the pool's one connection per peer
// (never blocking the driver), completions go to the callers waiting for
// them, and changes go to the change streams. See docs/engine.md for the
// rules the engine keeps.
package node
