//go:build !unix

package transport

import "net"

// directWriter returns nil: without a non-blocking write, only the writer
// goroutine writes.
func directWriter(net.Conn) func([]byte) (int, error) { return nil }
