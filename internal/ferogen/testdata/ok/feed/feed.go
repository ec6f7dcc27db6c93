// Package feed declares a streaming verb beside a unary one.
package feed

import "context"

//fero:resource feed
type Feed interface {
	// Watch streams a topic's events, from Since on.
	Watch(ctx context.Context, req *WatchRequest, send func(*Event) error) error
	Publish(ctx context.Context, req *Event) (*Published, error)
}

type WatchRequest struct {
	Topic string `msgpack:"topic" fero:"key"`
	Since int    `msgpack:"since"`
	// Count is how many events to send; 0: until the caller goes.
	Count int `msgpack:"count"`
}

type Event struct {
	Topic string `msgpack:"topic" fero:"key"`
	Seq   int    `msgpack:"seq"`
	Body  string `msgpack:"body"`
}

type Published struct {
	Seq int `msgpack:"seq"`
}
