package storage

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// SyncMode says when a [Committer] makes writes durable.
type SyncMode int

const (
	// SyncEachGroup: a write waits for an fsync that began after it was
	// made. Writes that arrive while one fsync runs share the next one
	// (group commit), so writers never wait for more than two fsyncs and
	// the fsync rate adapts to the disk.
	SyncEachGroup SyncMode = iota
	// SyncInterval: writes are acknowledged at once and made durable by an
	// fsync every SyncPolicy.Interval; a crash of the machine loses up to
	// an interval of acknowledged writes, a crash of the process those
	// still buffered.
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

// Committer runs a SyncPolicy over a Store: writers make their writes,
// then Wait. Under SyncEachGroup one goroutine loops, taking every writer
// waiting and calling Store.Sync once for all of them; under SyncInterval
// one goroutine calls Sync every interval; SyncNever starts none.
type Committer struct {
	store  Store
	policy SyncPolicy
	stop   chan struct{}
	done   chan struct{}
	wake   chan struct{}

	mu      sync.Mutex
	next    *group // the writers the next Sync covers; nil if none
	lastErr error  // the last Sync's error (SyncInterval)
	closed  bool
	syncs   uint64 // Store.Sync calls made
}

// group is the writers one Sync covers.
type group struct {
	done chan struct{}
	err  error
}

// NewCommitter starts a Committer for s. Close stops it.
func NewCommitter(s Store, policy SyncPolicy) (*Committer, error) {
	switch policy.Mode {
	case SyncEachGroup, SyncNever:
	case SyncInterval:
		if policy.Interval == 0 {
			policy.Interval = 100 * time.Millisecond
		}
		if policy.Interval < 0 {
			return nil, fmt.Errorf("storage: sync interval %v is negative", policy.Interval)
		}
	default:
		return nil, fmt.Errorf("storage: unknown %v", policy.Mode)
	}
	c := &Committer{
		store:  s,
		policy: policy,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		wake:   make(chan struct{}, 1),
	}
	switch policy.Mode {
	case SyncEachGroup:
		go c.runGroups()
	case SyncInterval:
		go c.runInterval()
	default:
		close(c.done)
	}
	return c, nil
}

// Wait returns once the writes its caller made before calling it are as
// durable as the policy makes them: under SyncEachGroup, after a Sync
// that began after the call (its error, if it failed); under the others
// at once, with the error of the last Sync, if it failed. A write whose
// Wait ended with ctx's error may still become durable.
func (c *Committer) Wait(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if c.policy.Mode != SyncEachGroup {
		err := c.lastErr
		c.mu.Unlock()
		return err
	}
	g := c.next
	if g == nil {
		g = &group{done: make(chan struct{})}
		c.next = g
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	select {
	case <-g.done:
		return g.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Syncs returns how many times the Committer has called Store.Sync.
func (c *Committer) Syncs() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.syncs
}

func (c *Committer) runGroups() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.wake:
		}
		c.mu.Lock()
		g := c.next
		c.next = nil
		c.mu.Unlock()
		if g == nil {
			continue
		}
		// Writers that arrive from here on join the next group.
		g.err = c.store.Sync()
		c.mu.Lock()
		c.syncs++
		c.mu.Unlock()
		close(g.done)
	}
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

// Close stops the Committer and waits for its goroutine; writers still
// waiting get ErrClosed. It neither syncs nor closes the Store (Store.Close
// syncs). It is idempotent.
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
	c.mu.Lock()
	g := c.next
	c.next = nil
	c.mu.Unlock()
	if g != nil {
		g.err = ErrClosed
		close(g.done)
	}
	return nil
}
