package directives

import "context"

//fero:resource users
type Users interface {
	Login(ctx context.Context, req *Request) error
}

//fero:resource users
type Again interface {
	Login(ctx context.Context, req *Request) error
}

//fero:resource
type Unnamed interface {
	Login(ctx context.Context, req *Request) error
}

//fero:resource request
type Request struct {
	Key string `msgpack:"key" fero:"key"`
}

//fero:resource embeds
type Embeds interface {
	Users
}

//fero:resource empty
type Empty interface{}

//fero:resource lower
type lower interface {
	Login(ctx context.Context, req *Request) error
}

//fero:verb LOGIN
func Login() {}

//fero:verbs LOGIN
type Other interface {
	Login(ctx context.Context, req *Request) error
}

//fero:resource generic
type Generic[T any] interface {
	Login(ctx context.Context, req *Request) error
}

// A directive with a space after the slashes is not one: it is reported,
// as is the verb directive below.
//
// fero:resource spaced
type Spaced interface {
	//	fero:verb SPACED
	Login(ctx context.Context, req *Request) error
}

// fero: a comment of prose that starts with the word fero is not.
var _ = 0
