package echo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fero-go/fero/bench"
)

// serve starts an in-process server and returns its address; cleanup stops
// it and checks that Serve returned cleanly.
func serve(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- System{}.Serve(ctx, bench.ServeOptions{Addr: "127.0.0.1:0"}, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-errc:
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc)
	})
	return addr
}

func dial(t *testing.T, addr string) *Conn {
	t.Helper()
	c, err := System{}.Dial(context.Background(), bench.DialOptions{Servers: []string{addr}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c.(*Conn)
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSendThenSyncCountsEveryFrame(t *testing.T) {
	c := dial(t, serve(t))
	ctx := context.Background()
	payload := make([]byte, 100)
	for i := 0; i < 50_000; i++ {
		require.NoError(t, c.Send(ctx, payload))
	}
	require.NoError(t, c.Flush(ctx))
	require.NoError(t, c.Sync(ctx))
	// A second batch: the count is per connection and cumulative.
	for i := 0; i < 10; i++ {
		require.NoError(t, c.Send(ctx, nil))
	}
	require.NoError(t, c.Sync(ctx))
}

func TestGoRepliesInOrderWithPayload(t *testing.T) {
	c := dial(t, serve(t))
	ctx := context.Background()
	const n = 5000
	var got []uint32
	var mu sync.Mutex
	all := make(chan struct{})
	for i := uint32(0); i < n; i++ {
		p := binary.BigEndian.AppendUint32(nil, i)
		require.NoError(t, c.Go(ctx, p, func(reply []byte, err error) {
			require.NoError(t, err)
			mu.Lock()
			got = append(got, binary.BigEndian.Uint32(reply))
			if len(got) == n {
				close(all)
			}
			mu.Unlock()
		}))
	}
	require.NoError(t, c.Flush(ctx))
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("replies did not arrive")
	}
	for i, v := range got {
		require.EqualValues(t, i, v)
	}
}

func TestCallInlineAndAfterReaderStarted(t *testing.T) {
	c := dial(t, serve(t))
	ctx := context.Background()
	reply, err := c.Call(ctx, []byte("ping"))
	require.NoError(t, err)
	assert.Equal(t, []byte("ping"), reply)
	// Once Go started the reader, Call goes through it.
	done := make(chan error, 1)
	require.NoError(t, c.Go(ctx, []byte("x"), func(_ []byte, err error) { done <- err }))
	reply, err = c.Call(ctx, []byte("pong"))
	require.NoError(t, err)
	assert.Equal(t, []byte("pong"), reply)
	require.NoError(t, <-done)
}

func TestFramesLargerThanTheBuffers(t *testing.T) {
	c := dial(t, serve(t))
	ctx := context.Background()
	big := bytes.Repeat([]byte("0123456789abcdef"), 3*bufSize/16+3)
	reply, err := c.Call(ctx, big)
	require.NoError(t, err)
	assert.Equal(t, big, reply)
	done := make(chan []byte, 1)
	require.NoError(t, c.Go(ctx, big, func(r []byte, err error) {
		require.NoError(t, err)
		done <- append([]byte(nil), r...)
	}))
	require.NoError(t, c.Flush(ctx))
	assert.Equal(t, big, <-done)
}

func TestCloseFailsPendingOnce(t *testing.T) {
	// A server that reads and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		s, err := ln.Accept()
		if err == nil {
			accepted <- s
		}
	}()
	c := dial(t, ln.Addr().String())
	server := <-accepted
	defer server.Close()
	var calls []error
	var mu sync.Mutex
	for i := 0; i < 3; i++ {
		require.NoError(t, c.Go(context.Background(), []byte("x"), func(_ []byte, err error) {
			mu.Lock()
			calls = append(calls, err)
			mu.Unlock()
		}))
	}
	require.NoError(t, c.Close())
	// Close returned: every callback has run, exactly once.
	require.Len(t, calls, 3)
	for _, err := range calls {
		assert.ErrorIs(t, err, bench.ErrClosed)
	}
	assert.ErrorIs(t, c.Go(context.Background(), nil, func([]byte, error) {}), bench.ErrClosed)
	assert.ErrorIs(t, c.Send(context.Background(), nil), bench.ErrClosed)
	assert.NoError(t, c.Close(), "Close is idempotent")
}

func TestCallHonoursContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if s, err := ln.Accept(); err == nil {
			defer s.Close()
			<-stop // read nothing, answer nothing
		}
	}()
	defer wg.Wait()
	defer close(stop)
	c := dial(t, ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = c.Call(ctx, []byte("x"))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestCallAfterACancelledCallFails: a Call whose own read was cut off
// leaves the stream at an unknown point; its reply may still come. The
// next Call must fail, not take that late reply for its own.
func TestCallAfterACancelledCallFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	release := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		br, bw := bufio.NewReader(s), bufio.NewWriter(s)
		for {
			flags, n, err := readHeader(br)
			if err != nil {
				return
			}
			payload := make([]byte, n)
			if _, err := io.ReadFull(br, payload); err != nil {
				return
			}
			<-release // answers only once the caller has given up
			if writeHeader(bw, flags, len(payload)) != nil {
				return
			}
			_, _ = bw.Write(payload)
			if bw.Flush() != nil {
				return
			}
		}
	}()
	defer wg.Wait()
	c := dial(t, ln.Addr().String())
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = c.Call(short, []byte("a"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(release)
	ctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	reply, err := c.Call(ctx, []byte("b"))
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the connection is given up with the first call's error")
	assert.Nil(t, reply, "not the first call's late reply")
	assert.NoError(t, c.Close())
}

func TestServerClosesOversizedFrame(t *testing.T) {
	addr := serve(t)
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.Write(binary.BigEndian.AppendUint32(nil, MaxPayload+1))
	require.NoError(t, err)
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = nc.Read(make([]byte, 1))
	assert.Error(t, err, "the server drops the connection")
	var ne net.Error
	assert.False(t, errors.As(err, &ne) && ne.Timeout(), "closed, not timed out")
}

func TestWouldBlock(t *testing.T) {
	frame := func(n int) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(n)), make([]byte, n)...)
	}
	br := bufio.NewReaderSize(bytes.NewReader(append(frame(3), frame(10)[:6]...)), 64)
	assert.True(t, wouldBlock(br), "nothing buffered yet")
	_, _ = br.Peek(1)
	assert.False(t, wouldBlock(br), "a whole frame is buffered")
	_, _, err := readHeader(br)
	require.NoError(t, err)
	_, _ = br.Discard(3)
	assert.True(t, wouldBlock(br), "only part of the next frame is buffered")
}
