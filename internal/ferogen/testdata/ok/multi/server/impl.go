// ferogen wrote this file once, as a start: it is yours to edit, and
// ferogen never writes it again. When the declarations gain a verb,
// ferogen lists the methods this file's types lack.

package main

import (
	"context"

	"github.com/fero-go/fero/internal/ferogen/testdata/ok/multi"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/multi/gen"
	"github.com/fero-go/fero/pkg/fero"
)

// SessionsService implements multi.Sessions.
// Mount it on every server node of the resource:
//
//	fero.Open(ctx, gen.SessionsResourceName, gen.RegisterSessions(&SessionsService{}))
//
// Each method runs on the node that owns its request's key.
// gen.RequestFromContext(ctx) returns the request, whose
// Resource() is the resource to read and write.
type SessionsService struct {
	// Verbs declared later answer CodeUnimplemented until implemented.
	gen.UnimplementedSessions
}

var _ multi.Sessions = (*SessionsService)(nil)

// Open answers OPEN.
func (s *SessionsService) Open(ctx context.Context, req *multi.OpenRequest) (*multi.OpenReply, error) {
	return nil, fero.NewError(fero.CodeUnimplemented, "sessions: OPEN is not implemented yet")
}

// CartsService implements multi.Carts.
// Mount it on every server node of the resource:
//
//	fero.Open(ctx, gen.CartsResourceName, gen.RegisterCarts(&CartsService{}))
//
// Each method runs on the node that owns its request's key.
// gen.RequestFromContext(ctx) returns the request, whose
// Resource() is the resource to read and write.
type CartsService struct {
	// Verbs declared later answer CodeUnimplemented until implemented.
	gen.UnimplementedCarts
}

var _ multi.Carts = (*CartsService)(nil)

// AddItem answers ADD_ITEM.
func (s *CartsService) AddItem(ctx context.Context, req *multi.AddRequest) error {
	return fero.NewError(fero.CodeUnimplemented, "carts: ADD_ITEM is not implemented yet")
}
