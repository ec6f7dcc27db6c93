package transport

import (
	"crypto/tls"
	"errors"
	"net"
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
	closed bool
	wg     sync.WaitGroup
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
	s := &Server{ln: ln, cfg: cfg, handler: h, conns: make(map[*Conn]struct{})}
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
		setNoDelay(nc)
		setUserTimeout(nc, s.cfg.userTimeout)
		c := newConn(nc, &s.cfg, s.handler)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		c.onEnd = func() {
			s.mu.Lock()
			delete(s.conns, c)
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
