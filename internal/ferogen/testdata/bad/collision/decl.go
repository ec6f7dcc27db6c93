package collision

import "context"

//fero:resource users
type Users interface {
	LoginAll(ctx context.Context, req *Request) error
}

//fero:resource userslogin
type UsersLogin interface {
	All(ctx context.Context, req *Request) error
}

type Request struct {
	Key string `msgpack:"key" fero:"key"`
}
