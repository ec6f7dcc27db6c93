package partition

import (
	"fmt"
	"time"

	"github.com/fero-go/fero/internal/errs"
)

// Defaults. The original library kept every commit forever
// (partitions.history.max = Infinity): memory grew without bound and a
// joining node replayed the whole log. Here history is capped per partition
// and anything older is served as a snapshot plus the tail; 10,000 entries
// of 100 bytes is about 1 MB per partition, 271 MB for 271 partitions of a
// write-hot resource, and a replica that falls further behind than that
// catches up faster from a snapshot anyway.
const (
	DefaultHistoryMax = 10000
	// DefaultHistoryBytes bounds the key and value bytes of a partition's
	// history: twice the largest write, so the newest two writes of any size
	// stay in history. Counted by entries alone, 603 writes of 1 MB to one
	// key held ~950 MB on every node for good; now a partition's history
	// holds at most 2 MiB of keys and values (plus its slots, 24 bytes an
	// entry, and at most one partly used 64 KiB block).
	DefaultHistoryBytes = 2 * DefaultMaxEntry
	DefaultGapBufferMax = 1024
	DefaultSyncQueueMax = 1024
	// DefaultTurnQueueMax bounds the writes and turns waiting behind one
	// key's turn (rule 15).
	DefaultTurnQueueMax  = 1024
	DefaultFetchMax      = 1024
	DefaultSyncTimeout   = 2 * time.Second
	DefaultFetchRetry    = 500 * time.Millisecond
	DefaultProbeInterval = time.Second
	DefaultFenceBackoff  = time.Second
	DefaultWriteTimeout  = 10 * time.Second
	// DefaultClockSkew is the margin by which an owner's clock may differ
	// from a forwarding node's: the owner commits a forwarded write only
	// while its deadline is more than this away (rule 1).
	DefaultClockSkew = 100 * time.Millisecond
	// DefaultMaxEntry bounds one write's key plus value, in bytes.
	DefaultMaxEntry = 1 << 20
	// DefaultMaxMessage bounds the entries' bytes in one Commit or
	// FetchReply; it stays well under the transport's 16 MiB frame.
	DefaultMaxMessage = 4 << 20
)

// ErrInvalidOption reports an option out of range; the message says which.
var ErrInvalidOption = errs.New(errs.InvalidArgument, "invalid partition engine option")

// Option configures an [Engine]. Options are sealed: only this package
// makes them.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithClient makes the engine a client member's: it owns nothing, keeps a
// copy of every partition and forwards writes to owners.
func WithClient() Option { return optionFunc(func(c *config) { c.client = true }) }

// WithHistoryMax caps the entries kept per partition (default
// [DefaultHistoryMax]; at least 1).
func WithHistoryMax(n int) Option { return optionFunc(func(c *config) { c.historyMax = n }) }

// WithHistoryBytes caps the key and value bytes of the entries kept per
// partition (default [DefaultHistoryBytes]; at least 1). The newest entry
// is kept whatever its size. With the entry cap it bounds a partition's
// history whatever the writes: a copy that falls further behind catches up
// by snapshot.
func WithHistoryBytes(n int) Option { return optionFunc(func(c *config) { c.historyBytes = n }) }

// WithGapBufferMax caps the out-of-order entries a copy holds per
// partition while it fetches the missing ones (default
// [DefaultGapBufferMax]; 0 buffers nothing and relies on fetch alone).
func WithGapBufferMax(n int) Option { return optionFunc(func(c *config) { c.gapMax = n }) }

// WithSyncQueueMax caps the writes a syncing owner holds per partition;
// beyond it writes fail with Unavailable (default [DefaultSyncQueueMax]).
func WithSyncQueueMax(n int) Option { return optionFunc(func(c *config) { c.queueMax = n }) }

// WithTurnQueueMax caps the writes and turns that wait behind one key's
// turn; beyond it they fail with ResourceExhausted, definite (default
// [DefaultTurnQueueMax]; 0 lets nothing wait: a write to a key whose turn
// is held fails at once).
func WithTurnQueueMax(n int) Option { return optionFunc(func(c *config) { c.turnQueueMax = n }) }

// WithFetchMax caps the entries in one FetchReply (default
// [DefaultFetchMax]; at least 1).
func WithFetchMax(n int) Option { return optionFunc(func(c *config) { c.fetchMax = n }) }

// WithQuorum fixes the number of live servers an owner needs to accept
// writes (rule 9). 0, the default, means a majority of the configuration
// (see [Voter]). A fixed quorum below that majority trades safety for
// availability: two sides of a split may then both write, and one side's
// Majority-acked writes may be lost on heal.
func WithQuorum(n int) Option { return optionFunc(func(c *config) { c.quorum = n }) }

// WithClockSkew sets the most two servers' wall clocks may differ by
// (default [DefaultClockSkew]). A forwarded write carries its deadline; the
// owner commits it only while the deadline is more than this away, so the
// forwarding node, which answers its caller at the deadline by its own
// clock, never answers before the commit (rule 1).
func WithClockSkew(d time.Duration) Option {
	return optionFunc(func(c *config) { c.clockSkew = d })
}

// WithSyncTimeout sets how long a sync may wait for positions and entries
// before it starts over with a new term (default [DefaultSyncTimeout]).
func WithSyncTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.syncTimeout = d })
}

// WithFetchRetry sets how long a copy waits for a fetch reply before asking
// again (default [DefaultFetchRetry]).
func WithFetchRetry(d time.Duration) Option {
	return optionFunc(func(c *config) { c.fetchRetry = d })
}

// WithProbeInterval sets how often an owner checks that each copy's acked
// position advances, re-sending EpochStart to one that trails (default
// [DefaultProbeInterval]).
func WithProbeInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.probeInterval = d })
}

// WithFenceBackoff sets how long a node the ring names owner waits after
// yielding to another node's epoch before it tries to sync again (default
// [DefaultFenceBackoff]).
func WithFenceBackoff(d time.Duration) Option {
	return optionFunc(func(c *config) { c.fenceBackoff = d })
}

// WithWriteTimeout bounds how long a write waits in the sync queue, for
// replica acks, or for a forwarded reply before it fails with Unavailable
// (default [DefaultWriteTimeout]). It bounds the engine's memory; callers
// still pass their own context to the driver.
func WithWriteTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.writeTimeout = d })
}

// WithMaxEntry bounds one write's key plus value, in bytes (default
// [DefaultMaxEntry]); a larger write fails with InvalidArgument. It may not
// exceed the message bound.
func WithMaxEntry(n int) Option { return optionFunc(func(c *config) { c.maxEntry = n }) }

// WithMaxMessage bounds the bytes of entries carried in one Commit or
// FetchReply (default [DefaultMaxMessage]); more entries go in further
// messages. Keep it well under the transport's frame limit.
func WithMaxMessage(n int) Option { return optionFunc(func(c *config) { c.maxMessage = n }) }

// WithSettleDelay makes the node wait this long after servers leave its
// map before it starts syncing any partition (default 0). Failure
// detection is not symmetric: a node cut off from the majority may declare
// some of the other side dead a moment before the rest, and in that moment
// its map still counts enough servers for quorum. Waiting out the detector
// keeps such a node from starting an epoch it will lose (rule 9). The node
// driver sets it from gossip's suspicion timeout.
func WithSettleDelay(d time.Duration) Option {
	return optionFunc(func(c *config) { c.settle = d })
}

// WithJoining says the node joins an existing cluster (it was given seeds):
// alone in its map, it waits for its peers instead of founding a cluster
// of one, whose epochs, empty, would otherwise compete with the real
// cluster's when they meet (rule 9).
func WithJoining() Option { return optionFunc(func(c *config) { c.joining = true }) }

// WithExpect says how many servers form a new cluster (fero serve
// --expect, Consul's bootstrap_expect): a node that has not heard a formed
// cluster's configuration forms one only once its map holds at least n
// servers and every one of them has sent its list (rule 9), whatever found
// them (seeds, DNS, multicast, a port range). With n > 1 the node never
// founds a cluster alone, as WithJoining; with n given, the seeds need
// not all be seen (the count replaces that rule). 0 (the default) keeps
// the seeds' rule: a node given seeds forms one once it sees every seed.
func WithExpect(n int) Option { return optionFunc(func(c *config) { c.expect = n }) }

// WithFirstID makes the ids this engine hands out (its fetches, forwarded
// writes and snapshot streams) start after n. Peers answer by node id, so
// a reply meant for an earlier incarnation of this node can reach this
// one; counted from 1 in every incarnation, the ids collided, and a
// restarted node took its predecessor's reply to a forward for the answer
// to its own (a caller told its write had committed when the owner had not
// seen it). A driver passes a number above any id an earlier incarnation
// handed out: the node's start time in nanoseconds is, since a process
// hands out fewer ids than the nanoseconds it lives.
func WithFirstID(n uint64) Option { return optionFunc(func(c *config) { c.firstID = n }) }

type config struct {
	durable       bool
	joining       bool
	expect        int
	firstID       uint64
	settle        time.Duration
	maxEntry      int
	maxMessage    int
	client        bool
	historyMax    int
	historyBytes  int
	gapMax        int
	queueMax      int
	turnQueueMax  int
	fetchMax      int
	quorum        int
	clockSkew     time.Duration
	syncTimeout   time.Duration
	fetchRetry    time.Duration
	probeInterval time.Duration
	fenceBackoff  time.Duration
	writeTimeout  time.Duration
}

func newConfig(opts []Option) (config, error) {
	c := config{
		historyMax:    DefaultHistoryMax,
		historyBytes:  DefaultHistoryBytes,
		gapMax:        DefaultGapBufferMax,
		queueMax:      DefaultSyncQueueMax,
		turnQueueMax:  DefaultTurnQueueMax,
		fetchMax:      DefaultFetchMax,
		clockSkew:     DefaultClockSkew,
		syncTimeout:   DefaultSyncTimeout,
		fetchRetry:    DefaultFetchRetry,
		probeInterval: DefaultProbeInterval,
		fenceBackoff:  DefaultFenceBackoff,
		writeTimeout:  DefaultWriteTimeout,
		maxEntry:      DefaultMaxEntry,
		maxMessage:    DefaultMaxMessage,
	}
	for _, o := range opts {
		o.apply(&c)
	}
	bad := func(format string, args ...any) (config, error) {
		return config{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
	switch {
	case c.historyMax < 1:
		return bad("history max %d below 1", c.historyMax)
	case c.historyBytes < 1:
		return bad("history bytes %d below 1", c.historyBytes)
	case c.gapMax < 0:
		return bad("gap buffer max %d negative", c.gapMax)
	case c.queueMax < 0:
		return bad("sync queue max %d negative", c.queueMax)
	case c.turnQueueMax < 0:
		return bad("turn queue max %d negative", c.turnQueueMax)
	case c.fetchMax < 1 || c.fetchMax > 1<<20:
		return bad("fetch max %d not in [1, %d]", c.fetchMax, 1<<20)
	case c.maxEntry < 1 || c.maxMessage < c.maxEntry:
		return bad("max entry %d must be at least 1 and at most max message %d", c.maxEntry, c.maxMessage)
	case c.quorum < 0:
		return bad("quorum %d negative", c.quorum)
	case c.clockSkew < 0:
		return bad("clock skew %v negative", c.clockSkew)
	case c.settle < 0:
		return bad("settle delay %v negative", c.settle)
	case c.syncTimeout <= 0, c.fetchRetry <= 0, c.probeInterval <= 0, c.fenceBackoff < 0, c.writeTimeout <= 0:
		return bad("timeouts must be positive (sync %v, fetch %v, probe %v, fence backoff %v, write %v)",
			c.syncTimeout, c.fetchRetry, c.probeInterval, c.fenceBackoff, c.writeTimeout)
	}
	return c, nil
}
