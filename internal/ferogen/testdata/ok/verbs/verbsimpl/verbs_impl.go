// ferogen wrote this file once, as a start: it is yours to edit, and
// ferogen never writes it again. When the declarations gain a verb,
// ferogen lists the methods this file's types lack.

package verbsimpl

import (
	"context"

	"github.com/fero-go/fero/internal/ferogen/testdata/ok/verbs"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/verbs/verbsfero"
	"github.com/fero-go/fero/pkg/fero"
)

// AccountsService implements verbs.Accounts.
// Mount it on every server node of the resource:
//
//	fero.Open(ctx, verbsfero.AccountsResourceName, verbsfero.RegisterAccounts(&AccountsService{}))
//
// Each method runs on the node that owns its request's key.
// verbsfero.RequestFromContext(ctx) returns the request, whose
// Resource() is the resource to read and write.
type AccountsService struct {
	// Verbs declared later answer CodeUnimplemented until implemented.
	verbsfero.UnimplementedAccounts
}

var _ verbs.Accounts = (*AccountsService)(nil)

// ResetPassword answers RESET_PASSWORD.
func (s *AccountsService) ResetPassword(ctx context.Context, req *verbs.Request) error {
	return fero.NewError(fero.CodeUnimplemented, "accounts: RESET_PASSWORD is not implemented yet")
}

// GetURL answers GET_URL.
func (s *AccountsService) GetURL(ctx context.Context, req *verbs.Request) (*verbs.URL, error) {
	return nil, fero.NewError(fero.CodeUnimplemented, "accounts: GET_URL is not implemented yet")
}

// HTTPProxy answers HTTP_PROXY.
func (s *AccountsService) HTTPProxy(ctx context.Context, req *verbs.Request) (*verbs.URL, error) {
	return nil, fero.NewError(fero.CodeUnimplemented, "accounts: HTTP_PROXY is not implemented yet")
}

// Delete answers accounts.delete/v2.
func (s *AccountsService) Delete(ctx context.Context, req *verbs.Request) error {
	return fero.NewError(fero.CodeUnimplemented, "accounts: accounts.delete/v2 is not implemented yet")
}
