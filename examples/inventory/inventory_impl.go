// ferogen wrote this file once, as a start: it is yours to edit, and
// ferogen never writes it again. When the declarations gain a verb,
// ferogen lists the methods this file's types lack.

package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fero-go/fero/examples/inventory/audit"
	"github.com/fero-go/fero/examples/inventory/stock"
	"github.com/fero-go/fero/examples/inventory/stock/stockfero"
	"github.com/fero-go/fero/pkg/fero"
)

// InventoryService implements stock.Inventory.
// Mount it on every server node of the resource:
//
//	fero.Open(ctx, stockfero.InventoryResourceName, stockfero.RegisterInventory(&InventoryService{}))
//
// Each method runs on the node that owns its request's key, and reads
// and writes the item there: reads are local, and the owner commits the
// item's writes itself.
//
// Handlers run concurrently, so ADD and RESERVE, which read the item,
// change it and write it back, hold the SKU's lock from the read until
// the write has committed: two requests for one SKU never work from the
// same version. The lock is this process's, which is enough while the
// SKU's partition stays with its owner; fero offers no conditional write
// that would also fence a request still running on an owner that has
// just handed the partition over.
type InventoryService struct {
	// Verbs declared later answer CodeUnimplemented until implemented.
	stockfero.UnimplementedInventory

	locks    keyLocks
	watching atomic.Int64
}

var _ stock.Inventory = (*InventoryService)(nil)

// watchBuffer is how many changes of the resource (of any SKU) a WATCH
// holds while its reader is behind. Past it, the watch sends the latest
// state and skips the versions it missed.
const watchBuffer = 256

// Get answers the item as this owner holds it.
func (s *InventoryService) Get(ctx context.Context, req *stock.ItemRequest) (*stock.Item, error) {
	r, err := resource(ctx, req.SKU)
	if err != nil {
		return nil, err
	}
	return read(r, req.SKU)
}

// Add receives Quantity units into the lot, creating the item on its
// first delivery.
func (s *InventoryService) Add(ctx context.Context, req *stock.AddRequest) (*stock.Item, error) {
	r, err := resource(ctx, req.SKU)
	if err != nil {
		return nil, err
	}
	if req.Quantity < 1 {
		return nil, fero.Errorf(fero.CodeInvalidArgument, "add %s: a delivery of %d units", req.SKU, req.Quantity)
	}
	if !segment(req.Lot) {
		return nil, fero.Errorf(fero.CodeInvalidArgument, "add %s: lot %q: want a name without '.'", req.SKU, req.Lot)
	}
	unlock, err := s.locks.lock(ctx, req.SKU)
	if err != nil {
		return nil, err
	}
	defer unlock()
	it, err := read(r, req.SKU)
	if fero.CodeOf(err) == fero.CodeNotFound {
		if req.Name == "" || req.Location == nil {
			return nil, fero.Errorf(fero.CodeInvalidArgument, "add %s: the first delivery of an item names it and gives its location", req.SKU)
		}
		it, err = &stock.Item{SKU: req.SKU, Lots: map[string]stock.Lot{}, Reserved: map[string]int{}}, nil
	}
	if err != nil {
		return nil, err
	}
	if req.Name != "" {
		it.Name = req.Name
	}
	if req.Location != nil {
		it.Location = *req.Location
	}
	if req.Dimensions != nil {
		d := *req.Dimensions
		it.Dimensions = &d
	}
	for _, tag := range req.Tags {
		if !slices.Contains(it.Tags, tag) {
			it.Tags = append(it.Tags, tag)
		}
	}
	stamp := stampOf(ctx)
	lot := it.Lots[req.Lot]
	lot.Quantity += req.Quantity
	if !req.Expires.IsZero() {
		lot.Expires = req.Expires.UTC()
	}
	lot.Received = stamp
	it.Lots[req.Lot] = lot
	if err := write(ctx, r, it, stamp); err != nil {
		return nil, err
	}
	return it, nil
}

// Reserve sets Quantity units aside for the order, if that many are
// available, and says in the reply header x-stock-left how many remain.
func (s *InventoryService) Reserve(ctx context.Context, req *stock.ReserveRequest) (*stock.Reservation, error) {
	r, err := resource(ctx, req.SKU)
	if err != nil {
		return nil, err
	}
	if req.Quantity < 1 {
		return nil, fero.Errorf(fero.CodeInvalidArgument, "reserve %s: %d units", req.SKU, req.Quantity)
	}
	if !segment(req.Order) {
		return nil, fero.Errorf(fero.CodeInvalidArgument, "reserve %s: order %q: want an ID without '.'", req.SKU, req.Order)
	}
	unlock, err := s.locks.lock(ctx, req.SKU)
	if err != nil {
		return nil, err
	}
	defer unlock()
	it, err := read(r, req.SKU)
	if err != nil {
		return nil, err
	}
	if held, ok := it.Reserved[req.Order]; ok {
		// A retry of a reservation that committed: answer it again.
		if held != req.Quantity {
			return nil, fero.Errorf(fero.CodeAlreadyExists, "reserve %s: order %s already holds %d units", req.SKU, req.Order, held)
		}
		return reserved(ctx, r, it, req.Order)
	}
	if avail := it.Available(); avail < req.Quantity {
		d, err := fero.NewErrorDetail(stock.OutOfStockDetail, stock.OutOfStock{SKU: req.SKU, Asked: req.Quantity, Available: avail})
		if err != nil {
			return nil, err
		}
		return nil, fero.Errorf(fero.CodeFailedPrecondition, "reserve %s: %d units asked, %d available", req.SKU, req.Quantity, avail).WithDetail(d)
	}
	if it.Reserved == nil {
		it.Reserved = map[string]int{}
	}
	it.Reserved[req.Order] = req.Quantity
	if err := write(ctx, r, it, stampOf(ctx)); err != nil {
		return nil, err
	}
	return reserved(ctx, r, it, req.Order)
}

// reserved answers the order's reservation in it.
func reserved(ctx context.Context, r *fero.Resource, it *stock.Item, order string) (*stock.Reservation, error) {
	left := it.Available()
	req, _ := stockfero.RequestFromContext(ctx)
	if err := req.SetReplyHeader("x-stock-left", strconv.Itoa(left)); err != nil {
		return nil, err
	}
	return &stock.Reservation{SKU: it.SKU, Order: order, Quantity: it.Reserved[order], Left: left, Version: it.Version, Node: r.ID()}, nil
}

// Watch sends the item's state, then its state after each change, until
// the caller goes (its context ends, or send fails).
//
// It follows the resource's change stream on this node, the owner, where
// each change the owner commits arrives in log order, and so the item's
// changes in version order. It subscribes before it reads the item, so
// that no change falls between the read and the stream: the changes up to
// the version read are skipped. A reader slower than the buffer makes the
// stream drop changes: the watch then sends the latest state, skipping
// versions, rather than fall further behind.
//
// When the SKU's partition moves to another owner, fero ends the
// handler's context and the caller's stream with fero.ErrStreamMoved; the
// caller resumes by calling Watch again with After set to the last
// version it saw.
func (s *InventoryService) Watch(ctx context.Context, req *stock.WatchRequest, send func(*stock.StockEvent) error) error {
	r, err := resource(ctx, req.SKU)
	if err != nil {
		return err
	}
	s.watching.Add(1)
	defer s.watching.Add(-1)
	sub := r.Subscribe(fero.Buffer(watchBuffer))
	defer sub.Close()

	last := req.After
	// sendLatest sends the item as this node holds it, if it is newer
	// than what the caller saw.
	sendLatest := func(initial bool) error {
		it, err := read(r, req.SKU)
		if err != nil {
			return err
		}
		if it.Version <= last {
			return nil
		}
		last = it.Version
		return send(&stock.StockEvent{Initial: initial, Item: *it, Node: r.ID()})
	}
	if err := sendLatest(true); err != nil {
		return err
	}
	var dropped uint64
	for {
		var ch fero.Change
		var ok bool
		select {
		case ch, ok = <-sub.C():
		case <-ctx.Done():
			return ctx.Err()
		}
		if !ok {
			return fero.Errorf(fero.CodeUnavailable, "watch %s: the node is closing", req.SKU)
		}
		switch {
		case ch.Kind == fero.Dropped || ch.Kind == fero.Restored:
			// The partition's history changed under the copy: read it.
			err = sendLatest(false)
		case ch.Key == string(req.SKU) && ch.Type == fero.Remove:
			return fero.Errorf(fero.CodeNotFound, "watch %s: the item was removed", req.SKU)
		case ch.Key == string(req.SKU):
			var it stock.Item
			if err := ch.Decode(&it); err != nil {
				return err
			}
			if it.Version > last {
				last = it.Version
				err = send(&stock.StockEvent{Item: it, Node: r.ID()})
			}
		case strings.HasPrefix(ch.Key, string(req.SKU)+"."):
			// A write to a field, made around the service with fero's
			// built-in verbs.
			err = sendLatest(false)
		}
		if err != nil {
			return err
		}
		if d := sub.Dropped(); d != dropped {
			dropped = d
			if err := sendLatest(false); err != nil {
				return err
			}
		}
	}
}

// Watching reports how many WATCH handlers are running in this process.
func (s *InventoryService) Watching() int { return int(s.watching.Load()) }

// resource returns the resource the request being answered came to, and
// checks its SKU.
func resource(ctx context.Context, sku stock.SKU) (*fero.Resource, error) {
	req, ok := stockfero.RequestFromContext(ctx)
	if !ok {
		return nil, fero.Errorf(fero.CodeFailedPrecondition, "inventory: InventoryService answers requests mounted with stockfero.RegisterInventory")
	}
	if !sku.Valid() {
		return nil, fero.Errorf(fero.CodeInvalidArgument, "%s: SKU %q: want a name without '.'", req.Verb, sku)
	}
	return req.Resource(), nil
}

// read returns the item as this node holds it.
func read(r *fero.Resource, sku stock.SKU) (*stock.Item, error) {
	var it stock.Item
	ok, err := r.GetInto(string(sku), &it)
	if err != nil {
		return nil, fero.Errorf(fero.CodeInternal, "read %s: %w", sku, err)
	}
	if !ok {
		return nil, fero.Errorf(fero.CodeNotFound, "no item %s", sku)
	}
	return &it, nil
}

// write stores it as its next version, made by this node and stamped,
// once a majority of the servers hold it: an acknowledged reservation
// survives the owner's crash.
func write(ctx context.Context, r *fero.Resource, it *stock.Item, stamp audit.Stamp) error {
	it.Version++
	it.Node = r.ID()
	it.Stamp = stamp
	if err := r.Update(ctx, string(it.SKU), it, fero.Majority); err != nil {
		return fmt.Errorf("store %s version %d: %w", it.SKU, it.Version, err)
	}
	return nil
}

// stampOf stamps a change made now by the request's principal.
func stampOf(ctx context.Context) audit.Stamp {
	by := principalOf(ctx)
	if by == "" {
		by = "anonymous"
	}
	return audit.Stamp{By: by, At: time.Now().UTC()}
}

// segment reports whether name can be one segment of a path: a map key
// inside the item.
func segment(name string) bool { return name != "" && !strings.Contains(name, ".") }

// keyLocks serialises the read-modify-writes of each SKU. A SKU's lock
// exists while someone holds it or waits for it.
type keyLocks struct {
	mu   sync.Mutex
	held map[stock.SKU]*keyLock
}

type keyLock struct {
	sem  chan struct{} // holds a token while the lock is held
	refs int           // holders and waiters; guarded by keyLocks.mu
}

// lock takes the lock of sku, waiting for it until ctx ends, and returns
// the function that releases it.
func (l *keyLocks) lock(ctx context.Context, sku stock.SKU) (unlock func(), err error) {
	l.mu.Lock()
	if l.held == nil {
		l.held = map[stock.SKU]*keyLock{}
	}
	k := l.held[sku]
	if k == nil {
		k = &keyLock{sem: make(chan struct{}, 1)}
		l.held[sku] = k
	}
	k.refs++
	l.mu.Unlock()
	select {
	case k.sem <- struct{}{}:
		return func() { <-k.sem; l.release(sku, k) }, nil
	case <-ctx.Done():
		l.release(sku, k)
		return nil, ctx.Err()
	}
}

func (l *keyLocks) release(sku stock.SKU, k *keyLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k.refs--; k.refs == 0 {
		delete(l.held, sku)
	}
}
