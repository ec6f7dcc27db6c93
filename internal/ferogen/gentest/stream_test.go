package gentest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/ferogen/testdata/ok/feed"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/feed/feedfero"
	"github.com/fero-go/fero/pkg/fero"
	"github.com/fero-go/fero/pkg/fero/ferotest"
)

// topics streams req.Count events of a topic from req.Since, or until
// its context ends with Count 0; ended gets how each stream ended.
type topics struct {
	feedfero.UnimplementedFeed
	ended chan error
}

func (tp topics) Watch(ctx context.Context, req *feed.WatchRequest, send func(*feed.Event) error) error {
	q, _ := feedfero.RequestFromContext(ctx)
	for i := req.Since; req.Count == 0 || i < req.Since+req.Count; i++ {
		if err := send(&feed.Event{Topic: req.Topic, Seq: i, Body: q.Resource().ID()}); err != nil {
			tp.ended <- err
			return err
		}
	}
	tp.ended <- nil
	return nil
}

// TestStreamingVerb: a generated client's streaming method delivers the
// owner's items in order through send, from a client node and through a
// Remote; an error send returns ends the stream on the owner and comes
// back; the generated handler refuses a streaming verb sent as a call;
// Unimplemented answers the stream with CodeUnimplemented.
func TestStreamingVerb(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tp := topics{ended: make(chan error, 16)}
	c := ferotest.NewCluster(t, feedfero.FeedResourceName, ferotest.WithNodeOptions(feedfero.RegisterFeed(tp)))
	client := c.Add(fero.Client())
	c.WaitSettled()
	remote, err := fero.Dial(ctx, c.Servers()[0].Addr())
	require.NoError(t, err)
	defer remote.Close()

	for name, via := range map[string]feed.Feed{"client node": feedfero.NewFeedClient(client), "remote": feedfero.NewFeedClient(remote)} {
		for topic := range 4 {
			req := &feed.WatchRequest{Topic: fmt.Sprint("t", topic), Since: 10, Count: 100}
			var got []int
			var from string
			require.NoError(t, via.Watch(ctx, req, func(e *feed.Event) error {
				got = append(got, e.Seq)
				from = e.Body
				return nil
			}), name)
			require.Len(t, got, 100, name)
			for i, s := range got {
				require.Equal(t, 10+i, s, name)
			}
			assert.Contains(t, []string{"node-1", "node-2", "node-3"}, from, name)
			require.NoError(t, <-tp.ended)
		}
	}

	// The reader stops: its error comes back, and the owner's send fails.
	stop := errors.New("enough")
	n := 0
	err = feedfero.NewFeedClient(client).Watch(ctx, &feed.WatchRequest{Topic: "t9"}, func(*feed.Event) error {
		if n++; n == 3 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	select {
	case err := <-tp.ended:
		require.Error(t, err, "the owner's send fails once its reader stopped")
	case <-time.After(10 * time.Second):
		t.Fatal("the owner still streams to a reader that stopped")
	}

	// A streaming verb sent as a call is refused by the generated handler.
	err = client.Call(ctx, feedfero.FeedWatchVerb, "t1", &feed.WatchRequest{Topic: "t1"}, nil)
	assert.Equal(t, fero.CodeFailedPrecondition, fero.CodeOf(err), "%v", err)

	// Unimplemented, and a nil request.
	err = feedfero.UnimplementedFeed{}.Watch(ctx, &feed.WatchRequest{}, nil)
	assert.Equal(t, fero.CodeUnimplemented, fero.CodeOf(err))
	err = feedfero.NewFeedClient(client).Watch(ctx, nil, nil)
	assert.Equal(t, fero.CodeInvalidArgument, fero.CodeOf(err))
}
