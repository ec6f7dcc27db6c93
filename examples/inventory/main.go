// Command inventory is a typed fero service with what a demanding user
// asks of one: requests and replies of nested structs, a struct embedded
// from another package, maps, slices, times and pointers (stock/stock.go);
// a streaming verb, WATCH; an error with a typed detail and a reply
// header (RESERVE); headers that carry a bearer token; and interceptors
// on the servers that authenticate and log every request, streams
// included (interceptors.go).
//
// The declarations are the interface stock.Inventory, whose methods have
// natural names (Get, Add) because the resource gives its verbs a prefix:
// INVENTORY_GET, INVENTORY_ADD, INVENTORY_RESERVE, INVENTORY_WATCH.
// ferogen generates package stockfero from them, and inventory_impl.go,
// the stub ferogen wrote once, implements them.
//
// The demo runs three server nodes and one client node in this process,
// joined by real gossip on loopback, and calls every verb from the
// client, which sends alice's token with each call and stream. It prints
// what each answered, a call without a token refused, a WATCH that sees a
// RESERVE another goroutine makes while it runs, and the servers' request
// log.
//
//	go run ./examples/inventory
//
// To regenerate after editing stock/stock.go: go generate ./examples/inventory/...
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fero-go/fero/examples/inventory/stock"
	"github.com/fero-go/fero/examples/inventory/stock/stockfero"
	"github.com/fero-go/fero/pkg/fero"
)

// demoTimeout bounds the whole demo.
const demoTimeout = 30 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	if _, err := runDemo(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(1)
	}
}

// tokens are the bearer tokens the servers accept, and whom each stands
// for. A real service would take them from a secret store.
var tokens = map[string]string{
	"alice-token": "alice",
	"bob-token":   "bob",
}

const sku stock.SKU = "WIDGET-42"

// outcome is what the demo's client saw.
type outcome struct {
	Added, Got *stock.Item
	// Unauthenticated is the error of a GET sent without a token.
	Unauthenticated error
	// The WATCH's first event, and the one that shows the RESERVE.
	Initial, Changed *stock.StockEvent
	Reservation      *stock.Reservation
	// StockLeft is the reply header x-stock-left of the RESERVE.
	StockLeft string
	// OutOfStock is the error of a RESERVE of more than is available,
	// and Detail its detail.
	OutOfStock error
	Detail     stock.OutOfStock
	// WatchErr is what the WATCH returned once the client stopped it.
	WatchErr error
	// Log is the servers' request log.
	Log string
}

// runDemo opens the cluster, calls every verb from the client node through
// the generated client, and returns what it saw, printing a transcript
// to w.
func runDemo(ctx context.Context, w io.Writer) (out *outcome, err error) {
	var nodes []*fero.Resource
	defer func() {
		for _, r := range slices.Backward(nodes) {
			if cerr := r.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("close %s: %w", r.ID(), cerr))
			}
		}
	}()
	var requestLog syncBuffer
	logger := slog.New(slog.NewTextHandler(&requestLog, &slog.HandlerOptions{ReplaceAttr: dropTimeAndLevel}))
	svc := &InventoryService{}
	seed := ""
	for _, id := range []string{"server-1", "server-2", "server-3", "client"} {
		opts := []fero.NodeOption{fero.WithID(id), fero.WithPreset(fero.PresetLocal), fero.WithoutMulticast()}
		if id == "client" {
			// A client owns no partition: it answers nothing, and sends
			// alice's token with everything it asks.
			opts = append(opts, fero.Client(), fero.WithCallRetry(fero.RetryPolicy{Attempts: 10}))
			opts = append(opts, bearer("alice-token"))
		} else {
			opts = append(opts, stockfero.RegisterInventory(svc), fero.WithInterceptors(LogRequests(logger), Authenticate(tokens)))
		}
		if seed != "" {
			opts = append(opts, fero.WithSeeds(seed))
		}
		r, err := fero.Open(ctx, stockfero.InventoryResourceName, opts...)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", id, err)
		}
		nodes = append(nodes, r)
		if seed == "" {
			seed = r.GossipAddr()
		}
	}
	if err := ready(ctx, nodes); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "3 servers (stockfero.RegisterInventory, interceptors LogRequests and Authenticate)\nand 1 client sending alice's token, joined by gossip at %s\n\n", seed)

	client := nodes[len(nodes)-1]
	inv := stockfero.NewInventoryClient(client)
	out = &outcome{}

	// ADD, twice: the first delivery creates the item.
	expires := time.Date(2027, time.March, 1, 0, 0, 0, 0, time.UTC)
	out.Added, err = inv.Add(ctx, &stock.AddRequest{
		SKU: sku, Name: "Widget, 42 mm", Tags: []string{"fragile"},
		Location:   &stock.Location{Warehouse: "AMS-1", Aisle: "7", Bin: 3},
		Dimensions: &stock.Dimensions{LengthMM: 120, WidthMM: 40, HeightMM: 40, WeightG: 310},
		Lot:        "L-2401", Quantity: 12, Expires: expires,
	})
	if err != nil {
		return nil, fmt.Errorf("INVENTORY_ADD: %w", err)
	}
	fmt.Fprintf(w, "INVENTORY_ADD %s lot L-2401 x12 → version %d, %d on hand (committed by %s, the owner)\n", sku, out.Added.Version, out.Added.OnHand(), out.Added.Node)
	added, err := inv.Add(ctx, &stock.AddRequest{SKU: sku, Lot: "L-2407", Quantity: 8, Tags: []string{"metric"}})
	if err != nil {
		return nil, fmt.Errorf("INVENTORY_ADD: %w", err)
	}
	fmt.Fprintf(w, "INVENTORY_ADD %s lot L-2407 x8  → version %d, %d on hand\n", sku, added.Version, added.OnHand())

	// GET: the nested and embedded fields, as stored.
	if out.Got, err = inv.Get(ctx, &stock.ItemRequest{SKU: sku}); err != nil {
		return nil, fmt.Errorf("INVENTORY_GET: %w", err)
	}
	printItem(w, out.Got)

	// The same GET without a token, through a Remote dialed to a server.
	anon, err := fero.Dial(ctx, nodes[0].Addr())
	if err != nil {
		return nil, err
	}
	_, out.Unauthenticated = stockfero.NewInventoryClient(anon).Get(ctx, &stock.ItemRequest{SKU: sku})
	if err := anon.Close(); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "INVENTORY_GET %s without a token → %v (code %s)\n\n", sku, out.Unauthenticated, fero.CodeOf(out.Unauthenticated))

	// WATCH, while another goroutine reserves.
	if err := watchAndReserve(ctx, w, inv, out); err != nil {
		return nil, err
	}

	// RESERVE more than is available: a coded error with a typed detail.
	_, out.OutOfStock = inv.Reserve(ctx, &stock.ReserveRequest{SKU: sku, Order: "order-1002", Quantity: 50})
	for _, d := range fero.ErrorDetails(out.OutOfStock) {
		if d.Type == stock.OutOfStockDetail {
			if err := fero.DecodeErrorDetail(d, &out.Detail); err != nil {
				return nil, err
			}
		}
	}
	fmt.Fprintf(w, "INVENTORY_RESERVE %s order-1002 x50 → %v (code %s)\n", sku, out.OutOfStock, fero.CodeOf(out.OutOfStock))
	fmt.Fprintf(w, "  detail %s: asked %d, available %d\n", stock.OutOfStockDetail, out.Detail.Asked, out.Detail.Available)

	// The watch's handler logs once it has returned.
	if err := poll(ctx, func() bool { return strings.Contains(requestLog.String(), "verb="+stockfero.InventoryWatchVerb) }); err != nil {
		return nil, fmt.Errorf("the watch's log line: %w", err)
	}
	out.Log = requestLog.String()
	fmt.Fprintf(w, "\nthe servers' request log (LogRequests):\n")
	for line := range strings.Lines(out.Log) {
		fmt.Fprintf(w, "  %s", line)
	}
	return out, nil
}

// watchAndReserve opens a WATCH of the item, reserves from another
// goroutine while it runs, and prints what the watch saw.
func watchAndReserve(ctx context.Context, w io.Writer, inv stock.Inventory, out *outcome) error {
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	events := make(chan *stock.StockEvent)
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- inv.Watch(watchCtx, &stock.WatchRequest{SKU: sku}, func(ev *stock.StockEvent) error {
			select {
			case events <- ev:
				return nil
			case <-watchCtx.Done():
				return watchCtx.Err()
			}
		})
	}()
	next := func() (*stock.StockEvent, error) {
		select {
		case ev := <-events:
			return ev, nil
		case err := <-watchDone:
			return nil, fmt.Errorf("INVENTORY_WATCH ended: %w", err)
		case <-ctx.Done():
			return nil, fmt.Errorf("INVENTORY_WATCH: %w", ctx.Err())
		}
	}
	var err error
	if out.Initial, err = next(); err != nil {
		return err
	}
	fmt.Fprintf(w, "INVENTORY_WATCH %s → initial state: version %d, %d available (sent by %s)\n", sku, out.Initial.Item.Version, out.Initial.Item.Available(), out.Initial.Node)

	type result struct {
		r      *stock.Reservation
		header fero.ReplyHeader
		err    error
	}
	reserved := make(chan *result, 1)
	go func() {
		res := &result{}
		res.r, res.err = inv.Reserve(fero.WithReplyHeader(ctx, &res.header), &stock.ReserveRequest{SKU: sku, Order: "order-1001", Quantity: 5})
		reserved <- res
	}()
	if out.Changed, err = next(); err != nil {
		return err
	}
	fmt.Fprintf(w, "  the watch sees version %d: reserved %v, %d available\n", out.Changed.Item.Version, out.Changed.Item.Reserved, out.Changed.Item.Available())
	res := <-reserved
	if res.err != nil {
		return fmt.Errorf("INVENTORY_RESERVE: %w", res.err)
	}
	out.Reservation, out.StockLeft = res.r, res.header.Get("x-stock-left")
	fmt.Fprintf(w, "INVENTORY_RESERVE %s order-1001 x5 (from another goroutine) → version %d, answered by %s, x-stock-left: %s\n",
		sku, out.Reservation.Version, out.Reservation.Node, out.StockLeft)

	stopWatch()
	out.WatchErr = <-watchDone
	fmt.Fprintf(w, "the client stops the watch → %v\n\n", out.WatchErr)
	return nil
}

// printItem prints an item's fields, the nested and embedded ones too.
func printItem(w io.Writer, it *stock.Item) {
	fmt.Fprintf(w, "INVENTORY_GET %s → version %d:\n", it.SKU, it.Version)
	fmt.Fprintf(w, "  name        %s\n", it.Name)
	fmt.Fprintf(w, "  location    warehouse %s, aisle %s, bin %d\n", it.Location.Warehouse, it.Location.Aisle, it.Location.Bin)
	if d := it.Dimensions; d != nil {
		fmt.Fprintf(w, "  dimensions  %dx%dx%d mm, %d g\n", d.LengthMM, d.WidthMM, d.HeightMM, d.WeightG)
	}
	for _, id := range slices.Sorted(maps.Keys(it.Lots)) {
		lot := it.Lots[id]
		expires := "never"
		if !lot.Expires.IsZero() {
			expires = lot.Expires.UTC().Format(time.DateOnly)
		}
		fmt.Fprintf(w, "  lot %s  %d units, expires %s, received by %s\n", id, lot.Quantity, expires, lot.Received.By)
	}
	fmt.Fprintf(w, "  tags        %s\n", strings.Join(it.Tags, ", "))
	fmt.Fprintf(w, "  last change by %s at %s on %s (audit.Stamp, embedded)\n", it.By, it.At.UTC().Format(time.TimeOnly), it.Node)
}

// ready waits until every server serves its share of the cluster and
// every node routes by a map of the three servers, so that the first
// calls find owners that have synced their partitions.
func ready(ctx context.Context, nodes []*fero.Resource) error {
	for _, r := range nodes {
		if err := r.WaitServers(ctx, 3); err != nil {
			return fmt.Errorf("%s: %w", r.ID(), err)
		}
		if r.IsClient() {
			continue
		}
		var last error
		if err := poll(ctx, func() bool { last = r.Ready(ctx); return last == nil }); err != nil {
			return fmt.Errorf("%s not ready: %w (%v)", r.ID(), err, last)
		}
	}
	return nil
}

// poll checks cond every 10ms until it holds or ctx ends.
func poll(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// dropTimeAndLevel keeps the request log short: every line is a request,
// logged at Info, now.
func dropTimeAndLevel(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey) {
		return slog.Attr{}
	}
	return a
}

// syncBuffer is a bytes.Buffer that the servers' handlers write to and
// the demo reads, at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
