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

// joinLanes is how many attempts at once join the targets that are not
// seeds.
const joinLanes = 8

// join joins targets as Join does: each seed in an attempt of its own, so
// that Seeds can say why a seed did not answer, and the rest shared among
// up to joinLanes more. The attempts run at once. memberlist tries the
// addresses of one call one after another, each for up to its TCP timeout
// (10 s), so a member whose first seeds are cut off would wait out each of
// them before reaching one that answers. join returns as soon as one
// attempt has merged state with a peer, when every attempt has failed, or
// when ctx ends; the attempts still running finish in the background and
// record their seeds' errors. An attempt still running is not started
// again meanwhile, so a re-join loop faster than the TCP timeout does not
// pile attempts up.
func (m *Membership) join(ctx context.Context, targets []string) (int, error) {
	var seeds, rest []string
	for _, t := range targets {
		if slices.Contains(m.cfg.seeds, t) {
			seeds = append(seeds, t)
		} else {
			rest = append(rest, t)
		}
	}
	type result struct {
		n   int
		err error
	}
	results := make(chan result, len(seeds)+joinLanes) // no attempt waits for join
	// attempt joins addrs in the background unless the attempt named key
	// (a seed, or a lane of other targets) is still running.
	attempt := func(key string, addrs []string) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.closed || m.joining[key] {
			return false
		}
		if m.joining == nil {
			m.joining = map[string]bool{}
		}
		m.joining[key] = true
		m.wg.Add(1) // under mu, so it cannot race Close's Wait
		go func() {
			defer m.wg.Done()
			k, err := m.Join(m.ctx, addrs...)
			m.mu.Lock()
			delete(m.joining, key)
			switch {
			case !slices.Contains(m.cfg.seeds, key) || m.ctx.Err() != nil:
			case err != nil:
				if m.seedErrs == nil {
					m.seedErrs = map[string]string{}
				}
				m.seedErrs[key] = joinReason(key, err)
			default:
				delete(m.seedErrs, key)
			}
			m.mu.Unlock()
			results <- result{k, err}
		}()
		return true
	}
	running := 0
	for _, s := range seeds {
		if attempt(s, []string{s}) {
			running++
		}
	}
	// The other targets (the port range, DNS answers, peers that died:
	// up to thousands) share a few attempts, each trying its share in turn.
	lanes := make([][]string, min(len(rest), joinLanes))
	for i, t := range rest {
		lanes[i%len(lanes)] = append(lanes[i%len(lanes)], t)
	}
	for i, lane := range lanes {
		if attempt(fmt.Sprintf("\x00lane %d", i), lane) { // never a seed's address
			running++
		}
	}
	if running == 0 {
		return 0, fmt.Errorf("%w: the earlier attempts to join are still running", ErrNoPeers)
	}
	var errs []error
	for range running {
		select {
		case r := <-results:
			if r.n > 0 {
				return r.n, nil
			}
			errs = append(errs, r.err)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return 0, errors.Join(errs...)
}

// joinReason words why joining seed failed: memberlist's error lists each
// address the seed resolved to ("failed to join ADDR: cause"); the address
// is dropped where it is the seed itself.
func joinReason(seed string, err error) string {
	var parts []string
	var multi interface{ WrappedErrors() []error }
	if errors.As(err, &multi) {
		for _, e := range multi.WrappedErrors() {
			parts = append(parts, strings.TrimPrefix(e.Error(), "failed to join "+seed+": "))
		}
	}
	if len(parts) == 0 {
		return err.Error()
	}
	return strings.Join(parts, "; ")
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

// Join contacts the given gossip addresses (host:port) and merges state with
// each reachable one; it returns how many answered. ErrNoPeers when none did.
// memberlist's join cannot be interrupted; if ctx ends first Join returns
// ctx.Err() and the attempt finishes in the background within the TCP
// timeout (Close waits for it).
func (m *Membership) Join(ctx context.Context, addrs ...string) (int, error) {
	if len(addrs) == 0 {
		return 0, ErrNoPeers
	}
	m.mu.Lock()
	ml, closed := m.ml, m.closed
	if !closed && ml != nil {
		// Added under mu so it cannot race Close's Wait.
		m.wg.Add(1)
	}
	m.mu.Unlock()
	switch {
	case closed:
		return 0, ErrClosed
	case m.cfg.feed != nil:
		return 0, errFed
	case ml == nil:
		return 0, ErrNotStarted
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer m.wg.Done()
		n, err := ml.Join(addrs)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		if r.n == 0 {
			return 0, fmt.Errorf("%w: %w", ErrNoPeers, r.err)
		}
		return r.n, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// gossipAddr returns the local member's gossip address, recorded when
// memberlist announced the local node; callers hold m.mu.
func (m *Membership) gossipAddr() string {
	if p, ok := m.peers[m.meta.ID]; ok {
		return p.m.Gossip
	}
	return ""
}

// HasSeeds reports whether the member was given seeds to join: it joins an
// existing cluster rather than founding one.
func (m *Membership) HasSeeds() bool { return len(m.cfg.seeds) > 0 }

// resolveSeeds records the addresses each seed names: a literal IP
// itself, a host name every address it resolves to (kept from the last
// lookup that worked). UnseenSeeds matches them against members' gossip
// addresses.
func (m *Membership) resolveSeeds(ctx context.Context) {
	out := make(map[string][]string, len(m.cfg.seeds))
	m.mu.Lock()
	for s, as := range m.seedAddrs {
		out[s] = as
	}
	m.mu.Unlock()
	for _, s := range m.cfg.seeds {
		host, port, _ := net.SplitHostPort(s) // checked by the options
		if ip := net.ParseIP(host); ip != nil {
			out[s] = []string{net.JoinHostPort(ip.String(), port)}
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ips, err := m.cfg.resolver.LookupHost(lctx, host)
		cancel()
		if err != nil {
			m.log.Debug("seed lookup", "seed", s, "err", err)
			continue
		}
		as := make([]string, 0, len(ips))
		for _, ip := range ips {
			if p := net.ParseIP(ip); p != nil {
				ip = p.String()
			}
			as = append(as, net.JoinHostPort(ip, port))
		}
		out[s] = as
	}
	m.mu.Lock()
	m.seedAddrs = out
	m.mu.Unlock()
}

// UnseenSeeds returns the seeds this member was given at which none of
// members, nor the local member, answers: its gossip address is not one a
// seed names. A server given seeds forms a new cluster only once it has
// seen every one of them (docs/engine.md, rule 9), so seeds must be given
// at the addresses members gossip from (fero status shows them).
func (m *Membership) UnseenSeeds(members []Member) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	at := make(map[string]bool, len(members)+1)
	for _, mem := range members {
		at[canonicalAddr(mem.Gossip)] = true
	}
	at[canonicalAddr(m.gossipAddr())] = true
	var out []string
	for _, s := range m.cfg.seeds {
		if !slices.ContainsFunc(m.seedAddrs[s], func(a string) bool { return at[a] }) {
			out = append(out, s)
		}
	}
	return out
}

// SeedStatus is what a member knows of one of its seeds.
type SeedStatus struct {
	Seed string
	// Answered: a live peer gossips from an address the seed names.
	Answered bool
	// Self: the seed names this member's own gossip address.
	Self bool
	// Err is why the last attempt to join the seed failed; "" when it
	// worked or none was made yet.
	Err string
}

// String describes the seed for a log line or an error: the seed, and
// why it did not answer.
func (s SeedStatus) String() string {
	switch {
	case s.Answered:
		return s.Seed + " (answered)"
	case s.Self:
		return s.Seed + " (this node's own address)"
	case s.Err != "":
		return s.Seed + " (" + s.Err + ")"
	}
	return s.Seed + " (not tried yet)"
}

// Seeds reports on each seed the member was given, in the order given.
func (m *Membership) Seeds() []SeedStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	peers := make(map[string]bool, len(m.peers))
	for _, p := range m.peers {
		if p.m.ID != m.meta.ID && p.m.Status.Live() {
			peers[canonicalAddr(p.m.Gossip)] = true
		}
	}
	self := canonicalAddr(m.gossipAddr())
	out := make([]SeedStatus, 0, len(m.cfg.seeds))
	for _, s := range m.cfg.seeds {
		st := SeedStatus{Seed: s, Err: m.seedErrs[s]}
		for _, a := range m.seedAddrs[s] {
			st.Answered = st.Answered || peers[a]
			st.Self = st.Self || a == self
		}
		out = append(out, st)
	}
	return out
}

// canonicalAddr writes host:port with the IP in its canonical form, so
// "::ffff:10.0.0.1" and "10.0.0.1" compare equal.
func canonicalAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	}
	return net.JoinHostPort(host, port)
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
