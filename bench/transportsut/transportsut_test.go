package transportsut

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fero-go/fero/bench"
)

func TestAdapterKeepsTheConnContract(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- System{}.Serve(ctx, bench.ServeOptions{Addr: "127.0.0.1:0"}, func(a string) { addrc <- a })
	}()
	addr := <-addrc
	defer func() { cancel(); require.NoError(t, <-errc) }()

	c, err := System{}.Dial(ctx, bench.DialOptions{Servers: []string{addr}})
	require.NoError(t, err)
	for i := 0; i < 1000; i++ {
		require.NoError(t, c.Send(ctx, []byte("record")))
	}
	require.NoError(t, c.Sync(ctx))
	reply, err := c.Call(ctx, []byte("ping"))
	require.NoError(t, err)
	assert.Equal(t, []byte("ping"), reply)

	const n = 500
	got := 0 // touched only by done, which the adapter serializes
	all := make(chan struct{})
	for i := 0; i < n; i++ {
		require.NoError(t, c.Go(ctx, []byte("x"), func(r []byte, err error) {
			assert.NoError(t, err)
			assert.Equal(t, []byte("x"), r)
			if got++; got == n {
				close(all)
			}
		}))
	}
	<-all
	require.NoError(t, c.Close())
}
