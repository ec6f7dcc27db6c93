// Package basic is the example: one resource, a verb with a reply
// and one without.
package basic

import (
	"context"
	"time"
)

//fero:resource users
type Users interface {
	Login(ctx context.Context, req *LoginRequest) (*LoginReply, error)
	Logout(ctx context.Context, req *LogoutRequest) error
}

type LoginRequest struct {
	Email    string `msgpack:"email" fero:"key"`
	Password string `msgpack:"password"`
}

type LoginReply struct {
	Token   string    `msgpack:"token"`
	Expires time.Time `msgpack:"expires"`
}

type LogoutRequest struct {
	Email string `msgpack:"email" fero:"key"`
	Token string `msgpack:"token"`
}
