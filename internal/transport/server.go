package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime/debug"
	"sync"
	"time"

	"github.com/fero-go/fero/internal/errs"
)

// Server accepts connections and serves their requests with one Handler.
type Server struct {
	ln      net.Listener
	cfg     config
	handler Handler

	mu     sync.Mutex
	conns  map[*Conn]struct{}
	proved int                // proved connections in conns
	perIP  map[netip.Addr]int // proved connections in conns by source address
	// Unproved connections (WithPreAuth) by source address, oldest first.
	unproved  map[netip.Addr][]*Conn
	nUnproved int
	closed    bool
	done      chan struct{} // closed by Close
	wg        sync.WaitGroup
	refusals  refusalLog
	scav      scavenger     // under mu
	rates     *newConnRates // WithPreAuth's pace per address; the accept loop's
}

// connState is where a Server counts a connection; under Server.mu.
type connState uint8

const (
	stateProved   connState = iota // in proved and perIP
	stateUnproved                  // in unproved
	stateGone                      // in no count: closed, or being closed
)

// Listen listens on the TCP address addr ("127.0.0.1:0" picks a free
// port) and serves each connection's requests with h.
func Listen(addr string, h Handler, opts ...Option) (*Server, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errs.Errorf(errs.Unavailable, "listen on %s: %w", addr, err)
	}
	if cfg.tls != nil {
		ln = tls.NewListener(ln, cfg.tls)
	}
	cfg.warns = &rateLog[warnKey]{}
	s := &Server{ln: ln, cfg: cfg, handler: h, conns: make(map[*Conn]struct{}), perIP: make(map[netip.Addr]int),
		unproved: make(map[netip.Addr][]*Conn), done: make(chan struct{})}
	if cfg.preAuth {
		s.rates = newNewConnRates(cfg.newConnRate, cfg.newConnBurst)
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Running out of file descriptors and the like pass; back off
			// so the loop does not spin while they last.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.cfg.logger.Warn("fero: transport: accept failed", "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			<-t.C
			continue
		}
		backoff = 0
		ip := sourceIP(nc)
		if s.rates != nil && !s.rates.allow(ip, time.Now()) {
			// Refused before the lock, the handshake and the goroutines: a
			// storm of connections costs the node little more than the
			// kernel's share.
			if st := s.cfg.stats; st != nil {
				st.PreAuthRate.Add(1)
			}
			s.refuse(nc, ip, "too many new connections from this address")
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		var victim *Conn
		if s.cfg.preAuth {
			var why string
			if victim, why = s.admitUnproved(ip); why != "" {
				s.mu.Unlock()
				s.refuse(nc, ip, why)
				continue
			}
		} else if s.proved >= s.cfg.maxConns || s.perIP[ip] >= s.cfg.maxConnsPerIP {
			why := s.overProved(ip)
			s.mu.Unlock()
			s.refuse(nc, ip, why)
			continue
		}
		setNoDelay(nc)
		setUserTimeout(nc, s.cfg.userTimeout)
		c := newConn(nc, &s.cfg, s.handler, true)
		c.srv, c.ip = s, ip
		s.conns[c] = struct{}{}
		if s.cfg.preAuth {
			// Its answers are a handshake's too: a stranger that never
			// reads stops its own reader once they fill this.
			c.out.limit = min(s.cfg.authMaxFrame, s.cfg.outboxLimit)
			c.state = stateUnproved
			s.unproved[ip] = append(s.unproved[ip], c)
			s.nUnproved++
			c.authTimer = time.AfterFunc(s.cfg.authTimeout, c.authExpired)
		} else {
			c.state = stateProved
			c.proved.Store(true)
			s.proved++
			s.perIP[ip]++
		}
		s.wg.Add(1)
		s.mu.Unlock()
		if victim != nil {
			s.evict(victim)
		}
		c.onEnd = func() {
			if c.authTimer != nil {
				c.authTimer.Stop()
			}
			held := c.heldBytes()
			s.mu.Lock()
			delete(s.conns, c)
			s.uncount(c)
			s.released(held)
			s.mu.Unlock()
			s.wg.Done()
		}
		if s.cfg.onConn != nil {
			s.cfg.onConn(c)
		}
		c.start()
	}
}

// admitUnproved decides whether a new connection from ip may join the
// unproved ones: why it may not, or, when the cap in all is reached, the
// connection whose place it takes (WithMaxUnprovedConns). Called with mu
// held.
func (s *Server) admitUnproved(ip netip.Addr) (victim *Conn, why string) {
	mine := len(s.unproved[ip])
	if mine >= s.cfg.maxUnprovedIP {
		if st := s.cfg.stats; st != nil {
			st.PreAuthCapPerIP.Add(1)
		}
		return nil, "too many unproved connections from this address"
	}
	if s.nUnproved < s.cfg.maxUnproved {
		return nil, ""
	}
	// Full: the address that holds the most gives up its oldest, if
	// that leaves it holding at least as many as the newcomer's. Under a
	// flood this scan runs per accept, over at most maxUnproved addresses.
	var top netip.Addr
	most := 0
	for a, cs := range s.unproved {
		if len(cs) > most {
			top, most = a, len(cs)
		}
	}
	if st := s.cfg.stats; st != nil {
		st.PreAuthCapTotal.Add(1)
	}
	if most <= mine+1 {
		return nil, "too many unproved connections"
	}
	victim = s.unproved[top][0]
	s.uncount(victim)
	return victim, ""
}

// evict closes an unproved connection whose place a newcomer took.
func (s *Server) evict(c *Conn) {
	if log, held := s.refusals.note(c.ip, time.Now()); log {
		s.cfg.logger.Warn("fero: transport: closing an unproved connection for a newer one: too many unproved connections",
			"remote", c.RemoteAddr(), "limit", s.cfg.maxUnproved, "refused_since_last_line", held)
	}
	c.end(c.lost(errEvicted), false)
}

// overProved says which proved cap a connection from ip would pass.
// Called with mu held.
func (s *Server) overProved(ip netip.Addr) string {
	if s.proved >= s.cfg.maxConns {
		return "too many connections"
	}
	return "too many connections from this address"
}

// uncount takes c out of the count it is in. Called with mu held.
func (s *Server) uncount(c *Conn) {
	switch c.state {
	case stateProved:
		s.proved--
		if s.perIP[c.ip]--; s.perIP[c.ip] == 0 {
			delete(s.perIP, c.ip)
		}
	case stateUnproved:
		cs := s.unproved[c.ip]
		for i, x := range cs {
			if x == c {
				cs = append(cs[:i], cs[i+1:]...)
				break
			}
		}
		if len(cs) == 0 {
			delete(s.unproved, c.ip)
		} else {
			s.unproved[c.ip] = cs
		}
		s.nUnproved--
	}
	c.state = stateGone
}

// Conns returns the connections the server holds that have proved
// themselves (all of them without WithPreAuth) and those that have not.
func (s *Server) Conns() (proved, unproved int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proved, s.nUnproved
}

// Prove marks a connection a Server accepted with WithPreAuth as proved:
// its other end has shown a credential. From its next frame on it reads
// frames up to the frame limit (WithMaxFrame), the auth timeout no longer
// applies, and it counts against WithMaxConns and WithMaxConnsPerIP
// instead of the unproved caps. Call it from the handler of the request
// that proved it, on the connection's reader, so that the very next frame
// gets the new limit. When the proved caps are full it returns
// ErrTooManyConns and the connection stays unproved (close it); on a
// connection that is already proved, or that this end dialed, it does
// nothing.
func (c *Conn) Prove() error {
	s := c.srv
	if c.proved.Load() || s == nil {
		return nil
	}
	s.mu.Lock()
	switch {
	case c.state != stateUnproved:
		s.mu.Unlock()
		return c.lost(ErrClosed) // closed: by the auth timeout, say
	case s.proved >= s.cfg.maxConns || s.perIP[c.ip] >= s.cfg.maxConnsPerIP:
		why := s.overProved(c.ip)
		s.mu.Unlock()
		if log, held := s.refusals.note(c.ip, time.Now()); log {
			s.cfg.logger.Warn("fero: transport: refusing a connection that proved itself: "+why, "remote", c.RemoteAddr(),
				"limit", s.cfg.maxConns, "limit_per_address", s.cfg.maxConnsPerIP, "refused_since_last_line", held)
		}
		return ErrTooManyConns
	}
	s.uncount(c)
	c.state = stateProved
	s.proved++
	s.perIP[c.ip]++
	c.proved.Store(true)
	s.mu.Unlock()
	c.authTimer.Stop()
	c.out.mu.Lock()
	c.out.limit = s.cfg.outboxLimit // senders waiting for room see it when the writer takes the queue
	c.out.mu.Unlock()
	return nil
}

// Proved reports whether the connection has proved itself (Prove), or
// needs not: one this end dialed, or a Server's without WithPreAuth.
func (c *Conn) Proved() bool { return c.proved.Load() }

// authExpired closes a connection that has not proved itself within the
// auth timeout.
func (c *Conn) authExpired() {
	s := c.srv
	s.mu.Lock()
	if c.state != stateUnproved {
		s.mu.Unlock()
		return
	}
	s.uncount(c) // a Prove from now on fails
	s.mu.Unlock()
	if st := s.cfg.stats; st != nil {
		st.PreAuthTimeouts.Add(1)
	}
	c.warn("fero: transport: closing a connection that proved nothing in time", fmt.Errorf("%w (%v)", ErrAuthTimeout, s.cfg.authTimeout))
	c.end(c.lost(ErrAuthTimeout), false)
}

// The scavenger hands the memory of ended connections back to the
// operating system soon after a burst of them: Go's runtime returns freed
// memory only after a collection has found it free, and an idle node may
// not collect for two minutes (the forced collection), so the memory of
// connections that a burst of strangers opened and left stayed resident
// (issue 42: 692 MB 90 s after they closed). Once connections holding
// scavengeAfter bytes in all (their read blocks and a fixed share for
// their goroutines and state) have ended since the last time, it waits
// scavengeDelay for the rest of the burst to end too and runs
// debug.FreeOSMemory, a collection that returns what it frees at once; at
// most once per scavengeEvery, so a stream of connections costs at most
// one forced collection every scavengeEvery.
type scavenger struct {
	freed int
	last  time.Time
	armed bool
}

const (
	scavengeAfter = 16 << 20
	scavengeDelay = time.Second
	scavengeEvery = 30 * time.Second
	// connOverhead is what a connection's goroutines and state take
	// besides its read blocks (WithMaxConns).
	connOverhead = 16 << 10
)

// released notes the memory of a connection that ended. Called with mu
// held, from the connection's onEnd, whose share of wg is still held.
func (s *Server) released(n int) {
	sc := &s.scav
	sc.freed += n
	if sc.freed < scavengeAfter || sc.armed || s.closed {
		return
	}
	sc.armed = true
	wait := max(scavengeDelay, time.Until(sc.last.Add(scavengeEvery)))
	s.wg.Add(1)
	go s.scavenge(wait)
}

func (s *Server) scavenge(wait time.Duration) {
	defer s.wg.Done()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.done:
		return
	}
	s.mu.Lock()
	s.scav = scavenger{last: time.Now()}
	s.mu.Unlock()
	debug.FreeOSMemory()
}

// Close stops accepting, closes every connection (flushing what each has
// queued, within the close timeout) and waits for all their goroutines.
// It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	close(s.done)
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	err := s.ln.Close()
	for _, c := range conns {
		c.end(ErrClosed, true)
	}
	s.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// sourceIP returns the address a connection comes from; connections
// whose address is not an IP share the zero Addr.
func sourceIP(nc net.Conn) netip.Addr {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// refuse closes a connection over a limit (WithMaxConns,
// WithMaxConnsPerIP, WithMaxUnprovedConns) at once, and logs it,
// rate-limited per source.
func (s *Server) refuse(nc net.Conn, ip netip.Addr, why string) {
	if log, held := s.refusals.note(ip, time.Now()); log {
		s.cfg.logger.Warn("fero: transport: refusing connection: "+why, "remote", nc.RemoteAddr(),
			"limit", s.cfg.maxConns, "limit_per_address", s.cfg.maxConnsPerIP,
			"unproved_limit", s.cfg.maxUnproved, "unproved_limit_per_address", s.cfg.maxUnprovedIP,
			"new_per_second_per_address", s.cfg.newConnRate, "refused_since_last_line", held)
	}
	// A reset, not a close: the socket is freed now, rather than linger
	// in the kernel for a peer that may never close its side.
	raw := nc
	if tc, ok := nc.(*tls.Conn); ok {
		raw = tc.NetConn() // the handshake has not begun: nothing to say over TLS
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	nc.Close()
}

// refusalLogEvery is how often refused connections from one source are
// logged at most.
const refusalLogEvery = 5 * time.Second

// refusalLogKeys bounds the sources a refusalLog tells apart; beyond it,
// new sources share one line.
const refusalLogKeys = 1024

// refusalLog lets through one log line per source address per
// refusalLogEvery, so that whoever can reach the port cannot flood the log
// by opening connections over the limit, and counts the refusals it held
// back, for the next line to report.
type refusalLog = rateLog[netip.Addr]

// rateLog is refusalLog for any key: a source address, or a source and
// the kind of line (a connection's warnings).
type rateLog[K comparable] struct {
	mu     sync.Mutex
	seen   map[K]refusalEntry
	pruned time.Time
}

type refusalEntry struct {
	at   time.Time // when the last line for the source was logged
	held int       // refusals not logged since
}

// note records a refusal of a connection from ip at now, and reports
// whether to log it, with the number held back before it.
func (l *rateLog[K]) note(ip K, now time.Time) (log bool, held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = make(map[K]refusalEntry)
	}
	e, ok := l.seen[ip]
	if !ok && len(l.seen) >= refusalLogKeys {
		if now.Sub(l.pruned) >= refusalLogEvery {
			// At most once per interval: under a flood from many
			// sources this is the expensive part.
			for k, e := range l.seen {
				if now.Sub(e.at) >= refusalLogEvery {
					delete(l.seen, k)
				}
			}
			l.pruned = now
		}
		if len(l.seen) >= refusalLogKeys {
			var zero K
			ip = zero // too many sources: the rest share one line
			e, ok = l.seen[ip]
		}
	}
	if ok && now.Sub(e.at) < refusalLogEvery {
		e.held++
		l.seen[ip] = e
		return false, 0
	}
	l.seen[ip] = refusalEntry{at: now}
	return true, e.held
}
