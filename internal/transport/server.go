package transport

import (
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/fero-go/fero/internal/errs"
)

// Server accepts connections and serves their requests with one Handler.
type Server struct {
	ln      net.Listener
	cfg     config
	handler Handler

	mu       sync.Mutex
	conns    map[*Conn]struct{}
	perIP    map[netip.Addr]int // connections in conns by source address
	closed   bool
	wg       sync.WaitGroup
	refusals refusalLog
}

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
	s := &Server{ln: ln, cfg: cfg, handler: h, conns: make(map[*Conn]struct{}), perIP: make(map[netip.Addr]int)}
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
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		total, fromIP := len(s.conns), s.perIP[ip]
		if total >= s.cfg.maxConns || fromIP >= s.cfg.maxConnsPerIP {
			s.mu.Unlock()
			s.refuse(nc, ip, total, fromIP)
			continue
		}
		setNoDelay(nc)
		setUserTimeout(nc, s.cfg.userTimeout)
		c := newConn(nc, &s.cfg, s.handler, true)
		s.conns[c] = struct{}{}
		s.perIP[ip]++
		s.wg.Add(1)
		s.mu.Unlock()
		c.onEnd = func() {
			s.mu.Lock()
			delete(s.conns, c)
			if s.perIP[ip]--; s.perIP[ip] == 0 {
				delete(s.perIP, ip)
			}
			s.mu.Unlock()
			s.wg.Done()
		}
		if s.cfg.onConn != nil {
			s.cfg.onConn(c)
		}
		c.start()
	}
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
// WithMaxConnsPerIP) at once, and logs it, rate-limited per source.
func (s *Server) refuse(nc net.Conn, ip netip.Addr, total, fromIP int) {
	if log, held := s.refusals.note(ip, time.Now()); log {
		limit, n, why := s.cfg.maxConnsPerIP, fromIP, "too many connections from this address"
		if total >= s.cfg.maxConns {
			limit, n, why = s.cfg.maxConns, total, "too many connections"
		}
		s.cfg.logger.Warn("fero: transport: refusing connection: "+why, "remote", nc.RemoteAddr(),
			"open", n, "limit", limit, "refused_since_last_line", held)
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
