package membership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

// Feed is where a member that does not gossip learns the cluster: an
// attached client (docs/engine.md, "Attached clients"), which proved a
// client token to the servers rather than the cluster secret and so
// cannot read their gossip. Called with the version of the list it last
// returned (0 the first time), it returns the servers a server of the
// cluster holds live, once that list differs from the version given or
// the wait the feed chooses ends. An error leaves the member with the list
// it had; the feed is called again after a pause.
type Feed func(ctx context.Context, have uint64) (servers []Meta, version uint64, err error)

// ErrFeedRefused, joined to a feed's error, says the servers refused the
// member (its credential): Start returns it rather than keep asking.
var ErrFeedRefused = errors.New("fero: membership: the servers refused this member")

// WithFeed makes the member learn the cluster from f instead of joining
// gossip: no memberlist runs, nothing is bound, and the discovery options
// (seeds, multicast, DNS, keys) are refused alongside it.
func WithFeed(f Feed) Option {
	return optionFunc(func(c *config) { c.feed = f })
}

// feedPause bounds the pause after a failed call of the feed.
const (
	feedPauseMin = 50 * time.Millisecond
	feedPauseMax = 2 * time.Second
)

// checkFeed refuses options that mean gossip alongside a feed.
func (c *config) checkFeed() error {
	if c.feed == nil {
		if IsAttached(c.meta.ID) {
			return fmt.Errorf("%w: ID %q: %q begins only an attached client's (one fed its members)", ErrInvalidOption, c.meta.ID, AttachedPrefix)
		}
		return nil
	}
	switch {
	case !IsAttached(c.meta.ID):
		return fmt.Errorf("%w: ID %q: an attached client's begins with %q", ErrInvalidOption, c.meta.ID, AttachedPrefix)
	case c.meta.Role != RoleClient:
		return fmt.Errorf("%w: only a client can be fed its members", ErrInvalidOption)
	case len(c.seeds) > 0, c.multicast != nil, c.dnsName != "", len(c.scanHosts) > 0:
		return fmt.Errorf("%w: a member fed its members (an attached client) does not gossip: no seeds, multicast, DNS or scanned hosts", ErrInvalidOption)
	case len(c.secretKeys) > 0:
		return fmt.Errorf("%w: a member fed its members (an attached client) does not gossip: no gossip keys", ErrInvalidOption)
	}
	return nil
}

// startFeed starts a fed member: the local member is live at once, and
// a loop keeps the others as the feed reports them. The first call of
// the feed is waited for, bounded by ctx; that it fails is not an error
// (the loop keeps calling), as finding no seed is not for a gossiping
// member.
func (m *Membership) startFeed(ctx context.Context) error {
	// The probe interval of the preset, for the engine's timers that
	// follow it, though this member probes nobody.
	conf := memberlist.DefaultLANConfig()
	conf.ProbeInterval = 250 * time.Millisecond
	if m.cfg.preset == PresetLocal {
		conf = memberlist.DefaultLocalConfig()
	}
	if m.cfg.tune != nil {
		m.cfg.tune(conf)
	}
	m.mu.Lock()
	m.probe = conf.ProbeInterval
	m.setStatus(Member{Meta: m.meta, Status: liveStatus(m.meta.Role)}, time.Now())
	m.mu.Unlock()

	first := make(chan error, 1)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.feedLoop(first)
	}()
	select {
	case err := <-first:
		if errors.Is(err, ErrFeedRefused) {
			return errors.Join(err, m.Close())
		}
	case <-ctx.Done():
	case <-m.ctx.Done():
	}
	return nil
}

// feedLoop calls the feed until the member closes, applying each list.
// first receives the first call's error (nil if it worked); a refusal
// ends the loop.
func (m *Membership) feedLoop(first chan error) {
	var have uint64
	pause := feedPauseMin
	failing := false
	for {
		list, version, err := m.cfg.feed(m.ctx, have)
		if first != nil {
			first <- err
			first = nil
			if errors.Is(err, ErrFeedRefused) {
				return
			}
		}
		if m.ctx.Err() != nil {
			return
		}
		if err != nil {
			if !failing {
				m.log.Warn("fero: membership: cannot learn the cluster's members from its servers; keeping the ones known", "err", err)
				failing = true
			}
			select {
			case <-time.After(pause):
			case <-m.ctx.Done():
				return
			}
			pause = min(2*pause, feedPauseMax)
			continue
		}
		if failing {
			m.log.Info("fero: membership: learning the cluster's members from its servers again")
			failing = false
		}
		pause = feedPauseMin
		have = version
		m.applyFeed(list)
	}
}

// applyFeed makes the peers those of list: each live as its role says,
// every other peer dead, and forgotten once dead for the forget delay.
func (m *Membership) applyFeed(list []Meta) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	in := make(map[string]bool, len(list))
	for _, meta := range list {
		if meta.ID == m.meta.ID || meta.Validate() != nil || meta.Resource != m.meta.Resource {
			continue
		}
		in[meta.ID] = true
		m.setStatus(Member{Meta: meta, Status: liveStatus(meta.Role)}, now)
	}
	for id, p := range m.peers {
		if id == m.meta.ID || in[id] {
			continue
		}
		switch {
		case p.m.Status != StatusDead:
			mem := p.m
			mem.Status = StatusDead
			m.setStatus(mem, now)
		case now.Sub(p.since) > m.cfg.forgetAfter:
			mem := p.m
			mem.Status = StatusRemoved
			m.setStatus(mem, now)
		}
	}
}

// errFed is returned by what a fed member cannot do.
var errFed = errors.New("fero: membership: an attached client does not gossip")
