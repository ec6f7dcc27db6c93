package fero

import (
	"context"
	"fmt"
	"iter"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/node"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/wire"
)

// ChangeType is the kind of change a record makes.
type ChangeType uint8

// Change types: the original's ADD, UPDATE and REMOVE.
const (
	Add    = ChangeType(wire.RecordAdd)
	Update = ChangeType(wire.RecordUpdate)
	Remove = ChangeType(wire.RecordRemove)
)

func (t ChangeType) String() string { return wire.RecordType(t).String() }

func (t ChangeType) record() wire.RecordType { return wire.RecordType(t) }

func (t ChangeType) valid() error {
	switch t {
	case Add, Update, Remove:
		return nil
	}
	return errs.Errorf(errs.InvalidArgument, "fero: unknown change type %d", uint8(t))
}

// ChangeKind says how a change reached this node's copy.
type ChangeKind uint8

const (
	// Committed: this node, as the partition's owner, committed the change
	// and applied it (the original's commit event).
	Committed = ChangeKind(partition.EventCommitted)
	// Applied: this node applied the owner's commit to its copy.
	Applied = ChangeKind(partition.EventApplied)
	// Dropped: this copy had applied a change that the partition's history
	// no longer holds (it was never acknowledged beyond Ack, and its owner
	// lost it in a failover); its effect is gone from the copy. Several
	// dropped at once come newest first, the order that undoes them.
	Dropped = ChangeKind(partition.EventDropped)
	// Restored: the partition was replaced by a snapshot of the owner's
	// state (a copy too far behind, or rolled back). Key and Value are
	// empty; read the copy to see the partition's keys.
	Restored = ChangeKind(partition.EventRestored)
)

func (k ChangeKind) String() string { return partition.EventKind(k).String() }

// Change is one change record. In a change stream it is a commit as
// applied to this node's copy, with its place in the partition's log.
type Change struct {
	Kind ChangeKind
	Type ChangeType
	// Key is the path the change applies to.
	Key string
	// Value is the msgpack encoding of the value (empty for Remove). In a
	// change stream it is shared: do not modify it.
	Value msgpack.RawMessage
	// Partition, Term and Offset place the change: Offset counts the
	// partition's commits from 1; Term is the owner's epoch.
	Partition int
	Term      uint64
	Offset    uint64
}

// Decode decodes the change's value into v, a pointer.
func (c Change) Decode(v any) error {
	if len(c.Value) == 0 {
		return errs.Errorf(errs.NotFound, "fero: %s %q has no value", c.Type, c.Key)
	}
	return wire.DecodeValue(c.Value, v)
}

func (c Change) String() string {
	return fmt.Sprintf("%s %s %q (partition %d, offset %d)", c.Kind, c.Type, c.Key, c.Partition, c.Offset)
}

func changeOf(ch node.Change) Change {
	c := Change{Kind: ChangeKind(ch.Kind), Partition: ch.Partition}
	if ch.Kind == partition.EventRestored {
		c.Term, c.Offset = ch.Position.Epoch.Term, ch.Position.Offset
		return c
	}
	e := ch.Entry
	c.Type, c.Key, c.Value, c.Term, c.Offset = ChangeType(e.Type), e.Key, e.Value, e.Epoch.Term, e.Offset
	return c
}

// Overflow says what a change stream does when its consumer falls a full
// buffer behind.
type Overflow uint8

// The overflow policies. Their values are the node's, so that an
// Overflow converts to its one as it is (TestPublicTypes).
const (
	// DropNewest discards changes the buffer has no room for and counts
	// them: the node never waits for a slow consumer. The default.
	DropNewest Overflow = iota
	// Block makes the node wait for the consumer. Nothing is lost, but a
	// slow consumer slows the whole node: its commits, its replication and
	// its answers. A Block consumer must not wait for a write to the same
	// resource: once its buffer is full, the node waits for the consumer
	// and the consumer for the node. Writes to another resource are fine,
	// as are NoWait writes.
	Block
)

// DefaultBuffer is a change stream's default buffer, in changes.
const DefaultBuffer = 1024

// StreamOption configures a change stream.
type StreamOption func(*streamConfig)

type streamConfig struct {
	buffer   int
	overflow Overflow
	commits  bool
	prefixes []string
}

// Buffer sets how many changes the stream holds for its consumer (default
// [DefaultBuffer]).
func Buffer(n int) StreamOption { return func(c *streamConfig) { c.buffer = n } }

// OnOverflow sets what happens when the buffer is full (default
// [DropNewest]).
func OnOverflow(o Overflow) StreamOption { return func(c *streamConfig) { c.overflow = o } }

// Prefix limits the stream to the changes under path p: a change to key
// matches when key is p or starts with p followed by the path separator
// '.'. Prefix("carts.ada") matches "carts.ada" and "carts.ada.items.3",
// not "carts.adam" nor "carts"; Prefix("cart") does not match
// "carts.ada". A trailing separator is ignored, and Prefix("") matches
// everything. Several Prefix options make a union: a change under two of
// them arrives once.
//
// Dropped changes match by their key, like the others. A Restored change
// (a whole partition replaced) matches when the partition holds p's
// top-level key, where every key under p lives; read the copy to see
// what changed under p.
//
// The node filters where it applies changes: a change no prefix matches
// is never handed to the stream, so it neither fills the buffer (nor
// counts as dropped, nor makes a [Block] stream wait) nor costs the
// stream anything. Publishing a change costs a lookup per segment of its
// key plus one send per stream it matches, however many streams watch
// other prefixes (docs/changes.md has the benchmark).
func Prefix(p string) StreamOption {
	return func(c *streamConfig) { c.prefixes = append(c.prefixes, p) }
}

// Subscription is a change stream read from a channel.
type Subscription struct {
	sub     *node.Subscription
	c       chan Change
	commits bool
	once    sync.Once
	done    chan struct{}
}

// Subscribe opens a change stream on a channel. Changes arrive in log
// order per partition. Close it when done; the channel is closed when the
// subscription or the resource closes.
func (r *Resource) Subscribe(opts ...StreamOption) *Subscription {
	return r.subscribe(false, opts)
}

func (r *Resource) subscribe(commits bool, opts []StreamOption) *Subscription {
	cfg := streamConfig{buffer: DefaultBuffer, overflow: DropNewest, commits: commits}
	for _, o := range opts {
		o(&cfg)
	}
	s := &Subscription{sub: r.n.Subscribe(cfg.buffer, node.Overflow(cfg.overflow), cfg.prefixes...), c: make(chan Change), commits: commits, done: make(chan struct{})}
	go s.run()
	return s
}

// run converts the node's changes to the public form. The unbuffered hop
// costs a goroutine per stream and keeps the node's buffer the only one.
func (s *Subscription) run() {
	defer close(s.c)
	for {
		select {
		case ch, ok := <-s.sub.C():
			if !ok {
				return
			}
			if s.commits && ch.Kind != partition.EventCommitted {
				continue
			}
			select {
			case s.c <- changeOf(ch):
			case <-s.done:
				return
			}
		case <-s.done:
			return
		}
	}
}

// All yields the subscription's changes until ctx ends, the loop breaks or
// the subscription closes; it closes the subscription when it returns. Use
// it when the stream must not miss what happens between the moment you
// subscribe and the moment the loop starts: Subscribe, then write, then
// range over All.
func (s *Subscription) All(ctx context.Context) iter.Seq[Change] {
	return func(yield func(Change) bool) {
		defer s.Close()
		for {
			select {
			case c, ok := <-s.c:
				if !ok || !yield(c) {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}
}

// C delivers the changes.
func (s *Subscription) C() <-chan Change { return s.c }

// Dropped counts the changes a DropNewest stream discarded.
func (s *Subscription) Dropped() uint64 { return s.sub.Dropped() }

// Close ends the stream and closes C. It is idempotent.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.sub.Close()
		close(s.done)
	})
}

// Changes yields every change applied to this node's copy, in log order per
// partition, until ctx ends, the loop breaks or the resource closes (the
// original's change event); with [Prefix], only those under a path,
// filtered where the node applies them. It subscribes when the loop
// starts; to catch every change from an earlier moment, use Subscribe and
// [Subscription.All]. The stream holds up to [DefaultBuffer] changes and
// drops newer ones when the loop falls that far behind, unless opts say
// otherwise.
func (r *Resource) Changes(ctx context.Context, opts ...StreamOption) iter.Seq[Change] {
	return r.seq(ctx, false, opts)
}

// Commits yields only the changes this node commits as an owner (the
// original's commit event): across the cluster, each change appears in
// exactly one node's Commits, the owner's at the time.
func (r *Resource) Commits(ctx context.Context, opts ...StreamOption) iter.Seq[Change] {
	return r.seq(ctx, true, opts)
}

func (r *Resource) seq(ctx context.Context, commits bool, opts []StreamOption) iter.Seq[Change] {
	return func(yield func(Change) bool) {
		r.subscribe(commits, opts).All(ctx)(yield)
	}
}

// MemberEvent reports a peer's new status.
type MemberEvent struct {
	Member Member
}

// MemberEvents yields member status changes (the original's status,
// connected, disconnected, removed and client events) until ctx ends or
// the loop breaks. It starts with every current member. A slow loop never
// slows gossip: it sees the latest status of each peer.
func (r *Resource) MemberEvents(ctx context.Context) iter.Seq[MemberEvent] {
	return func(yield func(MemberEvent) bool) {
		sub := r.n.Membership().Subscribe()
		defer sub.Close()
		for {
			select {
			case ev, ok := <-sub.Events():
				if !ok || !yield(MemberEvent{Member: memberOf(ev.Member)}) {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}
}

func memberOf(mem membership.Member) Member {
	return Member{ID: mem.ID, Addr: mem.Addr, Gossip: mem.Gossip, Client: mem.Role == membership.RoleClient, Status: mem.Status.String()}
}
