package signature

import "context"

//fero:resource users
type Users interface {
	NoContext(req *Request) error
	NotContext(ctx string, req *Request) error
	Value(ctx context.Context, req Request) error
	Slice(ctx context.Context, req *[]Request) error
	ReplyValue(ctx context.Context, req *Request) (Request, error)
	NoError(ctx context.Context, req *Request) *Request
	Three(ctx context.Context, req *Request) (*Request, *Request, error)
	Variadic(ctx context.Context, req ...*Request) error
	Unexported(ctx context.Context, req *request) error
	lower(ctx context.Context, req *Request) error
	StreamValue(ctx context.Context, req *Request, send func(Request) error) error
	StreamNoError(ctx context.Context, req *Request, send func(*Request)) error
	StreamChan(ctx context.Context, req *Request, send chan *Request) error
	StreamReply(ctx context.Context, req *Request, send func(*Request) error) (*Request, error)
	StreamUnsupported(ctx context.Context, req *Request, send func(*Bad) error) error
}

type Bad struct {
	F func() `msgpack:"f"`
}

type Request struct {
	Key string `msgpack:"key" fero:"key"`
}

type request struct {
	Key string `msgpack:"key" fero:"key"`
}
