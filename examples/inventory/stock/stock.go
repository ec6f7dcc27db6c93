// Package stock declares the inventory service for ferogen: the resource
// "inventory", its verbs, and their typed requests, replies and stream
// items. ferogen generates package stockfero from it; package main (one
// directory up) implements it.
//
// An item is stored under its SKU, one top-level key, so that all of an
// item's requests go to one owner: GET reads it, ADD receives stock into
// a lot, RESERVE sets stock aside for an order, and WATCH streams the
// item's state, then every change to it.
//
// The natural method names Get and Add would be fero's built-in verbs, so
// the resource puts a prefix before every verb: INVENTORY_GET,
// INVENTORY_ADD, INVENTORY_RESERVE and INVENTORY_WATCH. The built-in GET
// still answers the stored item as it is.
package stock

//go:generate go tool ferogen --stub ../inventory_impl.go

import (
	"context"
	"strings"
	"time"

	"github.com/fero-go/fero/examples/inventory/audit"
)

// Inventory is the inventory service. Its methods run on the owner of
// the SKU's partition.
//
//fero:resource inventory verbprefix=INVENTORY_
type Inventory interface {
	// Get answers the item. An unknown SKU fails with CodeNotFound. It
	// only reads, so it runs without its SKU's turn, beside the writes.
	//
	//fero:concurrent
	Get(ctx context.Context, req *ItemRequest) (*Item, error)
	// Add receives stock: it adds the quantity to the lot (creating the
	// item on its first delivery, which must name it and say where it
	// goes), and answers the item as stored.
	Add(ctx context.Context, req *AddRequest) (*Item, error)
	// Reserve sets stock aside for an order. With too little available
	// it fails with CodeFailedPrecondition and an OutOfStock detail.
	// Reserving for an order that already holds a reservation answers
	// that reservation again, so a retried call reserves once. The reply
	// header "x-stock-left" says what is left to reserve.
	Reserve(ctx context.Context, req *ReserveRequest) (*Reservation, error)
	// Watch sends the item's current state, then its state after every
	// change, in version order, until the caller goes. An unknown SKU
	// fails with CodeNotFound.
	//
	// A watch runs on the owner of the SKU's partition. When the
	// partition moves (a server joined or left), the watch ends with
	// fero.ErrStreamMoved (CodeUnavailable); call Watch again with
	// After set to the last version seen, and it resumes at the new
	// owner without repeating what it sent.
	Watch(ctx context.Context, req *WatchRequest, send func(*StockEvent) error) error
}

// SKU identifies an item, and is the key its requests are routed by and
// its record is stored under. Keys are dot-separated paths to fero, so a
// SKU holds no '.'.
type SKU string

// Valid reports whether s can be a SKU: non-empty, with no '.'.
func (s SKU) Valid() bool { return s != "" && !strings.Contains(string(s), ".") }

// ItemRequest names an item: GET's request.
type ItemRequest struct {
	SKU SKU `msgpack:"sku" fero:"key"`
}

// AddRequest is ADD's request: a delivery of Quantity units into a lot.
type AddRequest struct {
	SKU SKU `msgpack:"sku" fero:"key"`
	// Name, Location, Dimensions and Tags describe the item. The first
	// delivery must give a name and a location; later ones change what
	// they give (tags are added to the item's).
	Name       string      `msgpack:"name,omitempty"`
	Location   *Location   `msgpack:"location,omitempty"`
	Dimensions *Dimensions `msgpack:"dimensions,omitempty"`
	Tags       []string    `msgpack:"tags,omitempty"`
	// Lot names the batch delivered, Quantity how many units (at least
	// 1), and Expires, if set, when the lot expires.
	Lot      string    `msgpack:"lot"`
	Quantity int       `msgpack:"quantity"`
	Expires  time.Time `msgpack:"expires,omitempty"`
}

// ReserveRequest is RESERVE's request.
type ReserveRequest struct {
	SKU SKU `msgpack:"sku" fero:"key"`
	// Order is the order the stock is for: one reservation per order.
	Order    string `msgpack:"order"`
	Quantity int    `msgpack:"quantity"`
}

// WatchRequest is WATCH's request.
type WatchRequest struct {
	SKU SKU `msgpack:"sku" fero:"key"`
	// After is the last version the caller has seen: the watch sends
	// only later ones. Zero sends the current state first.
	After uint64 `msgpack:"after,omitempty"`
}

// Item is an item in stock, the record stored under its SKU.
type Item struct {
	SKU      SKU      `msgpack:"sku"`
	Name     string   `msgpack:"name"`
	Location Location `msgpack:"location"`
	// Dimensions is nil until a delivery gives them.
	Dimensions *Dimensions `msgpack:"dimensions"`
	// Lots holds the stock received, by lot.
	Lots map[string]Lot `msgpack:"lots"`
	// Reserved holds the units set aside, by order.
	Reserved map[string]int `msgpack:"reserved"`
	Tags     []string       `msgpack:"tags"`
	// Version counts the item's changes, from 1 for its first delivery.
	Version uint64 `msgpack:"version"`
	// Node is the server that made the last change: the owner of the
	// SKU's partition at the time.
	Node string `msgpack:"node"`
	// Stamp says who made the last change, and when: item.By, item.At.
	audit.Stamp
}

// OnHand is how many units the item's lots hold.
func (it *Item) OnHand() int {
	n := 0
	for _, l := range it.Lots {
		n += l.Quantity
	}
	return n
}

// Available is how many units are left to reserve.
func (it *Item) Available() int {
	n := it.OnHand()
	for _, q := range it.Reserved {
		n -= q
	}
	return n
}

// Location is where an item is shelved.
type Location struct {
	Warehouse string `msgpack:"warehouse"`
	Aisle     string `msgpack:"aisle"`
	Bin       int    `msgpack:"bin"`
}

// Dimensions are an item's size and weight, in millimetres and grams.
type Dimensions struct {
	LengthMM int `msgpack:"length_mm"`
	WidthMM  int `msgpack:"width_mm"`
	HeightMM int `msgpack:"height_mm"`
	WeightG  int `msgpack:"weight_g"`
}

// Lot is one batch of an item.
type Lot struct {
	Quantity int `msgpack:"quantity"`
	// Expires is zero for a lot that does not expire.
	Expires time.Time `msgpack:"expires,omitempty"`
	// Received says who received the lot's latest delivery, and when.
	Received audit.Stamp `msgpack:"received"`
}

// Reservation is RESERVE's reply.
type Reservation struct {
	SKU      SKU    `msgpack:"sku"`
	Order    string `msgpack:"order"`
	Quantity int    `msgpack:"quantity"`
	// Left is how many units are left to reserve after this one.
	Left int `msgpack:"left"`
	// Version is the item's version that holds the reservation.
	Version uint64 `msgpack:"version"`
	// Node is the server that answered: the owner of the SKU.
	Node string `msgpack:"node"`
}

// StockEvent is one item of a WATCH stream: the item as it was at
// Item.Version.
type StockEvent struct {
	// Initial marks the state the watch started from; every later event
	// is a change.
	Initial bool `msgpack:"initial,omitempty"`
	Item    Item `msgpack:"item"`
	// Node is the server that sent the event: the owner of the SKU.
	Node string `msgpack:"node"`
}

// OutOfStock is the detail of RESERVE's CodeFailedPrecondition error, of
// type OutOfStockDetail: what was asked, and what was available.
type OutOfStock struct {
	SKU       SKU `msgpack:"sku"`
	Asked     int `msgpack:"asked"`
	Available int `msgpack:"available"`
}

// OutOfStockDetail is the type name of an OutOfStock error detail.
const OutOfStockDetail = "inventory.OutOfStock"
