// ferogen wrote this file once, as a start: it is yours to edit, and
// ferogen never writes it again. When the declarations gain a verb,
// ferogen lists the methods this file's types lack.

package embeddedimpl

import (
	"context"

	"github.com/fero-go/fero/internal/ferogen/testdata/ok/embedded"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/embedded/embeddedfero"
	"github.com/fero-go/fero/pkg/fero"
)

// DocsService implements embedded.Docs.
// Mount it on every server node of the resource:
//
//	fero.Open(ctx, embeddedfero.DocsResourceName, embeddedfero.RegisterDocs(&DocsService{}))
//
// Each method runs on the node that owns its request's key.
// embeddedfero.RequestFromContext(ctx) returns the request, whose
// Resource() is the resource to read and write.
type DocsService struct {
	// Verbs declared later answer CodeUnimplemented until implemented.
	embeddedfero.UnimplementedDocs
}

var _ embedded.Docs = (*DocsService)(nil)

// Read answers READ.
func (s *DocsService) Read(ctx context.Context, req *embedded.ReadRequest) (*embedded.Doc, error) {
	return nil, fero.NewError(fero.CodeUnimplemented, "docs: READ is not implemented yet")
}

// Write answers WRITE.
func (s *DocsService) Write(ctx context.Context, req *embedded.WriteRequest) error {
	return fero.NewError(fero.CodeUnimplemented, "docs: WRITE is not implemented yet")
}

// Move answers MOVE.
func (s *DocsService) Move(ctx context.Context, req *embedded.MoveRequest) error {
	return fero.NewError(fero.CodeUnimplemented, "docs: MOVE is not implemented yet")
}

// Share answers SHARE.
func (s *DocsService) Share(ctx context.Context, req *embedded.ShareRequest) error {
	return fero.NewError(fero.CodeUnimplemented, "docs: SHARE is not implemented yet")
}
