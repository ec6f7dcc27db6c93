// ferogen wrote this file once, as a start: it is yours to edit, and
// ferogen never writes it again. When the declarations gain a verb,
// ferogen lists the methods this file's types lack.

package feedimpl

import (
	"context"

	"github.com/fero-go/fero/internal/ferogen/testdata/ok/feed"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/feed/feedfero"
	"github.com/fero-go/fero/pkg/fero"
)

// FeedService implements feed.Feed.
// Mount it on every server node of the resource:
//
//	fero.Open(ctx, feedfero.FeedResourceName, feedfero.RegisterFeed(&FeedService{}))
//
// Each method runs on the node that owns its request's key.
// feedfero.RequestFromContext(ctx) returns the request, whose
// Resource() is the resource to read and write.
type FeedService struct {
	// Verbs declared later answer CodeUnimplemented until implemented.
	feedfero.UnimplementedFeed
}

var _ feed.Feed = (*FeedService)(nil)

// Watch answers WATCH. It calls send with each item it streams, and
// its return ends the stream.
func (s *FeedService) Watch(ctx context.Context, req *feed.WatchRequest, send func(*feed.Event) error) error {
	return fero.NewError(fero.CodeUnimplemented, "feed: WATCH is not implemented yet")
}

// Publish answers PUBLISH.
func (s *FeedService) Publish(ctx context.Context, req *feed.Event) (*feed.Published, error) {
	return nil, fero.NewError(fero.CodeUnimplemented, "feed: PUBLISH is not implemented yet")
}
