package fero

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fero-go/fero/internal/wire"
)

// BenchmarkSetAsync keeps acked UPDATEs of 100-byte values in flight from
// a client node to a server node, both in this process (real loopback):
// the cost and the allocations of a write over both ends, the owner's
// commit and the client's copy included. fero-bench measures the same path
// across processes; this is for profiling it (-cpuprofile, -memprofile).
func BenchmarkSetAsync(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, keys := benchPair(ctx, b)
	value := wire.AppendBin(nil, make([]byte, 100))

	var failed atomic.Int64
	var wg sync.WaitGroup
	b.SetBytes(100)
	b.ReportAllocs()
	b.ResetTimer()
	wg.Add(b.N)
	for i := range b.N {
		err := cl.SetAsync(ctx, Change{Type: Update, Key: keys[i%len(keys)], Value: value}, Ack, func(err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	b.StopTimer()
	require.Zero(b, failed.Load(), "writes failed")
}

// BenchmarkCall makes sequential UPDATE requests from a client node to the
// owner, both in this process: the unloaded round trip fero-bench's
// roundtrip scenario measures across processes, for profiling its latency
// and counting its allocations (which set how often GC runs under it).
func BenchmarkCall(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, keys := benchPair(ctx, b)
	value := msgpack.RawMessage(wire.AppendBin(nil, make([]byte, 100)))
	var reply msgpack.RawMessage
	b.SetBytes(100)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := cl.Call(ctx, VerbUpdate, keys[i%len(keys)], value, &reply); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSet makes sequential acked UPDATEs from a client node, both
// nodes in this process: the unloaded round trip of a write that waits
// for its commit (the engine's path, where BenchmarkCall's request is
// answered by the owner's handler).
func BenchmarkSet(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, keys := benchPair(ctx, b)
	value := wire.AppendBin(nil, make([]byte, 100))
	b.SetBytes(100)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := cl.Set(ctx, Change{Type: Update, Key: keys[i%len(keys)], Value: value}, Ack); err != nil {
			b.Fatal(err)
		}
	}
}

// benchPair opens a server node and a client node of it in this process,
// and writes every hundredth of the keys it returns once, so the owner has
// synced every partition before the measurement.
func benchPair(ctx context.Context, b *testing.B) (*Resource, []string) {
	b.Helper()
	base := []NodeOption{WithBind("127.0.0.1:0"), WithPreset(PresetLocal), WithoutMulticast()}
	if os.Getenv("FERO_BENCH_METRICS") != "" {
		// Each node's Prometheus metrics on (WithMetrics): run with and
		// without to see what they cost.
		base = append(base, WithMetrics(prometheus.NewRegistry()))
	}
	switch os.Getenv("FERO_BENCH_TRACE") {
	case "never":
		// A tracer provider whose sampler records nothing: what tracing
		// costs when it is on but samples none of these requests.
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		base = append(base, WithTracerProvider(tp))
	case "always":
		// Every request recorded, and the spans dropped by a no-op
		// exporter: the cost of the spans themselves.
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()), sdktrace.WithSampler(sdktrace.AlwaysSample()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		base = append(base, WithTracerProvider(tp))
	}
	srv, err := Open(ctx, "bench", append(base, WithID("server"))...)
	require.NoError(b, err)
	b.Cleanup(func() { srv.Close() })
	cl, err := Open(ctx, "bench", append(base, WithID("client"), Client(), WithSeeds(srv.GossipAddr()))...)
	require.NoError(b, err)
	b.Cleanup(func() { cl.Close() })
	require.NoError(b, cl.WaitServers(ctx, 1))

	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	for i := 0; i < len(keys); i += 100 { // the owner has synced every partition
		require.NoError(b, retry(ctx, func() error { return cl.Update(ctx, keys[i], 0) }))
	}
	return cl, keys
}
