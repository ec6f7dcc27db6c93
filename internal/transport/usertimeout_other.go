//go:build !linux

package transport

import (
	"net"
	"time"
)

// setUserTimeout does nothing here: TCP_USER_TIMEOUT is Linux's. A
// connection cut by a split recovers when TCP's retransmission does.
func setUserTimeout(net.Conn, time.Duration) {}

func userTimeout(net.Conn) time.Duration { return 0 }
