package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The parent and its children talk in lines. A server prints its address,
// then answers "usage" on stdin with a JSON Usage line; stdin closing stops
// it. A client prints JSON ClientMessage lines: ready after dialling and warming
// up, progress while running, then one result; it starts measuring at the
// wall-clock instant the parent sends as "go <unix-ns>", so every client
// starts together, and stdin closing aborts it.

// The child subcommands, as the parent invokes them.
const (
	ServeCommand  = "serve"
	ClientCommand = "client"
	cmdUsage      = "usage"
	cmdGo         = "go"
)

// ServeSpec is everything a server process needs. The parent sends it as
// JSON.
type ServeSpec struct {
	System string       `json:"system"`
	Serve  ServeOptions `json:"serve"`
}

// ClientMessage is one line a client process prints for the harness:
// ready, progress, then a result or an error (ClientPipe writes them).
type ClientMessage struct {
	Ready bool `json:"ready,omitempty"`
	// Connected is when Dial returned (Unix ns), sent with Ready.
	Connected int64         `json:"connected_unix_ns,omitempty"`
	Progress  int64         `json:"progress,omitempty"`
	Result    *ClientResult `json:"result,omitempty"`
	Err       string        `json:"error,omitempty"`
}

// lineWriter serializes JSON lines to a child's stdout.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) line(s string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := io.WriteString(l.w, s+"\n")
	return err
}

func (l *lineWriter) json(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	return l.line(string(b))
}

// ServeChild runs the server side of a child process: it serves spec on
// the system from reg until ctx is done or stdin closes.
func ServeChild(ctx context.Context, reg Registry, spec ServeSpec, stdin io.Reader, stdout io.Writer) error {
	sys, err := reg.Lookup(spec.System)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &lineWriter{w: stdout}
	ready := make(chan struct{})
	serveErr := make(chan error, 1)
	go func() {
		serveErr <- sys.Serve(ctx, spec.Serve, func(addr string) {
			if out.line(addr) == nil {
				close(ready)
			}
		})
	}()
	// The control channel: commands until EOF, which stops the server.
	cmds := make(chan string)
	go func() {
		defer close(cmds)
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			select {
			case cmds <- strings.TrimSpace(sc.Text()):
			case <-ctx.Done():
				return
			}
		}
	}()
	var kids []int // the server's descendant processes
	scanned := false
	for {
		select {
		case err := <-serveErr:
			if err != nil {
				return fmt.Errorf("serve %s: %w", spec.System, err)
			}
			return nil
		case c, ok := <-cmds:
			if !ok {
				cancel()
				return <-serveErr
			}
			if c == cmdUsage {
				u, err := SelfUsage()
				if err != nil {
					return err
				}
				// A server that runs another program counts its CPU, and
				// reports its peak RSS as its own (ProgramMaxRSS). The
				// programs start before the server is ready, so the first
				// answer finds them all; later ones, some asked inside a
				// measured window, read only theirs, not all of /proc.
				if !scanned {
					kids, scanned = Descendants(), true
				}
				d := UsageOf(kids)
				u.CPU.User += d.CPU.User
				u.CPU.Sys += d.CPU.Sys
				u.CPU.Waits += d.CPU.Waits
				u.ProgramMaxRSS = d.MaxRSS
				if err := out.json(u); err != nil {
					return err
				}
			}
		}
	}
}

// ClientPipe is a client process's end of its protocol with the harness,
// for a system whose client is a program of its own rather than a Conn
// (bench/origsut): Ready once connected and warmed up, WaitGo for the
// common start instant, Progress while running, then Result or Fail.
type ClientPipe struct {
	out *lineWriter
	in  *bufio.Scanner
}

// NewClientPipe speaks the protocol on the client process's stdin and
// stdout.
func NewClientPipe(stdin io.Reader, stdout io.Writer) *ClientPipe {
	return &ClientPipe{out: &lineWriter{w: stdout}, in: bufio.NewScanner(stdin)}
}

// Ready says the client is connected (since connected) and warmed up.
func (p *ClientPipe) Ready(connected time.Time) error {
	return p.out.json(ClientMessage{Ready: true, Connected: connected.UnixNano()})
}

// WaitGo waits for the harness's start instant and returns it. Then it
// reads on in the background and calls abort when stdin closes: the
// harness went away.
func (p *ClientPipe) WaitGo(abort func()) (time.Time, error) {
	if !p.in.Scan() {
		return time.Time{}, errors.New("bench client: stdin closed before go")
	}
	f := strings.Fields(p.in.Text())
	if len(f) != 2 || f[0] != cmdGo {
		return time.Time{}, fmt.Errorf("bench client: want %q, got %q", cmdGo+" <unix-ns>", p.in.Text())
	}
	at, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("bench client: bad start time: %w", err)
	}
	go func() {
		for p.in.Scan() {
		}
		abort()
	}()
	return time.Unix(0, at), nil
}

// Progress reports how many operations have completed.
func (p *ClientPipe) Progress(done int64) error { return p.out.json(ClientMessage{Progress: done}) }

// Result sends the trial's result, the last line.
func (p *ClientPipe) Result(r *ClientResult) error { return p.out.json(ClientMessage{Result: r}) }

// Fail sends why the client failed, the last line; the parent reads it
// from stdout.
func (p *ClientPipe) Fail(err error) error { return p.out.json(ClientMessage{Err: err.Error()}) }

// ClientChild runs the client side of a child process.
func ClientChild(ctx context.Context, reg Registry, spec ClientSpec, stdin io.Reader, stdout io.Writer) (err error) {
	pipe := NewClientPipe(stdin, stdout)
	defer func() {
		if err != nil {
			// stderr has it too.
			_ = pipe.Fail(err)
		}
	}()
	sys, err := reg.Lookup(spec.System)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, err := sys.Dial(ctx, spec.Dial)
	if err != nil {
		return fmt.Errorf("dial %s: %w", spec.System, err)
	}
	connected := time.Now()
	defer conn.Close()
	if err := warmUp(ctx, conn, spec); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if err := pipe.Ready(connected); err != nil {
		return err
	}
	at, err := pipe.WaitGo(cancel) // the parent going away aborts
	if err != nil {
		return err
	}
	if d := time.Until(at); d > 0 {
		if err := NewRealClock().Sleep(ctx, d); err != nil {
			return err
		}
	}

	var p progress
	if spec.ProgressEvery > 0 {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(spec.ProgressEvery)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					_ = pipe.Progress(p.done.Load())
				case <-stop:
					return
				}
			}
		}()
	}
	before, err := SelfUsage()
	if err != nil {
		return err
	}
	res, err := runScenario(ctx, conn, spec, &p)
	if err != nil {
		return fmt.Errorf("%s: %w", spec.Scenario, err)
	}
	after, err := SelfUsage()
	if err != nil {
		return err
	}
	if res.measureFrom != nil {
		before = *res.measureFrom // the warm-up ran inside the scenario
	}
	res.CPU = after.CPU.Sub(before.CPU)
	res.GOMAXPROCS = runtime.GOMAXPROCS(0)
	res.MaxRSS = after.MaxRSS
	return pipe.Result(&res)
}
