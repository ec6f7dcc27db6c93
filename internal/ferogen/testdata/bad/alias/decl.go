package alias

import "context"

// Users is an alias of an interface literal: ferogen refuses it, and goes
// on to report the other resources' problems.
//
//fero:resource users
type Users = interface {
	Login(ctx context.Context, req *Request) error
}

// Sessions aliases a defined interface.
//
//fero:resource sessions
type Sessions = Accounts

type Accounts interface {
	Open(ctx context.Context, req *Request) error
}

//fero:resource carts
type Carts interface {
	Add(ctx context.Context, req *NoKey) error
}

type Request struct {
	Key string `msgpack:"key" fero:"key"`
}

type NoKey struct {
	Key string `msgpack:"key"`
}
