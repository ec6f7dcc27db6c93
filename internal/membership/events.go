package membership

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Status is a peer's state as this member sees it; the names follow the
// original library's peer statuses.
type Status uint8

const (
	// StatusConnecting: an alive message from a peer not (or no longer) in
	// the cluster was accepted; it is being admitted.
	StatusConnecting Status = iota + 1
	// StatusConnected: a server peer is a live member.
	StatusConnected
	// StatusClient: a client peer is a live member.
	StatusClient
	// StatusSuspect: a probe of the peer failed and memberlist suspects it.
	// Only the member whose probe failed sees this (memberlist reports
	// suspicion learnt from gossip to no delegate); a later ack or alive
	// message turns it back to connected or client.
	StatusSuspect
	// StatusDead: failure detection declared the peer dead (the original's
	// disconnected). It is still re-tried in the background.
	StatusDead
	// StatusRemoved: the peer left gracefully, or was dead for longer than
	// the forget-after time and is no longer re-tried.
	StatusRemoved
)

func (s Status) String() string {
	switch s {
	case StatusConnecting:
		return "connecting"
	case StatusConnected:
		return "connected"
	case StatusClient:
		return "client"
	case StatusSuspect:
		return "suspect"
	case StatusDead:
		return "dead"
	case StatusRemoved:
		return "removed"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Live reports whether a member in this status counts as part of the
// cluster (connected, client, or suspect).
func (s Status) Live() bool {
	return s == StatusConnected || s == StatusClient || s == StatusSuspect
}

// Member is one cluster member as this member sees it.
type Member struct {
	Meta
	// Gossip is the member's memberlist address, ip:port.
	Gossip string
	// Status is the member's current status.
	Status Status
}

// Event reports a peer's new status. The local member is reported too, so
// a subscriber can build the whole member set from events alone.
type Event struct {
	Member Member
	At     time.Time
}

// Subscription delivers events on a channel without ever blocking gossip.
//
// Slow subscribers: each subscription keeps, per peer, only the latest event
// not yet delivered, and delivers peers in the order they first changed.
// A subscriber that falls behind therefore skips intermediate states of a
// peer (a peer that went dead and came back may show up only as connected,
// with a new Meta.Boot) but never misses a peer's latest state, and the
// queue never holds more than one event per peer. [Subscription.Coalesced]
// counts the events replaced this way.
type Subscription struct {
	out       chan Event
	wake      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	coalesced atomic.Uint64
	unsub     func(*Subscription)

	mu      sync.Mutex
	pending map[string]Event
	order   []string
}

func newSubscription(unsub func(*Subscription)) *Subscription {
	return &Subscription{
		out:     make(chan Event),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		pending: make(map[string]Event),
		unsub:   unsub,
	}
}

// Events returns the channel events arrive on. It is closed when the
// subscription or the membership is closed.
func (s *Subscription) Events() <-chan Event { return s.out }

// Coalesced returns how many events were replaced by a newer event for the
// same peer before the subscriber read them.
func (s *Subscription) Coalesced() uint64 { return s.coalesced.Load() }

// Close stops delivery and closes the events channel. Idempotent.
func (s *Subscription) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.unsub(s)
	})
}

// publish never blocks: it records ev as the peer's latest pending event.
func (s *Subscription) publish(ev Event) {
	s.mu.Lock()
	id := ev.Member.ID
	if _, ok := s.pending[id]; ok {
		s.coalesced.Add(1)
	} else {
		s.order = append(s.order, id)
	}
	s.pending[id] = ev
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Subscription) next() (Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.order) == 0 {
		return Event{}, false
	}
	id := s.order[0]
	s.order[0] = ""
	s.order = s.order[1:]
	if len(s.order) == 0 {
		s.order = nil // let the backing array go
	}
	ev := s.pending[id]
	delete(s.pending, id)
	return ev, true
}

// pump moves pending events to the channel; one goroutine per subscription,
// owned by the Membership, ended by Close of either.
func (s *Subscription) pump(stop <-chan struct{}) {
	defer close(s.out)
	for {
		ev, ok := s.next()
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-s.done:
				return
			case <-stop:
				return
			}
		}
		select {
		case s.out <- ev:
		case <-s.done:
			return
		case <-stop:
			return
		}
	}
}
