package node

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// TestRequestsReachTheOwner sends requests for many keys through every
// node (servers and a client): each is answered by the handler of the
// node its key's partition belongs to, built-in verbs fall through and
// commit, and the error paths come back coded.
func TestRequestsReachTheOwner(t *testing.T) {
	nw := memnet.New(11)
	var oneways atomic.Int64
	var nodes []*Node
	handler := func(self *string) Handler {
		return func(ctx context.Context, req *Request) ([]byte, error) {
			switch req.Verb {
			case "WHO":
				return msgpack.Marshal([]any{*self, req.Key, req.Partition, req.Payload})
			case "PING":
				oneways.Add(1)
				return nil, nil
			case "BOOM":
				panic("boom")
			case "DENY":
				return nil, errs.Errorf(errs.PermissionDenied, "no %s for you", req.Key)
			}
			return nodes[0].Builtin(ctx, req) // any node's built-in would do; it writes through the local node
		}
	}
	ids := []string{"a", "b", "c"}
	for i, id := range ids {
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[0].Membership().Local().Gossip}
		}
		id := id
		nodes = append(nodes, startNodeWith(t, nw, id, false, handler(&id), seeds...))
	}
	client := startNode(t, nw, "client", true, nodes[0].Membership().Local().Gossip)
	all := append(append([]*Node(nil), nodes...), client)
	require.Eventually(t, func() bool { return settled(all, 3) && Synced(context.Background(), nodes...) }, 20*time.Second, 10*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < 200; i++ {
		key := fmt.Sprintf("user%d", i)
		via := all[i%len(all)]
		payload, err := msgpack.Marshal(i)
		require.NoError(t, err)
		reply, err := via.Request(ctx, "WHO", key, payload, false)
		require.NoError(t, err, "via %s", via.ID())
		var got []any
		require.NoError(t, msgpack.Unmarshal(reply, &got))
		owner, ok := via.ownerOf(via.Store().PartitionOf(key))
		require.True(t, ok)
		assert.Equal(t, owner, got[0], "key %s via %s", key, via.ID())
		assert.Equal(t, key, got[1])
		assert.Equal(t, payload, got[3])
	}

	// Built-in verbs fall through to a commit; the reply comes after it.
	v, err := msgpack.Marshal("hello")
	require.NoError(t, err)
	_, err = client.Request(ctx, VerbUpdate, "greeting", v, false)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, n := range all {
			if got, ok := n.Store().Get("greeting"); !ok || got != "hello" {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	_, err = client.Request(ctx, VerbAdd, "greeting", v, false)
	assert.Equal(t, errs.FailedPrecondition, errs.CodeOf(err), "%v", err)

	// Error paths, through the client (two hops at most) and locally.
	for _, via := range []*Node{client, nodes[0]} {
		_, err = via.Request(ctx, "NOPE", "k", nil, false)
		assert.Equal(t, errs.Unimplemented, errs.CodeOf(err), "%v", err)
		assert.Contains(t, err.Error(), `unknown verb "NOPE"`)
		_, err = via.Request(ctx, "BOOM", "k", nil, false)
		assert.Equal(t, errs.Internal, errs.CodeOf(err), "%v", err)
		assert.Contains(t, err.Error(), "panicked")
		_, err = via.Request(ctx, "DENY", "k", nil, false)
		assert.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "%v", err)
		assert.Contains(t, err.Error(), "no k for you")
	}

	// A node that is not the owner forwards a request once; a request
	// that already took its hop is answered "retry", never forwarded.
	var key string
	for i := 0; key == ""; i++ {
		if o, _ := nodes[0].ownerOf(nodes[0].Store().PartitionOf(fmt.Sprint("f", i))); o != "a" {
			key = fmt.Sprint("f", i)
		}
	}
	raw, err := transport.DialConn(ctx, nodes[0].Addr())
	require.NoError(t, err)
	defer raw.Close()
	for hops, want := range []byte{replyOK, replyRetry} {
		// Encoded by the msgpack library, as any client could.
		b, err := msgpack.Marshal([]any{"WHO", key, nil, hops})
		require.NoError(t, err)
		reply, err := raw.Call(ctx, OpRequest, b)
		require.NoError(t, err)
		require.Equal(t, want, reply[0], "hops %d", hops)
		if want == replyOK {
			var got []any
			require.NoError(t, msgpack.Unmarshal(reply[1:], &got))
			owner, _ := nodes[0].ownerOf(nodes[0].Store().PartitionOf(key))
			assert.Equal(t, owner, got[0])
		}
	}

	// One-way requests run on the owner; nothing comes back.
	for i := 0; i < 50; i++ {
		_, err := all[i%len(all)].Request(ctx, "PING", fmt.Sprintf("p%d", i), nil, true)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return oneways.Load() == 50 }, 10*time.Second, 10*time.Millisecond)

	// A closed node refuses at once.
	require.NoError(t, client.Close())
	_, err = client.Request(ctx, "WHO", "k", nil, false)
	assert.ErrorIs(t, err, ErrClosed)
}

// TestCloseEndsWaitingHandlers: a handler that waits on its context does
// not hold up Close.
func TestCloseEndsWaitingHandlers(t *testing.T) {
	nw := memnet.New(12)
	started := make(chan struct{}, 1)
	h := func(ctx context.Context, req *Request) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	a := startNodeWith(t, nw, "a", false, h)
	b := startNode(t, nw, "b", true, a.Membership().Local().Gossip)
	require.Eventually(t, func() bool { return settled([]*Node{a, b}, 1) }, 20*time.Second, 10*time.Millisecond)
	// The caller retries its call (it may have run) until its deadline,
	// the only server gone: a shorter one keeps the test short.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { _, err := b.Request(ctx, "HANG", "k", nil, false); errc <- err }()
	<-started
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for a handler that waits on its context")
	}
	assert.Error(t, <-errc)
}

// remoteSpan is the remote span context a traceparent names.
func remoteSpan(t *testing.T, tp string) trace.SpanContext {
	t.Helper()
	sc, ok := parseTraceparent([]byte(tp))
	require.True(t, ok, tp)
	return sc
}

func withState(t *testing.T, sc trace.SpanContext, state string) trace.SpanContext {
	t.Helper()
	ts, err := trace.ParseTraceState(state)
	require.NoError(t, err)
	return sc.WithTraceState(ts)
}

// TestTraceparent: W3C Trace Context level 1's rules for reading a
// traceparent, and writing one back.
func TestTraceparent(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	sc, ok := parseTraceparent([]byte(tp))
	require.True(t, ok)
	require.True(t, sc.IsSampled())
	require.True(t, sc.IsRemote())
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", sc.TraceID().String())
	require.Equal(t, "b7ad6b7169203331", sc.SpanID().String())
	require.Equal(t, tp, string(appendTraceparent(nil, sc)))
	// A later version may append fields; flags other than sampled are not
	// kept.
	sc, ok = parseTraceparent([]byte("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03-what-follows"))
	require.True(t, ok)
	require.Equal(t, trace.FlagsSampled, sc.TraceFlags())
	for _, bad := range []string{
		"",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0",        // short
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",     // version 00 with more
		"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",       // version ff
		"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",       // upper case
		"00-00000000000000000000000000000000-b7ad6b7169203331-01",       // zero trace id
		"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",       // zero span id
		"00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",       // separator
		"cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01.later", // later version, bad separator
	} {
		_, ok := parseTraceparent([]byte(bad))
		require.False(t, ok, bad)
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = parseTraceparent([]byte(tp)) }), "reading a traceparent allocates")
}

func TestWireRequestRoundTrip(t *testing.T) {
	for _, w := range []wireRequest{
		{Verb: VerbUpdate, Key: "users.ada", Payload: []byte{0x81, 0xa1, 'n', 0x01}, Hops: 1},
		{Verb: "LOGIN", Key: strings.Repeat("k", 300)},
		{Verb: VerbUpdate, Key: "k", Wait: WaitSpec{Set: true, Kind: partition.WaitMajority}},
		{Verb: VerbRemove, Key: "k", Hops: 1, Wait: WaitSpec{Set: true, Kind: partition.WaitReplicas, K: 2}},
		{Verb: VerbAdd, Key: "k", Wait: WaitSpec{Set: true, Kind: partition.WaitNone}},
		{Verb: "LOGIN", Key: "k", Trace: remoteSpan(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
		{Verb: "LOGIN", Key: "k", Trace: remoteSpan(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")},
		{Verb: VerbUpdate, Key: "k", Hops: 1, Wait: WaitSpec{Set: true, Kind: partition.WaitMajority}, Meta: Meta{"a", "", "b", "2"}},
		{Verb: "WAIT", Key: "k", Timeout: 1500 * time.Millisecond},
		{Verb: "WAIT", Key: "k", Timeout: time.Microsecond, Wait: WaitSpec{Set: true, Kind: partition.WaitAck}, Trace: remoteSpan(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
		{Verb: VerbUpdate, Key: "k", Meta: Meta{"a", "1"}, Trace: withState(t, remoteSpan(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), "ro=1,vendor=x")},
	} {
		var got wireRequest
		require.NoError(t, got.decode(w.append(nil)))
		assert.Equal(t, w, got)
		var lib []any
		require.NoError(t, msgpack.Unmarshal(w.append(nil), &lib), "the library reads it too")
		assert.Equal(t, w.Verb, lib[0])
	}
	for name, b := range map[string][]byte{
		"empty":                nil,
		"three fields":         {0x93, 0xa1, 'V', 0xa1, 'k', 0xc0},
		"trailing":             append((&wireRequest{Verb: "V"}).append(nil), 0),
		"hops too big":         {0x94, 0xa1, 'V', 0xa1, 'k', 0xc0, 0xcd, 0x01, 0x00},
		"five fields":          {0x95, 0xa1, 'V', 0xa1, 'k', 0xc0, 0x00, 0x01},
		"unknown wait":         {0x96, 0xa1, 'V', 0xa1, 'k', 0xc0, 0x00, 0x09, 0x00},
		"k, no wait":           {0x97, 0xa1, 'V', 0xa1, 'k', 0xc0, 0x00, 0xc0, 0x01, 0x90},
		"odd metadata":         {0x97, 0xa1, 'V', 0xa1, 'k', 0xc0, 0x00, 0xc0, 0xc0, 0x91, 0xa1, 'a'},
		"metadata not strings": {0x97, 0xa1, 'V', 0xa1, 'k', 0xc0, 0x00, 0xc0, 0xc0, 0x92, 0x01, 0x02},
		"too many pairs":       (&wireRequest{Verb: "V", Meta: make(Meta, 2*MaxMetaPairs+2)}).append(nil),
		"long name":            (&wireRequest{Verb: "V", Meta: Meta{strings.Repeat("n", MaxMetaName+1), ""}}).append(nil),
		"long value":           (&wireRequest{Verb: "V", Meta: Meta{"n", strings.Repeat("v", MaxMetaValue+1)}}).append(nil),
	} {
		var got wireRequest
		assert.ErrorIs(t, got.decode(b), wire.ErrMalformed, name)
	}
}

// TestPipelinedRequestsKeepTheirOrder pipelines UPDATEs of one key from a
// client to the owner, which proposes built-in requests on the reader's
// goroutine when its engine is idle and through the driver otherwise: the
// owner must commit them in the order they were sent, whichever way each
// one went.
func TestPipelinedRequestsKeepTheirOrder(t *testing.T) {
	server, client := serverAndClient(t, 12)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := client.Request(ctx, VerbUpdate, "seq", []byte{0}, false) // the owner has synced
	require.NoError(t, err)

	const n = 3000
	sub := server.Subscribe(n+10, Block)
	defer sub.Close()
	errc := make(chan error, n)
	for i := 1; i <= n; i++ {
		v, err := msgpack.Marshal(i)
		require.NoError(t, err)
		require.NoError(t, client.RequestAsync(ctx, VerbUpdate, "seq", v, func(_ []byte, err error) { errc <- err }))
		if i%500 == 0 {
			time.Sleep(time.Millisecond) // let the owner go idle now and then
		}
	}
	for range n {
		require.NoError(t, <-errc)
	}
	last := 0
	for last < n {
		select {
		case ch := <-sub.C():
			if ch.Entry.Key != "seq" {
				continue
			}
			var got int
			require.NoError(t, msgpack.Unmarshal(ch.Entry.Value, &got))
			require.Equal(t, last+1, got, "commits out of the order sent")
			last = got
		case <-ctx.Done():
			t.Fatalf("saw %d of %d commits", last, n)
		}
	}
}

// TestAnsweredWriteIsInTheStreams: by the time a caller has the answer to
// a write, the owner has handed the write's change to its streams, though
// the answer now leaves before the round's other work (the commit to the
// copies).
func TestAnsweredWriteIsInTheStreams(t *testing.T) {
	server, client := serverAndClient(t, 13)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sub := server.Subscribe(1000, Block)
	defer sub.Close()
	for i := range 200 {
		v, err := msgpack.Marshal(i)
		require.NoError(t, err)
		_, err = client.Request(ctx, VerbUpdate, "answered", v, false)
		require.NoError(t, err)
	drain:
		for {
			select {
			case ch := <-sub.C():
				var got int
				if ch.Entry.Key == "answered" && msgpack.Unmarshal(ch.Entry.Value, &got) == nil && got == i {
					break drain
				}
			default:
				t.Fatalf("write %d was answered before its change reached the owner's streams", i)
			}
		}
	}
}

// serverAndClient starts one server node and one client node on a network
// of their own and waits until both see the server.
func serverAndClient(t *testing.T, seed uint64) (server, client *Node) {
	t.Helper()
	nw := memnet.New(seed)
	server = startNode(t, nw, "s", false)
	client = startNode(t, nw, "client", true, server.Membership().Local().Gossip)
	require.Eventually(t, func() bool { return settled([]*Node{server, client}, 1) }, 20*time.Second, 10*time.Millisecond)
	return server, client
}

// TestChangesOutliveTheRequestBuffer writes values through the built-in
// UPDATE of another node, one call at a time, and reads the owner's change
// stream only afterwards. Each call is answered while the owner's reader
// still holds it, so the reader then reuses the block the call arrived in;
// the changes must hold their own values, not the block's later contents.
func TestChangesOutliveTheRequestBuffer(t *testing.T) {
	server, client := serverAndClient(t, 17)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 400 // about 1 KB each: the owner's 64 KB read block fills six times
	sub := server.Subscribe(2*n, Block)
	defer sub.Close()
	want := make([][]byte, n)
	for i := range n {
		v, err := msgpack.Marshal(bytes.Repeat([]byte{byte(i)}, 1000))
		require.NoError(t, err)
		want[i] = v
		_, err = client.Request(ctx, VerbUpdate, fmt.Sprintf("big%d", i%10), v, false)
		require.NoError(t, err)
	}
	for i := 0; i < n; {
		select {
		case ch := <-sub.C():
			if !strings.HasPrefix(ch.Entry.Key, "big") {
				continue
			}
			require.Equal(t, fmt.Sprintf("big%d", i%10), ch.Entry.Key, "change %d", i)
			require.Equal(t, want[i], ch.Entry.Value, "change %d", i)
			i++
		case <-ctx.Done():
			t.Fatalf("%d of %d changes", i, n)
		}
	}
}

// TestNoWaitCallsKeepTheirValues pipelines built-in UPDATEs that wait for
// nothing (fero.NoWait from a Remote) to a server. Each is answered as
// soon as it is queued, on the reader that read it, so the reader may
// read the next frames into the same block at once: the queued write
// must hold its own value by then, not the block's later contents.
func TestNoWaitCallsKeepTheirValues(t *testing.T) {
	server, client := serverAndClient(t, 23)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.connTo(ctx, server.ID())
	require.NoError(t, err)
	const n = 3000 // about 300 B each: many frames to a read block, many blocks
	want := make([][]byte, n)
	errc := make(chan error, n)
	for i := range n {
		v, err := msgpack.Marshal(bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 150))
		require.NoError(t, err)
		want[i] = v
		key := fmt.Sprintf("nowait%d", i)
		require.NoError(t, CallNodeAsync(ctx, c, VerbUpdate, key, v, WaitSpec{Set: true, Kind: partition.WaitNone}, func(_ []byte, err error) { errc <- err }))
	}
	for range n {
		select {
		case err := <-errc:
			require.NoError(t, err)
		case <-ctx.Done():
			t.Fatal("calls unanswered")
		}
	}
	// The writes were only queued when answered: wait for each to commit.
	for i := range n {
		key := fmt.Sprintf("nowait%d", i)
		var got []byte
		for {
			if b, ok := server.Store().GetBytes(key); ok {
				got = b
				if bytes.Equal(b, want[i]) {
					break
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("key %s: got %x, want %x", key, got, want[i])
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// retryingCaller answers the first request sent with GoTo "retry" once the
// test lets it (release), and records the requests sent with Call.
type retryingCaller struct {
	transport.Caller
	release chan struct{}
	called  chan wireRequest
}

func (c *retryingCaller) GoTo(_ context.Context, _ uint32, _ []byte, to transport.Answerer, _ ...transport.CallOption) error {
	go func() {
		<-c.release
		to.Answer([]byte{replyRetry}, nil)
	}()
	return nil
}

func (c *retryingCaller) Call(_ context.Context, _ uint32, payload []byte, _ ...transport.CallOption) ([]byte, error) {
	var w wireRequest
	if err := w.decode(bytes.Clone(payload)); err != nil {
		return nil, err
	}
	c.called <- w
	return []byte{replyOK}, nil
}

// TestAsyncCallRetriesWithThePayloadItSent: a caller may reuse its payload
// buffer once CallNodeAsync has returned (it has encoded the request). A
// "retry" answer (the owner moved) comes later: the retry must send the
// payload as it was, not what the buffer holds by then.
func TestAsyncCallRetriesWithThePayloadItSent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &retryingCaller{release: make(chan struct{}), called: make(chan wireRequest, 1)}
	buf, err := msgpack.Marshal("the value sent")
	require.NoError(t, err)
	want := bytes.Clone(buf)
	done := make(chan error, 1)
	require.NoError(t, CallNodeAsync(ctx, c, VerbUpdate, "k", buf, WaitSpec{}, func(_ []byte, err error) { done <- err }))
	copy(buf, bytes.Repeat([]byte{'x'}, len(buf))) // the caller's next request
	close(c.release)
	select {
	case w := <-c.called:
		assert.Equal(t, "k", w.Key)
		assert.Equal(t, want, w.Payload, "the retried request's payload")
	case <-ctx.Done():
		t.Fatal("no retry")
	}
	require.NoError(t, <-done)
}

// TestAsyncRequestOnTheOwnerKeepsItsPayload: RequestAsync on the node
// that owns the key runs the request on a goroutine of its own, after it
// has returned and the caller may have reused its buffer. The write must
// commit the payload as it was.
func TestAsyncRequestOnTheOwnerKeepsItsPayload(t *testing.T) {
	nw := memnet.New(29)
	server := startNode(t, nw, "s", false)
	require.Eventually(t, func() bool { return settled([]*Node{server}, 1) }, 20*time.Second, 10*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 200
	buf := make([]byte, 0, 64)
	errc := make(chan error, n)
	for i := range n {
		v, err := msgpack.Marshal(fmt.Sprintf("value %03d", i))
		require.NoError(t, err)
		buf = append(buf[:0], v...)
		require.NoError(t, server.RequestAsync(ctx, VerbUpdate, fmt.Sprintf("own%d", i), buf, func(_ []byte, err error) { errc <- err }))
	}
	for range n {
		require.NoError(t, <-errc)
	}
	for i := range n {
		want, err := msgpack.Marshal(fmt.Sprintf("value %03d", i))
		require.NoError(t, err)
		got, _ := server.Store().GetBytes(fmt.Sprintf("own%d", i))
		require.Equal(t, want, got, "own%d", i)
	}
}

// answeredWhileSending is a Caller whose GoTo answers before it has
// finished with the request, as a transport connection does when the
// caller's context ends while the request is being written: done runs on
// the goroutine that cancels, while the writer may still copy it.
type answeredWhileSending struct {
	transport.Caller
	changed bool
}

func (c *answeredWhileSending) GoTo(ctx context.Context, _ uint32, payload []byte, to transport.Answerer, _ ...transport.CallOption) error {
	sent := bytes.Clone(payload)
	to.Answer(nil, context.Canceled)
	// Another request encoded meanwhile must not take the buffer this one
	// is still being written from.
	w := wireRequest{Verb: VerbUpdate, Key: "another key", Payload: []byte{0xc0}}
	other, err := encodeAsync(ctx, &w)
	if err != nil {
		return err
	}
	c.changed = !bytes.Equal(sent, payload)
	other.release()
	other.release()
	return nil
}

// TestAsyncRequestBufferOutlivesItsSending: the pooled encoding of an
// async request goes back to the pool only once both the send and the
// reply's callback are done with it.
func TestAsyncRequestBufferOutlivesItsSending(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 100 {
		c := &answeredWhileSending{}
		errc := make(chan error, 1)
		require.NoError(t, CallNodeAsync(ctx, c, VerbUpdate, "k", []byte{0xc3}, WaitSpec{}, func(_ []byte, err error) { errc <- err }))
		require.ErrorIs(t, <-errc, context.Canceled)
		require.False(t, c.changed, "the request changed while it was being sent")
	}
}

// answeredAtOnce is a Caller that answers every request sent with Go or
// GoTo "ok" before it returns.
type answeredAtOnce struct{ transport.Caller }

var okAnswer = []byte{replyOK}

func (*answeredAtOnce) Go(_ context.Context, _ uint32, _ []byte, done func([]byte, error), _ ...transport.CallOption) error {
	done(okAnswer, nil)
	return nil
}

func (*answeredAtOnce) GoTo(_ context.Context, _ uint32, _ []byte, to transport.Answerer, _ ...transport.CallOption) error {
	to.Answer(okAnswer, nil)
	return nil
}

// TestAsyncCallAllocatesNothing: a pipelining caller's async call costs no
// allocation of its own once the pool of request records is warm. Its
// answer goes to the pooled record, not to a closure made for the call
// (two allocations a call, before).
func TestAsyncCallAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop what it is given")
	}
	ctx := context.Background()
	payload := []byte{0xc3}
	answered := 0
	done := func(_ []byte, err error) {
		if err == nil {
			answered++
		}
	}
	var c transport.Caller = &answeredAtOnce{}
	call := func() { _ = CallNodeAsync(ctx, c, VerbUpdate, "k", payload, WaitSpec{}, done) }
	call()
	require.Equal(t, 1, answered)
	require.Zero(t, testing.AllocsPerRun(1000, call), "allocations of an async call")
	require.Equal(t, 1002, answered)
}
