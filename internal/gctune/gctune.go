// Package gctune sizes the garbage collector's headroom by the part of the
// heap the collector has to scan, not by the whole heap.
//
// Go starts a collection when the heap has grown by GOGC percent of what
// the last one found live, on the grounds that a collection costs in
// proportion to that live heap. A server's heap is mostly its history:
// byte blocks and slot arrays without a pointer in them, which a
// collection marks in a few steps each and never scans. With GOGC=100 the
// heap still grows to twice that history before the next collection, so
// the process holds about twice the memory it uses. Scaling the headroom
// by the scannable heap (plus stacks and globals) keeps the collector's
// work per byte allocated about where GOGC puts it, and lets a mostly
// pointer-free heap stay near its live size.
//
// After every collection the tuner sets the GC percent so that the next
// collection starts once the heap has grown by
//
//	max(Floor, (scannable heap + stacks + globals) × GOGC / 100)
//
// Where the scannable part alone would ask for Floor or more, that is
// never more than GOGC would allow. Where it would ask for less, the heap
// grows by Floor, even past GOGC's headroom: a heap of a few megabytes
// (a lightly loaded node) would otherwise collect every few megabytes
// allocated, and every collection in a request's way shows in the
// latency tail. A pointer-free heap larger than Floor gets Floor, less
// than GOGC gives it; a small heap gets Floor, more than GOGC gives it,
// at a cost of at most Floor of memory. The tuner is
// process-wide and reference-counted: every Start is paired with a stop,
// and the GC percent in effect at the first Start comes back at the last
// stop. It stays off where GOGC is set in the environment (the operator's
// word) or the GC percent is not the default 100 when it starts (the
// program's), and it steps aside for good, leaving the percent alone, once
// it finds the percent changed by someone else.
package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Floor is the least headroom the tuner leaves: 32 MiB.
const Floor = 32 << 20

// goMinHeap is Go's least heap goal at GOGC=100 (4 MiB; the runtime
// scales it by the GC percent). A percent above 100 raises it too, so a
// small heap's percent is capped to keep that minimum at live + Floor.
const goMinHeap = 4 << 20

// defaultPercent is Go's GC percent when GOGC is not set.
const defaultPercent = 100

var (
	mu    sync.Mutex
	users int
	cur   *tuner // the running tuner; nil when off
)

// Start begins tuning, or joins the tuning already running, and returns
// the function that ends this user's share of it. It reports whether the
// tuner runs: false where GOGC is set in the environment or the program
// has set its own GC percent.
func Start() (stop func(), on bool) {
	mu.Lock()
	defer mu.Unlock()
	if cur == nil {
		if _, set := os.LookupEnv("GOGC"); set {
			return func() {}, false
		}
		if gcPercent() != defaultPercent {
			return func() {}, false
		}
		cur = &tuner{base: defaultPercent, last: defaultPercent}
		cur.arm()
	}
	users++
	t := cur
	on = !t.stopped.Load()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			if users--; users == 0 && cur == t {
				if !t.stopped.Load() {
					debug.SetGCPercent(t.base)
				}
				t.stopped.Store(true)
				cur = nil
			}
		})
	}, on
}

// gcPercent reads the GC percent in effect.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	return int(s[0].Value.Uint64())
}

// tuner re-arms a finalizer on a fresh sentinel after every collection,
// the runtime's only hook that runs once per cycle.
type tuner struct {
	base        int // the GC percent the headroom is scaled by
	stopped     atomic.Bool
	samples     [5]metrics.Sample
	last        int          // the percent last set (or found, at the start)
	adjustments atomic.Int64 // percents set, for tests
}

// sentinel is what the finalizer hangs on. It holds a pointer, so the
// tiny allocator (whose blocks may outlive their objects, and so never
// run their finalizers) does not take it.
type sentinel struct{ t *tuner }

func (t *tuner) arm() {
	runtime.SetFinalizer(&sentinel{t: t}, func(s *sentinel) {
		if s.t.stopped.Load() {
			return
		}
		s.t.adjust()
		s.t.arm()
	})
}

// adjust sets the GC percent for the next cycle from what the last one
// found.
func (t *tuner) adjust() {
	p, now := t.percent()
	mu.Lock()
	defer mu.Unlock()
	switch {
	case t.stopped.Load():
		return // the last stop has put the base percent back
	case now != t.last:
		// The program or an operator set the percent since: theirs
		// stands, and the last stop leaves it in place.
		t.stopped.Store(true)
		return
	case p == t.last:
		return
	}
	debug.SetGCPercent(p)
	t.last = p
	t.adjustments.Add(1)
}

// percent computes the GC percent that gives the headroom the package
// comment describes, and reads the percent in effect now.
func (t *tuner) percent() (want, now int) {
	s := t.samples[:]
	s[0].Name = "/gc/heap/live:bytes"
	s[1].Name = "/gc/scan/heap:bytes"
	s[2].Name = "/gc/scan/stack:bytes"
	s[3].Name = "/gc/scan/globals:bytes"
	s[4].Name = "/gc/gogc:percent"
	metrics.Read(s)
	for _, x := range s {
		if x.Value.Kind() != metrics.KindUint64 {
			return t.last, t.last // a runtime without these metrics: leave it be
		}
	}
	live, scan, stacks, globals := s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64(), s[3].Value.Uint64()
	return headroomPercent(live, scan, stacks, globals, t.base), int(s[4].Value.Uint64())
}

// headroomPercent is the GC percent whose headroom over live (Go's goal is
// live + (live + stacks + globals) × percent / 100, and at least
// goMinHeap × percent / 100) is the larger of Floor and the scannable
// memory's share at base percent. It is at least 1, and at most base
// unless Floor decides: then at most what keeps Go's least goal at
// live + Floor.
func headroomPercent(live, scan, stacks, globals uint64, base int) int {
	roots := stacks + globals
	scanned := (scan + roots) * uint64(base) / 100
	want := max(uint64(Floor), scanned)
	p := want * 100 / max(live+roots, 1)
	limit := uint64(base)
	if scanned < Floor {
		limit = max(limit, (live+Floor)*100/goMinHeap)
	}
	return int(min(max(p, 1), limit))
}

// Running reports whether a tuner is adjusting the GC percent now.
func Running() bool {
	mu.Lock()
	defer mu.Unlock()
	return cur != nil && !cur.stopped.Load()
}
