// Package stock covers the verb prefix: an inventory whose natural
// method names (Get, Add, Remove, Update) would be fero's built-in verbs
// without it, and a verb named by a directive, which keeps its name.
package stock

import "context"

// Stock is an inventory of items, by SKU.
//
//fero:resource stock verbprefix=STOCK_
type Stock interface {
	// Get is STOCK_GET: the built-in GET stays fero's.
	Get(ctx context.Context, req *ItemRequest) (*Item, error)
	// Add is STOCK_ADD.
	Add(ctx context.Context, req *Item) error
	// Remove is STOCK_REMOVE.
	Remove(ctx context.Context, req *ItemRequest) error
	// Update is STOCK_UPDATE.
	Update(ctx context.Context, req *Item) error
	// ListItems is STOCK_LIST_ITEMS.
	ListItems(ctx context.Context, req *ItemRequest) (*Items, error)
	// Reserve keeps the verb it had before the prefix: a directive's verb
	// is used as written.
	//
	//fero:verb LEGACY_NAME
	Reserve(ctx context.Context, req *ItemRequest) error
}

// ItemRequest names an item.
type ItemRequest struct {
	SKU string `msgpack:"sku" fero:"key"`
}

// Item is an item and how many are in stock.
type Item struct {
	SKU   string `msgpack:"sku" fero:"key"`
	Count int    `msgpack:"count"`
}

// Items is a list of items.
type Items struct {
	Items []Item `msgpack:"items"`
}
