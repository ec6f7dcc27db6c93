package dupverb

import "context"

//fero:resource users
type Users interface {
	Login(ctx context.Context, req *Request) error
	// SignIn says it is LOGIN too.
	//
	//fero:verb LOGIN
	SignIn(ctx context.Context, req *Request) error
	// Get would take over fero's own GET.
	Get(ctx context.Context, req *Request) (*Request, error)
	//fero:verb two words
	Fetch(ctx context.Context, req *Request) error
	//fero:verb "quoted"
	Load(ctx context.Context, req *Request) error
	// ÜberCount's name is not ASCII, so it needs a directive.
	ÜberCount(ctx context.Context, req *Request) error
	//fero:verb ZÄHLEN
	Count(ctx context.Context, req *Request) error
}

type Request struct {
	Key string `msgpack:"key" fero:"key"`
}
