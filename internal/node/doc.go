// Package node owns a running fero node: it ties membership, the ring,
// the transport and the partition engine together. So far it holds the
// connection pool; the driver that steps the engine joins it next (see
// docs/engine.md).
package node
