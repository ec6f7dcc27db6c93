// Membership: starting a member (New, Start, the memberlist under it),
// what it knows of its peers, subscriptions, and leaving (Close). Joining
// and seeds are in join.go.

package membership

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Membership is this process's member of one resource's cluster.
type Membership struct {
	cfg    config
	log    *slog.Logger
	ctx    context.Context // cancelled by Close; stops every goroutine
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wake   chan struct{} // nudges the re-join loop back to its base delay

	closeOnce sync.Once
	closeErr  error

	mu        sync.Mutex
	started   bool
	closed    bool
	ml        *memberlist.Memberlist
	meta      Meta
	metaBytes []byte
	peers     map[string]*peer // by ID, including the local member
	gone      map[string]tombstone
	conflicts map[string]conflict // by ID: another life seen at another address
	// selfConflict is the gossip address from which another process
	// announced this member's own ID ("" if none did): a duplicate ID, or
	// this member's previous life not yet declared dead.
	selfConflict string
	heard        map[string]time.Time
	subs         map[*Subscription]struct{}
	seedAddrs    map[string][]string // seed → the gossip addresses it resolves to
	seedErrs     map[string]string   // seed → why the last join of it failed; absent once one worked
	joining      map[string]bool     // seeds, and lanes of other targets, being joined now
	dnsLast      DNSStatus           // the last DNS lookup (lookupDNS), without Name
	eager        atomic.Bool         // SetEager
	keyring      *memberlist.Keyring // nil without encryption

	probe time.Duration // memberlist's probe interval, once created
}

type peer struct {
	m     Member
	since time.Time // when the status last changed
}

// conflict remembers a peer that announced itself from a new address while
// its previous life was not yet dead (a quick restart). memberlist refuses
// it then, and would only hear from it again at the next push-pull; the
// re-join loop contacts it as soon as the previous life is declared dead.
type conflict struct {
	addr string
	at   time.Time
}

// tombstone remembers a removed peer's life so stale gossip about it does
// not bring it back as connecting.
type tombstone struct {
	boot uint64
	at   time.Time
}

// New validates the options into a Membership; nothing runs until Start.
func New(opts ...Option) (*Membership, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Membership{
		cfg:       cfg,
		log:       cfg.logger.With("component", "membership"), // the caller's logger names the resource and node (WithLogger)
		ctx:       ctx,
		cancel:    cancel,
		wake:      make(chan struct{}, 1),
		meta:      cfg.meta,
		peers:     make(map[string]*peer),
		gone:      make(map[string]tombstone),
		conflicts: make(map[string]conflict),
		heard:     make(map[string]time.Time),
		subs:      make(map[*Subscription]struct{}),
	}
	// The start time, with random low bits: a restarted member's Boot is
	// larger than its previous life's, which lets the cluster's
	// configuration order a leave and a return (partition.Voter).
	var b [2]byte
	_, _ = rand.Read(b[:])
	m.meta.Boot = uint64(time.Now().UnixNano())&^0xffff | uint64(binary.LittleEndian.Uint16(b[:]))
	m.meta.Version = 1
	if m.metaBytes, err = EncodeMeta(m.meta); err != nil {
		return nil, err
	}
	return m, nil
}

// Start creates the gossip member, binds its sockets, joins whatever
// discovery finds once, and starts the background re-join and multicast
// loops. Finding nobody is not an error: the member is the first of its
// cluster and keeps looking in the background. ctx bounds the initial join.
func (m *Membership) Start(ctx context.Context) error {
	m.mu.Lock()
	switch {
	case m.closed:
		m.mu.Unlock()
		return ErrClosed
	case m.started:
		m.mu.Unlock()
		return ErrStarted
	}
	m.started = true
	m.mu.Unlock()
	if m.cfg.feed != nil {
		return m.startFeed(ctx)
	}

	ml, err := m.create()
	if err != nil {
		return err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errors.Join(ErrClosed, ml.Shutdown())
	}
	m.ml = ml
	dataAddr := m.meta.Addr
	m.mu.Unlock()
	// A data address on every interface (0.0.0.0:7400) is announced at the
	// IP gossip advertises: peers cannot dial 0.0.0.0 (on Linux it is this
	// host, so a node would dial itself for every peer).
	if addr, ok := advertisedDataAddr(dataAddr, ml.LocalNode().Addr); ok {
		if err := m.SetDataAddr(ctx, addr); err != nil {
			return errors.Join(err, m.Close())
		}
	}

	if mc := m.cfg.multicast; mc != nil {
		if err := m.startMulticast(*mc); err != nil {
			return errors.Join(err, m.Close())
		}
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.rejoinLoop()
	}()

	m.resolveSeeds(ctx)
	if targets := m.targets(ctx); len(targets) > 0 {
		if _, err := m.join(ctx, targets); err != nil && ctx.Err() != nil {
			return errors.Join(ctx.Err(), m.Close())
		}
	}
	return nil
}

func (m *Membership) create() (*memberlist.Memberlist, error) {
	conf := memberlist.DefaultLANConfig()
	// Faster failure detection than memberlist's LAN profile (probe every
	// second, suspicion 4 s for up to ten members): a killed owner's
	// partitions move once it is declared dead, so detection is most of a
	// failover. Probing every 250ms with a 250ms timeout and a suspicion
	// of four probe intervals declares a dead member in about 1.5 s, and
	// Lifeguard still stretches the timeouts of a member that is slow.
	conf.ProbeInterval = 250 * time.Millisecond
	conf.ProbeTimeout = 250 * time.Millisecond
	conf.GossipInterval = 100 * time.Millisecond
	if m.cfg.preset == PresetLocal {
		conf = memberlist.DefaultLocalConfig()
		// memberlist's Local preset retransmits broadcasts half as often as
		// LAN; measured here, that lets an alive message die out before it
		// reaches everyone in a 20+ member cluster, and the last member then
		// waits for the next push-pull (15s).
		conf.RetransmitMult = memberlist.DefaultLANConfig().RetransmitMult
	}
	if m.cfg.tune != nil {
		m.cfg.tune(conf)
	}
	m.probe = conf.ProbeInterval
	d := &delegate{m: m}
	conf.Name = m.meta.ID
	conf.Delegate = d
	conf.Events = d
	conf.Alive = d
	conf.Ping = d
	conf.Label = m.meta.Resource
	conf.Logger = log.New(&logBridge{m: m}, "", 0)
	// A member restarting under the same ID on a new port would otherwise
	// be refused until its dead predecessor is reaped. Only a dead or left
	// node can be reclaimed, never a live one.
	conf.DeadNodeReclaimTime = time.Nanosecond
	conf.Conflict = d
	if len(m.cfg.secretKeys) > 0 {
		kr, err := memberlist.NewKeyring(m.cfg.secretKeys[1:], m.cfg.secretKeys[0])
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		m.keyring = kr
		conf.Keyring = kr
		conf.GossipVerifyIncoming, conf.GossipVerifyOutgoing = true, true
	}
	if m.cfg.transport != nil {
		conf.Transport = m.cfg.transport
		return memberlist.Create(conf)
	}
	host, port, _ := splitBind(m.cfg.bind)
	conf.BindAddr = host
	if m.cfg.portStart == 0 {
		conf.BindPort, conf.AdvertisePort = port, port
		return memberlist.Create(conf)
	}
	var errs []error
	for p := m.cfg.portStart; p <= m.cfg.portEnd; p++ {
		conf.BindPort, conf.AdvertisePort = p, p
		ml, err := memberlist.Create(conf)
		if err == nil {
			return ml, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("fero: no free port in [%d, %d]: %w", m.cfg.portStart, m.cfg.portEnd, errors.Join(errs...))
}

// SetSecretKeys replaces the gossip keyring of a running member: it
// encrypts with keys[0] from now on and accepts any of keys. Rotating a
// cluster's key takes three rounds over every member, each finished before
// the next starts: add the new key (old first), make it first (new, old),
// drop the old one (new). A member started without encryption cannot turn
// it on.
func (m *Membership) SetSecretKeys(keys ...[]byte) error {
	if len(keys) == 0 {
		return fmt.Errorf("%w: no secret key", ErrInvalidOption)
	}
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	m.mu.Lock()
	kr := m.keyring
	m.mu.Unlock()
	if m.cfg.feed != nil {
		return errFed
	}
	if kr == nil {
		return fmt.Errorf("%w: gossip is not encrypted; a member started without a key cannot take one", ErrInvalidOption)
	}
	for _, k := range keys {
		if err := kr.AddKey(k); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
	}
	if err := kr.UseKey(keys[0]); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	for _, old := range kr.GetKeys() {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, old) }) {
			if err := kr.RemoveKey(old); err != nil {
				return fmt.Errorf("%w: %w", ErrInvalidOption, err)
			}
		}
	}
	return nil
}

// ProbeInterval is how often the member probes a peer.
func (m *Membership) ProbeInterval() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.probe
}

// Local returns the local member.
func (m *Membership) Local() Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.peers[m.meta.ID]; ok {
		return p.m
	}
	return Member{Meta: m.meta, Status: StatusConnecting}
}

// Members returns the live members (connected, client or suspect),
// including the local one, sorted by ID.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.peers))
	for _, p := range m.peers {
		if p.m.Status.Live() {
			out = append(out, p.m)
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Known returns every member this one knows of, live or not (connecting,
// dead), the local one too, sorted by ID. Removed members are forgotten:
// they are not among them.
func (m *Membership) Known() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.peers))
	for _, p := range m.peers {
		out = append(out, p.m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Subscribe returns a subscription that first receives the current status
// of every known peer (the local member included), then every change. The
// subscription is closed by its Close or by the Membership's.
func (m *Membership) Subscribe() *Subscription {
	s := newSubscription(m.unsubscribe)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		close(s.out)
		return s
	}
	now := time.Now()
	ids := make([]string, 0, len(m.peers))
	for id := range m.peers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s.publish(Event{Member: m.peers[id].m, At: now})
	}
	m.subs[s] = struct{}{}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		s.pump(m.ctx.Done())
	}()
	return s
}

func (m *Membership) unsubscribe(s *Subscription) {
	m.mu.Lock()
	delete(m.subs, s)
	m.mu.Unlock()
}

// SetDataAddr publishes a new data-plane address, bumping Meta.Version, and
// waits until the update has been handed to gossip or ctx ends.
func (m *Membership) SetDataAddr(ctx context.Context, addr string) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	meta := m.meta
	meta.Addr = addr
	meta.Version++
	b, err := EncodeMeta(meta)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	m.meta, m.metaBytes = meta, b
	ml := m.ml
	m.mu.Unlock()
	if ml == nil {
		return nil // published at Start
	}
	timeout := m.cfg.leaveTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return context.DeadlineExceeded
	}
	return ml.UpdateNode(timeout)
}

// advertisedDataAddr returns addr with its host replaced by ip, when
// addr's host is unspecified (0.0.0.0, ::) and ip is not.
func advertisedDataAddr(addr string, ip net.IP) (string, bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false
	}
	if h := net.ParseIP(host); h == nil || !h.IsUnspecified() || ip == nil || ip.IsUnspecified() {
		return "", false
	}
	return net.JoinHostPort(ip.String(), port), true
}

// Close leaves the cluster gracefully (peers see StatusRemoved at once
// instead of waiting for failure detection), stops every goroutine and waits
// for them, and closes all subscriptions. Idempotent; later calls return the
// first call's result.
func (m *Membership) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		ml := m.ml
		m.mu.Unlock()
		m.cancel()
		if ml != nil {
			m.announceLeaving(ml)
			if err := ml.Leave(m.cfg.leaveTimeout); err != nil {
				m.log.Warn("leave", "err", err)
			}
			m.closeErr = ml.Shutdown()
		}
		m.wg.Wait()
		m.mu.Lock()
		subs := m.subs
		m.subs = map[*Subscription]struct{}{}
		m.mu.Unlock()
		for s := range subs {
			s.Close()
		}
	})
	return m.closeErr
}

// announceLeaving tells every live peer, over memberlist's reliable
// (TCP) messages, that this member is leaving, waiting at most half the
// leave timeout. memberlist's dead message that Leave sends next does not
// say whether the node left or failed, and an updated Meta gossiped just
// before it would be dropped from gossip queues by the dead message, so the
// intent goes point to point.
func (m *Membership) announceLeaving(ml *memberlist.Memberlist) {
	m.mu.Lock()
	m.meta.Leaving = true
	m.meta.Version++
	if b, err := EncodeMeta(m.meta); err == nil {
		m.metaBytes = b
	}
	msg, err := encodeLeaving(m.meta.ID, m.meta.Boot)
	var to []*memberlist.Node
	for _, p := range m.peers {
		if p.m.ID != m.meta.ID && p.m.Status.Live() {
			host, port, _ := net.SplitHostPort(p.m.Gossip)
			portNum, _ := strconv.Atoi(port)
			to = append(to, &memberlist.Node{Name: p.m.ID, Addr: net.ParseIP(host), Port: uint16(portNum)})
		}
	}
	m.mu.Unlock()
	if err != nil || len(to) == 0 {
		return
	}
	done := make(chan struct{})
	var sent sync.WaitGroup
	work := make(chan *memberlist.Node)
	for range min(len(to), 8) {
		sent.Add(1)
		m.wg.Add(1) // Close waits for stragglers past the deadline
		go func() {
			defer m.wg.Done()
			defer sent.Done()
			for n := range work {
				if err := ml.SendReliable(n, msg); err != nil {
					m.log.Debug("announce leaving", "peer", n.Name, "err", err)
				}
			}
		}()
	}
	go func() {
		sent.Wait()
		close(done)
	}()
	timer := time.NewTimer(m.cfg.leaveTimeout / 2)
	defer timer.Stop()
	for _, n := range to {
		select {
		case work <- n:
		case <-timer.C:
			close(work)
			return
		}
	}
	close(work)
	select {
	case <-done:
	case <-timer.C:
	}
}

// setStatus records a peer's new state and tells subscribers. Callers hold
// m.mu. Returns false when nothing changed.
func (m *Membership) setStatus(mem Member, now time.Time) {
	p, ok := m.peers[mem.ID]
	if !ok {
		p = &peer{}
		m.peers[mem.ID] = p
	}
	if p.m == mem {
		return
	}
	if p.m.Status != mem.Status {
		p.since = now
	}
	p.m = mem
	if mem.Status == StatusRemoved {
		delete(m.peers, mem.ID)
		m.gone[mem.ID] = tombstone{boot: mem.Boot, at: now}
	} else {
		delete(m.gone, mem.ID)
	}
	ev := Event{Member: mem, At: now}
	for s := range m.subs {
		s.publish(ev)
	}
}

func liveStatus(r Role) Status {
	if r == RoleClient {
		return StatusClient
	}
	return StatusConnected
}

func (m *Membership) nudge() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// DuplicateOf reports the gossip address of another live process that
// runs as this member's ID, "" if there is none: two nodes started with
// one --id. A peer's gossip that announced this ID from another address
// is checked by pinging that address as this ID: only a process that
// runs as it answers (a previous life of this member, not yet declared
// dead, does not: it has stopped). Call it once the first join is done.
func (m *Membership) DuplicateOf(ctx context.Context) (string, error) {
	m.mu.Lock()
	addr, ml, id := m.selfConflict, m.ml, m.meta.ID
	m.mu.Unlock()
	if addr == "" || ml == nil {
		return "", nil
	}
	udp, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return "", nil
	}
	for try := 0; try < 3 && ctx.Err() == nil; try++ {
		if _, err := ml.Ping(id, udp); err == nil {
			return addr, nil
		}
	}
	return "", ctx.Err()
}
