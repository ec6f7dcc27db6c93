package main

import "context"

//fero:resource users
type Users interface {
	Login(ctx context.Context, req *Request) error
}

type Request struct {
	Key string `msgpack:"key" fero:"key"`
}

func main() {}
