package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/examples/inventory/audit"
	"github.com/fero-go/fero/examples/inventory/stock"
	"github.com/fero-go/fero/examples/inventory/stock/stockfero"
	"github.com/fero-go/fero/pkg/fero"
	"github.com/fero-go/fero/pkg/fero/ferotest"
)

// TestDemo runs the demo, on real loopback sockets, and checks what the
// client saw.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	var buf syncBuffer
	out, err := runDemo(ctx, &buf)
	require.NoError(t, err, "transcript:\n%s", buf.String())
	t.Logf("transcript:\n%s", buf.String())

	owner := out.Added.Node
	assert.True(t, strings.HasPrefix(owner, "server-"), owner)
	assert.Equal(t, 12, out.Added.OnHand())
	assert.Equal(t, uint64(2), out.Got.Version)
	assert.Equal(t, 20, out.Got.OnHand())
	assert.Equal(t, stock.Location{Warehouse: "AMS-1", Aisle: "7", Bin: 3}, out.Got.Location)
	assert.Equal(t, &stock.Dimensions{LengthMM: 120, WidthMM: 40, HeightMM: 40, WeightG: 310}, out.Got.Dimensions)
	assert.Equal(t, []string{"fragile", "metric"}, out.Got.Tags)
	assert.Equal(t, "alice", out.Got.By, "the embedded stamp names the token's principal")
	assert.Equal(t, fero.CodeUnauthenticated, fero.CodeOf(out.Unauthenticated), "%v", out.Unauthenticated)

	assert.True(t, out.Initial.Initial)
	assert.Equal(t, uint64(2), out.Initial.Item.Version)
	assert.Equal(t, uint64(3), out.Changed.Item.Version)
	assert.Equal(t, map[string]int{"order-1001": 5}, out.Changed.Item.Reserved, "the watch saw the reservation")
	assert.Equal(t, owner, out.Initial.Node)
	assert.Equal(t, uint64(3), out.Reservation.Version)
	assert.Equal(t, owner, out.Reservation.Node)
	assert.Equal(t, "15", out.StockLeft)
	assert.Equal(t, fero.CodeCanceled, fero.CodeOf(out.WatchErr), "%v", out.WatchErr)

	assert.Equal(t, fero.CodeFailedPrecondition, fero.CodeOf(out.OutOfStock), "%v", out.OutOfStock)
	assert.Equal(t, stock.OutOfStock{SKU: sku, Asked: 50, Available: 15}, out.Detail)
	assert.Contains(t, out.Log, "verb=INVENTORY_GET key=WIDGET-42 node="+owner)
	assert.Contains(t, out.Log, "code=unauthenticated")
	assert.Contains(t, out.Log, "code=canceled items=2")
}

// TestInventory runs the service on three servers of a ferotest cluster,
// mounted with the generated RegisterInventory and both interceptors, and
// calls it from a client node that sends alice's token.
//
// Routing is checked against fero's own record of ownership: each
// server's change stream marks the changes it committed as the owner of
// their partition (Kind Committed), and a change is committed by exactly
// one node, so the server that committed a SKU's writes owns it. Each
// reply names the node that answered it, and the log interceptor logs
// the node of every request, GET's included. The cluster's membership
// stays the same, and so do the owners, until the last subtest adds a
// server to move watches.
func TestInventory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs syncBuffer
	svc := &InventoryService{}
	c := ferotest.NewCluster(t, stockfero.InventoryResourceName, ferotest.WithServers(3),
		ferotest.WithNodeOptions(
			stockfero.RegisterInventory(svc),
			fero.WithInterceptors(LogRequests(slog.New(slog.NewJSONHandler(&logs, nil))), Authenticate(tokens)),
		))
	servers := c.Servers()
	client := c.Add(fero.Client(), fero.WithID("client"), bearer("alice-token"))
	c.WaitSettled()
	committed := ferotest.WatchCommits(t, servers...)
	inv := stockfero.NewInventoryClient(client)

	t.Run("every verb reaches the owner", func(t *testing.T) {
		skus := make([]stock.SKU, 9)
		added := map[stock.SKU]*stock.Item{}
		reservations := map[stock.SKU]*stock.Reservation{}
		watched := map[stock.SKU]*stock.StockEvent{}
		for i := range skus {
			sku := stock.SKU(fmt.Sprintf("SKU-%02d", i))
			skus[i] = sku
			var err error
			added[sku], err = inv.Add(ctx, &stock.AddRequest{SKU: sku, Name: string(sku), Location: &stock.Location{Warehouse: "W"}, Lot: "L1", Quantity: 10})
			require.NoError(t, err)
			var h fero.ReplyHeader
			reservations[sku], err = inv.Reserve(fero.WithReplyHeader(ctx, &h), &stock.ReserveRequest{SKU: sku, Order: "o1", Quantity: 3})
			require.NoError(t, err)
			assert.Equal(t, "7", h.Get("x-stock-left"), "%s: the reply header", sku)
			assert.Equal(t, 7, reservations[sku].Left)
			got, err := inv.Get(ctx, &stock.ItemRequest{SKU: sku})
			require.NoError(t, err)
			assert.Equal(t, uint64(2), got.Version)
			watched[sku] = firstEvent(ctx, t, inv, sku)
		}
		require.Eventually(t, func() bool {
			for _, sku := range skus {
				if len(committed.Of(string(sku))) == 0 {
					return false
				}
			}
			return true
		}, 10*time.Second, 10*time.Millisecond, "every server's commits seen")
		answered := map[string]int{}
		for _, sku := range skus {
			owner := added[sku].Node
			assert.Equal(t, []string{owner}, committed.Of(string(sku)), "%s: ADD answered by the owner of its SKU, the one committer", sku)
			assert.Equal(t, owner, reservations[sku].Node, "%s: RESERVE answered by the owner", sku)
			assert.Equal(t, owner, watched[sku].Node, "%s: WATCH run by the owner", sku)
			gets := findLogs(&logs, func(r logRecord) bool { return r.Verb == stockfero.InventoryGetVerb && r.Key == string(sku) })
			if assert.Len(t, gets, 1, "%s: one GET logged", sku) {
				assert.Equal(t, owner, gets[0].Node, "%s: GET answered by the owner", sku)
			}
			answered[owner]++
		}
		t.Logf("SKUs per owner: %v", answered)
		assert.Greater(t, len(answered), 1, "%d SKUs spread over the servers", len(skus))
	})

	t.Run("nested and embedded fields round-trip", func(t *testing.T) {
		req := &stock.AddRequest{
			SKU: "CRATE-1", Name: "Crate", Tags: []string{"wood", "stackable"},
			Location:   &stock.Location{Warehouse: "RTM-2", Aisle: "12B", Bin: 40},
			Dimensions: &stock.Dimensions{LengthMM: 600, WidthMM: 400, HeightMM: 300, WeightG: 2500},
			Lot:        "L-7", Quantity: 4, Expires: time.Date(2030, time.January, 2, 3, 4, 5, 6, time.UTC),
		}
		added, err := inv.Add(ctx, req)
		require.NoError(t, err)
		assert.WithinDuration(t, time.Now(), added.At, time.Minute)
		stamp := audit.Stamp{By: "alice", At: added.At}
		want := stock.Item{
			SKU: req.SKU, Name: req.Name, Location: *req.Location, Dimensions: req.Dimensions, Tags: req.Tags,
			Lots:     map[string]stock.Lot{"L-7": {Quantity: 4, Expires: req.Expires, Received: stamp}},
			Reserved: map[string]int{}, Version: 1, Node: added.Node, Stamp: stamp,
		}
		assert.Equal(t, inUTC(want), inUTC(*added), "ADD's reply")
		got, err := inv.Get(ctx, &stock.ItemRequest{SKU: req.SKU})
		require.NoError(t, err)
		assert.Equal(t, inUTC(want), inUTC(*got), "GET's reply")
		var stored stock.Item
		require.NoError(t, client.Call(ctx, fero.VerbGet, string(req.SKU), nil, &stored))
		assert.Equal(t, inUTC(want), inUTC(stored), "the stored record, by the built-in GET")
		for _, r := range c.Nodes() {
			require.Eventually(t, func() bool {
				var copy stock.Item
				ok, err := r.GetInto(string(req.SKU), &copy)
				return err == nil && ok && assert.ObjectsAreEqual(inUTC(want), inUTC(copy))
			}, 10*time.Second, 10*time.Millisecond, "%s's copy", r.ID())
		}
	})

	t.Run("watch sees concurrent reservations in version order", func(t *testing.T) {
		const sku, n = stock.SKU("WATCHED"), 8
		_, err := inv.Add(ctx, &stock.AddRequest{SKU: sku, Name: "Watched", Location: &stock.Location{Warehouse: "W"}, Lot: "L1", Quantity: 100})
		require.NoError(t, err)
		w := startWatch(ctx, t, inv, &stock.WatchRequest{SKU: sku})
		initial := w.next(t)
		require.True(t, initial.Initial)
		require.Equal(t, uint64(1), initial.Item.Version)

		byVersion := map[uint64]*stock.Reservation{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r, err := inv.Reserve(ctx, &stock.ReserveRequest{SKU: sku, Order: fmt.Sprintf("order-%d", i), Quantity: i + 1})
				if assert.NoError(t, err) {
					mu.Lock()
					byVersion[r.Version] = r
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Len(t, byVersion, n, "each reservation made its own version")

		held := map[string]int{}
		for v := uint64(2); v <= n+1; v++ {
			ev := w.next(t)
			require.Equal(t, v, ev.Item.Version, "the watch sends every version, in order")
			assert.False(t, ev.Initial)
			r := byVersion[v]
			require.NotNil(t, r, "a reservation made version %d", v)
			held[r.Order] = r.Quantity
			assert.Equal(t, held, ev.Item.Reserved, "version %d holds the reservations up to it", v)
			assert.Equal(t, r.Left, ev.Item.Available())
		}
		err = w.stop()
		assert.Equal(t, fero.CodeCanceled, fero.CodeOf(err), "%v", err)

		// The log interceptor counted the watch's items, once it ended.
		require.Eventually(t, func() bool {
			return len(findLogs(&logs, func(r logRecord) bool { return r.Verb == stockfero.InventoryWatchVerb && r.Key == string(sku) })) == 1
		}, 10*time.Second, 10*time.Millisecond)
		rec := findLogs(&logs, func(r logRecord) bool { return r.Verb == stockfero.InventoryWatchVerb && r.Key == string(sku) })[0]
		require.NotNil(t, rec.Items)
		assert.Equal(t, n+1, *rec.Items)
		assert.Equal(t, "canceled", rec.Code)
	})

	t.Run("a reservation beyond the stock fails with a detail", func(t *testing.T) {
		const sku = stock.SKU("SCARCE")
		_, err := inv.Add(ctx, &stock.AddRequest{SKU: sku, Name: "Scarce", Location: &stock.Location{Warehouse: "W"}, Lot: "L1", Quantity: 5})
		require.NoError(t, err)
		var h fero.ReplyHeader
		_, err = inv.Reserve(fero.WithReplyHeader(ctx, &h), &stock.ReserveRequest{SKU: sku, Order: "big", Quantity: 6})
		require.Equal(t, fero.CodeFailedPrecondition, fero.CodeOf(err), "%v", err)
		assert.Empty(t, h.Get("x-stock-left"), "an error carries details, not reply headers")
		details := fero.ErrorDetails(err)
		require.Len(t, details, 1)
		require.Equal(t, stock.OutOfStockDetail, details[0].Type)
		var d stock.OutOfStock
		require.NoError(t, fero.DecodeErrorDetail(details[0], &d))
		assert.Equal(t, stock.OutOfStock{SKU: sku, Asked: 6, Available: 5}, d)
	})

	t.Run("callers without a token are refused", func(t *testing.T) {
		// A SKU that servers[0] does not own: the refusal comes from its
		// owner, after servers[0] forwarded the request, headers and all.
		var sku stock.SKU
		for i := range 9 {
			if s := stock.SKU(fmt.Sprintf("SKU-%02d", i)); !slices.Contains(committed.Of(string(s)), servers[0].ID()) {
				sku = s
				break
			}
		}
		require.NotEmpty(t, sku)
		for name, opts := range map[string][]fero.DialOption{"no token": nil, "a wrong token": {bearer("mallory-token")}} {
			remote, err := fero.Dial(ctx, servers[0].Addr(), opts...)
			require.NoError(t, err)
			anon := stockfero.NewInventoryClient(remote)
			_, err = anon.Get(ctx, &stock.ItemRequest{SKU: sku})
			assert.Equal(t, fero.CodeUnauthenticated, fero.CodeOf(err), "%s: GET: %v", name, err)
			err = anon.Watch(ctx, &stock.WatchRequest{SKU: sku}, func(ev *stock.StockEvent) error {
				t.Errorf("%s: WATCH sent %+v", name, ev)
				return nil
			})
			assert.Equal(t, fero.CodeUnauthenticated, fero.CodeOf(err), "%s: WATCH: %v", name, err)
			err = remote.Call(ctx, fero.VerbGet, string(sku), nil, nil)
			assert.Equal(t, fero.CodeUnauthenticated, fero.CodeOf(err), "%s: the built-in GET: %v", name, err)
			require.NoError(t, remote.Close())
		}
		for _, verb := range []string{stockfero.InventoryGetVerb, stockfero.InventoryWatchVerb, fero.VerbGet} {
			refused := findLogs(&logs, func(r logRecord) bool { return r.Verb == verb && r.Key == string(sku) && r.Code == "unauthenticated" })
			assert.Len(t, refused, 2, "%s: both refusals logged", verb)
		}
	})

	t.Run("a watch ends when its caller cancels", func(t *testing.T) {
		require.Eventually(t, func() bool { return svc.Watching() == 0 }, 10*time.Second, 10*time.Millisecond, "the earlier watches ended")
		w := startWatch(ctx, t, inv, &stock.WatchRequest{SKU: "SKU-00"})
		w.next(t)
		// The handler counts itself before it sends, so it runs now.
		require.Equal(t, 1, svc.Watching())
		err := w.stop()
		assert.Equal(t, fero.CodeCanceled, fero.CodeOf(err), "%v", err)
		// Watch closes its subscription and then stops counting itself.
		require.Eventually(t, func() bool { return svc.Watching() == 0 }, 10*time.Second, 10*time.Millisecond, "the handler ended")
	})

	// Last: it changes the owners. A fourth server takes over some
	// partitions; the watches of their SKUs end with ErrStreamMoved and
	// resume at the new owner, and the others carry on.
	t.Run("a watch moves with its partition", func(t *testing.T) {
		const count = 24 // a fourth server takes about a quarter of them
		initial := map[stock.SKU]*stock.StockEvent{}
		watches := map[stock.SKU]*watch{}
		for i := range count {
			sku := stock.SKU(fmt.Sprintf("MOVE-%02d", i))
			_, err := inv.Add(ctx, &stock.AddRequest{SKU: sku, Name: string(sku), Location: &stock.Location{Warehouse: "W"}, Lot: "L1", Quantity: 10})
			require.NoError(t, err)
			watches[sku] = startWatch(ctx, t, inv, &stock.WatchRequest{SKU: sku})
			initial[sku] = watches[sku].next(t)
		}
		c.Add() // a server, with the cluster's node options: the service and its interceptors
		c.WaitSettled()

		var moved, stayed int
		for sku, w := range watches {
			before := initial[sku]
			r, err := inv.Reserve(ctx, &stock.ReserveRequest{SKU: sku, Order: "o1", Quantity: 1})
			require.NoError(t, err)
			require.Equal(t, before.Item.Version+1, r.Version)
			if r.Node == before.Node {
				stayed++
				ev := w.next(t)
				assert.Equal(t, r.Version, ev.Item.Version, "%s: the watch at the same owner sees the change", sku)
				continue
			}
			moved++
			err = w.end(t)
			require.ErrorIs(t, err, fero.ErrStreamMoved, "%s moved from %s to %s", sku, before.Node, r.Node)
			assert.Equal(t, fero.CodeUnavailable, fero.CodeOf(err))
			// Resume from the last version seen: the new owner sends what
			// the watch missed, and nothing twice.
			resumed := startWatch(ctx, t, inv, &stock.WatchRequest{SKU: sku, After: before.Item.Version})
			ev := resumed.next(t)
			assert.Equal(t, r.Version, ev.Item.Version, "%s: the change the moved watch missed", sku)
			assert.Equal(t, r.Node, ev.Node, "%s: sent by the new owner", sku)
		}
		t.Logf("%d watches moved, %d stayed", moved, stayed)
		assert.Positive(t, moved, "some SKU moved to the fourth server")
		assert.Positive(t, stayed, "some SKU stayed")
	})
}

// firstEvent opens a WATCH of sku and returns its first event, which
// ends the stream: the error send returns is what Watch returns.
func firstEvent(ctx context.Context, t *testing.T, inv stock.Inventory, sku stock.SKU) *stock.StockEvent {
	t.Helper()
	errFirst := errors.New("first event")
	var first *stock.StockEvent
	err := inv.Watch(ctx, &stock.WatchRequest{SKU: sku}, func(ev *stock.StockEvent) error {
		first = ev
		return errFirst
	})
	require.ErrorIs(t, err, errFirst, "%s", sku)
	return first
}

// watch is a WATCH running in a goroutine of its own.
type watch struct {
	events chan *stock.StockEvent
	done   chan error
	cancel context.CancelFunc
}

// startWatch opens a WATCH in a goroutine of its own, stopped when the
// test ends.
func startWatch(ctx context.Context, t *testing.T, inv stock.Inventory, req *stock.WatchRequest) *watch {
	ctx, cancel := context.WithCancel(ctx)
	w := &watch{events: make(chan *stock.StockEvent), done: make(chan error, 1), cancel: cancel}
	t.Cleanup(func() { _ = w.stop() })
	go func() {
		w.done <- inv.Watch(ctx, req, func(ev *stock.StockEvent) error {
			select {
			case w.events <- ev:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	return w
}

// next returns the watch's next event, failing the test if the watch
// ends or sends nothing within 10s.
func (w *watch) next(t *testing.T) *stock.StockEvent {
	t.Helper()
	select {
	case ev := <-w.events:
		return ev
	case err := <-w.done:
		w.done <- err
		t.Fatalf("the watch ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return nil
}

// end returns what Watch returned, failing the test if the watch sends
// another event or does not end within 10s.
func (w *watch) end(t *testing.T) error {
	t.Helper()
	select {
	case ev := <-w.events:
		t.Fatalf("the watch sent %+v; want its end", ev)
	case err := <-w.done:
		w.done <- err
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end within 10s")
	}
	return nil
}

// stop cancels the watch and returns what Watch returned. It is
// idempotent.
func (w *watch) stop() error {
	w.cancel()
	err := <-w.done
	w.done <- err
	return err
}

// inUTC returns it with its times in UTC. msgpack decodes a time in
// time.Local, so a decoded item equals the one encoded only up to the
// times' locations.
func inUTC(it stock.Item) stock.Item {
	it.At = it.At.UTC()
	lots := make(map[string]stock.Lot, len(it.Lots))
	for id, lot := range it.Lots {
		lot.Expires = lot.Expires.UTC()
		lot.Received.At = lot.Received.At.UTC()
		lots[id] = lot
	}
	it.Lots = lots
	return it
}

// logRecord is a line of LogRequests' output, as the JSON handler writes
// it.
type logRecord struct {
	Msg   string `json:"msg"`
	Verb  string `json:"verb"`
	Key   string `json:"key"`
	Node  string `json:"node"`
	Took  int64  `json:"took"`
	Code  string `json:"code"`
	Items *int   `json:"items"`
}

// findLogs returns the records of logs that match.
func findLogs(logs *syncBuffer, match func(logRecord) bool) []logRecord {
	var out []logRecord
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var r logRecord
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Msg == "request" && match(r) {
			out = append(out, r)
		}
	}
	return out
}
