package protocol

// BackupRequest is OpBackup's payload.
type BackupRequest struct {
	Partition int `msgpack:"p"`
	// Forwarded: a node asks the owner on its caller's behalf; the owner
	// answers itself or refuses, and does not forward again.
	Forwarded bool `msgpack:"fwd,omitempty"`
}

// BackupPart is one partition at one commit: the owner's state under its
// engine lock, so the keys are exactly those of the log up to Offset in
// Epoch, with no write half applied.
type BackupPart struct {
	Partition int    `msgpack:"p"`
	Owner     string `msgpack:"owner"`
	Epoch     string `msgpack:"epoch"`
	Offset    uint64 `msgpack:"offset"`
	Keys      int    `msgpack:"keys"`
	// Digest is doc.Store.PartitionDigest of the partition: a restored
	// copy holds the same keys and values when its digest is equal.
	Digest uint64 `msgpack:"digest"`
	// Snapshot is the partition as doc.Store.Snapshot encodes it.
	Snapshot []byte `msgpack:"snapshot"`
}
