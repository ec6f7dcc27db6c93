//go:build unix

package transport

import (
	"errors"
	"net"
	"syscall"
)

// directWriter returns a function that writes to nc's socket without ever
// blocking: it makes one write system call and reports how much the socket
// took, possibly nothing. It returns nil for a connection that is not a
// plain TCP or Unix socket (TLS has records to frame), which leaves every
// write to the writer goroutine. The function is not safe for concurrent
// use; the outbox's busy flag serializes it.
func directWriter(nc net.Conn) func([]byte) (int, error) {
	if _, ok := nc.(*net.TCPConn); !ok {
		if _, ok := nc.(*net.UnixConn); !ok {
			return nil
		}
	}
	rc, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil
	}
	w := &rawWriter{rc: rc}
	w.fn = w.write // made once: a closure per call would allocate
	return w.Write
}

type rawWriter struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool
	b   []byte
	n   int
	err error
}

func (w *rawWriter) write(fd uintptr) bool {
	for {
		w.n, w.err = syscall.Write(int(fd), w.b)
		if !errors.Is(w.err, syscall.EINTR) {
			return true // done, whatever it took: never wait here
		}
	}
}

func (w *rawWriter) Write(b []byte) (int, error) {
	w.b = b
	werr := w.rc.Write(w.fn)
	n, err := w.n, w.err
	w.b, w.err = nil, nil
	if n < 0 {
		n = 0
	}
	if errors.Is(err, syscall.EAGAIN) {
		err = nil // the socket is full: the writer goroutine waits for room
	}
	if err == nil {
		err = werr
	}
	return n, err
}
