package membership

import (
	"context"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"golang.org/x/net/ipv4"

	"github.com/fero-go/fero/internal/wire"
)

// rejoinLoop keeps the member connected to everything it can find: seeds,
// the scanned port range, DNS, multicast announcements, and peers that died.
// memberlist gives up on dead peers (it reaps them after
// GossipToTheDeadTime), so without this loop the two sides of a long split
// would never merge. The delay starts at rejoinBase whenever a peer dies or
// is announced and doubles to rejoinCap while nothing changes.
func (m *Membership) rejoinLoop() {
	delay := m.cfg.rejoinBase
	timer := time.NewTimer(m.jitter(delay))
	defer timer.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-timer.C:
		case <-m.wake:
			delay = m.cfg.rejoinBase
			timer.Stop()
		}
		m.forget(time.Now())
		m.resolveSeeds(m.ctx)
		if targets := m.targets(m.ctx); len(targets) > 0 {
			if n, err := m.join(m.ctx, targets); err != nil && m.ctx.Err() == nil {
				m.log.Debug("rejoin found nobody", "targets", len(targets), "err", err)
			} else if n > 0 {
				m.log.Debug("rejoin", "targets", len(targets), "answered", n)
			}
		}
		limit := m.cfg.rejoinCap
		if m.eager.Load() {
			limit = min(limit, eagerRejoinCap)
		}
		delay = min(2*delay, limit)
		timer.Reset(m.jitter(delay))
	}
}

// eagerRejoinCap bounds the rejoin delay while the member is eager
// (SetEager).
const eagerRejoinCap = 2 * time.Second

// SetEager makes the rejoin loop look for peers at least every
// eagerRejoinCap (DNS looked up again, seeds and the port range tried)
// instead of backing off to the rejoin cap: a server that has not found
// the servers a new cluster needs (fero serve --expect) keeps looking
// while DNS, or its peers, come up. Off again, the delay grows back.
func (m *Membership) SetEager(on bool) {
	if m.eager.Swap(on) != on && on {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// jitter multiplies d by a random factor in [1-jitter, 1], so members that
// lost the same peer do not all retry at once.
func (m *Membership) jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (1 - m.cfg.rejoinJitter*rand.Float64()))
}

// forget drops peers dead for longer than forgetAfter, and the oldest dead
// ones when the table is over its bound, telling subscribers they are
// removed; and expires multicast announcements.
func (m *Membership) forget(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// A peer stuck connecting was refused by memberlist after we saw its
	// alive message; treat it like a dead one.
	var dead []*peer
	for _, p := range m.peers {
		if p.m.Status == StatusDead || p.m.Status == StatusConnecting {
			dead = append(dead, p)
		}
	}
	slices.SortFunc(dead, func(a, b *peer) int { return a.since.Compare(b.since) })
	over := len(m.peers) - maxKnownPeers
	for i, p := range dead {
		if i < over || now.Sub(p.since) > m.cfg.forgetAfter {
			mem := p.m
			mem.Status = StatusRemoved
			m.setStatus(mem, now)
		}
	}
	for id, c := range m.conflicts {
		if now.Sub(c.at) > m.cfg.forgetAfter {
			delete(m.conflicts, id)
		}
	}
	for id, g := range m.gone {
		if now.Sub(g.at) > m.cfg.forgetAfter || len(m.gone) > maxKnownPeers {
			delete(m.gone, id)
		}
	}
	if mc := m.cfg.multicast; mc != nil {
		for addr, at := range m.heard {
			if now.Sub(at) > 10*mc.Interval {
				delete(m.heard, addr)
			}
		}
	}
}

// targets lists gossip addresses worth joining now: seeds, the port range,
// DNS answers, multicast announcements and peers that are not live,
// without the local member and the addresses of live members.
func (m *Membership) targets(ctx context.Context) []string {
	m.mu.Lock()
	skip := make(map[string]bool, len(m.peers)+1)
	var dead []string
	for _, p := range m.peers {
		if p.m.ID == m.meta.ID || p.m.Status.Live() {
			skip[p.m.Gossip] = true
		} else if p.m.Gossip != "" {
			dead = append(dead, p.m.Gossip)
			if c, ok := m.conflicts[p.m.ID]; ok {
				dead = append(dead, c.addr)
			}
		}
	}
	heard := make([]string, 0, len(m.heard))
	for addr := range m.heard {
		heard = append(heard, addr)
	}
	skip[m.gossipAddr()] = true
	m.mu.Unlock()

	var out []string
	add := func(addr string) {
		if !skip[addr] {
			skip[addr] = true
			out = append(out, addr)
		}
	}
	for _, s := range m.cfg.seeds {
		add(s)
	}
	for _, h := range m.cfg.scanHosts {
		for port := m.cfg.portStart; port <= m.cfg.portEnd; port++ {
			add(net.JoinHostPort(h, strconv.Itoa(port)))
		}
	}
	for _, a := range m.lookupDNS(ctx) {
		add(a)
	}
	slices.Sort(heard)
	for _, a := range heard {
		add(a)
	}
	slices.Sort(dead)
	for _, a := range dead {
		add(a)
	}
	return out
}

// DNSStatus is the outcome of the last DNS discovery lookup (WithDNS).
type DNSStatus struct {
	Name string
	// At is when it ended; zero before the first.
	At time.Time
	// Found lists the gossip addresses it gave, Err why it failed
	// (each name that failed, with the resolver's error).
	Found []string
	Err   string
}

// String describes the lookup for a log line.
func (d DNSStatus) String() string {
	switch {
	case d.At.IsZero():
		return d.Name + ": not looked up yet"
	case d.Err != "":
		return d.Name + ": " + d.Err
	case len(d.Found) == 0:
		return d.Name + ": no addresses"
	}
	return d.Name + ": " + strings.Join(d.Found, ", ")
}

// DNS reports the last DNS discovery lookup; false without WithDNS.
func (m *Membership) DNS() (DNSStatus, bool) {
	if m.cfg.dnsName == "" {
		return DNSStatus{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.dnsLast
	d.Name = m.cfg.dnsName
	d.Found = slices.Clone(d.Found)
	return d, true
}

// lookupDNS resolves the DNS discovery name; failures are logged, kept
// for DNS, and yield nothing (the next round tries again).
func (m *Membership) lookupDNS(ctx context.Context) []string {
	name := m.cfg.dnsName
	if name == "" {
		return nil
	}
	var failed []string
	var out []string
	defer func() {
		m.mu.Lock()
		m.dnsLast = DNSStatus{At: time.Now(), Found: out, Err: strings.Join(failed, "; ")}
		m.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	type hostPort struct {
		host string
		port int
	}
	var hosts []hostPort
	if strings.HasPrefix(name, "_") {
		_, srvs, err := m.cfg.resolver.LookupSRV(ctx, "", "", name)
		if err != nil {
			m.log.Debug("dns srv lookup", "name", name, "err", err)
			failed = append(failed, "SRV "+err.Error())
			return nil
		}
		for _, s := range srvs {
			hosts = append(hosts, hostPort{strings.TrimSuffix(s.Target, "."), int(s.Port)})
		}
	} else {
		hosts = append(hosts, hostPort{name, m.cfg.dnsPort})
	}
	for _, hp := range hosts {
		if net.ParseIP(hp.host) != nil {
			out = append(out, net.JoinHostPort(hp.host, strconv.Itoa(hp.port)))
			continue
		}
		ips, err := m.cfg.resolver.LookupHost(ctx, hp.host)
		if err != nil {
			m.log.Debug("dns lookup", "name", hp.host, "err", err)
			failed = append(failed, err.Error())
			continue
		}
		for _, ip := range ips {
			out = append(out, net.JoinHostPort(ip, strconv.Itoa(hp.port)))
		}
	}
	return out
}

// packetConn is the part of a UDP socket multicast discovery uses.
type packetConn interface {
	ReadFrom(b []byte) (int, net.Addr, error)
	WriteTo(b []byte, addr net.Addr) (int, error)
	Close() error
}

// announcement is the multicast discovery message: who I am and where I
// gossip. It carries no secret; with a secret key set, an announcement only
// leads to a join attempt, which the key then refuses if it does not match.
type announcement struct {
	Magic    string `msgpack:"m"`
	Resource string `msgpack:"r"`
	ID       string `msgpack:"i"`
	Gossip   string `msgpack:"g"`
}

const announceMagic = "fero1"

// maxHeard bounds the multicast-announced addresses kept between rounds.
const maxHeard = 1024

func openMulticast(mc MulticastConfig) (recv, send packetConn, group net.Addr, err error) {
	gaddr, err := net.ResolveUDPAddr("udp4", mc.Group)
	if err != nil {
		return nil, nil, nil, err
	}
	// ListenMulticastUDP sets SO_REUSEADDR, so every process on the host
	// can listen on the group port.
	r, err := net.ListenMulticastUDP("udp4", nil, gaddr)
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
	if err != nil {
		_ = r.Close()
		return nil, nil, nil, err
	}
	pc := ipv4.NewPacketConn(s)
	if err := pc.SetMulticastTTL(mc.TTL); err != nil {
		_ = r.Close()
		_ = s.Close()
		return nil, nil, nil, err
	}
	_ = pc.SetMulticastLoopback(true) // peers on the same host
	return r, s, gaddr, nil
}

func (m *Membership) startMulticast(mc MulticastConfig) error {
	open := m.cfg.multicastConns
	if open == nil {
		open = openMulticast
	}
	recv, send, group, err := open(mc)
	if err != nil {
		return err
	}
	// Closing the sockets is what unblocks the reader, so it must happen
	// once the context ends. (Stopping this AfterFunc when the announcer
	// returned could cancel it before it ran, leaving the reader blocked
	// and Close waiting for it forever: seen in a loaded test run.)
	context.AfterFunc(m.ctx, func() {
		_ = recv.Close()
		_ = send.Close()
	})
	m.wg.Add(2)
	go func() {
		defer m.wg.Done()
		m.multicastRead(recv)
	}()
	go func() {
		defer m.wg.Done()
		m.multicastAnnounce(mc, send, group)
	}()
	return nil
}

func (m *Membership) multicastRead(c packetConn) {
	buf := make([]byte, 1024)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			if m.ctx.Err() != nil {
				return
			}
			m.log.Debug("multicast read", "err", err)
			continue
		}
		var a announcement
		if err := wire.DecodeValue(buf[:n], &a); err != nil || a.Magic != announceMagic ||
			a.Resource != m.cfg.meta.Resource || a.ID == m.cfg.meta.ID || len(a.Gossip) > MaxAddrLen {
			continue
		}
		if _, _, err := net.SplitHostPort(a.Gossip); err != nil {
			continue
		}
		m.mu.Lock()
		_, known := m.heard[a.Gossip]
		if known || len(m.heard) < maxHeard {
			m.heard[a.Gossip] = time.Now()
		}
		m.mu.Unlock()
		if !known {
			m.nudge()
		}
	}
}

// multicastAnnounce announces the member after a random delay up to Jitter,
// then every Interval for as long as it has no peers.
func (m *Membership) multicastAnnounce(mc MulticastConfig, c packetConn, group net.Addr) {
	wait := time.Duration(0)
	if mc.Jitter > 0 {
		wait = rand.N(mc.Jitter)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-timer.C:
		}
		m.mu.Lock()
		alone := true
		for id, p := range m.peers {
			if id != m.meta.ID && p.m.Status.Live() {
				alone = false
				break
			}
		}
		self := m.gossipAddr()
		m.mu.Unlock()
		if alone && self != "" {
			b, err := msgpack.Marshal(&announcement{
				Magic: announceMagic, Resource: m.cfg.meta.Resource, ID: m.cfg.meta.ID, Gossip: self,
			})
			if err == nil {
				if _, err = c.WriteTo(b, group); err != nil {
					m.log.Debug("multicast announce", "err", err)
				}
			}
		}
		timer.Reset(mc.Interval)
	}
}
