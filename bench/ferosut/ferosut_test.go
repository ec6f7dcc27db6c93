package ferosut

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fero-go/fero/bench"
	"github.com/fero-go/fero/pkg/fero"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer runs sys's server in this process, with its data directory
// under dataDir, and returns its address and the function that stops it
// and returns what Serve did; the test's cleanup stops it if need be.
func startServer(t *testing.T, sys System, dataDir string) (addr string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- sys.Serve(ctx, bench.ServeOptions{Addr: "127.0.0.1:0", DataDir: dataDir}, func(a string) { addrc <- a })
	}()
	stop = sync.OnceValue(func() error { cancel(); return <-errc })
	t.Cleanup(func() { _ = stop() })
	select {
	case addr = <-addrc:
		return addr, stop
	case err := <-errc:
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve: not ready within 30s")
	}
	panic("unreachable")
}

// write sends n records through a client of the server at addr and waits
// for every ack.
func write(t *testing.T, ctx context.Context, addr string, n int) {
	t.Helper()
	c, err := System{}.Dial(ctx, bench.DialOptions{Servers: []string{addr}})
	require.NoError(t, err)
	defer c.Close()
	for i := 0; i < n; i++ {
		require.NoError(t, c.Send(ctx, []byte("v")))
	}
	require.NoError(t, c.Sync(ctx))
}

func TestDurableServersCountTheirFsyncs(t *testing.T) {
	for _, c := range []struct {
		policy string
		// grows says how a server's count moves once acked writes are in.
		grows func(t *testing.T, ctx context.Context, sys System, addr string, before uint64)
	}{
		{"group", func(t *testing.T, ctx context.Context, sys System, addr string, before uint64) {
			// An ack leaves only after its round's fsync.
			n, err := sys.Fsyncs(ctx, addr)
			require.NoError(t, err)
			assert.Greater(t, n, before)
		}},
		{"interval", func(t *testing.T, ctx context.Context, sys System, addr string, before uint64) {
			// The next tick fsyncs, whenever it comes.
			for {
				n, err := sys.Fsyncs(ctx, addr)
				require.NoError(t, err)
				if n > before {
					return
				}
				select {
				case <-ctx.Done():
					t.Fatalf("fsyncs stayed at %d: %v", n, ctx.Err())
				case <-time.After(10 * time.Millisecond):
				}
			}
		}},
		{"never", func(t *testing.T, ctx context.Context, sys System, addr string, before uint64) {
			n, err := sys.Fsyncs(ctx, addr)
			require.NoError(t, err)
			assert.Zero(t, n)
		}},
	} {
		t.Run(c.policy, func(t *testing.T) {
			ctx, cancelTest := context.WithTimeout(context.Background(), time.Minute)
			defer cancelTest()
			sys := System{Fsync: c.policy}
			assert.Equal(t, "fsync "+c.policy, sys.Durability())
			parent := t.TempDir()
			addr, stop := startServer(t, sys, parent)
			dirs, err := os.ReadDir(parent)
			require.NoError(t, err)
			assert.Len(t, dirs, 1, "one fresh data directory for the server")

			before, err := sys.Fsyncs(ctx, addr)
			require.NoError(t, err)
			write(t, ctx, addr, 100)
			c.grows(t, ctx, sys, addr, before)

			require.NoError(t, stop())
			dirs, err = os.ReadDir(parent)
			require.NoError(t, err)
			assert.Empty(t, dirs, "removed once the server has closed")
		})
	}
}

func TestInMemoryServersCountNoFsyncs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	assert.Empty(t, System{}.Durability())
	addr, _ := startServer(t, System{}, "")
	_, err := System{}.Fsyncs(ctx, addr)
	assert.ErrorContains(t, err, "keeps no data directory")
	_, err = System{}.Fsyncs(ctx, "127.0.0.1:1")
	assert.ErrorContains(t, err, "is not a fero server's address")
}

func TestServeRejectsAnUnknownFsync(t *testing.T) {
	err := System{Fsync: "sometimes"}.Serve(context.Background(), bench.ServeOptions{Addr: "127.0.0.1:0"}, func(string) {
		t.Error("ready called")
	})
	assert.ErrorContains(t, err, `fsync "sometimes"`)
}

// TestRemoteClientWritesAndReplicates: a fero-remote client's records,
// sent one way, pipelined and blocking, reach the server, and Replicated
// sees all of them.
func TestRemoteClientWritesAndReplicates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys := System{Remote: true}
	addr, _ := startServer(t, sys, "")
	c, err := sys.Dial(ctx, bench.DialOptions{Servers: []string{addr}})
	require.NoError(t, err)
	defer c.Close()
	for range 200 {
		require.NoError(t, c.Send(ctx, []byte("v")))
	}
	require.NoError(t, c.Sync(ctx))
	replies := make(chan error, 100)
	for range 100 {
		require.NoError(t, c.Go(ctx, []byte("w"), func(_ []byte, err error) { replies <- err }))
	}
	for range 100 {
		require.NoError(t, <-replies)
	}
	_, err = c.Call(ctx, []byte("x"))
	require.NoError(t, err)
	require.NoError(t, c.(bench.Replicator).Replicated(ctx))
	// The server committed the settling writes and every record.
	rc, err := fero.Dial(ctx, dataOf([]string{addr})[0])
	require.NoError(t, err)
	defer rc.Close()
	st, err := rc.Status(ctx)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, st.Stats.Committed, uint64(100+200+100+1))
}
