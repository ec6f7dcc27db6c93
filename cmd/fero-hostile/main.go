// Command fero-hostile attacks a running fero node the way issue 17's
// attacker on the same host did, in a loop, for a bounded time: slow
// connections, half-sent 16 MiB frames, nested payloads, forged hellos,
// oversized calls and garbage gossip packets. It is the hostile client of
// the soak (scripts/soak.sh): a node must stay up, keep its memory flat
// and keep serving normal clients while it runs.
//
//	fero-hostile --data 127.0.0.1:7400 --gossip 127.0.0.1:7946 --duration 10m
//
// It only sends to the addresses it is given, and stops by itself.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/node"
	"github.com/fero-go/fero/internal/transport"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fero-hostile:", err)
		os.Exit(1)
	}
}

type flags struct {
	data, gossip string
	duration     time.Duration
	slow, half   int
	claim        string
}

func newRoot() *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   "fero-hostile",
		Short: "Attack a running fero node in a loop, for a bounded time",
		Long: `fero-hostile runs these attacks against one node, round after round,
until --duration ends, and prints what each round did:

  slow      --slow connections that send the preface and one byte
  half      --half connections that declare a 16 MiB frame and send 10 bytes of it
  nested    a 12 MB hello of nested arrays, and the same as a request payload
  forged    a hello that names --claim (a member) and a proof it cannot make
  big       30 calls of 16 MiB on one connection
  gossip    1,000 UDP packets of random bytes to the gossip port

It sends only to --data and --gossip.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.data, "data", "", "the node's data address host:port")
	fl.StringVar(&f.gossip, "gossip", "", "the node's gossip address host:port (optional)")
	fl.DurationVar(&f.duration, "duration", time.Minute, "how long to keep attacking")
	fl.IntVar(&f.slow, "slow", 500, "slow connections per round")
	fl.IntVar(&f.half, "half", 40, "half-sent 16 MiB frames per round")
	fl.StringVar(&f.claim, "claim", "server-0", "the member ID forged hellos claim")
	_ = cmd.MarkFlagRequired("data")
	return cmd
}

// preface is the transport's: "FERO", three zero bytes, version 1.
var preface = []byte{'F', 'E', 'R', 'O', 0, 0, 0, 1}

func run(ctx context.Context, f flags) error {
	ctx, cancel := context.WithTimeout(ctx, f.duration)
	defer cancel()
	for round := 1; ctx.Err() == nil; round++ {
		start := time.Now()
		var out []string
		for _, a := range []struct {
			name string
			do   func(context.Context, flags) string
		}{
			{"slow", slow}, {"half", half}, {"nested", nested}, {"forged", forged}, {"big", big}, {"gossip", gossip},
		} {
			if ctx.Err() != nil {
				break
			}
			out = append(out, a.name+": "+a.do(ctx, f))
		}
		fmt.Printf("round %d (%v): %v\n", round, time.Since(start).Round(time.Millisecond), out)
	}
	return nil
}

// hold opens n connections, writes b on each, and waits (until ctx ends
// or 45 s) for the node to close them; it reports how many it closed.
func hold(ctx context.Context, addr string, n int, b []byte) string {
	var closed, failed atomic.Int64
	var wg sync.WaitGroup
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			failed.Add(1)
			continue
		}
		_, _ = c.Write(b)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(45 * time.Second))
			stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
			defer stop()
			buf := make([]byte, 512)
			for {
				if _, err := c.Read(buf); err != nil {
					var ne net.Error
					if !errors.As(err, &ne) || !ne.Timeout() {
						closed.Add(1)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	return fmt.Sprintf("%d of %d closed by the node (%d dials failed)", closed.Load(), n, failed.Load())
}

func slow(ctx context.Context, f flags) string {
	return hold(ctx, f.data, f.slow, append(bytes.Clone(preface), 0))
}

func half(ctx context.Context, f flags) string {
	b := binary.BigEndian.AppendUint32(bytes.Clone(preface), 16<<20-64)
	return hold(ctx, f.data, f.half, append(b, bytes.Repeat([]byte{0x93}, 10)...))
}

// nestedMsgpack is about n bytes of a map whose field "x" holds n-1
// one-element arrays around nil.
func nestedMsgpack(n int) []byte {
	b := append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, n)...)
	b[len(b)-1] = 0xc0
	return b
}

func dial(ctx context.Context, addr string) (*transport.Conn, error) {
	return transport.DialConn(ctx, addr, transport.WithMaxFrame(32<<20))
}

func nested(ctx context.Context, f flags) string {
	c, err := dial(ctx, f.data)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, herr := c.Call(cctx, node.OpHello, nestedMsgpack(12<<20))
	req, _ := msgpack.Marshal([]any{"UPDATE", "nested", nestedMsgpack(12 << 20)})
	_, rerr := c.Call(cctx, node.OpRequest, req)
	return fmt.Sprintf("hello: %v; request: %v", short(herr), short(rerr))
}

func forged(ctx context.Context, f flags) string {
	c, err := dial(ctx, f.data)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nonce := make([]byte, 32)
	for i := range nonce {
		nonce[i] = byte(rand.N(256))
	}
	h, _ := msgpack.Marshal(map[string]any{"id": f.claim, "n": nonce})
	_, herr := c.Call(cctx, node.OpHello, h)
	p, _ := msgpack.Marshal(map[string]any{"m": make([]byte, 32)})
	_, perr := c.Call(cctx, node.OpHelloProof, p)
	return fmt.Sprintf("hello: %v; proof: %v", short(herr), short(perr))
}

func big(ctx context.Context, f flags) string {
	c, err := dial(ctx, f.data)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	payload := bytes.Repeat([]byte{0xc0}, 16<<20-1024)
	errsSeen := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Call(cctx, node.OpRequest, payload)
			mu.Lock()
			errsSeen[short(err)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return fmt.Sprint(errsSeen)
}

func gossip(ctx context.Context, f flags) string {
	if f.gossip == "" {
		return "skipped (no --gossip)"
	}
	c, err := net.Dial("udp", f.gossip)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	sent := 0
	b := make([]byte, 512)
	for range 1000 {
		if ctx.Err() != nil {
			break
		}
		for i := range b {
			b[i] = byte(rand.N(256))
		}
		if _, err := c.Write(b[:1+rand.N(len(b)-1)]); err == nil {
			sent++
		}
	}
	return fmt.Sprintf("%d packets sent", sent)
}

// short is an error's message cut to a line's worth.
func short(err error) string {
	if err == nil {
		return "ok"
	}
	s := err.Error()
	if len(s) > 90 {
		s = s[:90] + "…"
	}
	return s
}
