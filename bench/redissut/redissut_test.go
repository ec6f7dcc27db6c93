package redissut

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fero-go/fero/bench"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// needRedis skips the test where redis-server is not installed.
func needRedis(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (apt-get install redis-server):", err)
	}
}

// startServe runs Serve on a free loopback port and returns its address,
// its cancel and the channel Serve's result arrives on.
func startServe(t *testing.T) (string, context.CancelFunc, <-chan error) {
	t.Helper()
	return startServeOf(t, System{}, "")
}

// startServeOf is startServe for sys, with its data directory under
// dataDir.
func startServeOf(t *testing.T, sys System, dataDir string) (string, context.CancelFunc, <-chan error) {
	t.Helper()
	needRedis(t)
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- sys.Serve(ctx, bench.ServeOptions{Addr: "127.0.0.1:0", DataDir: dataDir}, func(a string) { addrc <- a })
	}()
	select {
	case addr := <-addrc:
		return addr, cancel, errc
	case err := <-errc:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(15 * time.Second):
		cancel()
		t.Fatal("serve: not ready")
	}
	panic("unreachable")
}

// serve starts a server that the test's cleanup stops, checking that Serve
// then returns nil.
func serve(t *testing.T) string {
	t.Helper()
	addr, cancel, errc := startServe(t)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc)
	})
	return addr
}

func dial(t *testing.T, addr string, index int) *Conn {
	t.Helper()
	c, err := System{}.Dial(context.Background(), bench.DialOptions{Servers: []string{addr}, Index: index})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c.(*Conn)
}

// do sends one command through the connection's queue and waits for the
// reply: the tests' hook for commands other than SET.
func (c *Conn) do(ctx context.Context, args ...string) ([]byte, error) {
	return c.roundTrip(ctx, func() error { return c.writeCommand(args) })
}

// sendRaw queues a command the way Send queues a SET: its reply is
// discarded, and an error reply fails the next Sync.
func (c *Conn) sendRaw(args ...string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.enqueue(nil); err != nil {
		return err
	}
	return c.writeCommand(args)
}

// writeCommand buffers args as a RESP array, with wmu held.
func (c *Conn) writeCommand(args []string) error {
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	_, err := c.bw.Write(b)
	return err
}

func TestSendThenSyncStoresEveryRecord(t *testing.T) {
	c := dial(t, serve(t), 7)
	ctx := context.Background()
	payload := make([]byte, 100)
	for i := 0; i < 1000; i++ {
		// Send may not keep payload: each record must carry its own.
		copy(payload, strconv.Itoa(i))
		require.NoError(t, c.Send(ctx, payload))
	}
	require.NoError(t, c.Flush(ctx))
	require.NoError(t, c.Sync(ctx))

	n, err := c.do(ctx, "DBSIZE")
	require.NoError(t, err)
	assert.Equal(t, "1000", string(n))
	v, err := c.do(ctx, "GET", "k:7:123")
	require.NoError(t, err)
	want := make([]byte, 100)
	copy(want, "123")
	assert.Equal(t, want, v)
	missing, err := c.do(ctx, "GET", "k:7:1000")
	require.NoError(t, err)
	assert.Nil(t, missing)

	// A second batch, this time flushed only by Sync.
	for i := 0; i < 10; i++ {
		require.NoError(t, c.Send(ctx, nil))
	}
	require.NoError(t, c.Sync(ctx))
	n, err = c.do(ctx, "DBSIZE")
	require.NoError(t, err)
	assert.Equal(t, "1010", string(n))
}

func TestSyncReportsFailedSends(t *testing.T) {
	c := dial(t, serve(t), 0)
	ctx := context.Background()
	require.NoError(t, c.Send(ctx, []byte("a")))
	require.NoError(t, c.sendRaw("NOSUCHCOMMAND"))
	require.NoError(t, c.sendRaw("NOSUCHCOMMAND", "again"))
	require.NoError(t, c.Send(ctx, []byte("b")))
	err := c.Sync(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "2 sent records failed")
	assert.Contains(t, err.Error(), "unknown command")
	var re ReplyError
	assert.ErrorAs(t, err, &re)
	// Reported once: the connection is still usable.
	require.NoError(t, c.Send(ctx, []byte("c")))
	require.NoError(t, c.Sync(ctx))
}

func TestGoRepliesInOrder(t *testing.T) {
	c := dial(t, serve(t), 0)
	ctx := context.Background()
	const n = 500
	var next int // touched only by done, which never overlaps
	var bad atomic.Value
	all := make(chan struct{})
	for i := 0; i < n; i++ {
		require.NoError(t, c.Go(ctx, []byte("v"), func(reply []byte, err error) {
			switch {
			case err != nil:
				bad.CompareAndSwap(nil, err)
			case i != next || string(reply) != "OK":
				bad.CompareAndSwap(nil, fmt.Errorf("reply %d (%q) came as number %d", i, reply, next))
			}
			next++
			if next == n {
				close(all)
			}
		}))
	}
	require.NoError(t, c.Flush(ctx))
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("replies did not arrive")
	}
	if err, _ := bad.Load().(error); err != nil {
		t.Fatal(err)
	}
}

func TestCallInlineAndThroughTheReader(t *testing.T) {
	c := dial(t, serve(t), 0)
	ctx := context.Background()
	reply, err := c.Call(ctx, []byte("x"))
	require.NoError(t, err)
	assert.Equal(t, "OK", string(reply))
	// A cancellable context exercises the read-deadline hook.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reply, err = c.Call(cctx, []byte("y"))
	require.NoError(t, err)
	assert.Equal(t, "OK", string(reply))

	// Once Go started the reader, Call goes through it.
	done := make(chan error, 1)
	require.NoError(t, c.Go(ctx, []byte("z"), func(_ []byte, err error) { done <- err }))
	reply, err = c.Call(ctx, []byte("w"))
	require.NoError(t, err)
	assert.Equal(t, "OK", string(reply))
	require.NoError(t, <-done)
	n, err := c.do(ctx, "DBSIZE")
	require.NoError(t, err)
	assert.Equal(t, "4", string(n))
}

func TestErrorReplyFailsOnlyItsRequest(t *testing.T) {
	c := dial(t, serve(t), 0)
	ctx := context.Background()
	_, err := c.do(ctx, "NOSUCHCOMMAND", "arg")
	require.Error(t, err)
	var re ReplyError
	require.ErrorAs(t, err, &re)
	assert.Contains(t, err.Error(), "unknown command")
	reply, err := c.Call(ctx, []byte("x"))
	require.NoError(t, err)
	assert.Equal(t, "OK", string(reply))
}

func TestKeysCycle(t *testing.T) {
	c := dial(t, serve(t), 2)
	ctx := context.Background()
	c.n = 2*Keys - 1 // the last key of the second lap
	require.NoError(t, c.Send(ctx, []byte("last")))
	require.NoError(t, c.Send(ctx, []byte("first")))
	require.NoError(t, c.Sync(ctx))
	v, err := c.do(ctx, "GET", fmt.Sprintf("k:2:%d", Keys-1))
	require.NoError(t, err)
	assert.Equal(t, "last", string(v))
	v, err = c.do(ctx, "GET", "k:2:0")
	require.NoError(t, err)
	assert.Equal(t, "first", string(v))
}

func TestCloseFailsOutstandingAndWaits(t *testing.T) {
	c := dial(t, serve(t), 0)
	ctx := context.Background()
	var accepted, called, failed atomic.Int64
	payload := make([]byte, 100)
	// More than the write buffer holds: some are answered, some are still
	// buffered or in flight when Close runs.
	for i := 0; i < 5000; i++ {
		require.NoError(t, c.Go(ctx, payload, func(_ []byte, err error) {
			if err != nil {
				failed.Add(1)
			}
			called.Add(1)
		}))
		accepted.Add(1)
	}
	require.NoError(t, c.Close())
	// Close returned only after every done did.
	assert.Equal(t, accepted.Load(), called.Load())
	assert.Positive(t, failed.Load())

	err := c.Go(ctx, payload, func([]byte, error) { t.Error("done called for a refused Go") })
	assert.ErrorIs(t, err, bench.ErrClosed)
	assert.ErrorIs(t, c.Send(ctx, payload), bench.ErrClosed)
	assert.ErrorIs(t, c.Sync(ctx), bench.ErrClosed)
	_, err = c.Call(ctx, payload)
	assert.ErrorIs(t, err, bench.ErrClosed)
	assert.NoError(t, c.Close(), "Close is idempotent")
}

func TestCloseFailsTheOutstandingWithErrClosed(t *testing.T) {
	c := dial(t, serve(t), 0)
	ctx := context.Background()
	errs := make(chan error, 1)
	// Never flushed, so certainly outstanding at Close.
	require.NoError(t, c.Go(ctx, []byte("x"), func(_ []byte, err error) { errs <- err }))
	require.NoError(t, c.Close())
	assert.ErrorIs(t, <-errs, bench.ErrClosed)
}

func TestSyncAndCallRespectContext(t *testing.T) {
	addr := serve(t)
	ctx := context.Background()
	// While writes are paused Redis holds every SET, and the commands a
	// client pipelined after it, unanswered.
	admin := dial(t, addr, 9)
	pause := func() {
		_, err := admin.do(ctx, "CLIENT", "PAUSE", "10000", "WRITE")
		require.NoError(t, err)
	}
	unpause := func() {
		_, err := admin.do(ctx, "CLIENT", "UNPAUSE")
		require.NoError(t, err)
	}

	c := dial(t, addr, 0)
	pause()
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err := c.Call(short, []byte("x"))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	// The inline read was cut mid-stream, so the connection is done with.
	assert.Error(t, c.Sync(ctx))
	unpause()

	c2 := dial(t, addr, 1)
	require.NoError(t, c2.Send(ctx, []byte("x")))
	require.NoError(t, c2.Sync(ctx))
	pause()
	require.NoError(t, c2.Send(ctx, []byte("y")))
	short2, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel2()
	assert.ErrorIs(t, c2.Sync(short2), context.DeadlineExceeded)
	unpause()
	// Through the reader the connection survives a cancelled wait.
	require.NoError(t, c2.Sync(ctx))
	v, err := c2.do(ctx, "GET", "k:1:1")
	require.NoError(t, err)
	assert.Equal(t, "y", string(v))
}

func TestServeStopsRedisWhenCancelled(t *testing.T) {
	addr, cancel, errc := startServe(t)
	c := dial(t, addr, 0)
	reply, err := c.Call(context.Background(), []byte("x"))
	require.NoError(t, err)
	assert.Equal(t, "OK", string(reply))

	cancel()
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	// Serve returned after Redis was reaped, so its port is closed.
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		conn.Close()
		t.Fatal("redis-server still accepts connections after Serve returned")
	}
	_, err = c.Call(context.Background(), []byte("y"))
	assert.Error(t, err)
}

func TestServeFailsWhenRedisExitsOnItsOwn(t *testing.T) {
	addr, cancel, errc := startServe(t)
	defer cancel()
	c := dial(t, addr, 0)
	_, _ = c.do(context.Background(), "SHUTDOWN", "NOSAVE")
	select {
	case err := <-errc:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "redis-server exited")
		assert.Contains(t, err.Error(), "ready to exit", "the error carries Redis's output")
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after Redis exited")
	}
}

func TestServeFailsWhenThePortIsTaken(t *testing.T) {
	needRedis(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	err = System{}.Serve(context.Background(), bench.ServeOptions{Addr: ln.Addr().String()}, func(string) {
		t.Error("ready called")
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "before it answered PING")
	assert.Contains(t, err.Error(), "in use", "the error carries Redis's output")
}

func TestServeCancelledBeforeReady(t *testing.T) {
	needRedis(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := System{}.Serve(ctx, bench.ServeOptions{Addr: "127.0.0.1:0"}, func(string) { t.Error("ready called") })
	assert.ErrorIs(t, err, context.Canceled)
}

func TestDialSpreadsClientsOverServers(t *testing.T) {
	a, b := serve(t), serve(t)
	ctx := context.Background()
	c, err := System{}.Dial(ctx, bench.DialOptions{Servers: []string{a, b}, Index: 3})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Send(ctx, []byte("x")))
	require.NoError(t, c.Sync(ctx))
	for addr, want := range map[string]string{a: "0", b: "1"} {
		n, err := dial(t, addr, 0).do(ctx, "DBSIZE")
		require.NoError(t, err)
		assert.Equal(t, want, string(n), addr)
	}

	_, err = System{}.Dial(ctx, bench.DialOptions{})
	assert.Error(t, err)
}

func TestServeRejectsABadAddress(t *testing.T) {
	needRedis(t)
	err := System{}.Serve(context.Background(), bench.ServeOptions{Addr: "no-port"}, func(string) {})
	assert.Error(t, err)
	assert.False(t, errors.Is(err, context.Canceled))
}

func TestSendAndGoDoNotAllocate(t *testing.T) {
	c := dial(t, serve(t), 0)
	ctx := context.Background()
	payload := make([]byte, 100)
	done := func([]byte, error) {}
	// Warm up: the queue and the scratch buffers reach their size.
	for i := 0; i < 10000; i++ {
		require.NoError(t, c.Send(ctx, payload))
		require.NoError(t, c.Go(ctx, payload, done))
	}
	require.NoError(t, c.Sync(ctx))
	allocs := testing.AllocsPerRun(1000, func() {
		_ = c.Send(ctx, payload)
		_ = c.Go(ctx, payload, done)
	})
	assert.Zero(t, allocs)
	require.NoError(t, c.Sync(ctx))
}

func TestAppendOnlyFileInADirectoryOfItsOwn(t *testing.T) {
	for _, policy := range []string{"always", "everysec", "no"} {
		t.Run(policy, func(t *testing.T) {
			parent := t.TempDir()
			sys := System{AppendFsync: policy}
			assert.Equal(t, "appendfsync "+policy, sys.Durability())
			addr, cancel, errc := startServeOf(t, sys, parent)
			defer cancel()
			c := dial(t, addr, 0)
			ctx := context.Background()
			for i := 0; i < 100; i++ {
				require.NoError(t, c.Send(ctx, []byte("v")))
			}
			require.NoError(t, c.Sync(ctx))
			info, err := c.do(ctx, "INFO", "persistence")
			require.NoError(t, err)
			assert.Contains(t, string(info), "aof_enabled:1")
			dirs, err := os.ReadDir(parent)
			require.NoError(t, err)
			require.Len(t, dirs, 1, "one fresh directory for the server")
			aof, err := os.ReadDir(filepath.Join(parent, dirs[0].Name(), "appendonlydir"))
			require.NoError(t, err, "Redis writes its append-only file there")
			assert.NotEmpty(t, aof)

			cancel()
			require.NoError(t, <-errc)
			dirs, err = os.ReadDir(parent)
			require.NoError(t, err)
			assert.Empty(t, dirs, "removed once Redis has exited")
		})
	}
	assert.Empty(t, System{}.Durability(), "in memory")
}

func TestServeRejectsAnUnknownAppendFsync(t *testing.T) {
	parent := t.TempDir()
	err := System{AppendFsync: "sometimes"}.Serve(context.Background(), bench.ServeOptions{Addr: "127.0.0.1:0", DataDir: parent}, func(string) {
		t.Error("ready called")
	})
	assert.ErrorContains(t, err, `appendfsync "sometimes": want always, everysec or no`)
	dirs, err := os.ReadDir(parent)
	require.NoError(t, err)
	assert.Empty(t, dirs)
}

// TestServerUsageIsRedisServers: the usage a fero-bench server process
// reports for Redis has the redis-server process's peak RSS, read from
// its /proc/<pid>/status, not the serving Go process's own.
func TestServerUsageIsRedisServers(t *testing.T) {
	needRedis(t)
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Skip("no /proc:", err)
	}
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		spec := bench.ServeSpec{System: "redis", Serve: bench.ServeOptions{Addr: "127.0.0.1:0"}}
		done <- bench.ServeChild(context.Background(), bench.Registry{"redis": System{}}, spec, stdinR, stdoutW)
		_ = stdoutW.Close()
	}()
	out := bufio.NewReader(stdoutR)
	addr, err := out.ReadString('\n')
	require.NoError(t, err)

	var redis procfs.Proc
	for _, pid := range bench.Descendants() {
		p, err := fs.Proc(pid)
		require.NoError(t, err)
		if comm, _ := p.Comm(); comm == "redis-server" {
			redis = p
		}
	}
	require.NotZero(t, redis.PID, "a redis-server among this process's children")
	peak := func() int64 {
		st, err := redis.NewStatus()
		require.NoError(t, err)
		return int64(st.VmHWM)
	}

	// 10,000 keys of 4,000 bytes: Redis's peak grows by some 40 MB, which
	// this process's does not.
	c := dial(t, strings.TrimSpace(addr), 0)
	ctx := context.Background()
	payload := make([]byte, 4000)
	for range Keys {
		require.NoError(t, c.Send(ctx, payload))
	}
	require.NoError(t, c.Sync(ctx))

	before := peak()
	_, err = io.WriteString(stdinW, "usage\n")
	require.NoError(t, err)
	line, err := out.ReadString('\n')
	require.NoError(t, err)
	var u bench.Usage
	require.NoError(t, json.Unmarshal([]byte(line), &u), line)
	after := peak()
	t.Logf("redis-server peak RSS %d bytes; the serving process's own %d", u.ProgramMaxRSS, u.MaxRSS)
	assert.Greater(t, u.ProgramMaxRSS, int64(40e6), "Redis holds 40 MB of values")
	assert.GreaterOrEqual(t, u.ProgramMaxRSS, before, "redis-server's VmHWM")
	assert.LessOrEqual(t, u.ProgramMaxRSS, after, "redis-server's VmHWM")

	require.NoError(t, stdinW.Close())
	require.NoError(t, <-done)
}
