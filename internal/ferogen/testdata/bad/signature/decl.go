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
}

type Request struct {
	Key string `msgpack:"key" fero:"key"`
}

type request struct {
	Key string `msgpack:"key" fero:"key"`
}
