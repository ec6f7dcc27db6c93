package fero

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// item is what the test handlers stream.
type item struct {
	Seq  int    `msgpack:"seq"`
	Node string `msgpack:"node"`
}

// streamHandler answers COUNT with the number of items its payload says,
// and a trailer; TICK with an item every 10 ms until its context ends;
// FAIL with an error after one item. It counts the items it sent per key.
type streamHandler struct {
	mu    sync.Mutex
	sent  map[string]*atomic.Int64
	ended map[string]chan error // the error a handler's Send or context ended with
}

func newStreamHandler() *streamHandler {
	return &streamHandler{sent: map[string]*atomic.Int64{}, ended: map[string]chan error{}}
}

func (h *streamHandler) counter(key string) (*atomic.Int64, chan error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sent[key] == nil {
		h.sent[key], h.ended[key] = new(atomic.Int64), make(chan error, 16)
	}
	return h.sent[key], h.ended[key]
}

func (h *streamHandler) handle(ctx context.Context, req *Request) (any, error) {
	if !req.Streaming() {
		return req.Next(ctx)
	}
	sent, ended := h.counter(req.Key)
	id := req.Resource().ID()
	switch req.Verb {
	case "COUNT":
		var n int
		if err := req.Decode(&n); err != nil {
			return nil, err
		}
		for i := range n {
			if err := req.Send(item{Seq: i, Node: id}); err != nil {
				ended <- err
				return nil, err
			}
			sent.Add(1)
		}
		if err := req.SetReplyHeader("x-count", fmt.Sprint(n)); err != nil {
			return nil, err
		}
		return nil, nil
	case "TICK":
		for i := 0; ; i++ {
			if err := req.Send(item{Seq: i, Node: id}); err != nil {
				ended <- err
				return nil, err
			}
			sent.Add(1)
			select {
			case <-ctx.Done():
				ended <- ctx.Err()
				return nil, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	case "FAIL":
		if err := req.Send(item{Node: id}); err != nil {
			return nil, err
		}
		return nil, Errorf(CodeNotFound, "no such thing")
	}
	return nil, Errorf(CodeUnimplemented, "no %s", req.Verb)
}

// streamPair opens two servers, a and b, that answer with a
// streamHandler, and a Remote dialed to b.
func streamPair(t *testing.T, seed uint64) (a *Resource, rc *Remote, h *streamHandler) {
	c := newTestCluster(t, seed)
	h = newStreamHandler()
	a, b := c.open("a", WithHandler(h.handle)), c.open("b", WithHandler(h.handle))
	c.settle(2)
	rc, err := Dial(ctxT(t), b.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })
	return a, rc, h
}

// TestStream (issue 20): a stream's items arrive in order, then its end
// with the handler's trailer, from an owner in the caller's process, on
// another server, and relayed to a Remote through a node that does not
// own the key; a handler's error reaches the reader with its code; a
// built-in verb does not stream; a call to a streaming handler is not a
// stream.
func TestStream(t *testing.T) {
	a, rc, _ := streamPair(t, 11)
	ctx := ctxT(t)

	for _, tc := range []struct {
		name   string
		via    StreamCaller
		owner  string
		prefix string
	}{
		{"local", a, "a", "l"},
		{"remote", a, "b", "r"},
		{"relayed", rc, "a", "f"},
		{"remote's own node", rc, "b", "o"},
	} {
		key := keyOwnedBy(a, tc.owner, tc.prefix)
		var got []item
		var trailer string
		require.NoError(t, retry(ctx, func() error {
			got = got[:0]
			s, err := tc.via.Stream(ctx, "COUNT", key, 300)
			if err != nil {
				return err
			}
			defer s.Close()
			for {
				var it item
				err := s.Recv(&it)
				if err == io.EOF {
					trailer = s.Trailer().Get("X-Count")
					return nil
				}
				if err != nil {
					return err
				}
				got = append(got, it)
			}
		}), tc.name)
		require.Len(t, got, 300, tc.name)
		for i, it := range got {
			require.Equal(t, item{Seq: i, Node: tc.owner}, it, tc.name)
		}
		assert.Equal(t, "300", trailer, tc.name)
	}

	// The trailers also reach a ReplyHeader the context carries, as a
	// call's reply headers do (how a typed client delivers them).
	for _, via := range []StreamCaller{a, rc} {
		var h ReplyHeader
		s, err := via.Stream(WithReplyHeader(ctx, &h), "COUNT", keyOwnedBy(a, "b", "t"), 2)
		require.NoError(t, err)
		require.NoError(t, ForEach(s, func(*item) error { return nil }))
		assert.Equal(t, "2", h.Get("x-count"))
	}

	// Items, the iterator.
	s, err := rc.Stream(ctx, "COUNT", keyOwnedBy(a, "a", "i"), 5)
	require.NoError(t, err)
	var seqs []int
	for it, err := range Items[item](s) {
		require.NoError(t, err)
		seqs = append(seqs, it.Seq)
	}
	assert.Equal(t, []int{0, 1, 2, 3, 4}, seqs)

	// A handler's error, after an item.
	for _, via := range []StreamCaller{a, rc} {
		s, err := via.Stream(ctx, "FAIL", keyOwnedBy(a, "b", "e"), nil)
		require.NoError(t, err)
		var it item
		require.NoError(t, s.Recv(&it))
		err = s.Recv(&it)
		assert.Equal(t, CodeNotFound, CodeOf(err), "%v", err)
		assert.Equal(t, err, s.Recv(&it), "an ended stream stays ended")
	}

	// Built-in verbs do not stream; a call to a streaming verb is a call.
	s, err = a.Stream(ctx, VerbGet, keyOwnedBy(a, "b", "g"), nil)
	require.NoError(t, err)
	assert.Equal(t, CodeUnimplemented, CodeOf(s.Recv(nil)))
	err = a.Call(ctx, "COUNT", keyOwnedBy(a, "b", "g"), 1, nil)
	assert.Equal(t, CodeUnimplemented, CodeOf(err), "%v", err)
}

// TestStreamBackpressure (issue 20): a handler streaming to a reader that
// reads nothing gets at most a window ahead, whether the reader is in
// its process, on another node, or behind a relay (a window per hop);
// reading lets it go on.
func TestStreamBackpressure(t *testing.T) {
	a, rc, h := streamPair(t, 12)
	ctx := ctxT(t)
	const window = 64
	for _, tc := range []struct {
		name  string
		via   StreamCaller
		owner string
		ahead int64
	}{
		{"local", a, "a", window},
		{"remote", a, "b", window},
		{"relayed", rc, "a", 2*window + 1}, // the relay's window, its item in hand, and the caller's
	} {
		key := keyOwnedBy(a, tc.owner, "bp"+tc.name)
		sent, _ := h.counter(key)
		s, err := tc.via.Stream(ctx, "COUNT", key, 1000)
		require.NoError(t, err)
		var first item
		require.NoError(t, retry(ctx, func() error { return s.Recv(&first) }), tc.name)
		require.Eventually(t, func() bool { return sent.Load() >= window }, 10*time.Second, time.Millisecond, tc.name)
		// Unchecked, the handler would send all 1,000 in a few ms.
		time.Sleep(300 * time.Millisecond)
		assert.LessOrEqual(t, sent.Load(), tc.ahead+1, "%s: sent beyond the window", tc.name)
		n := 1
		for {
			err := s.Recv(nil)
			if err == io.EOF {
				break
			}
			require.NoError(t, err, tc.name)
			n++
		}
		assert.Equal(t, 1000, n, tc.name)
		s.Close()
	}
}

// TestStreamCancel (issue 20): the reader's Close, and the end of its
// context, end the handler's context and fail its Send, on a local
// owner, a remote one and through a relay; the handler's deadline is
// the caller's.
func TestStreamCancel(t *testing.T) {
	a, rc, h := streamPair(t, 13)
	ctx := ctxT(t)
	for _, tc := range []struct {
		name  string
		via   StreamCaller
		owner string
	}{{"local", a, "a"}, {"remote", a, "b"}, {"relayed", rc, "a"}} {
		for _, how := range []string{"close", "cancel"} {
			key := keyOwnedBy(a, tc.owner, "c"+tc.name+how)
			_, ended := h.counter(key)
			sctx, cancel := context.WithCancel(ctx)
			s, err := tc.via.Stream(sctx, "TICK", key, nil)
			require.NoError(t, err)
			require.NoError(t, retry(ctx, func() error { return s.Recv(nil) }), tc.name)
			if how == "close" {
				s.Close()
			} else {
				cancel()
			}
			select {
			case err := <-ended:
				assert.ErrorIs(t, err, context.Canceled, "%s %s", tc.name, how)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s %s: the handler still streams", tc.name, how)
			}
			cancel()
			require.Error(t, s.Recv(nil))
		}
	}

	// The caller's deadline ends the handler too, as a deadline.
	key := keyOwnedBy(a, "b", "d")
	_, ended := h.counter(key)
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	s, err := a.Stream(dctx, "TICK", key, nil)
	require.NoError(t, err)
	var last error
	for last == nil {
		last = s.Recv(nil)
	}
	// The caller's own context, or the owner's copy of the deadline
	// (which ends the handler, whose error then arrives), whichever first.
	assert.Equal(t, CodeDeadlineExceeded, CodeOf(last), "%v", last)
	select {
	case err := <-ended:
		assert.True(t, errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled), "%v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still streams past its caller's deadline")
	}
}

// TestStreamOwnerMoves (issue 20): when a server joins and takes over
// some of the keys being streamed, each of those streams ends with
// ErrStreamMoved at its reader, and the others carry on; opened again, a
// moved stream runs at the new owner.
func TestStreamOwnerMoves(t *testing.T) {
	c := newTestCluster(t, 14)
	h := newStreamHandler()
	a := c.open("a", WithHandler(h.handle))
	c.open("b", WithHandler(h.handle))
	c.settle(2)
	ctx := ctxT(t)
	type run struct {
		key   string
		s     *Stream
		owner string
		ended chan error
	}
	var runs []*run
	for i := range 24 {
		key := fmt.Sprint("w", i)
		s, err := a.Stream(ctx, "TICK", key, nil)
		require.NoError(t, err)
		var it item
		require.NoError(t, retry(ctx, func() error { return s.Recv(&it) }))
		r := &run{key: key, s: s, owner: it.Node, ended: make(chan error, 1)}
		runs = append(runs, r)
		go func() {
			for {
				var it item
				if err := s.Recv(&it); err != nil {
					r.ended <- err
					return
				}
			}
		}()
	}
	c.open("c", WithHandler(h.handle))
	c.settle(3)
	moved := 0
	for _, r := range runs {
		o, ok := a.node().Map().OwnerOfKey(r.key)
		require.True(t, ok)
		if o.ID == r.owner {
			continue
		}
		moved++
		select {
		case err := <-r.ended:
			require.ErrorIs(t, err, ErrStreamMoved, r.key)
			require.Equal(t, CodeUnavailable, CodeOf(err))
		case <-time.After(10 * time.Second):
			t.Fatalf("%s moved from %s to %s, and its stream goes on", r.key, r.owner, o.ID)
		}
		// Opened again, it runs at the new owner.
		var it item
		require.NoError(t, retry(ctx, func() error {
			s, err := a.Stream(ctx, "TICK", r.key, nil)
			if err != nil {
				return err
			}
			defer s.Close()
			return s.Recv(&it)
		}))
		assert.Equal(t, o.ID, it.Node, r.key)
	}
	require.Positive(t, moved, "the new server took none of 24 keys")
	for _, r := range runs {
		if o, _ := a.node().Map().OwnerOfKey(r.key); o.ID != r.owner {
			continue
		}
		select {
		case err := <-r.ended:
			t.Fatalf("%s stayed on %s, and its stream ended: %v", r.key, r.owner, err)
		default:
		}
		r.s.Close()
	}
	t.Logf("%d of %d streams moved", moved, len(runs))
}

// TestCloseEndsStreams: closing a node ends the stream handlers it runs,
// for a reader in its own process that reads nothing (whose context
// never ends) as for one on another node; Close does not wait for the
// readers.
func TestCloseEndsStreams(t *testing.T) {
	c := newTestCluster(t, 15)
	h := newStreamHandler()
	a, b := c.open("a", WithHandler(h.handle)), c.open("b", WithHandler(h.handle))
	c.settle(2)
	ctx := ctxT(t)
	var enders []chan error
	for _, via := range []*Resource{a, b} {
		key := keyOwnedBy(a, "a", "close"+via.ID())
		_, ended := h.counter(key)
		enders = append(enders, ended)
		s, err := via.Stream(context.Background(), "COUNT", key, 10000)
		require.NoError(t, err)
		t.Cleanup(s.Close)
		require.NoError(t, retry(ctx, func() error { return s.Recv(nil) }))
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Close waits for a stream handler whose reader reads nothing")
	}
	for _, ended := range enders {
		require.Error(t, <-ended)
	}
}

// TestStreamOwnerGone (issue 43): when the owner of a stream's key goes
// (here it closes; a crash drops the connection the same way), the
// reader got the lost connection's aborted, which the documented resume
// pattern (errors.Is ErrStreamMoved, open again) did not match. Now it
// gets ErrStreamMoved: through a server in another process, relayed
// through a server to a Remote, and at a Remote dialed to the owner
// itself; opened again, the stream runs at the new owner.
func TestStreamOwnerGone(t *testing.T) {
	c := newTestCluster(t, 16)
	h := newStreamHandler()
	a := c.open("a", WithHandler(h.handle))
	b := c.open("b", WithHandler(h.handle))
	c.open("c", WithHandler(h.handle))
	c.settle(3)
	ctx := ctxT(t)
	viaB, err := Dial(ctx, b.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { viaB.Close() })
	toA, err := Dial(ctx, a.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { toA.Close() })

	type reader struct {
		name, key string
		open      func(key string) (*Stream, error)
		ended     chan error
	}
	readers := []*reader{
		{name: "server b", open: func(k string) (*Stream, error) { return b.Stream(ctx, "TICK", k, nil) }},
		{name: "Remote through b", open: func(k string) (*Stream, error) { return viaB.Stream(ctx, "TICK", k, nil) }},
		{name: "Remote to the owner", open: func(k string) (*Stream, error) { return toA.Stream(ctx, "TICK", k, nil) }},
	}
	for i, r := range readers {
		r.key = keyOwnedBy(a, "a", fmt.Sprint("gone", i))
		r.ended = make(chan error, 1)
		s, err := r.open(r.key)
		require.NoError(t, err, r.name)
		var it item
		require.NoError(t, retry(ctx, func() error { return s.Recv(&it) }), r.name)
		require.Equal(t, "a", it.Node, r.name)
		go func() {
			for {
				if err := s.Recv(nil); err != nil {
					r.ended <- err
					return
				}
			}
		}()
	}
	require.NoError(t, a.Close())
	for _, r := range readers {
		select {
		case err := <-r.ended:
			require.ErrorIs(t, err, ErrStreamMoved, "%s: %v", r.name, err)
			require.Equal(t, CodeUnavailable, CodeOf(err), r.name)
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the owner is gone and the stream goes on", r.name)
		}
	}
	// The resume pattern: opened again, it runs at the new owner.
	for _, r := range readers[:2] {
		var it item
		require.NoError(t, retry(ctx, func() error {
			s, err := r.open(r.key)
			if err != nil {
				return err
			}
			defer s.Close()
			return s.Recv(&it)
		}), r.name)
		require.NotEqual(t, "a", it.Node, r.name)
	}
}

// TestStreamConnectionBreaks (issue 43): a Remote's connection to the
// owner of its stream breaks (the owner's host died, or a network cut:
// here a proxy between them resets both sides). The reader gets
// ErrStreamMoved, not the lost connection's aborted, and the resume
// pattern opens the stream again.
func TestStreamConnectionBreaks(t *testing.T) {
	c := newTestCluster(t, 17)
	h := newStreamHandler()
	a := c.open("a", WithHandler(h.handle))
	c.settle(1)
	ctx := ctxT(t)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	var mu sync.Mutex
	var conns []*net.TCPConn
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", a.Addr())
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in.(*net.TCPConn), out.(*net.TCPConn))
			mu.Unlock()
			go func() { _, _ = io.Copy(out, in) }()
			go func() { _, _ = io.Copy(in, out) }()
		}
	}()
	rc, err := Dial(ctx, l.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })
	s, err := rc.Stream(ctx, "TICK", "k", nil)
	require.NoError(t, err)
	require.NoError(t, retry(ctx, func() error { return s.Recv(nil) }))

	mu.Lock()
	for _, c := range conns {
		_ = c.SetLinger(0) // a reset, as from a host that is gone
		_ = c.Close()
	}
	mu.Unlock()
	var got error
	for got == nil {
		got = s.Recv(nil)
	}
	require.ErrorIs(t, got, ErrStreamMoved, "%v", got)
	require.Equal(t, CodeUnavailable, CodeOf(got))
	require.NoError(t, retry(ctx, func() error {
		s, err := rc.Stream(ctx, "TICK", "k", nil)
		if err != nil {
			return err
		}
		defer s.Close()
		return s.Recv(nil)
	}), "opened again")
}
