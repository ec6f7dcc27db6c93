package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/errs"
)

// flowServer answers every stream with the chunks sizes names, sent with
// ChunkWait, counting each one sent; the end (nil or ChunkWait's error)
// goes to ended.
func flowServer(t *testing.T, sizes []int, sent *atomic.Int64, ended chan<- error) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", HandlerFunc(func(r *Request) {
		go func() {
			for i, n := range sizes {
				if err := r.ChunkWait(context.Background(), bytes.Repeat([]byte{byte(i)}, n)); err != nil {
					ended <- err
					return
				}
				sent.Add(1)
			}
			ended <- r.Reply([]byte("end"))
		}()
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// waitStill waits until sent reaches want, then checks that it stays
// there while the caller reads nothing: the sender waits for credit.
func waitStill(t *testing.T, sent *atomic.Int64, want int64) {
	t.Helper()
	require.Eventually(t, func() bool { return sent.Load() >= want }, 10*time.Second, time.Millisecond)
	// Without flow control the rest of the stream goes at once: 200 ms is
	// ages for a loopback sender with nothing to wait for.
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, want, sent.Load(), "sent beyond the window")
}

// TestStreamWindowChunks: a caller that grants 4 chunks and reads none
// gets 4; reading half the window lets 2 more go; the rest arrives in
// order as it reads, then the end.
func TestStreamWindowChunks(t *testing.T) {
	var sent atomic.Int64
	ended := make(chan error, 1)
	sizes := make([]int, 20)
	for i := range sizes {
		sizes[i] = 10
	}
	srv := flowServer(t, sizes, &sent, ended)
	p := dialTest(t, srv.Addr().String())
	st, err := p.StreamWindow(ctxT(t), 1, nil, 4)
	require.NoError(t, err)
	waitStill(t, &sent, 4)
	for range 2 {
		_, err := st.Recv()
		require.NoError(t, err)
	}
	waitStill(t, &sent, 6)
	for i := 2; i < len(sizes); i++ {
		b, err := st.Recv()
		require.NoError(t, err)
		require.Equal(t, bytes.Repeat([]byte{byte(i)}, 10), b, "chunk %d", i)
	}
	_, err = st.Recv()
	require.Equal(t, io.EOF, err)
	require.Equal(t, "end", string(st.Final()), "the final reply, apart from the chunks")
	require.NoError(t, <-ended)
}

// TestStreamWindowBytes: the byte window holds back chunks the chunk
// window would let go, and one chunk larger than the whole byte window
// goes once nothing is outstanding, and is accepted.
func TestStreamWindowBytes(t *testing.T) {
	var sent atomic.Int64
	ended := make(chan error, 1)
	sizes := []int{300, 300, 300, 300, 5000, 10}
	srv := flowServer(t, sizes, &sent, ended)
	p := dialTest(t, srv.Addr().String(), WithStreamBuffer(1000))
	st, err := p.StreamWindow(ctxT(t), 1, nil, 100)
	require.NoError(t, err)
	waitStill(t, &sent, 3) // 3 × (300+24) fit in 1000 bytes, a fourth does not
	for i, n := range sizes {
		b, err := st.Recv()
		require.NoError(t, err, "chunk %d", i)
		require.Len(t, b, n)
	}
	_, err = st.Recv()
	require.Equal(t, io.EOF, err)
	require.NoError(t, <-ended)
}

// TestStreamWindowCancel: a sender waiting for credit learns at once that
// its caller went away.
func TestStreamWindowCancel(t *testing.T) {
	var sent atomic.Int64
	ended := make(chan error, 1)
	srv := flowServer(t, []int{1, 1, 1, 1}, &sent, ended)
	p := dialTest(t, srv.Addr().String())
	st, err := p.StreamWindow(ctxT(t), 1, nil, 1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return sent.Load() == 1 }, 10*time.Second, time.Millisecond)
	st.Close()
	select {
	case err := <-ended:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("the sender still waits for credit after its caller closed the stream")
	}
}

// TestChunkWaitNeedsAStream: ChunkWait on a call, and the window's bounds.
func TestChunkWaitNeedsAStream(t *testing.T) {
	got := make(chan error, 1)
	srv, err := Listen("127.0.0.1:0", HandlerFunc(func(r *Request) {
		got <- r.ChunkWait(context.Background(), nil)
		_ = r.Reply(nil)
	}))
	require.NoError(t, err)
	defer srv.Close()
	p := dialTest(t, srv.Addr().String())
	_, err = p.Call(ctxT(t), 1, nil)
	require.NoError(t, err)
	require.True(t, errors.Is(<-got, ErrNotStream))
	_, err = p.StreamWindow(ctxT(t), 1, nil, 0)
	require.Equal(t, errs.InvalidArgument, errs.CodeOf(err))
}
