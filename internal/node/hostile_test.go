package node

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/transport"
)

// nested returns about n bytes of msgpack: a map whose field "x" (which a
// hello does not have, so a decoder skips it) holds n-1 one-element arrays
// around nil. Skipped recursively, it goes n levels deep.
func nested(n int) []byte {
	b := append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, n)...)
	b[len(b)-1] = 0xc0
	return b
}

// TestNestedHelloIsRefused: a hello of 12 MB of nested arrays, sent by
// anyone who reaches the data port, overflowed the decoder's stack and
// ended the process ("fatal error: stack overflow", which no recover
// catches). The hello is refused with a clear error and the node serves
// on.
func TestNestedHelloIsRefused(t *testing.T) {
	nw := memnet.New(1)
	a := startNode(t, nw, "a", false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := transport.DialConn(ctx, a.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Call(ctx, OpHello, nested(12<<20))
	require.Error(t, err)
	require.Equal(t, errs.InvalidArgument, errs.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "malformed hello")

	// The node still answers.
	c2, err := transport.DialConn(ctx, a.Addr())
	require.NoError(t, err)
	defer c2.Close()
	_, err = c2.Call(ctx, OpHello, []byte{0x81, 0xa2, 'i', 'd', 0xa1, 'z'})
	require.NoError(t, err)
}
