package storage

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The comparison's shape is fero's write path: 271 partitions, keys of
// about 10 bytes, values of 100. doc.go says how to run it.
const (
	benchPartitions = 271
	benchValueSize  = 100
)

var (
	benchEntries = flag.Int("storage.entries", 1_000_000, "entries written by the space and recovery benchmarks")
	benchKeys    = flag.Int("storage.keys", 1000, "distinct keys per partition in the space benchmark (sets the snapshot's size)")
)

var benchImpls = []impl{
	{"seglog", func(dir string) (Store, error) { return OpenSegmentLog(dir, Options{}) }},
	{"pebble", func(dir string) (Store, error) { return OpenPebble(dir, Options{}) }},
}

var benchDirOnce sync.Once

// benchDir returns a fresh directory for one benchmark's store, under
// $FERO_STORAGE_BENCH_DIR or else os.TempDir(); it refuses a file system
// in memory, where fsync costs nothing and the figures would mean nothing.
func benchDir(b *testing.B) string {
	b.Helper()
	base := os.Getenv("FERO_STORAGE_BENCH_DIR")
	if base == "" {
		base = os.TempDir()
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		b.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(base, &st); err != nil {
		b.Fatal(err)
	}
	const tmpfsMagic, ramfsMagic = 0x01021994, 0x858458f6
	if st.Type == tmpfsMagic || st.Type == ramfsMagic {
		b.Fatalf("%s is in memory (fsync is free); set FERO_STORAGE_BENCH_DIR to a directory on the disk under test", base)
	}
	benchDirOnce.Do(func() { b.Logf("storage benchmarks write under %s (file system type %#x)", base, st.Type) })
	dir, err := os.MkdirTemp(base, "fero-storage-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func openBench(b *testing.B, im impl, dir string) Store {
	b.Helper()
	s, err := im.open(dir)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

var (
	benchKeyOnce sync.Once
	benchKeyList [][]string // [partition][k]: 10 bytes each
)

// benchEntry fills e as the write of key k of partition p at offset o.
func benchEntry(e *Entry, p, k int, o uint64, value []byte) {
	benchKeyOnce.Do(func() {
		benchKeyList = make([][]string, benchPartitions)
		for p := range benchKeyList {
			benchKeyList[p] = make([]string, *benchKeys)
			for k := range benchKeyList[p] {
				benchKeyList[p][k] = fmt.Sprintf("k%04d.%04d", p, k)
			}
		}
	})
	*e = Entry{Epoch: Epoch{Term: 1, Owner: "10.0.0.1:7946"}, Offset: o, Type: 2, Key: benchKeyList[p][k], Value: value}
}

func dirSize(b *testing.B, dir string) int64 {
	b.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n += info.Size()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkGroupCommit measures the node's write path (internal/node's
// disk.write): writers each own a share of the partitions and hand one
// entry at a time to the next round, then wait for the round to finish.
// One goroutine runs the rounds, like the node's engine loop: it takes
// every write queued, appends them (one Append per partition touched),
// then, under "group", calls Store.Sync once for the round, and under
// "never" Store.Flush, before it lets the round's writers go on. Writes
// queued while a round's fsync runs go into the next round. One op is one
// write.
func BenchmarkGroupCommit(b *testing.B) {
	for _, im := range benchImpls {
		for _, mode := range []SyncMode{SyncEachGroup, SyncNever} {
			for _, writers := range []int{1, 16, 256} {
				b.Run(fmt.Sprintf("%s/%s/writers=%d", im.name, mode, writers), func(b *testing.B) {
					benchGroupCommit(b, im, mode, writers)
				})
			}
		}
	}
}

// roundWrite is one writer's write, queued for the next round.
type roundWrite struct {
	p    int
	e    Entry
	done chan error // the writer's own, buffered: the round's result
}

// rounds runs the write rounds of BenchmarkGroupCommit.
type rounds struct {
	s    Store
	mode SyncMode
	wake chan struct{}
	stop chan struct{}

	mu      sync.Mutex
	pending []*roundWrite // queued for the next round

	n       int // rounds run (one Sync or Flush each)
	byPart  [][]Entry
	touched []int
}

func (r *rounds) submit(w *roundWrite) error {
	r.mu.Lock()
	r.pending = append(r.pending, w)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return <-w.done
}

func (r *rounds) run() {
	var taken []*roundWrite
	for {
		r.mu.Lock()
		taken, r.pending = r.pending, taken[:0]
		r.mu.Unlock()
		if len(taken) == 0 {
			select {
			case <-r.stop:
				return
			case <-r.wake:
			}
			continue
		}
		err := r.round(taken)
		for _, w := range taken {
			w.done <- err
		}
		clear(taken)
	}
}

// round writes one round: the writes grouped by partition, in the order
// they were queued, then one Sync (group) or Flush (never).
func (r *rounds) round(ws []*roundWrite) error {
	r.n++
	for _, w := range ws {
		if len(r.byPart[w.p]) == 0 {
			r.touched = append(r.touched, w.p)
		}
		r.byPart[w.p] = append(r.byPart[w.p], w.e)
	}
	var err error
	for _, p := range r.touched {
		if err == nil {
			err = r.s.Append(p, r.byPart[p])
		}
		clear(r.byPart[p])
		r.byPart[p] = r.byPart[p][:0]
	}
	r.touched = r.touched[:0]
	if err != nil {
		return err
	}
	if r.mode == SyncEachGroup {
		return r.s.Sync()
	}
	return r.s.Flush()
}

func benchGroupCommit(b *testing.B, im impl, mode SyncMode, writers int) {
	s := openBench(b, im, benchDir(b))
	defer s.Close()
	r := &rounds{s: s, mode: mode, wake: make(chan struct{}, 1), stop: make(chan struct{}), byPart: make([][]Entry, benchPartitions)}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		r.run()
	}()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 0))
			value := make([]byte, benchValueSize)
			for i := range value {
				value[i] = byte(rng.Uint32())
			}
			var owned []int
			for p := w; p < benchPartitions; p += writers {
				owned = append(owned, p)
			}
			last := make([]uint64, len(owned))
			rw := &roundWrite{done: make(chan error, 1)}
			for i := 0; ; i++ {
				if next.Add(1) > int64(b.N) {
					return
				}
				j := i % len(owned)
				last[j]++
				rw.p = owned[j]
				benchEntry(&rw.e, owned[j], rng.IntN(*benchKeys), last[j], value)
				if err := r.submit(rw); err != nil {
					failed.Store(&err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(r.stop)
	<-ran
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "writes/s")
	if r.n > 0 {
		unit, units := "fsync", "fsyncs"
		if mode != SyncEachGroup {
			unit, units = "flush", "flushes"
		}
		b.ReportMetric(float64(r.n)/elapsed.Seconds(), units+"/s")
		b.ReportMetric(float64(b.N)/float64(r.n), "writes/"+unit)
	}
}

// fill writes n entries round-robin over the partitions, in appends of
// 16 (a driver round's share of one partition), with a Sync every 256
// appends. It returns the key and value bytes written and each
// partition's state (its keys' latest values), which the space benchmark
// snapshots.
func fill(b *testing.B, s Store, n int) (written int64, state []map[string][]byte) {
	b.Helper()
	rng := rand.New(rand.NewPCG(18, 18))
	state = make([]map[string][]byte, benchPartitions)
	for p := range state {
		state[p] = map[string][]byte{}
	}
	last := make([]uint64, benchPartitions)
	batch := make([]Entry, 16)
	for i, p := 0, 0; i < n; p = (p + 1) % benchPartitions {
		k := min(len(batch), n-i)
		for j := range k {
			value := make([]byte, benchValueSize)
			for v := range value {
				value[v] = byte(rng.Uint32())
			}
			benchEntry(&batch[j], p, rng.IntN(*benchKeys), last[p]+uint64(j)+1, value)
			written += int64(entrySize(&batch[j]))
			state[p][batch[j].Key] = value
		}
		if err := s.Append(p, batch[:k]); err != nil {
			b.Fatal(err)
		}
		last[p] += uint64(k)
		i += k
		if (i/len(batch))%256 == 0 {
			if err := s.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	return written, state
}

// settledSize is dir's size once it stops changing: pebble deletes the
// files a compaction made obsolete in the background.
func settledSize(b *testing.B, dir string) int64 {
	size := dirSize(b, dir)
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		next := dirSize(b, dir)
		if next == size {
			break
		}
		size = next
	}
	return size
}

func encodeState(m map[string][]byte) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []byte
	for _, k := range keys {
		out = append(append(out, k...), m[k]...)
	}
	return out
}

// BenchmarkSpace writes -storage.entries entries, snapshots every
// partition at its last offset (the state: each key's latest value) and
// reports the bytes on disk per key and value byte written: before the
// snapshots, after them, and after pebble's memtable flush and full
// manual compaction (the segment log deletes whole segments at once; its
// figure repeats).
// state/written is the floor: the snapshots alone.
func BenchmarkSpace(b *testing.B) {
	for _, im := range benchImpls {
		b.Run(im.name, func(b *testing.B) {
			for range b.N {
				dir := benchDir(b)
				s := openBench(b, im, dir)
				written, state := fill(b, s, *benchEntries)
				before := dirSize(b, dir)
				var stateBytes int64
				for p := range benchPartitions {
					_, last, err := s.Bounds(p)
					if err != nil {
						b.Fatal(err)
					}
					st := encodeState(state[p])
					stateBytes += int64(len(st))
					if err := s.SaveSnapshot(p, Snapshot{Base: last, Epoch: Epoch{Term: 1, Owner: "10.0.0.1:7946"}, State: st}); err != nil {
						b.Fatal(err)
					}
				}
				afterSnap := dirSize(b, dir)
				if ps, ok := s.(*pebbleStore); ok {
					if err := ps.db.Flush(); err != nil {
						b.Fatal(err)
					}
					if err := ps.db.Compact(context.Background(), []byte{0}, []byte{0xff}, true); err != nil {
						b.Fatal(err)
					}
				}
				afterCompact := settledSize(b, dir)
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				w := float64(written)
				b.ReportMetric(float64(before)/w, "disk/written")
				b.ReportMetric(float64(afterSnap)/w, "disk/written-after-snap")
				b.ReportMetric(float64(afterCompact)/w, "disk/written-after-compact")
				b.ReportMetric(float64(stateBytes)/w, "state/written")
			}
		})
	}
}

// BenchmarkRecovery writes -storage.entries entries, closes the store,
// and times Open. One op is one Open.
func BenchmarkRecovery(b *testing.B) {
	for _, im := range benchImpls {
		b.Run(im.name, func(b *testing.B) {
			dir := benchDir(b)
			s := openBench(b, im, dir)
			fill(b, s, *benchEntries)
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			var rec Recovery
			for range b.N {
				s := openBench(b, im, dir)
				b.StopTimer()
				rec = s.Recovery()
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			if rec.Entries != *benchEntries {
				b.Fatalf("recovered %d entries, want %d", rec.Entries, *benchEntries)
			}
			b.ReportMetric(float64(rec.Duration.Microseconds())/1000, "ms/open")
		})
	}
}
