package nokey

import (
	"context"
	"strings"
)

//fero:resource users
type Users interface {
	Login(ctx context.Context, req *LoginRequest) (*LoginReply, error)
	// Logout's request comes from another package, so the error points
	// here.
	Logout(ctx context.Context, req *strings.Builder) error
	Typo(ctx context.Context, req *TypoRequest) error
}

type LoginRequest struct {
	Email    string `msgpack:"email"`
	Password string `msgpack:"password"`
}

type LoginReply struct{}

type TypoRequest struct {
	Email string `msgpack:"email" fero:"primary"`
}
