package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"
)

// Clock is the time source of the open-loop generator. Times are offsets
// from an arbitrary origin, so tests can drive a fake clock and the real one
// stays monotonic.
type Clock interface {
	Now() time.Duration
	// Sleep waits for d or until ctx is done.
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the monotonic wall clock, measured from when it was made.
type RealClock struct{ origin time.Time }

// NewRealClock returns a clock whose zero is now.
func NewRealClock() RealClock { return RealClock{origin: time.Now()} }

// Now returns the time since the clock was made.
func (c RealClock) Now() time.Duration { return time.Since(c.origin) }

// preciseBelow is the wait under which RealClock sleeps on the OS thread
// instead of a runtime timer (see preciseSleep).
const preciseBelow = 2 * time.Millisecond

// spinBelow is the wait too short to sleep for at all.
const spinBelow = 5 * time.Microsecond

// Sleep waits for d or until ctx is done. A long wait uses a timer for all
// but its last stretch, which is slept precisely.
func (c RealClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d < spinBelow {
		// Shorter than any sleep's wake-up: yield and let the caller
		// look at the time again.
		runtime.Gosched()
		return nil
	}
	if d < preciseBelow {
		preciseSleep(d)
		return nil
	}
	end := time.Now().Add(d)
	t := time.NewTimer(d - preciseBelow/2)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	if rest := time.Until(end); rest > 0 {
		preciseSleep(rest)
	}
	return nil
}

// Schedule is the open loop's timetable: send i is due at Start + i/Rate.
// Each due time is computed from i alone, never accumulated from the one
// before, so rounding cannot drift and a stall cannot move any later send.
type Schedule struct {
	Start time.Duration
	Rate  float64 // sends per second
}

// Due is the intended time of send i.
func (s Schedule) Due(i int64) time.Duration {
	return s.Start + time.Duration(math.Round(float64(i)*float64(time.Second)/s.Rate))
}

// Interval is the time between consecutive sends.
func (s Schedule) Interval() time.Duration {
	return time.Duration(float64(time.Second) / s.Rate)
}

// CountBefore is the number of sends due strictly before t.
func (s Schedule) CountBefore(t time.Duration) int64 {
	if t <= s.Start {
		return 0
	}
	n := int64(math.Ceil(float64(t-s.Start) * s.Rate / float64(time.Second)))
	// Correct the float estimate against Due itself, which is the definition.
	for n > 0 && s.Due(n-1) >= t {
		n--
	}
	for s.Due(n) < t {
		n++
	}
	return n
}

// DefaultTick is OpenLoop's shortest sleep unless told otherwise. It is
// below the wake-up delay of a sleeping thread on the machines we measured
// on (tens of microseconds), so it adds little lag of its own, and it holds
// the generator to at most 20,000 wake-ups a second at any rate.
const DefaultTick = 50 * time.Microsecond

// OpenLoop generates sends at a fixed rate for Warmup+Duration. The sends
// due in the first Warmup are marked unmeasured; the schedule runs straight
// through the boundary, so warm-up does not restart the clock either.
type OpenLoop struct {
	Clock    Clock
	Rate     float64
	Warmup   time.Duration
	Duration time.Duration
	// Tick is the shortest the generator sleeps. When the next send is due
	// sooner, it sleeps a tick and then issues every send due by then in
	// one batch. Each send's latency still counts from its due time, so
	// the batching shows in the results rather than hiding: up to a tick
	// of lag. Without a tick, a fast schedule wakes the generator for
	// almost every send, and those wake-ups cost more CPU than the sends.
	// Zero sleeps until each due time.
	Tick time.Duration
	// Wake, if set, records how late each sleep ended: how much of the
	// lag the machine's timers and scheduler explain.
	Wake *Recorder
	// OnMeasure, if set, runs once, just before the first measured send is
	// issued: where the measured window begins, so that a caller can count
	// its resources from there rather than from the warm-up.
	OnMeasure func()
}

// SendFunc issues send i. intended is its due time and actual the time it was
// issued; measured is false during warm-up.
type SendFunc func(i int64, intended, actual time.Duration, measured bool) error

// LoopStats describes what the generator did.
type LoopStats struct {
	Schedule Schedule
	Sent     int64 // every send issued, warm-up included
	Measured int64 // sends due in the measured window
	// MeasureStart and End bound the measured window.
	MeasureStart, End time.Duration
	// Lagged is the number of measured sends issued later than their due
	// time plus one interval and one tick: later than batching explains.
	Lagged int64
}

// ErrBadRate is returned for a rate or duration that cannot be scheduled.
var ErrBadRate = errors.New("bench: open loop needs a positive rate and duration")

// Run issues every send due in the run, in order, then returns. When it is
// behind it issues every overdue send at once rather than skipping any or
// sliding the schedule: their lateness is the latency the system caused.
// flush, if not nil, runs before each sleep and at the end, so nothing issued
// waits in a buffer while the generator idles.
func (o OpenLoop) Run(ctx context.Context, send SendFunc, flush func() error) (LoopStats, error) {
	if o.Rate <= 0 || math.IsInf(o.Rate, 0) || math.IsNaN(o.Rate) || o.Duration <= 0 || o.Warmup < 0 || o.Tick < 0 {
		return LoopStats{}, ErrBadRate
	}
	if flush == nil {
		flush = func() error { return nil }
	}
	start := o.Clock.Now()
	st := LoopStats{
		Schedule:     Schedule{Start: start, Rate: o.Rate},
		MeasureStart: start + o.Warmup,
		End:          start + o.Warmup + o.Duration,
	}
	sched := st.Schedule
	total := sched.CountBefore(st.End)
	firstMeasured := sched.CountBefore(st.MeasureStart)
	st.Measured = total - firstMeasured
	late := sched.Interval() + o.Tick

	for i := int64(0); i < total; {
		now := o.Clock.Now()
		if due := sched.Due(i); now < due {
			if err := flush(); err != nil {
				return st, err
			}
			// The flush took time of its own, which is not the sleep's.
			asleep := o.Clock.Now()
			d := max(due-asleep, o.Tick)
			if err := o.Clock.Sleep(ctx, d); err != nil {
				return st, fmt.Errorf("open loop: %w", err)
			}
			if o.Wake != nil && i >= firstMeasured {
				// A sleep too short to take (see RealClock.Sleep) ends
				// early; that is not lateness.
				o.Wake.Record(max(o.Clock.Now()-asleep-d, 0))
			}
			continue
		}
		// Everything due by now goes out back to back.
		for ; i < total; i++ {
			due := sched.Due(i)
			actual := o.Clock.Now()
			if due > actual {
				break
			}
			measured := i >= firstMeasured
			if i == firstMeasured && o.OnMeasure != nil {
				o.OnMeasure()
				actual = o.Clock.Now()
			}
			if measured && actual-due > late {
				st.Lagged++
			}
			if err := send(i, due, actual, measured); err != nil {
				return st, fmt.Errorf("open loop send %d: %w", i, err)
			}
			st.Sent++
		}
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("open loop: %w", err)
		}
	}
	return st, flush()
}
