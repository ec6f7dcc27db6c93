// ferogen wrote this file once, as a start: it is yours to edit, and
// ferogen never writes it again. When the declarations gain a verb,
// ferogen lists the methods this file's types lack.

package stockimpl

import (
	"context"

	"github.com/fero-go/fero/internal/ferogen/testdata/ok/stock"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/stock/stockfero"
	"github.com/fero-go/fero/pkg/fero"
)

// StockService implements stock.Stock.
// Mount it on every server node of the resource:
//
//	fero.Open(ctx, stockfero.StockResourceName, stockfero.RegisterStock(&StockService{}))
//
// Each method runs on the node that owns its request's key.
// stockfero.RequestFromContext(ctx) returns the request, whose
// Resource() is the resource to read and write.
type StockService struct {
	// Verbs declared later answer CodeUnimplemented until implemented.
	stockfero.UnimplementedStock
}

var _ stock.Stock = (*StockService)(nil)

// Get answers STOCK_GET.
func (s *StockService) Get(ctx context.Context, req *stock.ItemRequest) (*stock.Item, error) {
	return nil, fero.NewError(fero.CodeUnimplemented, "stock: STOCK_GET is not implemented yet")
}

// Add answers STOCK_ADD.
func (s *StockService) Add(ctx context.Context, req *stock.Item) error {
	return fero.NewError(fero.CodeUnimplemented, "stock: STOCK_ADD is not implemented yet")
}

// Remove answers STOCK_REMOVE.
func (s *StockService) Remove(ctx context.Context, req *stock.ItemRequest) error {
	return fero.NewError(fero.CodeUnimplemented, "stock: STOCK_REMOVE is not implemented yet")
}

// Update answers STOCK_UPDATE.
func (s *StockService) Update(ctx context.Context, req *stock.Item) error {
	return fero.NewError(fero.CodeUnimplemented, "stock: STOCK_UPDATE is not implemented yet")
}

// ListItems answers STOCK_LIST_ITEMS.
func (s *StockService) ListItems(ctx context.Context, req *stock.ItemRequest) (*stock.Items, error) {
	return nil, fero.NewError(fero.CodeUnimplemented, "stock: STOCK_LIST_ITEMS is not implemented yet")
}

// Reserve answers LEGACY_NAME.
func (s *StockService) Reserve(ctx context.Context, req *stock.ItemRequest) error {
	return fero.NewError(fero.CodeUnimplemented, "stock: LEGACY_NAME is not implemented yet")
}
