//go:build linux

package transport

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout sets TCP_USER_TIMEOUT on a TCP connection: the kernel
// closes it once data it sent has gone unacknowledged for d. Without it, a
// connection whose packets were dropped for a while (a network split) is
// not broken but waits in retransmission backoff, which doubles with every
// try: after a 50 s split the next retry came about 50 s after the heal,
// and everything sent meanwhile waited behind it (fault suite seed 473: a
// node's syncs waited 30 s and more for answers from two peers it had
// been cut off from). A closed connection is dialed afresh. A peer that
// is slow or paused still acknowledges (its kernel does), so only a cut
// link, or a dead host, trips it.
func setUserTimeout(nc net.Conn, d time.Duration) {
	tc, ok := nc.(*net.TCPConn)
	if !ok || d <= 0 {
		return
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	})
}

// userTimeout reads TCP_USER_TIMEOUT back (for tests); 0 if unknown.
func userTimeout(nc net.Conn) time.Duration {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return 0
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0
	}
	var ms int
	_ = rc.Control(func(fd uintptr) {
		ms, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	})
	return time.Duration(ms) * time.Millisecond
}
