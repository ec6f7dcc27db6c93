package transport

import (
	"context"
	"sync/atomic"
	"testing"
)

// These benchmarks run client and server in one process over loopback:
// they guide work on the hot paths. The speed claims come from fero-bench,
// which runs them as separate processes beside the raw echo.

func benchServer(b *testing.B) (*Server, *atomic.Int64) {
	var count atomic.Int64
	mux := NewMux()
	mux.HandleFunc(1, func(*Request) { count.Add(1) })
	mux.HandleFunc(2, func(r *Request) { _ = r.Reply(r.Payload()) })
	s, err := Listen("127.0.0.1:0", mux)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, &count
}

func benchPeer(b *testing.B, addr string) *Peer {
	p, err := Dial(context.Background(), addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// BenchmarkSendPipelined: one-way 100-byte messages, as fast as the
// outbox takes them; the final Call waits until the server handled all.
func BenchmarkSendPipelined(b *testing.B) {
	s, _ := benchServer(b)
	p := benchPeer(b, s.Addr().String())
	ctx := context.Background()
	payload := make([]byte, 100)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := p.Send(ctx, 1, payload); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := p.Call(ctx, 2, nil); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkGoPipelined: request→reply with up to 1000 calls in flight.
func BenchmarkGoPipelined(b *testing.B) {
	s, _ := benchServer(b)
	p := benchPeer(b, s.Addr().String())
	ctx := context.Background()
	payload := make([]byte, 100)
	window := make(chan struct{}, 1000)
	done := func([]byte, error) { <-window }
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		window <- struct{}{}
		if err := p.Go(ctx, 2, payload, done); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < cap(window); i++ {
		window <- struct{}{}
	}
}

// BenchmarkCallRoundTrip: sequential request→reply, the unloaded latency
// path; allocs/op is the allocation cost of one round trip, both ends.
func BenchmarkCallRoundTrip(b *testing.B) {
	s, _ := benchServer(b)
	p := benchPeer(b, s.Addr().String())
	ctx := context.Background()
	payload := make([]byte, 100)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.Call(ctx, 2, payload); err != nil {
			b.Fatal(err)
		}
	}
}
