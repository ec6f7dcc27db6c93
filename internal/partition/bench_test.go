package partition

import (
	"testing"

	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/wire"
)

type nopState struct{}

func (nopState) Check(int, Entry) error        { return nil }
func (nopState) Apply(int, Entry)              {}
func (nopState) Snapshot(int) ([]byte, error)  { return nil, nil }
func (nopState) Restore(p int, b []byte) error { return nil }

func benchMap(b *testing.B, ids ...string) *ring.Map {
	r, err := ring.New(ring.WithPartitions(1))
	if err != nil {
		b.Fatal(err)
	}
	ms := make([]ring.Member, len(ids))
	for i, id := range ids {
		ms[i] = ring.Member{ID: id}
	}
	m, err := r.Build(ms)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkProposeReady measures an owner committing writes and batching
// them for two copies: batch writes per Ready.
func BenchmarkProposeReady(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(map[int]string{1: "batch=1", 64: "batch=64"}[batch], func(b *testing.B) {
			e, err := New("a", nopState{})
			if err != nil {
				b.Fatal(err)
			}
			if err := e.SetMap(benchMap(b, "a"), []string{"x", "y"}); err != nil {
				b.Fatal(err)
			}
			e.Ready()
			e.Advance()
			req := Request{Type: wire.RecordUpdate, Key: "users.42", Value: val("a 100-byte-ish value ........................................................................"), Wait: WaitAck, Token: 1}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := e.Propose(req); err != nil {
					b.Fatal(err)
				}
				if (i+1)%batch == 0 {
					e.Ready()
					e.Advance()
				}
			}
		})
	}
}

// BenchmarkStepCommit measures a copy applying commits: entries per
// Commit message, one Ready (with its CommitAck) per message.
func BenchmarkStepCommit(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(map[int]string{1: "batch=1", 64: "batch=64"}[batch], func(b *testing.B) {
			e, err := New("x", nopState{}, WithClient())
			if err != nil {
				b.Fatal(err)
			}
			if err := e.SetMap(benchMap(b, "a"), []string{"x"}); err != nil {
				b.Fatal(err)
			}
			ep := Epoch{Term: 1, Owner: "a"}
			if err := e.Step("a", ClusterID{}, &EpochStart{Epoch: ep}); err != nil {
				b.Fatal(err)
			}
			e.Ready()
			e.Advance()
			v := val("a 100-byte-ish value ........................................................................")
			msgs := make([]*Commit, (b.N+batch-1)/batch)
			for i := range msgs {
				es := make([]Entry, batch)
				for j := range es {
					es[j] = Entry{Epoch: ep, Offset: uint64(i*batch + j + 1), Type: wire.RecordUpdate, Key: "users.42", Value: v}
				}
				msgs[i] = &Commit{Entries: es}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for _, m := range msgs {
				if err := e.Step("a", ClusterID{}, m); err != nil {
					b.Fatal(err)
				}
				e.Ready()
				e.Advance()
			}
			b.StopTimer()
			if got := e.Status(0).Position.Offset; got != uint64(len(msgs)*batch) {
				b.Fatalf("applied %d", got)
			}
		})
	}
}
