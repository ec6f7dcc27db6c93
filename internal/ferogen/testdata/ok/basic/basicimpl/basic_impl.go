// ferogen wrote this file once, as a start: it is yours to edit, and
// ferogen never writes it again. When the declarations gain a verb,
// ferogen lists the methods this file's types lack.

package basicimpl

import (
	"context"

	"github.com/fero-go/fero/internal/ferogen/testdata/ok/basic"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/basic/basicfero"
	"github.com/fero-go/fero/pkg/fero"
)

// UsersService implements basic.Users.
// Mount it on every server node of the resource:
//
//	fero.Open(ctx, basicfero.UsersResourceName, basicfero.RegisterUsers(&UsersService{}))
//
// Each method runs on the node that owns its request's key.
// basicfero.RequestFromContext(ctx) returns the request, whose
// Resource() is the resource to read and write.
type UsersService struct {
	// Verbs declared later answer CodeUnimplemented until implemented.
	basicfero.UnimplementedUsers
}

var _ basic.Users = (*UsersService)(nil)

// Login answers LOGIN.
func (s *UsersService) Login(ctx context.Context, req *basic.LoginRequest) (*basic.LoginReply, error) {
	return nil, fero.NewError(fero.CodeUnimplemented, "users: LOGIN is not implemented yet")
}

// Logout answers LOGOUT.
func (s *UsersService) Logout(ctx context.Context, req *basic.LogoutRequest) error {
	return fero.NewError(fero.CodeUnimplemented, "users: LOGOUT is not implemented yet")
}
