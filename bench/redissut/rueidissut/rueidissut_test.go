package rueidissut

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fero-go/fero/bench"
	"github.com/fero-go/fero/bench/redissut"
)

// Serve is redissut's, whose own tests cover starting, stopping and
// failing; these cover the rueidis client and that the system serves the
// same Redis.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serveOf starts sys on a free loopback port, with its data directory
// under dataDir, and stops it in the test's cleanup, checking that Serve
// then returns nil. It skips the test where redis-server is not installed.
func serveOf(t *testing.T, sys System, dataDir string) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (apt-get install redis-server):", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- sys.Serve(ctx, bench.ServeOptions{Addr: "127.0.0.1:0", DataDir: dataDir}, func(a string) { addrc <- a })
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc)
	})
	select {
	case addr := <-addrc:
		return addr
	case err := <-errc:
		errc <- err // for the cleanup
		t.Fatalf("serve: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("serve: not ready")
	}
	panic("unreachable")
}

func serve(t *testing.T) string { return serveOf(t, System{}, "") }

func dial(t *testing.T, addr string, index int) *Conn {
	t.Helper()
	c, err := System{}.Dial(context.Background(), bench.DialOptions{Servers: []string{addr}, Index: index})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c.(*Conn)
}

// command runs any command and waits for its result: the tests' hook for
// commands other than SET.
func (c *Conn) command(ctx context.Context, args ...string) rueidis.RedisResult {
	return c.client.Do(ctx, c.client.B().Arbitrary(args...).Build())
}

// sendRaw issues a command the way Send issues a SET: its reply is
// discarded, and an error reply fails the next Sync.
func (c *Conn) sendRaw(ctx context.Context, args ...string) error {
	if err := c.acquire(ctx); err != nil {
		return err
	}
	c.discard(c.client.B().Arbitrary(args...).Build())
	return nil
}

func dbsize(t *testing.T, c *Conn) int64 {
	t.Helper()
	n, err := c.command(context.Background(), "DBSIZE").AsInt64()
	require.NoError(t, err)
	return n
}

func TestSendThenSyncStoresEveryRecord(t *testing.T) {
	c := dial(t, serve(t), 7)
	ctx := context.Background()
	payload := make([]byte, 100)
	// More than SendDepth, so Send also waits for room.
	const n = SendDepth + 1000
	for i := range n {
		// Send may not keep payload: each record must carry its own.
		copy(payload, strconv.Itoa(i))
		require.NoError(t, c.Send(ctx, payload))
	}
	require.NoError(t, c.Sync(ctx))
	assert.EqualValues(t, n, dbsize(t, c))
	v, err := c.command(ctx, "GET", "k:7:123").AsBytes()
	require.NoError(t, err)
	want := make([]byte, 100)
	copy(want, "123")
	assert.Equal(t, want, v)
	_, err = c.command(ctx, "GET", fmt.Sprintf("k:7:%d", n)).ToString()
	assert.True(t, rueidis.IsRedisNil(err), "no key past the last record: %v", err)
}

func TestSyncReportsFailedSends(t *testing.T) {
	c := dial(t, serve(t), 0)
	ctx := context.Background()
	require.NoError(t, c.Send(ctx, []byte("a")))
	require.NoError(t, c.sendRaw(ctx, "NOSUCHCOMMAND"))
	require.NoError(t, c.sendRaw(ctx, "NOSUCHCOMMAND", "again"))
	require.NoError(t, c.Send(ctx, []byte("b")))
	err := c.Sync(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "2 sent records failed")
	assert.Contains(t, err.Error(), "unknown command")
	var reply *rueidis.RedisError
	assert.ErrorAs(t, err, &reply, "the Redis error reply is wrapped")
	// Reported once: the connection is still usable.
	require.NoError(t, c.Send(ctx, []byte("c")))
	require.NoError(t, c.Sync(ctx))
}

// TestGoCallsEachDoneOnceAndNeverTwoAtOnce: replies may complete in any
// order (one goroutine per request), but bench.Conn's promise holds.
func TestGoCallsEachDoneOnceAndNeverTwoAtOnce(t *testing.T) {
	c := dial(t, serve(t), 0)
	ctx := context.Background()
	const n = 500
	var inside atomic.Bool
	var bad atomic.Value
	seen := make([]bool, n) // touched only by done, which never overlaps
	count := 0
	all := make(chan struct{})
	for i := range n {
		require.NoError(t, c.Go(ctx, []byte("v"), func(reply []byte, err error) {
			if inside.Swap(true) {
				bad.CompareAndSwap(nil, fmt.Errorf("done %d overlaps another", i))
			}
			switch {
			case err != nil:
				bad.CompareAndSwap(nil, err)
			case string(reply) != "OK" || seen[i]:
				bad.CompareAndSwap(nil, fmt.Errorf("reply %d: %q, seen before %v", i, reply, seen[i]))
			}
			seen[i] = true
			count++
			inside.Store(false)
			if count == n {
				close(all)
			}
		}))
	}
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("replies did not arrive")
	}
	if err, _ := bad.Load().(error); err != nil {
		t.Fatal(err)
	}
	assert.EqualValues(t, n, dbsize(t, c))
}

func TestCallWithAndWithoutACancellableContext(t *testing.T) {
	c := dial(t, serve(t), 0)
	ctx := context.Background()
	reply, err := c.Call(ctx, []byte("x"))
	require.NoError(t, err)
	assert.Equal(t, "OK", string(reply))
	// rueidis queues this one to its pipeline goroutines.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reply, err = c.Call(cctx, []byte("y"))
	require.NoError(t, err)
	assert.Equal(t, "OK", string(reply))

	done := make(chan error, 1)
	require.NoError(t, c.Go(ctx, []byte("z"), func(_ []byte, err error) { done <- err }))
	reply, err = c.Call(ctx, []byte("w"))
	require.NoError(t, err)
	assert.Equal(t, "OK", string(reply))
	require.NoError(t, <-done)
	assert.EqualValues(t, 4, dbsize(t, c))
}

func TestErrorReplyFailsOnlyItsRequest(t *testing.T) {
	c := dial(t, serve(t), 0)
	ctx := context.Background()
	err := c.command(ctx, "NOSUCHCOMMAND", "arg").Error()
	_, isReply := rueidis.IsRedisErr(err)
	require.True(t, isReply, "%v", err)
	assert.Contains(t, err.Error(), "unknown command")
	reply, err := c.Call(ctx, []byte("x"))
	require.NoError(t, err)
	assert.Equal(t, "OK", string(reply))
}

func TestKeysCycle(t *testing.T) {
	c := dial(t, serve(t), 2)
	ctx := context.Background()
	c.n.Store(2*redissut.Keys - 1) // the last key of the second lap
	_, err := c.Call(ctx, []byte("last"))
	require.NoError(t, err)
	_, err = c.Call(ctx, []byte("first"))
	require.NoError(t, err)
	v, err := c.command(ctx, "GET", fmt.Sprintf("k:2:%d", redissut.Keys-1)).ToString()
	require.NoError(t, err)
	assert.Equal(t, "last", v)
	v, err = c.command(ctx, "GET", "k:2:0").ToString()
	require.NoError(t, err)
	assert.Equal(t, "first", v)
}

func TestCloseWaitsForEveryDone(t *testing.T) {
	c := dial(t, serve(t), 0)
	ctx := context.Background()
	var accepted, called atomic.Int64
	payload := make([]byte, 100)
	for range 5000 {
		require.NoError(t, c.Go(ctx, payload, func([]byte, error) { called.Add(1) }))
		accepted.Add(1)
	}
	require.NoError(t, c.Close())
	// Close returned only after every done did.
	assert.Equal(t, accepted.Load(), called.Load())

	err := c.Go(ctx, payload, func([]byte, error) { t.Error("done called for a refused Go") })
	assert.ErrorIs(t, err, bench.ErrClosed)
	assert.ErrorIs(t, c.Send(ctx, payload), bench.ErrClosed)
	assert.ErrorIs(t, c.Sync(ctx), bench.ErrClosed)
	_, err = c.Call(ctx, payload)
	assert.ErrorIs(t, err, bench.ErrClosed)
	assert.NoError(t, c.Close(), "Close is idempotent")
}

// pauser holds Redis's writes (and what each client pipelined after a
// write) unanswered while paused.
func pauser(t *testing.T, addr string, ms int) (pause, unpause func()) {
	admin := dial(t, addr, 9)
	ctx := context.Background()
	pause = func() {
		require.NoError(t, admin.command(ctx, "CLIENT", "PAUSE", strconv.Itoa(ms), "WRITE").Error())
	}
	unpause = func() { require.NoError(t, admin.command(ctx, "CLIENT", "UNPAUSE").Error()) }
	return pause, unpause
}

func TestCloseFailsTheOutstandingWithErrClosed(t *testing.T) {
	addr := serve(t)
	// Paused long enough that the SET is certainly outstanding at Close,
	// short enough that rueidis's closing PING is soon answered.
	pause, _ := pauser(t, addr, 300)
	c := dial(t, addr, 0)
	_, err := c.Call(context.Background(), []byte("warm")) // connected before the pause
	require.NoError(t, err)
	pause()
	errs := make(chan error, 1)
	require.NoError(t, c.Go(context.Background(), []byte("x"), func(_ []byte, err error) { errs <- err }))
	require.NoError(t, c.Close())
	assert.ErrorIs(t, <-errs, bench.ErrClosed)
}

func TestSyncAndCallRespectContext(t *testing.T) {
	addr := serve(t)
	ctx := context.Background()
	pause, unpause := pauser(t, addr, 10000)

	c := dial(t, addr, 0)
	pause()
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err := c.Call(short, []byte("x"))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	unpause()
	// rueidis gives up the connection the deadline cut and dials anew.
	_, err = c.Call(ctx, []byte("y"))
	require.NoError(t, err)

	c2 := dial(t, addr, 1)
	require.NoError(t, c2.Send(ctx, []byte("x")))
	require.NoError(t, c2.Sync(ctx))
	pause()
	require.NoError(t, c2.Send(ctx, []byte("y")))
	short2, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel2()
	assert.ErrorIs(t, c2.Sync(short2), context.DeadlineExceeded)
	unpause()
	// The Send lives on: a later Sync sees it through.
	require.NoError(t, c2.Sync(ctx))
	v, err := c2.command(ctx, "GET", "k:1:1").ToString()
	require.NoError(t, err)
	assert.Equal(t, "y", v)
}

func TestDialSpreadsClientsOverServers(t *testing.T) {
	a, b := serve(t), serve(t)
	ctx := context.Background()
	c, err := System{}.Dial(ctx, bench.DialOptions{Servers: []string{a, b}, Index: 3})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Send(ctx, []byte("x")))
	require.NoError(t, c.Sync(ctx))
	for addr, want := range map[string]int64{a: 0, b: 1} {
		assert.Equal(t, want, dbsize(t, dial(t, addr, 0)), addr)
	}

	_, err = System{}.Dial(ctx, bench.DialOptions{})
	assert.Error(t, err)
}

// TestServesTheSameRedis: the durable variants start redissut's Redis
// with its append-only file (redissut's tests cover every policy and the
// data directory's life).
func TestServesTheSameRedis(t *testing.T) {
	for _, policy := range []string{"always", "everysec", "no"} {
		assert.Equal(t, redissut.System{AppendFsync: policy}.Durability(), System{AppendFsync: policy}.Durability())
	}
	assert.Empty(t, System{}.Durability(), "in memory")

	parent := t.TempDir()
	addr := serveOf(t, System{AppendFsync: "everysec"}, parent)
	c := dial(t, addr, 0)
	info, err := c.command(context.Background(), "INFO", "persistence").ToString()
	require.NoError(t, err)
	assert.Contains(t, info, "aof_enabled:1")
	dirs, err := os.ReadDir(parent)
	require.NoError(t, err)
	assert.Len(t, dirs, 1, "the server's data directory")

	err = System{AppendFsync: "sometimes"}.Serve(context.Background(), bench.ServeOptions{Addr: "127.0.0.1:0"}, func(string) {
		t.Error("ready called")
	})
	assert.ErrorContains(t, err, `appendfsync "sometimes"`)
}
