package origsut

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fero-go/fero/bench"
)

// stallTimeout is how long client.js waits without any operation
// completing before it fails: the original drops a request that its handler
// refuses, without an answer, and a trial should say so rather than hang.
const stallTimeout = 30 * time.Second

// clientArgs is client.js's argument.
type clientArgs struct {
	Host          string `json:"host"`
	Port          int    `json:"port"`
	Scenario      string `json:"scenario"`
	Size          int    `json:"size"`
	Records       int64  `json:"records"`
	WarmupRecords int64  `json:"warmupRecords"`
	Window        int    `json:"window"`
	Count         int64  `json:"count"`
	WarmupCount   int64  `json:"warmupCount"`
	ProgressMs    int64  `json:"progressMs"`
	StallMs       int64  `json:"stallMs"`
}

// nodeResult is client.js's "r" line: milestones, or a round trip's
// window, in nanoseconds from the start.
type nodeResult struct {
	Tacks  int64 `json:"tacks"`
	Yacks  int64 `json:"yacks"`
	Sacks  int64 `json:"sacks"`
	Window int64 `json:"window"`
}

// RunClient is a client process of a trial of the original, in place of
// bench.ClientChild, speaking the same protocol with the harness on stdin
// and stdout. It starts client.js against Servers[Index % len(Servers)],
// which connects and warms up; then it says ready, waits for the harness's
// common start instant, and has client.js run the measured part. The
// result's CPU is this process's and client.js's from the start to the
// result; its milestones and latencies are client.js's.
func (s System) RunClient(ctx context.Context, spec bench.ClientSpec, stdin io.Reader, stdout io.Writer) (err error) {
	pipe := bench.NewClientPipe(stdin, stdout)
	defer func() {
		if err != nil {
			_ = pipe.Fail(err)
		}
	}()
	if err := s.Supports(spec.Scenario, len(spec.Dial.Servers)); err != nil {
		return err
	}
	addr := spec.Dial.Servers[spec.Dial.Index%len(spec.Dial.Servers)]
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("origsut: server address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("origsut: server address %q: %w", addr, err)
	}
	in, err := prepare(ctx)
	if err != nil {
		return err
	}
	arg, err := json.Marshal(clientArgs{
		Host: host, Port: port, Scenario: string(spec.Scenario), Size: spec.Size,
		Records: spec.Records, WarmupRecords: spec.WarmupRecords, Window: spec.Window,
		Count: spec.Count, WarmupCount: spec.WarmupCount,
		ProgressMs: spec.ProgressEvery.Milliseconds(), StallMs: stallTimeout.Milliseconds(),
	})
	if err != nil {
		return fmt.Errorf("origsut: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := startNode(in.node, in.dir, clientScript, arg, true)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, p.stop()) }()

	c := &nodeClient{p: p}
	if err := c.expect(ctx, "connected"); err != nil {
		return err
	}
	connected := time.Now()
	if err := c.expect(ctx, "ready"); err != nil {
		return err
	}
	if err := pipe.Ready(connected); err != nil {
		return err
	}
	at, err := pipe.WaitGo(cancel) // the harness going away aborts
	if err != nil {
		return err
	}
	if d := time.Until(at); d > 0 {
		if err := bench.NewRealClock().Sleep(ctx, d); err != nil {
			return err
		}
	}
	before, err := c.usage()
	if err != nil {
		return err
	}
	if err := p.send("go"); err != nil {
		return err
	}
	rec := bench.NewRecorder()
	var r nodeResult
	for done := false; !done; {
		kind, rest, err := c.next(ctx)
		if err != nil {
			return err
		}
		switch kind {
		case "p":
			n, err := strconv.ParseInt(rest, 10, 64)
			if err != nil {
				return fmt.Errorf("origsut: client.js progress %q: %w", rest, err)
			}
			if err := pipe.Progress(n); err != nil {
				return err
			}
		case "l":
			for _, f := range strings.Fields(rest) {
				ns, err := strconv.ParseInt(f, 10, 64)
				if err != nil {
					return fmt.Errorf("origsut: client.js latency %q: %w", f, err)
				}
				rec.Record(time.Duration(ns))
			}
		case "r":
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				return fmt.Errorf("origsut: client.js result %q: %w", rest, err)
			}
			done = true
		default:
			return fmt.Errorf("origsut: client.js said %q", kind+" "+rest)
		}
	}
	after, err := c.usage()
	if err != nil {
		return err
	}
	res, err := result(spec, r, rec)
	if err != nil {
		return err
	}
	res.CPU = after.CPU.Sub(before.CPU)
	return pipe.Result(&res)
}

// result turns client.js's report into the harness's, as
// bench.ClientChild builds it for the same scenario.
func result(spec bench.ClientSpec, r nodeResult, rec *bench.Recorder) (bench.ClientResult, error) {
	res := bench.ClientResult{Index: spec.Dial.Index}
	switch spec.Scenario {
	case bench.OneWay:
		res.Milestones = []bench.Milestone{{Name: bench.Tacks, Nanos: time.Duration(r.Tacks)}, {Name: bench.Yacks, Nanos: time.Duration(r.Yacks)}}
		res.Records, res.Sent, res.Window = spec.Records, spec.Records, time.Duration(r.Yacks)
	case bench.RequestReply:
		res.Milestones = []bench.Milestone{{Name: bench.Tacks, Nanos: time.Duration(r.Tacks)}, {Name: bench.Sacks, Nanos: time.Duration(r.Sacks)}}
		res.Records, res.Sent, res.Window = spec.Records, spec.Records, time.Duration(r.Sacks)
	case bench.RoundTrip:
		if rec.Count() != spec.Count {
			return res, fmt.Errorf("origsut: client.js reported %d round trips of %d", rec.Count(), spec.Count)
		}
		enc, err := rec.Encode()
		if err != nil {
			return res, err
		}
		res.Histograms = map[string]string{bench.HistLatency: enc}
		res.Clamped = rec.Clamped()
		res.Records, res.Sent, res.Window = spec.Count, spec.Count, time.Duration(r.Window)
	}
	res.Bytes = res.Records * int64(spec.Size)
	// GOMAXPROCS stays 0: the client is not a Go program.
	return res, nil
}

// nodeClient reads client.js's lines.
type nodeClient struct{ p *nodeProc }

// next returns the next line's kind (its first word) and the rest; an "e"
// line or client.js's exit is an error.
func (c *nodeClient) next(ctx context.Context) (kind, rest string, err error) {
	select {
	case line, ok := <-c.p.lines:
		if !ok {
			<-c.p.exited
			return "", "", c.p.exitError("client.js exited")
		}
		kind, rest, _ = strings.Cut(line, " ")
		if kind == "e" {
			return "", "", fmt.Errorf("origsut: client.js: %s", rest)
		}
		return kind, rest, nil
	case <-ctx.Done():
		return "", "", fmt.Errorf("origsut: client.js: %w; stderr:\n%s", ctx.Err(), c.p.stderr)
	}
}

// expect waits for the line want.
func (c *nodeClient) expect(ctx context.Context, want string) error {
	kind, rest, err := c.next(ctx)
	if err != nil {
		return err
	}
	if kind != want || rest != "" {
		return fmt.Errorf("origsut: client.js said %q, want %q", kind+" "+rest, want)
	}
	return nil
}

// usage is this process's usage plus client.js's. client.js may exit
// once it has sent its result, and once reaped it is gone from /proc
// (UsageOf counts it as nothing, which made the result's CPU negative on a
// loaded machine); its totals are then in its ProcessState.
func (c *nodeClient) usage() (bench.Usage, error) {
	u, err := bench.SelfUsage()
	if err != nil {
		return u, err
	}
	n := bench.UsageOf([]int{c.p.cmd.Process.Pid})
	if n == (bench.Usage{}) && procfs() {
		// Not in /proc: reaped, or being reaped, so Wait returns at
		// once; stopTimeout only bounds a surprise.
		select {
		case <-c.p.exited:
		case <-time.After(stopTimeout):
		}
	}
	select {
	case <-c.p.exited:
		if ps := c.p.cmd.ProcessState; ps != nil {
			n.CPU.User, n.CPU.Sys = ps.UserTime(), ps.SystemTime()
		}
	default:
	}
	u.CPU.User += n.CPU.User
	u.CPU.Sys += n.CPU.Sys
	return u, nil
}

// procfs reports whether /proc is there to read usage from (UsageOf
// reads nothing without it).
func procfs() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}
