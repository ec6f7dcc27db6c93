package node

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
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
	// prefixes are the paths the stream is filtered to, none nested in
	// another (see Subscribe); empty means every change.
	prefixes []string
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
		s.n.subs.mu.Lock()
		s.n.unindex(s)
		s.n.subs.mu.Unlock()
	})
}

// Subscribe opens a change stream holding up to buffer changes. With
// prefixes, the stream holds only the changes to those paths: a change to
// key matches prefix p when key is p or starts with p and the separator
// ("carts.ada" matches "carts.ada" and "carts.ada.items", not
// "carts.adam"). A trailing separator is ignored; an empty prefix matches
// everything. Several prefixes are a union: a change matching two of them
// arrives once. A restore matches when the restored partition holds the
// prefix's top-level key, since every key under a prefix lives there. The
// node filters as it publishes (see publish): a change no prefix matches
// never reaches the stream, nor costs it anything.
func (n *Node) Subscribe(buffer int, overflow Overflow, prefixes ...string) *Subscription {
	s := &Subscription{n: n, c: make(chan Change, max(buffer, 0)), overflow: overflow,
		prefixes: n.normalPrefixes(prefixes), done: make(chan struct{})}
	n.subs.mu.Lock()
	defer n.subs.mu.Unlock()
	if n.subs.closed {
		close(s.c)
		return s
	}
	n.index(s)
	return s
}

// normalPrefixes trims a trailing separator and drops every prefix nested
// in another, so that a key matches at most one of them (publish then
// sends each change once without remembering whom it sent to). It
// returns nil when one of them matches everything.
func (n *Node) normalPrefixes(prefixes []string) []string {
	if len(prefixes) == 0 {
		return nil
	}
	sep := n.sep()
	trimmed := make([]string, len(prefixes))
	for i, p := range prefixes {
		if trimmed[i] = strings.TrimSuffix(p, string(sep)); trimmed[i] == "" {
			return nil
		}
	}
	var kept []string
	for i, p := range trimmed {
		redundant := false
		for j, q := range trimmed {
			// Of equal prefixes, the first stays.
			if underPath(p, q, sep) && (p != q || j < i) {
				redundant = true
				break
			}
		}
		if !redundant {
			kept = append(kept, p)
		}
	}
	return kept
}

// underPath reports whether key is prefix or lies under it.
func underPath(key, prefix string, sep byte) bool {
	return strings.HasPrefix(key, prefix) && (len(key) == len(prefix) || key[len(prefix)] == sep)
}

func (n *Node) sep() byte { return n.store.Builder().Sep }

// subIndex finds the streams a change is for without looking at the
// others. It is guarded by subMu.
type subIndex struct {
	every []*Subscription // no prefix
	// byPath holds the filtered streams by each of their prefixes; a
	// change looks up the key and each of its ancestors, up to maxLen.
	byPath map[string][]*Subscription
	// maxLen bounds the longest prefix ever indexed, so that a deep key
	// is not looked up past any prefix's length. It never shrinks: a
	// bound, not the exact maximum.
	maxLen int
	// byPartition holds the filtered streams by the partitions of their
	// prefixes, for restores.
	byPartition map[int][]*Subscription
}

// index adds s to the node's streams; subMu is held.
func (n *Node) index(s *Subscription) {
	n.subs.all[s] = struct{}{}
	if len(s.prefixes) == 0 {
		n.subs.idx.every = append(n.subs.idx.every, s)
		return
	}
	if n.subs.idx.byPath == nil {
		n.subs.idx.byPath, n.subs.idx.byPartition = map[string][]*Subscription{}, map[int][]*Subscription{}
	}
	for _, p := range s.prefixes {
		n.subs.idx.byPath[p] = append(n.subs.idx.byPath[p], s)
		n.subs.idx.maxLen = max(n.subs.idx.maxLen, len(p))
		part := n.store.PartitionOf(p)
		if ss := n.subs.idx.byPartition[part]; len(ss) == 0 || ss[len(ss)-1] != s {
			n.subs.idx.byPartition[part] = append(ss, s)
		}
	}
}

// unindex removes s from the node's streams; subMu is held.
func (n *Node) unindex(s *Subscription) {
	if _, ok := n.subs.all[s]; !ok {
		return
	}
	delete(n.subs.all, s)
	if len(s.prefixes) == 0 {
		n.subs.idx.every = without(n.subs.idx.every, s)
		return
	}
	for _, p := range s.prefixes {
		if ss := without(n.subs.idx.byPath[p], s); len(ss) > 0 {
			n.subs.idx.byPath[p] = ss
		} else {
			delete(n.subs.idx.byPath, p)
		}
		part := n.store.PartitionOf(p)
		if ss := without(n.subs.idx.byPartition[part], s); len(ss) > 0 {
			n.subs.idx.byPartition[part] = ss
		} else {
			delete(n.subs.idx.byPartition, part)
		}
	}
}

// without removes s from ss, in place, keeping the order of the rest.
func without(ss []*Subscription, s *Subscription) []*Subscription {
	for i, x := range ss {
		if x == s {
			copy(ss[i:], ss[i+1:])
			ss[len(ss)-1] = nil
			return ss[:len(ss)-1]
		}
	}
	return ss
}

// matching appends to to the streams change ch is for: every unfiltered
// stream, then the filtered ones whose prefix is ch's key or one of its
// ancestors (a restore: whose prefix lies in its partition). subMu is
// held. It costs a map lookup per separator in the key, up to the longest
// prefix, plus one per matching stream; streams that do not match are
// never looked at.
func (n *Node) matching(to []*Subscription, ch *Change) []*Subscription {
	to = append(to, n.subs.idx.every...)
	if len(n.subs.idx.byPath) == 0 {
		return to
	}
	if ch.Kind == partition.EventRestored {
		return append(to, n.subs.idx.byPartition[ch.Partition]...)
	}
	key, sep := ch.Entry.Key, n.sep()
	for i := 0; i <= len(key) && i <= n.subs.idx.maxLen; i++ {
		if i == len(key) || key[i] == sep {
			to = append(to, n.subs.idx.byPath[key[:i]]...)
		}
	}
	return to
}

type stats struct {
	committed, applied, dropped, restored, gained, lost atomic.Uint64
	relayedFor                                          atomic.Uint64
	// needProof counts requests refused, and their connections closed,
	// for asking what needs a credential before proving one.
	needProof atomic.Uint64
	// steppedInline counts the batches stepped on a reader (tests).
	steppedInline atomic.Int64
	// catchUps counts the catch-ups that ended with this server's vote
	// counting, catchUpNanos their total time and lastCatchUp the last
	// one's, for the metrics.
	catchUps                  atomic.Uint64
	catchUpNanos, lastCatchUp atomic.Int64
}

// subscribers are a node's change streams (Subscribe).
type subscribers struct {
	mu      sync.Mutex // guards all, idx and closed
	all     map[*Subscription]struct{}
	idx     subIndex
	closed  bool
	scratch []*Subscription // publish's list of streams; under engMu
	// drops counts changes subscribers with the Drop policy missed.
	drops atomic.Uint64
}

// Stats returns the node's counters.
func (n *Node) Stats() protocol.Stats {
	return protocol.Stats{
		Committed: n.stats.committed.Load(), Applied: n.stats.applied.Load(),
		Dropped: n.stats.dropped.Load(), Restored: n.stats.restored.Load(),
		Gained: n.stats.gained.Load(), Lost: n.stats.lost.Load(),
		Relayed: n.peers.relayed.Load(), RelayedFor: n.stats.relayedFor.Load(),
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
	// The streams are copied out so that a Block send does not hold subMu
	// (and so Subscribe and Close); the copy reuses one slice, since
	// publish runs under engMu.
	n.subs.mu.Lock()
	subs := n.matching(n.subs.scratch[:0], &ch)
	n.subs.mu.Unlock()
	defer func() {
		clear(subs)
		n.subs.scratch = subs[:0]
	}()
	for _, s := range subs {
		if s.overflow == Drop {
			select {
			case s.c <- ch:
			default:
				s.dropped.Add(1)
				n.subs.drops.Add(1)
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
	n.subs.mu.Lock()
	defer n.subs.mu.Unlock()
	n.subs.closed = true
	for s := range n.subs.all {
		close(s.c)
		n.unindex(s)
	}
}
