// ferogen wrote this file once, as a start: it is yours to edit, and
// ferogen never writes it again. When the declarations gain a verb,
// ferogen lists the methods this file's types lack.

package inimpl

import (
	"context"

	in2 "github.com/fero-go/fero/internal/ferogen/testdata/ok/imports"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/imports/infero"
	fero2 "github.com/fero-go/fero/internal/ferogen/testdata/ok/imports/model"
	"github.com/fero-go/fero/pkg/fero"
)

// InventoryService implements in2.Inventory.
// Mount it on every server node of the resource:
//
//	fero.Open(ctx, infero.InventoryResourceName, infero.RegisterInventory(&InventoryService{}))
//
// Each method runs on the node that owns its request's key.
// infero.RequestFromContext(ctx) returns the request, whose
// Resource() is the resource to read and write.
type InventoryService struct {
	// Verbs declared later answer CodeUnimplemented until implemented.
	infero.UnimplementedInventory
}

var _ in2.Inventory = (*InventoryService)(nil)

// Count answers COUNT.
func (s *InventoryService) Count(ctx context.Context, req *fero2.Item) (*fero2.Stock, error) {
	return nil, fero.NewError(fero.CodeUnimplemented, "inventory: COUNT is not implemented yet")
}

// Restock answers RESTOCK.
func (s *InventoryService) Restock(ctx context.Context, req *in2.Restock) (*fero2.Stock, error) {
	return nil, fero.NewError(fero.CodeUnimplemented, "inventory: RESTOCK is not implemented yet")
}
