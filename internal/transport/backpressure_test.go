package transport

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stalledPeer accepts one connection, sends a preface and never reads.
func stalledPeer(t *testing.T) (addr string, release func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		_, _ = nc.Write(preface[:])
		accepted <- nc
	}()
	var once sync.Once
	release = func() {
		once.Do(func() {
			ln.Close()
			if nc, ok := <-accepted; ok {
				nc.Close()
			}
		})
	}
	t.Cleanup(release)
	return ln.Addr().String(), release
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestStalledPeerBoundsMemory writes ~64 MiB at a peer that never reads.
// Senders must block (or fail fast) once the outbox holds its limit, and
// the sender's heap must not grow past about twice the limit.
func TestStalledPeerBoundsMemory(t *testing.T) {
	const limit = 1 << 20
	addr, release := stalledPeer(t)
	c, err := DialConn(ctxT(t), addr, WithOutboxLimit(limit), WithMaxBatch(64<<10), WithCloseTimeout(0))
	require.NoError(t, err)
	defer c.Close()
	defer release()

	payload := make([]byte, 1024)
	before := heapInUse()

	// Fail fast: fills up, then refuses.
	var full int
	for i := 0; i < 64<<10; i++ {
		if err := c.Send(context.Background(), opCount, payload, FailFast); err != nil {
			require.ErrorIs(t, err, ErrOutboxFull)
			full++
			break
		}
	}
	require.Equal(t, 1, full, "a fail-fast sender was refused once the outbox was full")

	// Blocking: 8 senders try 8 MiB each; each blocks until its context
	// ends because nothing drains.
	var wg sync.WaitGroup
	blocked := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			for i := 0; i < 8<<10; i++ {
				if err := c.Send(ctx, opCount, payload); err != nil {
					blocked <- err
					return
				}
			}
			blocked <- nil
		}()
	}
	wg.Wait()
	close(blocked)
	for err := range blocked {
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	}
	grown := int64(heapInUse()) - int64(before)
	t.Logf("heap grew %d KiB against an outbox limit of %d KiB (64 MiB attempted)", grown>>10, limit>>10)
	assert.Less(t, grown, int64(3*limit), "the sender's heap is bounded by the outbox, not by what was attempted")
}

// TestBlockedSenderResumes: a sender blocked on a full outbox goes on as
// soon as the peer reads.
func TestBlockedSenderResumes(t *testing.T) {
	ts := newTestServer(t)
	p := dialTest(t, ts.Addr().String(), WithOutboxLimit(4096))
	ctx := ctxT(t)
	for i := 0; i < 20000; i++ {
		require.NoError(t, p.Send(ctx, opCount, make([]byte, 200)))
	}
	_, err := p.Call(ctx, opEcho, nil)
	require.NoError(t, err)
	assert.EqualValues(t, 20000, ts.count.Load())
}

func TestOutboxTakesEverythingQueued(t *testing.T) {
	o := newOutbox(1 << 20)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		require.NoError(t, o.lock(ctx, 3, false))
		empty := len(o.buf) == 0
		o.buf = append(o.buf, 'a'+byte(i), 'b'+byte(i), 'c'+byte(i))
		o.unlock(empty, false, false)
	}
	assert.Len(t, o.wake, 1, "only the append into an empty outbox wakes the writer")
	batch, last := o.take(nil)
	assert.Equal(t, "abcbcdcde", string(batch), "one batch carries every frame queued meanwhile")
	assert.False(t, last)
	o.close(ErrClosed, true)
	require.ErrorIs(t, o.lock(ctx, 1, false), ErrClosed)
}

// TestCorkedFramesWaitForAFlush: corked appends wake nobody, and the
// writer leaves them queued even when a stale wake comes; an append that
// is not corked takes them along, and so does a flush.
func TestCorkedFramesWaitForAFlush(t *testing.T) {
	o := newOutbox(1 << 20)
	ctx := context.Background()
	appendFrame := func(b string, corked bool) {
		require.NoError(t, o.lock(ctx, len(b), false))
		empty := len(o.buf) == 0
		o.buf = append(o.buf, b...)
		o.unlock(empty, false, corked)
	}
	appendFrame("a", true)
	appendFrame("b", true)
	assert.Empty(t, o.wake, "a corked append woke the writer")
	// A stale wake: the writer must not take corked frames on it.
	o.signal()
	taken := make(chan string, 1)
	go func() {
		b, _ := o.take(nil)
		taken <- string(b)
	}()
	select {
	case b := <-taken:
		t.Fatalf("the writer took corked frames %q before any flush", b)
	case <-time.After(50 * time.Millisecond):
	}
	appendFrame("c", false)
	assert.Equal(t, "abc", <-taken, "an append that is not corked takes the corked ones along")
	o.mu.Lock()
	o.busy, o.writerOwns = false, false // the writer wrote its batch
	o.mu.Unlock()

	appendFrame("d", true)
	assert.Empty(t, o.wake)
	o.flushCorked() // no direct writes here: it wakes the writer
	b, _ := o.take(nil)
	assert.Equal(t, "d", string(b))
	o.mu.Lock()
	o.busy, o.writerOwns = false, false
	o.mu.Unlock()

	for len(o.wake) > 0 {
		<-o.wake // the flush's, which the writer did not need
	}

	// A reader's hold that starts and ends meanwhile leaves corked frames
	// corked; a flush during the hold leaves them to the hold's end.
	appendFrame("e", true)
	o.setHold(true)
	o.setHold(false)
	assert.Empty(t, o.wake, "a hold's end woke the writer for corked frames")
	o.setHold(true)
	o.flushCorked()
	assert.Empty(t, o.wake, "a flush during the reader's hold woke the writer")
	o.setHold(false)
	require.Len(t, o.wake, 1, "the hold's end left flushed frames behind")
	b, _ = o.take(nil)
	assert.Equal(t, "e", string(b))
	o.close(ErrClosed, true)
}

// TestCorkedCallsLeaveOnFlush: a call sent Corked is not written until
// the connection is flushed; then it is answered.
func TestCorkedCallsLeaveOnFlush(t *testing.T) {
	ts := newTestServer(t)
	ctx := ctxT(t)
	c, err := DialConn(ctx, ts.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = c.Call(ctx, opEcho, nil) // the connection's opening frames have gone
	require.NoError(t, err)
	got := make(chan string, 2)
	for _, v := range []string{"one", "two"} {
		require.NoError(t, c.Go(ctx, opEcho, []byte(v), func(reply []byte, err error) {
			if err != nil {
				got <- err.Error()
				return
			}
			got <- string(reply)
		}, Corked))
	}
	select {
	case r := <-got:
		t.Fatalf("a corked call was answered before the flush: %q", r)
	case <-time.After(100 * time.Millisecond):
	}
	c.Flush()
	assert.Equal(t, "one", <-got)
	assert.Equal(t, "two", <-got)
}

// TestDirectWritesKeepOrder: senders that write their frames themselves
// (partially, as a full socket would take them), senders that leave them
// to the writer goroutine and senders that cork them until a flush
// interleave, and every frame still leaves whole and in the order it was
// queued.
func TestDirectWritesKeepOrder(t *testing.T) {
	o := newOutbox(1 << 10)
	o.keep = 1 << 10
	var (
		mu   sync.Mutex
		sent []byte
		turn int
	)
	o.direct = func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		turn++
		n := min(len(b), turn%7) // 0 to 6 bytes: often nothing, rarely all
		sent = append(sent, b[:n]...)
		return n, nil
	}
	o.fail = func(err error) { t.Errorf("direct write failed: %v", err) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		var free []byte
		for {
			batch, last := o.take(free)
			mu.Lock()
			sent = append(sent, batch...)
			mu.Unlock()
			if last {
				return
			}
			free = batch[:0]
		}
	}()
	const senders, frames = 4, 500
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range frames {
				frame := fmt.Sprintf("<%d:%d>", s, i)
				require.NoError(t, o.lock(context.Background(), len(frame), false))
				empty := len(o.buf) == 0
				o.buf = append(o.buf, frame...)
				// Direct, corked or left to the writer; some flushes.
				o.unlock(empty, i%3 == 0, i%3 == 1)
				if i%50 == 49 {
					o.flushCorked()
				}
			}
		})
	}
	wg.Wait()
	o.close(ErrClosed, true)
	<-done

	next := make([]int, senders)
	for _, f := range strings.SplitAfter(string(sent), ">") {
		if f == "" {
			continue
		}
		var s, i int
		_, err := fmt.Sscanf(f, "<%d:%d>", &s, &i)
		require.NoError(t, err, "a frame arrived torn: %q", f)
		require.Equal(t, next[s], i, "sender %d's frames arrived out of order", s)
		next[s]++
	}
	for s := range senders {
		assert.Equal(t, frames, next[s], "sender %d's frames all arrived", s)
	}
}

// TestDirectCallsSurviveAFullSocket: calls that write themselves while the
// socket is full (the peer has stopped reading) leave the rest to the
// writer goroutine, never block in the socket, and are all answered once
// the peer reads again.
func TestDirectCallsSurviveAFullSocket(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	s, err := Listen("127.0.0.1:0", HandlerFunc(func(r *Request) {
		once.Do(func() { <-release }) // the first request stalls the server's reader
		_ = r.Reply(r.Payload())
	}), WithOutboxLimit(64<<20))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	ctx := ctxT(t)
	c, err := DialConn(ctx, s.Addr().String(), WithOutboxLimit(64<<20))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	var releaseOnce sync.Once
	unstall := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unstall) // first of the cleanups, if the test fails early
	const calls = 64
	payload := make([]byte, 256<<10) // 16 MiB in all: more than the socket buffers hold
	errc := make(chan error, calls)
	for range calls {
		go func() {
			_, err := c.Call(ctx, opEcho, payload)
			errc <- err
		}()
	}
	// Let the calls fill the socket, so that the writer goroutine has to
	// take over what the direct writes could not place (it then blocks
	// writing, or frames wait for it), then read.
	require.Eventually(t, func() bool {
		c.out.mu.Lock()
		defer c.out.mu.Unlock()
		return c.out.writerOwns || len(c.out.buf) > 0
	}, 10*time.Second, time.Millisecond, "the writer goroutine took over from a full socket")
	unstall()
	for range calls {
		require.NoError(t, <-errc)
	}
}

// TestCloseBoundsAWriteUnderWay: Close flushes for at most the close
// timeout, even when the writer is already blocked writing to a peer that
// stopped reading.
func TestCloseBoundsAWriteUnderWay(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	s, err := Listen("127.0.0.1:0", HandlerFunc(func(r *Request) {
		once.Do(func() { <-release }) // the first message stalls the server's reader
	}))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	t.Cleanup(func() { close(release) })
	ctx := ctxT(t)
	c, err := DialConn(ctx, s.Addr().String(), WithOutboxLimit(64<<20), WithCloseTimeout(200*time.Millisecond))
	require.NoError(t, err)
	payload := make([]byte, 256<<10)
	for range 64 { // 16 MiB: more than the socket buffers hold
		require.NoError(t, c.Send(ctx, opCount, payload))
	}
	require.Eventually(t, func() bool {
		c.out.mu.Lock()
		defer c.out.mu.Unlock()
		return c.out.writerOwns
	}, 10*time.Second, time.Millisecond, "the writer is writing")
	closed := make(chan struct{})
	start := time.Now()
	go func() {
		c.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Logf("Close returned after %v", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits for a peer that does not read")
	}
}

// TestWithoutDirectWrites: with direct writes off, no sender writes to the
// socket itself, and calls still go through the writer goroutine.
func TestWithoutDirectWrites(t *testing.T) {
	ts := newTestServer(t, WithDirectWrites(false))
	ctx := ctxT(t)
	c, err := DialConn(ctx, ts.Addr().String(), WithDirectWrites(false))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	assert.Nil(t, c.out.direct, "the option turns direct writes off")
	for i := range 100 {
		reply, err := c.Call(ctx, opEcho, []byte{byte(i)})
		require.NoError(t, err)
		require.Equal(t, []byte{byte(i)}, reply)
	}

	d, err := DialConn(ctx, ts.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	assert.NotNil(t, d.out.direct, "a plain TCP connection writes directly by default")
}

// A handler that answers the only request its reader holds and then goes
// on working does not hold the answer back until it returns: the caller
// has it at once. (The node answers a write, then sends its commit to
// every copy.)
func TestLastAnswerLeavesBeforeTheHandlerReturns(t *testing.T) {
	const opAnswerThenWork = 100
	answered := make(chan struct{}, 3)
	mux := NewMux()
	mux.HandleFunc(opAnswerThenWork, func(r *Request) {
		more := r.More()
		_ = r.Reply(nil)
		if more {
			return
		}
		select {
		case <-answered: // the caller has the answer while we work on
		case <-time.After(10 * time.Second):
			t.Error("the answer waited for the handler to return")
		}
	})
	s, err := Listen("127.0.0.1:0", mux)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	ctx := ctxT(t)
	c, err := DialConn(ctx, s.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	for range 3 {
		_, err := c.Call(ctx, opAnswerThenWork, nil)
		require.NoError(t, err)
		answered <- struct{}{}
	}
}

// TestBatchedAnswerLeavesWithTheDispatch: an answer given with
// TryReplyBatched on the reader waits for what the handler sends next on
// the same connection, and both arrive together, the answer first: the
// caller has its reply only once the handler has returned.
func TestBatchedAnswerLeavesWithTheDispatch(t *testing.T) {
	const opBatched, opNote = 101, 102
	release := make(chan struct{})
	var sent atomic.Bool
	var once sync.Once
	mux := NewMux()
	mux.HandleFunc(opEcho, func(r *Request) { _ = r.Reply(r.Payload()) })
	mux.HandleFunc(opBatched, func(r *Request) {
		// On the connection's reader: assert, never require (FailNow
		// there would end the reader, not the test).
		assert.NoError(t, r.TryReplyBatched([]byte("answer")))
		<-release
		sent.Store(true)
		assert.NoError(t, r.Conn().Send(context.Background(), opNote, []byte("after"), FailFast))
	})
	s, err := Listen("127.0.0.1:0", mux)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	notes := make(chan string, 1)
	back := NewMux()
	back.HandleFunc(opNote, func(r *Request) { notes <- string(r.Payload()) })
	ctx := ctxT(t)
	c, err := DialConn(ctx, s.Addr().String(), WithHandler(back))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	// Cleanups run last first: the handler is released before the server
	// closes, which waits for it. (Registered first, a failure below hung
	// the test until go test's timeout: CI, a loaded machine.)
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	// A call first: what each end writes when a connection opens has
	// gone. (An answer batched behind a write still under way leaves
	// with that write: batching saves writes, it does not add any.)
	_, err = c.Call(ctx, opEcho, nil)
	require.NoError(t, err)
	type result struct {
		reply []byte
		err   error
	}
	got := make(chan result, 1)
	go func() {
		reply, err := c.Call(ctx, opBatched, nil)
		got <- result{reply, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("the batched answer left before the handler returned: %q %v", r.reply, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	once.Do(func() { close(release) })
	r := <-got
	require.NoError(t, r.err)
	assert.Equal(t, "answer", string(r.reply))
	assert.True(t, sent.Load())
	assert.Equal(t, "after", <-notes)
}

// TestStatsCountBackpressure: with WithStats, sends that wait for room in
// a full outbox are counted, with the time they waited, and Queued says
// what the outbox holds.
func TestStatsCountBackpressure(t *testing.T) {
	const limit = 64 << 10
	addr, release := stalledPeer(t)
	var st Stats
	c, err := DialConn(ctxT(t), addr, WithOutboxLimit(limit), WithMaxBatch(16<<10), WithCloseTimeout(0), WithStats(&st))
	require.NoError(t, err)
	defer c.Close()
	defer release()
	payload := make([]byte, 1024)
	// Fill the outbox (and the socket's buffers behind it) without
	// waiting, however long that takes on a loaded machine: then a send
	// that waits waits its whole context.
	var err2 error
	for i := 0; i < 64<<10 && err2 == nil; i++ {
		err2 = c.Send(context.Background(), opCount, payload, FailFast)
	}
	require.ErrorIs(t, err2, ErrOutboxFull, "the peer never reads: the outbox fills")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	for err2 = nil; err2 == nil; {
		err2 = c.Send(ctx, opCount, payload)
	}
	require.ErrorIs(t, err2, context.DeadlineExceeded, "the peer never reads: a send blocks")
	// One wait or more: while the socket's buffers still take bytes, the
	// writer frees room, the sender appends and waits again. (How much of
	// the 100ms went in waits depends on the machine: under -race on a
	// loaded one, appending between waits took most of it. A wait's time
	// is checked exactly below, without a socket.)
	require.GreaterOrEqual(t, st.BackpressureWaits.Load(), uint64(1))
	require.Positive(t, st.BackpressureNanos.Load())
	// The outbox stays within its limit. (It may be empty by now: the
	// socket's buffers grow, and the writer can move all of it there
	// after the send gave up, as it did once under a loaded CI run.)
	require.LessOrEqual(t, c.Queued(), limit+1100)

	// A send into a full outbox that nothing drains waits its whole
	// context, and the wait is counted with its time.
	var st2 Stats
	o := newOutbox(100)
	o.stats = &st2
	o.buf = make([]byte, 100)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	require.ErrorIs(t, o.lock(ctx2, 10, false), context.DeadlineExceeded)
	require.Equal(t, uint64(1), st2.BackpressureWaits.Load())
	require.GreaterOrEqual(t, time.Duration(st2.BackpressureNanos.Load()), 50*time.Millisecond, "it waited until its context ended")
}

// TestAfterBurstAnswersWhatTheBurstPutOff: WithAfterBurst runs on the
// reader once it has dispatched every frame it had read, so a handler may
// put its answers off until then and give them all at once; and once more
// when the reader ends.
func TestAfterBurstAnswersWhatTheBurstPutOff(t *testing.T) {
	const opLater = 103
	var (
		mu     sync.Mutex
		put    []*Request
		bursts atomic.Int32
	)
	mux := NewMux()
	mux.HandleFunc(opLater, func(r *Request) {
		mu.Lock()
		put = append(put, r)
		mu.Unlock()
	})
	after := func() {
		bursts.Add(1)
		mu.Lock()
		rs := put
		put = nil
		mu.Unlock()
		for _, r := range rs {
			// On the reader: assert, never require.
			assert.NoError(t, r.TryReplyBatched(r.Payload()))
		}
	}
	s, err := Listen("127.0.0.1:0", mux, WithAfterBurst(after))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	ctx := ctxT(t)
	c, err := DialConn(ctx, s.Addr().String())
	require.NoError(t, err)
	const n = 2000
	errc := make(chan error, n)
	for i := range n {
		want := fmt.Sprint(i)
		require.NoError(t, c.Go(ctx, opLater, []byte(want), func(reply []byte, err error) {
			if err == nil && string(reply) != want {
				err = fmt.Errorf("call %s answered %q", want, reply)
			}
			errc <- err
		}))
	}
	for range n {
		require.NoError(t, <-errc)
	}
	require.Positive(t, bursts.Load())
	// The reader's end is one more call.
	before := bursts.Load()
	require.NoError(t, c.Close())
	require.Eventually(t, func() bool { return bursts.Load() > before }, 10*time.Second, 5*time.Millisecond, "no call as the reader ended")
}
