package node

import (
	"context"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/wire"
)

// Exactly-once (docs/engine.md, rule 16). Each write a caller waits for,
// and each verb it calls, carries this node's writer ID and a sequence
// number of its own. The owner's state remembers the outcome of a writer's
// recent sequences in each partition (doc.Store's table, replicated with
// the partition), so when an attempt fails with an indefinite error (the
// owner died or lost the partition with the write in flight) the node
// sends it again with the same sequence, to whoever owns the key by then,
// and the write applies once: a retry of a committed write, or of a verb
// whose record was committed, is answered with the first outcome.

// newOnce names a new write of this node's whose sequence is taken when
// it is proposed (takeSeq), or none when the node does not retry.
func (n *Node) newOnce() protocol.Once {
	if n.cfg.NoRetry {
		return protocol.Once{}
	}
	return protocol.Once{Writer: n.once.writer}
}

// takeSeq gives o the next sequence number and holds the node's turn to
// propose until releaseSeq: the writes of one node reach its
// engine, which forwards them to their owners in the order it takes them,
// in sequence order. A partition remembers its writers' latest
// doc.DedupPerWriter sequences and refuses an older one it does not know
// as too old to tell; numbered before they queued, a first attempt could
// arrive more than that many behind later ones and be refused
// (TestConcurrentWritesAreNotTooOld: 400 goroutines writing to one
// partition through a client node).
func (n *Node) takeSeq(ctx context.Context, o *protocol.Once) error {
	select {
	case n.once.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.ctx.Done():
		return protocol.ErrClosed
	}
	o.Seq = n.once.seq.Add(1)
	return nil
}

// releaseSeq gives back the turn takeSeq took.
func (n *Node) releaseSeq() { <-n.once.turn }

// onceRecord is the record of change c sent as o: a batch that names its
// writer's sequence (and carries c's condition, if any), or c itself when
// it needs neither.
func onceRecord(c doc.Change, o protocol.Once) doc.Change {
	if o.Writer == "" && !c.Cond {
		return c
	}
	b := doc.Batch{Changes: []doc.Change{c}, Writer: o.Writer, Seq: o.Seq}
	return doc.Change{Type: wire.RecordBatch, Key: c.Key, Value: doc.AppendBatch(nil, &b)}
}
