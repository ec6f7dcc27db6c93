package transport

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// FuzzConnStream writes arbitrary bytes, with or without a valid preface
// before them and split into writes at points the input chooses, to a
// connection a Server accepted, then ends its side of the stream. The
// server must never panic; whatever the bytes did (calls answered, the
// connection closed on bad input), the connection ends once the stream
// does, its goroutines and its place in the server's count with it; and
// the server goes on serving a fresh client. Small limits keep each input
// cheap.
func FuzzConnStream(f *testing.F) {
	const maxFrame = 64 << 10
	mux := NewMux()
	mux.HandleFunc(opEcho, func(r *Request) { _ = r.Reply(r.Payload()) })
	mux.HandleFunc(opFail, func(r *Request) { _ = r.Fail(errs.New(405, "method not allowed")) })
	mux.HandleFunc(opPanic, func(r *Request) { panic("boom") })
	mux.HandleFunc(opStream, func(r *Request) {
		for i := range min(len(r.Payload()), 4) {
			if r.Chunk(r.Payload()[i:i+1]) != nil {
				break
			}
		}
		_ = r.Reply(nil)
	})
	// Answered when its caller cancels it or the connection ends: it
	// stays open meanwhile, so the in-flight limits and cancels apply.
	mux.HandleFunc(opWait, func(r *Request) {
		if r.Mode() == ModeSend {
			return // its Request is reused: nothing may keep it
		}
		go func() {
			<-r.Context().Done()
			_ = r.Fail(r.Context().Err())
		}()
	})
	accepted := make(chan *Conn, 64)
	srv, err := Listen("127.0.0.1:0", mux,
		// The connect timeout is the input's deadline: a fuzzer at nice
		// 19 on a loaded machine once went more than a second without
		// reading a fresh client's preface, and the server closed it.
		WithMaxFrame(maxFrame), WithFrameTimeout(500*time.Millisecond), WithConnectTimeout(10*time.Second),
		WithCloseTimeout(100*time.Millisecond), WithMaxInflight(4), WithMaxInflightBytes(128<<10),
		WithMaxConns(16), WithMaxConnsPerIP(16),
		WithOnConn(func(c *Conn) { accepted <- c }))
	require.NoError(f, err)
	f.Cleanup(func() { srv.Close() })
	addr := srv.Addr().String()

	frame := func(kind wire.Kind, id uint64, op uint32, payload []byte) []byte {
		return wire.AppendFrame(nil, kind, id, op, payload)
	}
	valid := bytes.Join([][]byte{
		frame(wire.KindCancel, 0, 0, nil), // what a dialing Conn sends first
		frame(wire.KindCall, 1, opEcho, []byte("hello")),
		frame(wire.KindStream, 2, opStream, []byte("abc")),
		frame(wire.KindCredit, 2, 0, appendCredit(nil, 4, 1<<20)),
		frame(wire.KindCredit, 9, 0, []byte{0x92, 0xff}), // an unknown stream, a bad payload
		frame(wire.KindCall, 3, opWait, nil),
		frame(wire.KindCancel, 3, 0, nil),
		frame(wire.KindSend, 0, opEcho, []byte("one-way")),
		frame(wire.KindCall, 4, opFail, nil),
		frame(wire.KindCall, 5, opPanic, nil),
		frame(wire.KindCall, 6, 999, nil),
		frame(wire.KindReply, 7, 0, []byte("unasked")),
	}, nil)
	nested := append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 1<<20)...)
	nested[len(nested)-1] = 0xc0
	for _, pre := range []bool{true, false} {
		f.Add(valid, []byte{}, pre)
		f.Add(valid, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, pre) // split early, byte by byte
		f.Add(frame(wire.KindCall, 1, opEcho, nested[:maxFrame-16]), []byte{3, 200}, pre)
		f.Add(frame(wire.KindCall, 1, opEcho, nested), []byte{}, pre) // over the frame limit
		f.Add(nested, []byte{}, pre)
		f.Add([]byte("\xde\xad\xbe\xef garbage"), []byte{1}, pre)
		f.Add([]byte{}, []byte{}, pre)
	}
	// Many calls that stay open, past the in-flight limit.
	var open []byte
	for id := range uint64(8) {
		open = append(open, frame(wire.KindCall, id+1, opWait, nil)...)
	}
	f.Add(append(open, frame(wire.KindCall, 9, opEcho, nil)...), []byte{}, true)

	f.Fuzz(func(t *testing.T, data, splits []byte, pre bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		nc, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer nc.Close()
		var sc *Conn // the server's end
		select {
		case sc = <-accepted:
		case <-ctx.Done():
			t.Fatal("the server accepted no connection: has it lost count of the ended ones?")
		}
		require.Equal(t, nc.LocalAddr().String(), sc.RemoteAddr().String())
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			_, _ = io.Copy(io.Discard, nc) // whatever the server answers, until it closes
		}()

		stream := data
		if pre {
			stream = append(preface[:len(preface):len(preface)], data...)
		}
		for i := 0; len(stream) > 0; i++ {
			n := len(stream)
			if i < len(splits) {
				n = min(n, int(splits[i])+1)
			}
			if _, err := nc.Write(stream[:n]); err != nil {
				break // the server closed the connection on bad input
			}
			stream = stream[n:]
		}
		_ = nc.(*net.TCPConn).CloseWrite() // fails if the server has reset the connection
		select {
		case <-drained:
		case <-ctx.Done():
			t.Fatal("the server kept the connection after its stream ended")
		}
		select {
		case <-sc.Done():
		case <-ctx.Done():
			t.Fatal("the server's end of the connection did not finish")
		}
		require.Error(t, sc.Err())
		srv.mu.Lock()
		_, held := srv.conns[sc]
		srv.mu.Unlock()
		require.False(t, held, "the server still counts an ended connection")

		// A fresh client is served.
		c, err := DialConn(ctx, addr)
		require.NoError(t, err)
		defer c.Close()
		select {
		case <-accepted:
		case <-ctx.Done():
			t.Fatal("the server accepted no fresh client")
		}
		reply, err := c.Call(ctx, opEcho, []byte("ping"))
		require.NoError(t, err)
		require.Equal(t, "ping", string(reply))
	})
}
