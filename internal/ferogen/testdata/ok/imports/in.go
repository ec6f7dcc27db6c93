// Package in covers imports: requests and replies from another package,
// named as pkg/fero is, and a declaration package named as a variable of
// the generated code.
package in

import (
	"context"

	model "github.com/fero-go/fero/internal/ferogen/testdata/ok/imports/model"
)

//fero:resource inventory
type Inventory interface {
	Count(ctx context.Context, req *model.Item) (*model.Stock, error)
	Restock(ctx context.Context, req *Restock) (*model.Stock, error)
}

// Restock embeds the model's item, whose key is not the request's: the key
// is a field of the request itself.
type Restock struct {
	model.Item
	Shelf string `msgpack:"shelf" fero:"key"`
}
