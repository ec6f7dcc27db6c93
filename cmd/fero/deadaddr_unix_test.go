//go:build unix

package main

import (
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// deadAddr returns a loopback address where nothing listens and nothing
// can start to while the test runs: a TCP socket is bound to its port
// without listening (a connect is refused), and a UDP socket too. A port
// freeAddr found free may be taken by another test's server before it is
// dialed; TestServeWarnsWhenNoSeedAnswers once found its "nobody" seed
// answering.
func deadAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	port := sa.(*syscall.SockaddrInet4).Port
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	require.NoError(t, err)
	t.Cleanup(func() { _ = u.Close() })
	return u.LocalAddr().String()
}
