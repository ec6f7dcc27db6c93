package verbprefix

import "context"

// Inventory's Get would be the built-in GET: the error suggests a prefix
// and a directive, both made of the interface's name.
//
//fero:resource inventory
type Inventory interface {
	Get(ctx context.Context, req *Request) (*Request, error)
	ListItems(ctx context.Context, req *Request) error
	// A directive's verb is used as written, prefix or not.
	//
	//fero:verb ADD
	Put(ctx context.Context, req *Request) error
}

//fero:resource lower verbprefix=stock_
type Lower interface {
	Get(ctx context.Context, req *Request) error
}

//fero:resource nonascii verbprefix=STÖCK_
type NonASCII interface {
	Get(ctx context.Context, req *Request) error
}

//fero:resource empty verbprefix=
type Empty interface {
	Get(ctx context.Context, req *Request) error
}

//fero:resource punct verbprefix=STOCK.
type Punct interface {
	Get(ctx context.Context, req *Request) error
}

//fero:resource twice verbprefix=A_ verbprefix=B_
type Twice interface {
	Get(ctx context.Context, req *Request) error
}

//fero:resource unknown prefix=STOCK_
type Unknown interface {
	Login(ctx context.Context, req *Request) error
}

//fero:resource two words
type TwoWords interface {
	Login(ctx context.Context, req *Request) error
}

//fero:resource verbprefix=NONAME_
type NoName interface {
	Get(ctx context.Context, req *Request) error
}

// The prefix and the method's verb make a built-in verb.
//
//fero:resource made verbprefix=GE
type Made interface {
	T(ctx context.Context, req *Request) error
}

// Prefixed verbs may still collide with a directive's.
//
//fero:resource dup verbprefix=DUP_
type Dup interface {
	Get(ctx context.Context, req *Request) error
	//fero:verb DUP_GET
	Fetch(ctx context.Context, req *Request) error
}

type Request struct {
	Key string `msgpack:"key" fero:"key"`
}
