// Package gentest runs the code ferogen generates for the golden cases
// (internal/ferogen/testdata/ok): the generated clients call the
// generated handlers through a loopback Caller that encodes requests and
// replies with msgpack, as a fero.Resource does, or through a node of a
// ferotest cluster where fero's built-in verbs must keep working. It is
// a package of its own so that `go test ./internal/ferogen -update` still builds when the
// expected files are out of date.
package gentest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/ferogen/testdata/ok/basic/basicfero"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/embedded"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/embedded/base"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/embedded/embeddedfero"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/stock"
	"github.com/fero-go/fero/internal/ferogen/testdata/ok/stock/stockfero"
	"github.com/fero-go/fero/pkg/fero"
	"github.com/fero-go/fero/pkg/fero/ferotest"
)

// loopback is a Caller that answers with a handler in this process. calls
// counts the requests it was given.
type loopback struct {
	h     fero.Handler
	calls int
}

func (l *loopback) Call(ctx context.Context, verb, key string, payload, reply any) error {
	l.calls++
	b, err := msgpack.Marshal(payload)
	if err != nil {
		return err
	}
	out, err := l.h(ctx, &fero.Request{Verb: verb, Key: key, Payload: b})
	if err != nil || reply == nil || out == nil {
		return err
	}
	if b, err = msgpack.Marshal(out); err != nil {
		return err
	}
	return msgpack.Unmarshal(b, reply)
}

// TestNilRequest: a client given a nil request returns CodeInvalidArgument
// and sends nothing.
func TestNilRequest(t *testing.T) {
	ctx := context.Background()
	l := &loopback{h: basicfero.UsersHandler(basicfero.UnimplementedUsers{}, nil)}
	c := basicfero.NewUsersClient(l)
	var loginErr, logoutErr error
	require.NotPanics(t, func() { _, loginErr = c.Login(ctx, nil) })
	require.NotPanics(t, func() { logoutErr = c.Logout(ctx, nil) })
	for _, err := range []error{loginErr, logoutErr} {
		assert.Equal(t, fero.CodeInvalidArgument, fero.CodeOf(err), "%v", err)
	}
	assert.ErrorContains(t, loginErr, "users: LOGIN: the request is nil")
	assert.Zero(t, l.calls, "nothing sent")
}

// docs records the key of each request it answers.
type docs struct {
	keys []string
}

func (d *docs) Read(_ context.Context, req *embedded.ReadRequest) (*embedded.Doc, error) {
	d.keys = append(d.keys, string(req.Doc))
	return &embedded.Doc{Body: "body of " + string(req.Doc)}, nil
}

func (d *docs) Write(_ context.Context, req *embedded.WriteRequest) error {
	d.keys = append(d.keys, req.ID)
	return nil
}

func (d *docs) Move(_ context.Context, req *embedded.MoveRequest) error {
	d.keys = append(d.keys, req.ID)
	return nil
}

func (d *docs) Share(_ context.Context, req *embedded.ShareRequest) error {
	d.keys = append(d.keys, req.Name)
	return nil
}

// TestPromotedKey: a key promoted from an embedded struct routes the
// request; through a nil pointer, the client refuses the request with
// CodeInvalidArgument, and so does the handler a hand-made payload
// without it reaches.
func TestPromotedKey(t *testing.T) {
	ctx := context.Background()
	impl := &docs{}
	h := embeddedfero.DocsHandler(impl, nil)
	l := &loopback{h: h}
	c := embeddedfero.NewDocsClient(l)

	reply, err := c.Read(ctx, &embedded.ReadRequest{Target: embedded.Target{Doc: "a"}})
	require.NoError(t, err)
	assert.Equal(t, "body of a", reply.Body)
	require.NoError(t, c.Write(ctx, &embedded.WriteRequest{Ref: &base.Ref{ID: "b"}}))
	require.NoError(t, c.Move(ctx, &embedded.MoveRequest{Move: embedded.Move{Ref: &base.Ref{ID: "c"}}}))
	share := &embedded.ShareRequest{With: "e"}
	share.Name = "d" // promoted from an unexported struct
	require.NoError(t, c.Share(ctx, share))
	assert.Equal(t, []string{"a", "b", "c", "d"}, impl.keys)
	calls := l.calls

	var writeErr, moveErr error
	require.NotPanics(t, func() { writeErr = c.Write(ctx, &embedded.WriteRequest{Body: "x"}) })
	require.NotPanics(t, func() { moveErr = c.Move(ctx, &embedded.MoveRequest{To: "y"}) })
	assert.Equal(t, fero.CodeInvalidArgument, fero.CodeOf(writeErr), "%v", writeErr)
	assert.ErrorContains(t, writeErr, "docs: WRITE: the request has no ID: its Ref is nil")
	assert.Equal(t, fero.CodeInvalidArgument, fero.CodeOf(moveErr), "%v", moveErr)
	assert.Equal(t, calls, l.calls, "nothing sent")

	payload, err := msgpack.Marshal(map[string]string{"body": "x"})
	require.NoError(t, err)
	var out any
	require.NotPanics(t, func() {
		out, err = h(ctx, &fero.Request{Verb: embeddedfero.DocsWriteVerb, Key: "b", Payload: payload})
	})
	assert.Nil(t, out)
	assert.Equal(t, fero.CodeInvalidArgument, fero.CodeOf(err), "%v", err)
	assert.ErrorContains(t, err, `WRITE "b": the request has no ID: its Ref is nil`)
	assert.Equal(t, []string{"a", "b", "c", "d"}, impl.keys, "the handler called no method")
}

// shelf keeps each item at its SKU in the resource it answers for, where
// fero's built-in verbs keep values too.
type shelf struct{ stockfero.UnimplementedStock }

func (shelf) Get(ctx context.Context, req *stock.ItemRequest) (*stock.Item, error) {
	q, _ := stockfero.RequestFromContext(ctx)
	var it stock.Item
	if ok, err := q.Resource().GetInto(req.SKU, &it); err != nil || !ok {
		return nil, fero.Errorf(fero.CodeNotFound, "no item %s (%v)", req.SKU, err)
	}
	return &it, nil
}

func (shelf) Add(ctx context.Context, req *stock.Item) error {
	q, _ := stockfero.RequestFromContext(ctx)
	return q.Resource().Add(ctx, req.SKU, req)
}

// TestVerbPrefix: with verbprefix=STOCK_, the methods Get and Add answer
// STOCK_GET and STOCK_ADD on a real node, and the built-in GET and ADD of
// the same resource still read and write the stored values.
func TestVerbPrefix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := ferotest.NewCluster(t, stockfero.StockResourceName, ferotest.WithServers(1),
		ferotest.WithNodeOptions(stockfero.RegisterStock(shelf{})))
	node := c.Nodes()[0]
	s := stockfero.NewStockClient(node)
	assert.Equal(t, "STOCK_GET", stockfero.StockGetVerb)

	require.NoError(t, s.Add(ctx, &stock.Item{SKU: "a", Count: 3}))
	got, err := s.Get(ctx, &stock.ItemRequest{SKU: "a"})
	require.NoError(t, err)
	assert.Equal(t, 3, got.Count, "the prefixed GET, the method")
	var builtin stock.Item
	require.NoError(t, node.Call(ctx, fero.VerbGet, "a", nil, &builtin))
	assert.Equal(t, stock.Item{SKU: "a", Count: 3}, builtin, "the built-in GET")

	require.NoError(t, node.Call(ctx, fero.VerbAdd, "b", stock.Item{SKU: "b", Count: 5}, nil))
	got, err = s.Get(ctx, &stock.ItemRequest{SKU: "b"})
	require.NoError(t, err)
	assert.Equal(t, 5, got.Count, "the built-in ADD wrote what the method reads")
	assert.Equal(t, fero.CodeUnimplemented, fero.CodeOf(s.Remove(ctx, &stock.ItemRequest{SKU: "a"})), "STOCK_REMOVE is the method's, not the built-in REMOVE")
	_, ok := node.Get("a")
	assert.True(t, ok, "a is still there")
}
