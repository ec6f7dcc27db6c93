// Package protocol owns fero's wire protocol between nodes and their
// callers, above the transport's frames: the op codes every node serves
// (ops.go), the shapes of a request and its reply (Request, Meta, WaitSpec,
// IfVersion, the reply status byte), exactly-once naming and retries
// (Once, Writer, Attempts), the caller's half of authentication
// (Authenticate), the operator records (StatusReport, TailRecord,
// BackupPart), and the client side of every call: CallNode* and
// CallNodeAsync over one connection, and streams (Stream, OpenStreamVia).
//
// It is what a process that talks to a cluster without being part of it
// imports (pkg/fero's Dial and Remote, the fero CLI, the dashboard's
// reports, fero-hostile), so that none of them needs the server
// (internal/node), which imports this package for the same shapes and
// serves them. A node's own calls reuse it too: the async record
// (AsyncRequest) and the stream (NewStream) take the node's side through
// the small AsyncNode and Router interfaces.
//
// The protocol's compatibility rules (the hello's version range, what a
// newer build may add) are in docs/operations.md, "Upgrades"; the request
// encoding in docs/operations.md, "The metadata slot".
package protocol
