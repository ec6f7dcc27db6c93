// Package multi declares two resources, generated into one package with
// --out and a stub put into an existing package main with --stub (see
// ferogen.flags).
package multi

import "context"

// Sessions holds logins.
//
//fero:resource sessions
type Sessions interface {
	Open(ctx context.Context, req *OpenRequest) (*OpenReply, error)
}

// Carts holds shopping carts.
//
//fero:resource carts
type Carts interface {
	AddItem(ctx context.Context, req *AddRequest) error
}

type OpenRequest struct {
	User string `msgpack:"user" fero:"key"`
}

type OpenReply struct {
	Token string `msgpack:"token"`
}

type AddRequest struct {
	Cart string `msgpack:"cart" fero:"key"`
	Item string `msgpack:"item"`
}
