// Package node is the server: it owns a running fero node and ties
// membership, the ring, the transport, the partition engine and the
// document store together. The wire shapes it serves, and the client
// side of every call, are internal/protocol's.
//
// One goroutine (the driver, driver.go) steps the engine: it hands it the
// ring map whenever the view of live members changes, the messages peers
// send, the writes proposed locally and a periodic tick, and then does
// what the engine asks: messages go out through peers (peers.go: one
// connection per peer, never blocking the driver), completions go to the
// callers waiting for them, and changes go to the change streams. See
// docs/engine.md for the rules the engine keeps and docs/layout.md for
// which file holds what.
package node
