package storage

import (
	"fmt"
	"sync"
	"time"
)

// SyncMode says when a server's writes are made durable.
type SyncMode int

const (
	// SyncEachGroup: the caller (the node) syncs once per write round
	// itself: it calls Store.Sync after the round's writes and lets none of
	// the round's acknowledgements out before that returns. The writes
	// that arrive while one round's fsync runs go into the next round, so
	// one fsync covers them all and the fsync rate follows the disk. It
	// needs no [Committer].
	SyncEachGroup SyncMode = iota
	// SyncInterval: writes are acknowledged at once and made durable by an
	// fsync every SyncPolicy.Interval (a [Committer]'s timer); a crash of
	// the machine loses up to an interval of acknowledged writes, a crash
	// of the process those still buffered.
	SyncInterval
	// SyncNever: no fsync until Close; the operating system writes back
	// when it likes. A crash can lose any acknowledged write.
	SyncNever
)

func (m SyncMode) String() string {
	switch m {
	case SyncEachGroup:
		return "group"
	case SyncInterval:
		return "interval"
	case SyncNever:
		return "never"
	}
	return fmt.Sprintf("SyncMode(%d)", int(m))
}

// SyncPolicy is the user's choice of durability against speed.
type SyncPolicy struct {
	Mode SyncMode
	// Interval is SyncInterval's period (default 100 ms).
	Interval time.Duration
}

// Committer runs SyncInterval over a Store: one goroutine calls Store.Sync
// every interval. The other policies need none: under SyncEachGroup the
// caller syncs once per write round itself, and under SyncNever nothing
// syncs before Store.Close.
type Committer struct {
	store  Store
	policy SyncPolicy
	stop   chan struct{}
	done   chan struct{}

	mu      sync.Mutex
	lastErr error // the last failed Sync's error
	closed  bool
	syncs   uint64 // Store.Sync calls made
}

// NewCommitter starts a Committer for s under a SyncInterval policy.
// Close stops it. Any other mode is an error: SyncEachGroup is the
// caller's own Sync each write round, SyncNever no Sync at all.
func NewCommitter(s Store, policy SyncPolicy) (*Committer, error) {
	switch policy.Mode {
	case SyncInterval:
		if policy.Interval == 0 {
			policy.Interval = 100 * time.Millisecond
		}
		if policy.Interval < 0 {
			return nil, fmt.Errorf("storage: sync interval %v is negative", policy.Interval)
		}
	case SyncEachGroup:
		return nil, fmt.Errorf("storage: a Committer runs only the %v policy, not %v: under %v the caller syncs once per write round itself", SyncInterval, policy.Mode, policy.Mode)
	case SyncNever:
		return nil, fmt.Errorf("storage: a Committer runs only the %v policy, not %v: under %v nothing syncs before Close", SyncInterval, policy.Mode, policy.Mode)
	default:
		return nil, fmt.Errorf("storage: unknown %v", policy.Mode)
	}
	c := &Committer{
		store:  s,
		policy: policy,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go c.runInterval()
	return c, nil
}

// Err returns ErrClosed after Close, else the error of the last Sync
// that failed, if one did. (Writes are acknowledged before they are
// durable under SyncInterval: nothing waits for a Sync.)
func (c *Committer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return c.lastErr
}

// Syncs returns how many times the Committer has called Store.Sync.
func (c *Committer) Syncs() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.syncs
}

func (c *Committer) runInterval() {
	defer close(c.done)
	t := time.NewTicker(c.policy.Interval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		err := c.store.Sync()
		c.mu.Lock()
		c.syncs++
		if err != nil {
			c.lastErr = err
		}
		c.mu.Unlock()
	}
}

// Close stops the Committer and waits for its goroutine. It neither syncs
// nor closes the Store (Store.Close syncs). It is idempotent.
func (c *Committer) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.done
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	<-c.done
	return nil
}
