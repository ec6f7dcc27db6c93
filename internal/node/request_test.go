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

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
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
	_, err = client.Request(ctx, protocol.VerbUpdate, "greeting", v, false)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, n := range all {
			if got, ok := n.Store().Get("greeting"); !ok || got != "hello" {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	_, err = client.Request(ctx, protocol.VerbAdd, "greeting", v, false)
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
	for hops, want := range []byte{protocol.ReplyOK, protocol.ReplyRetry} {
		// Encoded by the msgpack library, as any client could.
		b, err := msgpack.Marshal([]any{"WHO", key, nil, hops})
		require.NoError(t, err)
		reply, err := raw.Call(ctx, protocol.OpRequest, b)
		require.NoError(t, err)
		require.Equal(t, want, reply[0], "hops %d", hops)
		if want == protocol.ReplyOK {
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
	assert.ErrorIs(t, err, protocol.ErrClosed)
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

// TestPipelinedRequestsKeepTheirOrder pipelines UPDATEs of one key from a
// client to the owner, which proposes built-in requests on the reader's
// goroutine when its engine is idle and through the driver otherwise: the
// owner must commit them in the order they were sent, whichever way each
// one went.
func TestPipelinedRequestsKeepTheirOrder(t *testing.T) {
	server, client := serverAndClient(t, 12)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := client.Request(ctx, protocol.VerbUpdate, "seq", []byte{0}, false) // the owner has synced
	require.NoError(t, err)

	const n = 3000
	sub := server.Subscribe(n+10, Block)
	defer sub.Close()
	errc := make(chan error, n)
	for i := 1; i <= n; i++ {
		v, err := msgpack.Marshal(i)
		require.NoError(t, err)
		require.NoError(t, client.RequestAsync(ctx, protocol.VerbUpdate, "seq", v, func(_ []byte, err error) { errc <- err }))
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
		_, err = client.Request(ctx, protocol.VerbUpdate, "answered", v, false)
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
		_, err = client.Request(ctx, protocol.VerbUpdate, fmt.Sprintf("big%d", i%10), v, false)
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
	c, err := client.peers.connTo(ctx, server.ID())
	require.NoError(t, err)
	const n = 3000 // about 300 B each: many frames to a read block, many blocks
	want := make([][]byte, n)
	errc := make(chan error, n)
	for i := range n {
		v, err := msgpack.Marshal(bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 150))
		require.NoError(t, err)
		want[i] = v
		key := fmt.Sprintf("nowait%d", i)
		require.NoError(t, protocol.CallNodeAsync(ctx, c, protocol.VerbUpdate, key, v, protocol.WaitSpec{Set: true, Kind: partition.WaitNone}, func(_ []byte, err error) { errc <- err }))
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
		require.NoError(t, server.RequestAsync(ctx, protocol.VerbUpdate, fmt.Sprintf("own%d", i), buf, func(_ []byte, err error) { errc <- err }))
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
