package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The tests change the process's GC percent, so none runs in parallel.

const mib = 1 << 20

func TestHeadroomPercent(t *testing.T) {
	for _, c := range []struct {
		name                       string
		live, scan, stacks, global uint64
		want                       int
	}{
		{"a small heap gets the floor, past GOGC", 10 * mib, 5 * mib, 0, 0, 320},
		{"a heap of pointers below the floor gets the floor", 16 * mib, 15 * mib, 0, 0, 200},
		{"a tiny heap: Go's least goal stays at live + floor", 1 * mib, 1 * mib, 0, 0, 825},
		{"a mostly pointer-free heap gets the floor", 256 * mib, 8 * mib, 0, 0, 12},
		{"a heap of pointers keeps about GOGC", 256 * mib, 240 * mib, 4 * mib, 1 * mib, 93},
		{"stacks and globals count as scanned", 256 * mib, 8 * mib, 40 * mib, 0, 16},
		{"never below one percent", 1 << 40, 0, 0, 0, 1},
		{"an empty heap", 0, 0, 0, 0, 800},
		{"a heap of pointers at the floor keeps GOGC", 32 * mib, 32 * mib, 0, 0, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, headroomPercent(c.live, c.scan, c.stacks, c.global, 100))
		})
	}
}

func read(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// collectUntil runs collections until cond holds (the tuner adjusts from
// a finalizer, after the collection that ran it), or fails after 20 s.
func collectUntil(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), msg)
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// TestPointerFreeHeapGetsTheFloor: with 128 MiB of byte blocks live (a
// server's history), Go's default would let the heap grow to about twice
// that before collecting; the tuner lets it grow by about Floor. The last
// stop puts GOGC's percent back.
func TestPointerFreeHeapGetsTheFloor(t *testing.T) {
	require.Equal(t, 100, gcPercent())
	blocks := make([][]byte, 128)
	for i := range blocks {
		blocks[i] = make([]byte, mib)
	}
	stop, on := Start()
	require.True(t, on)
	stop2, on2 := Start() // a second node in the process shares it
	require.True(t, on2)
	collectUntil(t, func() bool { return cur.adjustments.Load() > 0 }, "the tuner never adjusted")
	runtime.GC() // a goal computed with the tuned percent
	live, goal := read("/gc/heap/live:bytes"), read("/gc/heap/goal:bytes")
	t.Logf("live %d MiB, goal %d MiB, GC percent %d", live/mib, goal/mib, gcPercent())
	require.GreaterOrEqual(t, live, uint64(128*mib))
	require.Less(t, goal, live+2*Floor, "the heap may still grow by about its live size")
	require.Less(t, gcPercent(), 50)

	stop()
	require.Less(t, gcPercent(), 50, "another user still holds the tuner")
	stop2()
	stop2() // a second call does nothing
	require.Equal(t, 100, gcPercent())
	require.Nil(t, cur)
	runtime.KeepAlive(blocks)
}

// TestSmallHeapGetsTheFloor: a process with a few megabytes live (a
// lightly loaded node) would collect every few megabytes allocated at
// GOGC=100; the tuner lets its heap grow by about Floor, beyond what GOGC
// allows, and no further.
func TestSmallHeapGetsTheFloor(t *testing.T) {
	require.Equal(t, 100, gcPercent())
	runtime.GC()
	stop, on := Start()
	require.True(t, on)
	defer stop()
	// At GOGC=100 a small heap's percent would stay 100 and the tuner
	// never adjust: give it a few seconds of collections, then look.
	for deadline := time.Now().Add(5 * time.Second); cur.adjustments.Load() == 0 && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	runtime.GC() // a goal computed with the tuned percent
	live, goal := read("/gc/heap/live:bytes"), read("/gc/heap/goal:bytes")
	t.Logf("live %d KiB, goal %d KiB, GC percent %d", live>>10, goal>>10, gcPercent())
	require.Less(t, live, uint64(Floor/2), "this test needs a small heap")
	require.Greater(t, gcPercent(), 100)
	require.GreaterOrEqual(t, goal, live+Floor-2*mib, "the heap may grow by about Floor")
	require.LessOrEqual(t, goal, live+Floor+2*mib, "and not much more")
}

// TestProgramsPercentStands: a tuner does not start where GOGC is set or
// the program set its own percent, and steps aside, for good, when the
// percent it set is changed under it.
func TestProgramsPercentStands(t *testing.T) {
	t.Run("GOGC set", func(t *testing.T) {
		t.Setenv("GOGC", "100")
		stop, on := Start()
		require.False(t, on)
		stop()
		require.Nil(t, cur)
	})
	t.Run("percent set before", func(t *testing.T) {
		defer debug.SetGCPercent(debug.SetGCPercent(150))
		stop, on := Start()
		require.False(t, on)
		stop()
		require.Equal(t, 150, gcPercent())
	})
	t.Run("percent set after", func(t *testing.T) {
		blocks := make([][]byte, 128)
		for i := range blocks {
			blocks[i] = make([]byte, mib)
		}
		stop, on := Start()
		require.True(t, on)
		tn := cur
		collectUntil(t, func() bool { return tn.adjustments.Load() > 0 }, "the tuner never adjusted")
		debug.SetGCPercent(77)
		defer debug.SetGCPercent(defaultPercent)
		collectUntil(t, tn.stopped.Load, "the tuner did not step aside")
		n := tn.adjustments.Load()
		runtime.GC()
		runtime.GC()
		require.Equal(t, 77, gcPercent())
		require.Equal(t, n, tn.adjustments.Load())
		again, on := Start()
		require.False(t, on, "a new user joins the tuner that stepped aside")
		again()
		stop()
		require.Equal(t, 77, gcPercent(), "the last stop leaves the program's percent")
		runtime.KeepAlive(blocks)
	})
}
