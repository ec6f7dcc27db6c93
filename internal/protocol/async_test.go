package protocol

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/transport"
)

// retryingCaller answers the first request sent with GoTo "retry" once the
// test lets it (release), and records the requests sent with Call.
type retryingCaller struct {
	transport.Caller
	release chan struct{}
	called  chan Request
}

func (c *retryingCaller) GoTo(_ context.Context, _ uint32, _ []byte, to transport.Answerer, _ ...transport.CallOption) error {
	go func() {
		<-c.release
		to.Answer([]byte{ReplyRetry}, nil)
	}()
	return nil
}

func (c *retryingCaller) Call(_ context.Context, _ uint32, payload []byte, _ ...transport.CallOption) ([]byte, error) {
	var w Request
	if err := w.Decode(bytes.Clone(payload)); err != nil {
		return nil, err
	}
	c.called <- w
	return []byte{ReplyOK}, nil
}

// TestAsyncCallRetriesWithThePayloadItSent: a caller may reuse its payload
// buffer once CallNodeAsync has returned (it has encoded the request). A
// "retry" answer (the owner moved) comes later: the retry must send the
// payload as it was, not what the buffer holds by then.
func TestAsyncCallRetriesWithThePayloadItSent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &retryingCaller{release: make(chan struct{}), called: make(chan Request, 1)}
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
	w := Request{Verb: VerbUpdate, Key: "another key", Payload: []byte{0xc0}}
	other, err := EncodeAsync(ctx, &w)
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

var okAnswer = []byte{ReplyOK}

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
	call := func() {
		_ = CallNodeAsync(ctx, c, VerbUpdate, "k", payload, WaitSpec{}, done)
	}
	call()
	require.Equal(t, 1, answered)
	require.Zero(t, testing.AllocsPerRun(1000, call), "allocations of an async call")
	require.Equal(t, 1002, answered)
}
