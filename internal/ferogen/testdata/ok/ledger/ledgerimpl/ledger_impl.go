// ferogen wrote this file once, as a start: it is yours to edit, and
// ferogen never writes it again. When the declarations gain a verb,
// ferogen lists the methods this file's types lack.

package ledgerimpl

import (
	"context"

	"github.com/fero-go/fero/internal/ferogen/testdata/ok/ledger"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/ledger/ledgerfero"
	"github.com/fero-go/fero/pkg/fero"
)

// LedgerService implements ledger.Ledger.
// Mount it on every server node of the resource:
//
//	fero.Open(ctx, ledgerfero.LedgerResourceName, ledgerfero.RegisterLedger(&LedgerService{}))
//
// Each method runs on the node that owns its request's key.
// ledgerfero.RequestFromContext(ctx) returns the request, whose
// Resource() is the resource to read and write.
type LedgerService struct {
	// Verbs declared later answer CodeUnimplemented until implemented.
	ledgerfero.UnimplementedLedger
}

var _ ledger.Ledger = (*LedgerService)(nil)

// Balance answers BALANCE.
func (s *LedgerService) Balance(ctx context.Context, req *ledger.Account) (*ledger.Amount, error) {
	return nil, fero.NewError(fero.CodeUnimplemented, "ledger: BALANCE is not implemented yet")
}

// Deposit answers DEPOSIT.
func (s *LedgerService) Deposit(ctx context.Context, req *ledger.Deposit) (*ledger.Amount, error) {
	return nil, fero.NewError(fero.CodeUnimplemented, "ledger: DEPOSIT is not implemented yet")
}

// Audit answers AUDIT_LOG.
func (s *LedgerService) Audit(ctx context.Context, req *ledger.Account) error {
	return fero.NewError(fero.CodeUnimplemented, "ledger: AUDIT_LOG is not implemented yet")
}

// History answers HISTORY. It calls send with each item it streams, and
// its return ends the stream.
func (s *LedgerService) History(ctx context.Context, req *ledger.Account, send func(*ledger.Deposit) error) error {
	return fero.NewError(fero.CodeUnimplemented, "ledger: HISTORY is not implemented yet")
}

// VaultService implements ledger.Vault.
// Mount it on every server node of the resource:
//
//	fero.Open(ctx, ledgerfero.VaultResourceName, ledgerfero.RegisterVault(&VaultService{}))
//
// Each method runs on the node that owns its request's key.
// ledgerfero.RequestFromContext(ctx) returns the request, whose
// Resource() is the resource to read and write.
type VaultService struct {
	// Verbs declared later answer CodeUnimplemented until implemented.
	ledgerfero.UnimplementedVault
}

var _ ledger.Vault = (*VaultService)(nil)

// Open answers OPEN.
func (s *VaultService) Open(ctx context.Context, req *ledger.Account) error {
	return fero.NewError(fero.CodeUnimplemented, "vault: OPEN is not implemented yet")
}
