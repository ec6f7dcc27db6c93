// Command fero-hostile attacks a running fero node the way issue 17's
// and issue 42's attackers did, in a loop, for a bounded time: slow
// connections, half-sent and almost complete 16 MiB frames, nested
// payloads, forged hellos, oversized calls, engine calls without a hello,
// connections that say hello and nothing more (from several source
// addresses with --from) and garbage gossip packets. It is the hostile client of
// the soak (scripts/soak.sh): a node must stay up, keep its memory flat
// and keep serving normal clients while it runs.
//
//	fero-hostile --data 127.0.0.1:7400 --gossip 127.0.0.1:7946 --duration 10m
//	fero-hostile --data 10.0.0.1:7400,10.0.0.2:7400 --tls --from 10.0.1.1,10.0.1.2
//
// It only sends to the addresses it is given, and stops by itself.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
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
	targets, gossips []string
	data, gossip     string // the target of one attack loop
	duration         time.Duration
	slow, half       int
	full, engine     int
	silent, storm    int
	silentPace       float64
	from             []string
	claim            string
	tls              bool
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
  full      --full connections that each send a frame of almost 16 MiB, every
            byte but the last
  engine    --engine connections that each send an engine call without a hello,
            and wait for its answer
  silent    --silent connections from each --from address that say hello and
            nothing more, held until the node closes them (--silent-pace
            a second per address, to stay under the node's pace of new
            connections and fill its caps)
  storm     --storm connections opened and closed one after another, each
            with the preface (and with --tls, a whole TLS handshake)

With several --data addresses (and as many --gossip), every node is
attacked at once, each by its own loop of rounds.

With --tls every TCP connection first completes a TLS handshake without
a client certificate (an attacker has none) and without checking the
node's: what an attacker on the network can do to a node that serves
TLS.

--from spreads the connections of every attack over these local source
addresses (on Linux any of 127.0.0.0/8 reaches a node on loopback), so
that they count against the node's caps per source address as an attack
from several hosts does.

It sends only to --data and --gossip.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.targets, "data", nil, "the nodes' data addresses host:port (comma-separated)")
	fl.StringSliceVar(&f.gossips, "gossip", nil, "the nodes' gossip addresses host:port, in --data's order (optional)")
	fl.DurationVar(&f.duration, "duration", time.Minute, "how long to keep attacking")
	fl.IntVar(&f.slow, "slow", 500, "slow connections per round")
	fl.IntVar(&f.half, "half", 40, "half-sent 16 MiB frames per round")
	fl.IntVar(&f.full, "full", 40, "almost complete 16 MiB frames per round")
	fl.IntVar(&f.engine, "engine", 8, "engine calls without a hello per round")
	fl.IntVar(&f.silent, "silent", 80, "hello-then-silence connections per source address per round")
	fl.Float64Var(&f.silentPace, "silent-pace", 0, "open the silent connections at most this many a second per source address (0: all at once), to stay under a node's pace of new connections and reach its caps")
	fl.IntVar(&f.storm, "storm", 2000, "connections opened and closed per round (a reconnect storm)")
	fl.BoolVar(&f.tls, "tls", false, "attack over TLS (the node serves --tls-cert)")
	fl.StringSliceVar(&f.from, "from", nil, "local source addresses to spread connections over (default: the system's choice)")
	fl.StringVar(&f.claim, "claim", "server-0", "the member ID forged hellos claim")
	_ = cmd.MarkFlagRequired("data")
	return cmd
}

// preface is the transport's: "FERO", three zero bytes, version 1.
var preface = []byte{'F', 'E', 'R', 'O', 0, 0, 0, 1}

func run(ctx context.Context, f flags) error {
	if len(f.gossips) > 0 && len(f.gossips) != len(f.targets) {
		return fmt.Errorf("--gossip: %d addresses for %d --data addresses", len(f.gossips), len(f.targets))
	}
	ctx, cancel := context.WithTimeout(ctx, f.duration)
	defer cancel()
	dials.from = f.from
	if f.tls {
		// An attacker checks nothing and proves nothing.
		dials.tls = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13} //nolint:gosec // an attacker's
	}
	var wg sync.WaitGroup
	for i, t := range f.targets {
		g := f
		g.data, g.gossip = t, ""
		if len(f.gossips) > 0 {
			g.gossip = f.gossips[i]
		}
		wg.Go(func() { rounds(ctx, g, len(f.targets) > 1) })
	}
	wg.Wait()
	return nil
}

// rounds attacks f.data, round after round, until ctx ends.
func rounds(ctx context.Context, f flags, name bool) {
	for round := 1; ctx.Err() == nil; round++ {
		start := time.Now()
		var out []string
		for _, a := range []struct {
			name string
			do   func(context.Context, flags) string
		}{
			{"slow", slow}, {"half", half}, {"nested", nested}, {"forged", forged}, {"big", big}, {"gossip", gossip},
			{"full", full}, {"engine", engine}, {"silent", silent}, {"storm", storm},
		} {
			if ctx.Err() != nil {
				break
			}
			out = append(out, a.name+": "+a.do(ctx, f))
		}
		who := ""
		if name {
			who = f.data + " "
		}
		fmt.Printf("%sround %d (%v): %v\n", who, round, time.Since(start).Round(time.Millisecond), out)
	}
}

// dialer opens connections to the node, from the --from addresses in
// turn, over TLS with --tls.
type dialer struct {
	from []string
	next atomic.Uint64
	tls  *tls.Config
}

func (d *dialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	nd := net.Dialer{Timeout: 5 * time.Second}
	if len(d.from) > 0 {
		ip := d.from[int(d.next.Add(1))%len(d.from)]
		nd.LocalAddr = &net.TCPAddr{IP: net.ParseIP(ip)}
	}
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil || d.tls == nil {
		return c, err
	}
	tc := tls.Client(c, d.tls)
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

var dials dialer

// hold opens n connections, writes b on each, and waits (until ctx ends
// or 45 s) for the node to close them; it reports how many it closed.
func hold(ctx context.Context, addr string, n int, b []byte) string {
	var closed, failed atomic.Int64
	var wg sync.WaitGroup
	for range n {
		c, err := dials.dial(ctx, addr)
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
	opts := []transport.Option{transport.WithMaxFrame(32 << 20)}
	if dials.tls != nil {
		opts = append(opts, transport.WithTLS(dials.tls))
	}
	return transport.DialConn(ctx, addr, opts...)
}

func nested(ctx context.Context, f flags) string {
	c, err := dial(ctx, f.data)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, herr := c.Call(cctx, protocol.OpHello, nestedMsgpack(12<<20))
	req, _ := msgpack.Marshal([]any{"UPDATE", "nested", nestedMsgpack(12 << 20)})
	_, rerr := c.Call(cctx, protocol.OpRequest, req)
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
	_, herr := c.Call(cctx, protocol.OpHello, h)
	p, _ := msgpack.Marshal(map[string]any{"m": make([]byte, 32)})
	_, perr := c.Call(cctx, protocol.OpHelloProof, p)
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
			_, err := c.Call(cctx, protocol.OpRequest, payload)
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

// full sends, on each of --full connections, a frame of 16 MiB less 64
// bytes but for its last byte: a node that buffers what strangers send
// holds it all until the frame timeout.
func full(ctx context.Context, f flags) string {
	const payload = 16<<20 - 64
	b := wire.AppendFrameHeader(bytes.Clone(preface), wire.KindCall, 1, protocol.OpAuth, payload)
	b = append(b, make([]byte, payload-1)...)
	var sent, closed, failed atomic.Int64
	var wg sync.WaitGroup
	for range f.full {
		c, err := dials.dial(ctx, f.data)
		if err != nil {
			failed.Add(1)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
			defer stop()
			_ = c.SetDeadline(time.Now().Add(45 * time.Second))
			n, _ := c.Write(b)
			sent.Add(int64(n))
			if _, err := io.Copy(io.Discard, c); !isTimeout(err) {
				closed.Add(1)
			}
		}()
	}
	wg.Wait()
	return fmt.Sprintf("%d of %d closed by the node, %.0f MB written (%d dials failed)", closed.Load(), f.full, float64(sent.Load())/(1<<20), failed.Load())
}

// engine sends an engine call on each of --engine connections that said no
// hello, and waits up to 10 s for its answer.
func engine(ctx context.Context, f flags) string {
	b := wire.AppendFrame(bytes.Clone(preface), wire.KindCall, 1, protocol.OpEngine, make([]byte, 4000))
	seen := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range f.engine {
		wg.Add(1)
		go func() {
			defer wg.Done()
			what := engineCall(ctx, f.data, b)
			mu.Lock()
			seen[what]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return fmt.Sprint(seen)
}

func engineCall(ctx context.Context, addr string, b []byte) string {
	c, err := dials.dial(ctx, addr)
	if err != nil {
		return "dial failed"
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(b); err != nil {
		return "write failed"
	}
	got, err := answer(c)
	switch {
	case ctx.Err() != nil:
		return "cut short by --duration"
	case isTimeout(err):
		return "unanswered in 10 s"
	case err != nil:
		return "closed unanswered"
	case got.Kind != wire.KindError:
		return "answered " + got.Kind.String()
	}
	code, _, _, _ := wire.ParseErrorPayload(got.Payload)
	return errs.Code(code).String()
}

// answer reads the node's preface and its first frame.
func answer(c net.Conn) (wire.Frame, error) {
	var f wire.Frame
	if _, err := io.ReadFull(c, make([]byte, len(preface))); err != nil {
		return f, err
	}
	return f, wire.NewReader(c, 1<<20).Next(&f)
}

// silent opens --silent connections per source address that each say
// hello (a member's ID, a nonce) and nothing after, and holds them until
// the node closes them (or 45 s): it reports how many were answered,
// refused, and how long the longest stayed open.
func silent(ctx context.Context, f flags) string {
	nonce := make([]byte, 32)
	h, _ := msgpack.Marshal(map[string]any{"id": f.claim, "n": nonce})
	b := wire.AppendFrame(bytes.Clone(preface), wire.KindCall, 1, protocol.OpHello, h)
	n := f.silent * max(1, len(f.from))
	var answered, refused, closed atomic.Int64
	var longest atomic.Int64
	var wg sync.WaitGroup
	var pace <-chan time.Time
	if f.silentPace > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / (f.silentPace * float64(max(1, len(f.from))))))
		defer t.Stop()
		pace = t.C
	}
	for range n {
		if pace != nil {
			select {
			case <-pace:
			case <-ctx.Done():
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dials.dial(ctx, f.data)
			if err != nil {
				refused.Add(1)
				return
			}
			defer c.Close()
			stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
			defer stop()
			_ = c.SetDeadline(time.Now().Add(45 * time.Second))
			if _, err := c.Write(b); err != nil {
				refused.Add(1)
				return
			}
			if got, err := answer(c); err != nil || got.Kind != wire.KindReply {
				refused.Add(1)
				return
			}
			answered.Add(1)
			at := time.Now()
			if _, err := io.Copy(io.Discard, c); !isTimeout(err) {
				closed.Add(1)
				for d, old := int64(time.Since(at)), longest.Load(); d > old && !longest.CompareAndSwap(old, d); old = longest.Load() {
				}
			}
		}()
	}
	wg.Wait()
	return fmt.Sprintf("%d hellos answered, %d refused, %d closed by the node (the longest %v after its hello)",
		answered.Load(), refused.Load(), closed.Load(), time.Duration(longest.Load()).Round(time.Millisecond))
}

// storm opens --storm connections one after another (from the --from
// addresses in turn), each sending the preface and closing at once: it
// reports how many the node accepted and how fast they went.
func storm(ctx context.Context, f flags) string {
	start := time.Now()
	var ok, failed int
	for range f.storm {
		if ctx.Err() != nil {
			break
		}
		c, err := dials.dial(ctx, f.data)
		if err != nil {
			failed++
			continue
		}
		if _, err := c.Write(preface); err == nil {
			ok++
		} else {
			failed++
		}
		c.Close()
	}
	d := time.Since(start)
	return fmt.Sprintf("%d opened and closed in %v (%.0f/s), %d failed", ok, d.Round(time.Millisecond), float64(ok)/max(d.Seconds(), 1e-3), failed)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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
