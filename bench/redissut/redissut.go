// Package redissut puts a real Redis server under the benchmark harness as
// a [bench.System], so fero can be quoted next to a well-known peer measured
// by exactly the same scenarios, processes and reports.
//
// What is measured: every record is one "SET k:<client>:<n> <payload>",
// the keys cycling through [Keys] numbers per client. Redis's server is
// single-threaded C (started with one I/O thread), with persistence off (no
// RDB snapshots, no append-only file), so its figures are the cost of a
// pipelined in-memory write over loopback. As for every system, they are
// read as ratios to the raw echo floor (bench/echo) measured in the same
// run by the same harness.
//
// [System.AppendFsync] turns the append-only file on, with that fsync
// policy, as the peer of fero keeping its partitions on disk: each Redis
// then writes in a fresh directory of its own, removed when it stops.
// Redis does not count its fsyncs, so the report has none for it.
//
// Serve starts redis-server (it must be installed, e.g. with apt-get
// install redis-server) as a child of the serving process, waits until it
// answers PING, and stops it when its context ends. The child is killed if
// the serving process dies, so it never outlives a run. The harness counts
// the CPU of a server's child processes as the server's, and reports their
// peak RSS in place of the server process's (see [bench.Descendants] and
// [bench.Usage]), so Redis's own CPU and memory are in the report. With
// several servers each is an independent Redis: clients spread over them as Servers[Index %
// len(Servers)] and nothing is replicated, so the Conn does not implement
// [bench.Replicator].
//
// The client is a minimal RESP2 client written here rather than go-redis or
// rueidis. Those complete commands synchronously or in batches and offer no
// callback per command, so an open-loop generator that issues each request
// at its due time, with a thousand in flight, would need a goroutine per
// request, and that would be measured as the client's cost. This one
// mirrors the echo floor's client: commands are encoded without allocation
// into one buffered writer and pipelined, and a single reader goroutine
// hands each reply to the oldest queued callback. Package rueidissut
// drives the same server with rueidis, paying that goroutine per request,
// so that a run can quote whichever client is faster.
//
// Redis answers every command, so one-way mode is emulated: Send writes a
// SET whose reply the reader discards (an error reply makes the next Sync
// fail), and Sync sends a PING and waits for its PONG, which Redis can only
// send once it has executed everything before it.
package redissut

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/fero-go/fero/bench"
)

const (
	// startTimeout bounds how long Serve waits for Redis to answer PING.
	startTimeout = 10 * time.Second
	// pollInterval is how often Serve tries PING while Redis starts.
	pollInterval = 10 * time.Millisecond
	// stopTimeout is how long Redis has to exit after SIGTERM before it
	// is killed.
	stopTimeout = 5 * time.Second
	// tailSize is how much of Redis's output is kept for error messages.
	tailSize = 4 << 10
)

// System is Redis as a system under test.
type System struct {
	// AppendFsync, if set, turns the append-only file on with this
	// appendfsync policy: "always" (fsync before replying to the commands
	// of each event loop), "everysec" or "no" (the OS writes back when it
	// likes). Empty: no persistence at all.
	AppendFsync string
}

var (
	_ bench.System  = System{}
	_ bench.Durable = System{}
)

// Durability names the append-only file's policy; empty without one.
func (s System) Durability() string {
	if s.AppendFsync == "" {
		return ""
	}
	return "appendfsync " + s.AppendFsync
}

// Serve runs one redis-server on opts.Addr until ctx is done. opts.Peers is
// ignored: servers are independent. It returns nil when Redis stops because
// ctx ended, and an error with the end of Redis's output if Redis exits on
// its own. With an append-only file, Redis writes it in a directory made
// under opts.DataDir and removed once Redis has exited.
func (s System) Serve(ctx context.Context, opts bench.ServeOptions, ready func(addr string)) error {
	if s.AppendFsync == "" {
		return serveRedis(ctx, opts.Addr, []string{"--appendonly", "no"}, ready)
	}
	switch s.AppendFsync {
	case "always", "everysec", "no":
	default:
		return fmt.Errorf("redissut: appendfsync %q: want always, everysec or no", s.AppendFsync)
	}
	dir, remove, err := bench.NewDataDir(opts.DataDir, "redis")
	if err != nil {
		return err
	}
	err = serveRedis(ctx, opts.Addr, []string{"--appendonly", "yes", "--appendfsync", s.AppendFsync, "--dir", dir}, ready)
	return errors.Join(err, remove())
}

// serveRedis runs redis-server on listen, with the append-only file as
// persistence says, until ctx is done.
func serveRedis(ctx context.Context, listen string, persistence []string, ready func(addr string)) error {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redissut: redis-server not found (install it, e.g. apt-get install redis-server): %w", err)
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("redissut: address %q: %w", listen, err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	if port == "0" {
		if port, err = freePort(host); err != nil {
			return err
		}
	}
	addr := net.JoinHostPort(host, port)
	p, err := start(path, host, port, persistence)
	if err != nil {
		return err
	}
	if err := p.waitReady(ctx, addr); err != nil {
		return err
	}
	ready(addr)
	select {
	case err := <-p.exited:
		return p.exitError("redis-server exited", err)
	case <-ctx.Done():
		return p.stop()
	}
}

// freePort asks the kernel for a free port on host. Redis binds it only
// after the probe's listener is closed, so another process could take it in
// between; Redis then fails to bind and Serve reports its output.
func freePort(host string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("redissut: find a free port: %w", err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), nil
}

// process is a running redis-server.
type process struct {
	cmd    *exec.Cmd
	out    *bench.Tail
	exited chan error // receives Wait's result once
}

// start launches redis-server: no RDB snapshots, the append-only file as
// persistence sets it, one I/O thread, one database, logs to stdout,
// which is kept in a tail for error messages.
func start(path, host, port string, persistence []string) (*process, error) {
	cmd := exec.Command(path, append([]string{
		"--port", port,
		"--bind", host,
		"--save", "",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--io-threads", "1",
		"--logfile", "",
		"--databases", "1",
	}, persistence...)...)
	// Redis writes in its working directory, or where --dir sends it:
	// without an append-only file nothing should be written, but a stray
	// dump must not land wherever the harness runs.
	cmd.Dir = os.TempDir()
	out := bench.NewTail(tailSize)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	// Redis closes its output as it exits; this only bounds the wait for
	// a grandchild that might still hold it.
	cmd.WaitDelay = time.Second
	p := &process{cmd: cmd, out: out, exited: make(chan error, 1)}
	started := make(chan error, 1)
	go func() {
		// Linux sends the parent-death signal when the thread that
		// started the child ends, not the process, and Go ends a thread
		// when a goroutine locked to it exits. Holding this thread until
		// the child is reaped keeps any other goroutine from doing so.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("redissut: start redis-server: %w", err)
			return
		}
		started <- nil
		p.exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// waitReady polls addr with PING until Redis answers PONG. It stops Redis
// and fails if Redis exits, ctx ends or startTimeout passes first.
func (p *process) waitReady(ctx context.Context, addr string) error {
	wctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := ping(wctx, addr)
		if err == nil {
			return nil
		}
		// An exit wins over a tick that is also due, or a slow failed
		// PING could leave it unnoticed for several rounds.
		select {
		case werr := <-p.exited:
			return p.exitError("redis-server exited before it answered PING", werr)
		default:
		}
		select {
		case werr := <-p.exited:
			return p.exitError("redis-server exited before it answered PING", werr)
		case <-wctx.Done():
			_ = p.stop()
			if ctx.Err() != nil {
				return fmt.Errorf("redissut: stopped while redis-server started: %w", ctx.Err())
			}
			return fmt.Errorf("redissut: redis-server did not answer PING on %s within %v (last: %v); output:\n%s",
				addr, startTimeout, err, p.out)
		case <-tick.C:
		}
	}
}

// ping sends PING on a fresh connection and expects +PONG.
func ping(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	if _, err := c.Write(pingCmd); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadSlice('\n')
	if err != nil {
		return err
	}
	if string(line) != "+PONG\r\n" {
		// Such as -LOADING while Redis is still starting.
		return fmt.Errorf("PING answered with %q", bytes.TrimSpace(line))
	}
	return nil
}

// stop sends SIGTERM, and SIGKILL if Redis has not exited stopTimeout
// later. It returns nil if Redis exited cleanly or by the signal.
func (p *process) stop() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		// Already gone, or a system without SIGTERM.
		_ = p.cmd.Process.Kill()
	}
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case err := <-p.exited:
		var ee *exec.ExitError
		if err == nil || errors.As(err, &ee) && ee.ExitCode() == -1 {
			return nil // exit status 0, or ended by the signal
		}
		return p.exitError("redis-server failed to stop", err)
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("redissut: redis-server ignored SIGTERM for %v and was killed; output:\n%s", stopTimeout, p.out)
	}
}

// exitError describes Redis ending with err, with its last output.
func (p *process) exitError(what string, err error) error {
	if err == nil {
		err = errors.New("exit status 0")
	}
	return fmt.Errorf("redissut: %s: %w; output:\n%s", what, err, p.out)
}
