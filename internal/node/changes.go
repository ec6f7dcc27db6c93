package node

import (
	"sync"
	"sync/atomic"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/partition"
)

// Change is one commit as applied to this node's copy: what a change
// stream delivers. Value is the msgpack encoding of the value (empty for
// a remove); it is shared and must not be modified.
type Change struct {
	// Kind is EventCommitted when this node committed it as owner,
	// EventApplied when it applied the owner's commit, EventDropped when an
	// uncommitted change it held was undone (see docs/engine.md, rule 6),
	// and EventRestored when a partition was replaced by a snapshot.
	Kind      partition.EventKind
	Partition int
	Entry     partition.Entry
	// Position is where a restored partition now stands (EventRestored).
	Position partition.Position
}

// Overflow says what a change stream does when its subscriber falls a
// full buffer behind.
type Overflow uint8

const (
	// Drop discards the newest changes and counts them (Subscription.Dropped):
	// the node never waits for a slow subscriber.
	Drop Overflow = iota
	// Block makes the node wait until the subscriber takes the change.
	// Nothing is lost, but a slow subscriber slows the whole node: its
	// commits, its replication and its answers.
	Block
)

// Subscription is one change stream. Changes arrive in commit order per
// partition.
type Subscription struct {
	n        *Node
	c        chan Change
	overflow Overflow
	dropped  atomic.Uint64
	once     sync.Once
	done     chan struct{}
}

// C delivers the changes. It is closed when the node closes; after Close
// no more changes are sent on it, but it stays open (the node's driver is
// its only sender and closes it only on its way out).
func (s *Subscription) C() <-chan Change { return s.c }

// Dropped counts the changes a Drop subscription discarded.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close ends the subscription. It is idempotent.
func (s *Subscription) Close() {
	s.once.Do(func() {
		close(s.done)
		s.n.subMu.Lock()
		delete(s.n.subs, s)
		s.n.subMu.Unlock()
	})
}

// Subscribe opens a change stream holding up to buffer changes.
func (n *Node) Subscribe(buffer int, overflow Overflow) *Subscription {
	s := &Subscription{n: n, c: make(chan Change, max(buffer, 0)), overflow: overflow, done: make(chan struct{})}
	n.subMu.Lock()
	defer n.subMu.Unlock()
	if n.subsClosed {
		close(s.c)
		return s
	}
	n.subs[s] = struct{}{}
	return s
}

// Stats counts what happened to this node's copy since it started.
type Stats struct {
	Committed uint64 `msgpack:"committed" json:"committed"` // changes this node committed as owner
	Applied   uint64 `msgpack:"applied" json:"applied"`     // owners' commits applied to this copy
	Dropped   uint64 `msgpack:"dropped" json:"dropped"`     // uncommitted changes undone (rule 6)
	Restored  uint64 `msgpack:"restored" json:"restored"`   // partitions replaced by a snapshot
	Gained    uint64 `msgpack:"gained" json:"gained"`       // partitions this node took ownership of
	Lost      uint64 `msgpack:"lost" json:"lost"`           // partitions this node stopped owning
}

type stats struct {
	committed, applied, dropped, restored, gained, lost atomic.Uint64
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	return Stats{
		Committed: n.stats.committed.Load(), Applied: n.stats.applied.Load(),
		Dropped: n.stats.dropped.Load(), Restored: n.stats.restored.Load(),
		Gained: n.stats.gained.Load(), Lost: n.stats.lost.Load(),
	}
}

// publish counts an engine event and hands it to every subscriber. It
// runs under engMu (on the driver, or on a writer that runs a round
// inline), so there is one sender on the channels at a time.
func (n *Node) publish(ev partition.Event) {
	switch ev.Kind {
	case partition.EventCommitted:
		n.stats.committed.Add(1)
	case partition.EventApplied:
		n.stats.applied.Add(1)
	case partition.EventDropped:
		n.stats.dropped.Add(1)
	case partition.EventRestored:
		n.stats.restored.Add(1)
	case partition.EventOwnershipGained:
		n.stats.gained.Add(1)
		if n.hot != nil {
			n.hot.syncTime.Observe(ev.Took.Seconds())
		}
		return
	case partition.EventOwnershipLost:
		n.stats.lost.Add(1)
		return
	default:
		return
	}
	ch := Change{Kind: ev.Kind, Partition: ev.Partition, Entry: ev.Entry, Position: ev.Position}
	n.subMu.Lock()
	subs := make([]*Subscription, 0, len(n.subs))
	for s := range n.subs {
		subs = append(subs, s)
	}
	n.subMu.Unlock()
	for _, s := range subs {
		if s.overflow == Drop {
			select {
			case s.c <- ch:
			default:
				s.dropped.Add(1)
				n.subDrops.Add(1)
			}
			continue
		}
		select {
		case s.c <- ch:
		case <-s.done:
		case <-n.ctx.Done():
		}
	}
}

// publishBatch hands the changes of a batch record (a verb's turn, a
// compare-and-set) to the streams one by one, each as an entry at the
// record's position: a stream delivers changes, and a batch is several.
// Dropped, they come newest first, the order that undoes them.
func (n *Node) publishBatch(ev partition.Event) {
	bt, err := doc.DecodeBatch(ev.Entry.Value)
	if err != nil {
		// The owner decoded it before it committed (docState.CheckApply).
		n.logger.Error("fero: node: a committed batch does not decode", "partition", ev.Partition, "offset", ev.Entry.Offset, "err", err)
		return
	}
	for i := range bt.Changes {
		c := bt.Changes[i]
		if ev.Kind == partition.EventDropped {
			c = bt.Changes[len(bt.Changes)-1-i]
		}
		one := ev
		one.Entry.Type, one.Entry.Key, one.Entry.Value = c.Type, c.Key, c.Value
		n.publish(one)
	}
}

// closeSubs closes every stream; the driver calls it as it exits, so no
// send can follow.
func (n *Node) closeSubs() {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	n.subsClosed = true
	for s := range n.subs {
		close(s.c)
		delete(n.subs, s)
	}
}
