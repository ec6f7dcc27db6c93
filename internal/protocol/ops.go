package protocol

// Operator ops: what the fero CLI and other tools ask a node for. Any node
// answers them; no hello is needed.
const (
	// OpStatus (call) answers a StatusReport.
	OpStatus uint32 = 5
	// OpTail (stream) streams this node's change stream as TailRecords
	// until the caller cancels.
	OpTail uint32 = 6
	// OpForget (call) removes the server whose ID is the payload from the
	// cluster's configuration (Node.Forget); it answers nothing.
	OpForget uint32 = 7
)

// OpMembers asks a server for the cluster's live servers (membersAsk),
// answered (membersReply) once the list differs from the version the
// caller has, or after the wait it asked for.
const OpMembers uint32 = 11

// Connections that are not a peer's (fero.Dial, the fero CLI) prove a
// credential before a node with credentials serves them: a client token,
// which lets them make requests, read the status and tail, or the cluster
// secret, which also lets them forget servers. The exchange is the
// hello's (pool.go) without IDs: OpAuth carries the caller's nonce and the
// ID of its key (a hash prefix of the derived key, so a node that accepts
// several tokens, or secrets during a rotation, knows which to use), and
// is answered with the node's nonce and its MAC under that key, so the
// caller knows it reached a node that holds the credential too; then
// OpAuthProof carries the caller's MAC. The MACs carry different labels
// ("node", "caller"), so neither side can reflect the other's.
const (
	OpAuth      uint32 = 9
	OpAuthProof uint32 = 10
)

// OpBackup (call) answers one partition of the resource as its owner holds
// it at one commit (a BackupPart, for `fero backup`). A node that does not
// own the partition asks its owner, once (BackupRequest.Forwarded), over
// its peer connection, so a backup through any one node reaches them all.
const OpBackup uint32 = 13

// OpEngine carries partition engine messages, one-way: the engines answer
// each other with messages of their own, never with transport replies.
const OpEngine uint32 = 3

// OpHello is the first call on every connection one node dials to another:
// it names the caller, so the callee can use the connection to call back.
const OpHello uint32 = 1

// OpHelloProof follows OpHello when the cluster has a secret: the caller
// proves that it knows the secret, for the ID it named, on this connection.
const OpHelloProof uint32 = 8

// OpRelay carries what one server sends another through a third, when
// the data plane between the two fails while gossip still shows both
// alive (docs/engine.md, rule 17), and the probe that finds the direct
// path again. Its payload is a kind byte, a node ID (uvarint length,
// bytes) and what the kind carries.
const OpRelay uint32 = 12

// OpRequest carries a request (a verb, a key and a payload) to the owner of
// the key's partition, whose handler answers it. A node that is not the
// owner forwards the request once; a request that already took that hop
// and still meets a non-owner is answered with "retry", never forwarded
// again, so a request travels at most two hops and cannot loop while maps
// disagree.
const OpRequest uint32 = 4
