package typeerror

import "context"

//fero:resource users
type Users interface {
	Login(ctx context.Context, req *LoginRequest) error
}
