package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock advances only when slept on or told to.
type fakeClock struct {
	now    time.Duration
	sleeps int
	// over is how much longer than asked every sleep takes.
	over time.Duration
	// slept lists the sleeps asked for.
	slept []time.Duration
}

func (c *fakeClock) Now() time.Duration { return c.now }

func (c *fakeClock) Sleep(_ context.Context, d time.Duration) error {
	c.sleeps++
	c.slept = append(c.slept, d)
	c.now += d + c.over
	return nil
}

func TestScheduleDueIsComputedFromIndex(t *testing.T) {
	s := Schedule{Start: 7 * time.Second, Rate: 3}
	assert.Equal(t, 7*time.Second, s.Due(0))
	// 1/3 s is not a whole number of nanoseconds; accumulating it would
	// drift by a nanosecond every three sends.
	assert.Equal(t, 7*time.Second+time.Second, s.Due(3))
	assert.Equal(t, 7*time.Second+1_000_000*time.Second, s.Due(3_000_000))
	assert.Equal(t, time.Second/3, s.Interval())
}

func TestScheduleCountBefore(t *testing.T) {
	s := Schedule{Start: time.Second, Rate: 1000}
	assert.EqualValues(t, 0, s.CountBefore(time.Second))
	assert.EqualValues(t, 1, s.CountBefore(time.Second+1))
	assert.EqualValues(t, 1, s.CountBefore(time.Second+time.Millisecond))
	assert.EqualValues(t, 2, s.CountBefore(time.Second+time.Millisecond+1))
	assert.EqualValues(t, 1000, s.CountBefore(2*time.Second))
	for _, tt := range []time.Duration{0, 1, 999_999, 1_000_000, 1_000_001, 123_456_789} {
		n := s.CountBefore(s.Start + tt)
		if n > 0 {
			assert.Less(t, s.Due(n-1), s.Start+tt)
		}
		assert.GreaterOrEqual(t, s.Due(n), s.Start+tt)
	}
}

type sent struct {
	i                int64
	intended, actual time.Duration
	measured         bool
}

func TestOpenLoopKeepsScheduleThroughStall(t *testing.T) {
	clock := &fakeClock{now: 5 * time.Second}
	const rate = 1000 // 1 ms interval
	interval := time.Millisecond
	loop := OpenLoop{Clock: clock, Rate: rate, Warmup: 10 * time.Millisecond, Duration: 90 * time.Millisecond}
	var got []sent
	flushes := 0
	st, err := loop.Run(context.Background(), func(i int64, intended, actual time.Duration, measured bool) error {
		got = append(got, sent{i, intended, actual, measured})
		if i == 20 {
			// The system stalls the sender for 30 intervals.
			clock.now += 30 * interval
		}
		return nil
	}, func() error { flushes++; return nil })
	require.NoError(t, err)

	start := 5 * time.Second
	require.Len(t, got, 100, "every send of warm-up + duration is issued, none skipped")
	assert.EqualValues(t, 100, st.Sent)
	assert.EqualValues(t, 90, st.Measured)
	for k, s := range got {
		assert.EqualValues(t, k, s.i)
		// Intended times never move, before or after the stall.
		assert.Equal(t, start+time.Duration(k)*interval, s.intended, "send %d", k)
		assert.GreaterOrEqual(t, s.actual, s.intended)
		assert.Equal(t, k >= 10, s.measured, "send %d", k)
	}
	// Before the stall each send goes out on time.
	for _, s := range got[:21] {
		assert.Equal(t, s.intended, s.actual)
	}
	// The stall ended at 51 ms: sends 21..50 were overdue and went out at
	// once, each with the lag the stall gave it; t0 was not reset, so send
	// 51 is back on its original time.
	stallEnd := start + 50*time.Millisecond
	for _, s := range got[21:51] {
		assert.Equal(t, stallEnd, s.actual, "send %d", s.i)
		assert.Equal(t, stallEnd-s.intended, s.actual-s.intended)
	}
	assert.Equal(t, got[51].intended, got[51].actual)
	// Lagged counts sends more than one interval late: 21..48.
	assert.EqualValues(t, 28, st.Lagged)
	assert.Greater(t, flushes, 0)
	assert.Equal(t, start+10*time.Millisecond, st.MeasureStart)
	assert.Equal(t, start+100*time.Millisecond, st.End)
}

func TestOpenLoopOnMeasureMarksTheWindowsStart(t *testing.T) {
	for _, warmup := range []time.Duration{0, 10 * time.Millisecond} {
		clock := &fakeClock{}
		var events []string
		loop := OpenLoop{Clock: clock, Rate: 1000, Warmup: warmup, Duration: 20 * time.Millisecond, Tick: 3 * time.Millisecond}
		loop.OnMeasure = func() { events = append(events, "measure") }
		st, err := loop.Run(context.Background(), func(_ int64, _, _ time.Duration, measured bool) error {
			events = append(events, map[bool]string{false: "warm-up", true: "measured"}[measured])
			return nil
		}, nil)
		require.NoError(t, err)
		warm := int(st.Sent - st.Measured)
		require.Len(t, events, int(st.Sent)+1, "warm-up %v: one call, at the measured sends' start", warmup)
		for k, ev := range events {
			switch {
			case k < warm:
				assert.Equal(t, "warm-up", ev, "warm-up %v, event %d", warmup, k)
			case k == warm:
				assert.Equal(t, "measure", ev, "warm-up %v, event %d", warmup, k)
			default:
				assert.Equal(t, "measured", ev, "warm-up %v, event %d", warmup, k)
			}
		}
	}
}

func TestOpenLoopFlushesBeforeSleeping(t *testing.T) {
	clock := &fakeClock{}
	var events []string
	loop := OpenLoop{Clock: clock, Rate: 100, Duration: 50 * time.Millisecond}
	_, err := loop.Run(context.Background(), func(int64, time.Duration, time.Duration, bool) error {
		events = append(events, "send")
		return nil
	}, func() error { events = append(events, "flush"); return nil })
	require.NoError(t, err)
	assert.Equal(t, []string{"send", "flush", "send", "flush", "send", "flush", "send", "flush", "send", "flush"}, events)
	assert.Equal(t, 4, clock.sleeps)
}

func TestOpenLoopBatchesWithinATick(t *testing.T) {
	// 100,000 sends a second is a send every 10 µs; with a 50 µs tick and
	// sleeps that end 7 µs late, the generator wakes every 57 µs and sends
	// what fell due meanwhile.
	const tick, over = 50 * time.Microsecond, 7 * time.Microsecond
	clock := &fakeClock{now: time.Second, over: over}
	wake := NewRecorder()
	loop := OpenLoop{Clock: clock, Rate: 100_000, Warmup: time.Millisecond, Duration: 10 * time.Millisecond, Tick: tick, Wake: wake}
	var got []sent
	st, err := loop.Run(context.Background(), func(i int64, intended, actual time.Duration, measured bool) error {
		got = append(got, sent{i, intended, actual, measured})
		return nil
	}, nil)
	require.NoError(t, err)
	require.Len(t, got, 1100, "batching skips no send")
	batches := map[time.Duration]int{}
	for k, s := range got {
		assert.EqualValues(t, k, s.i)
		assert.GreaterOrEqual(t, s.actual, s.intended, "send %d went out early", k)
		assert.LessOrEqual(t, s.actual-s.intended, tick+over, "send %d", k)
		batches[s.actual]++
	}
	for _, d := range clock.slept {
		assert.GreaterOrEqual(t, d, tick, "a sleep shorter than the tick")
	}
	// 11 ms in wake-ups 57 µs apart, each sending 5 or 6.
	assert.InDelta(t, 11*time.Millisecond/(tick+over), len(batches), 2)
	assert.Zero(t, st.Lagged, "lag within a tick and an interval is batching, not falling behind")
	// Every sleep in the measured window was 7 µs late, and recorded so.
	assert.InDelta(t, 10*time.Millisecond/(tick+over), wake.Count(), 2)
	assert.EqualValues(t, over, wake.Histogram().Min())
	assert.Equal(t, over, time.Duration(wake.Histogram().Max()).Truncate(10*time.Nanosecond))

	// Without a tick the same loop wakes for every send.
	clock = &fakeClock{now: time.Second, over: over}
	loop.Clock, loop.Tick, loop.Wake = clock, 0, nil
	_, err = loop.Run(context.Background(), func(int64, time.Duration, time.Duration, bool) error { return nil }, nil)
	require.NoError(t, err)
	assert.Greater(t, clock.sleeps, 2*len(batches))
}

func TestOpenLoopWakeIsTheSleepsLatenessAlone(t *testing.T) {
	// Every flush takes 20 µs and every sleep ends 7 µs late: the wake
	// histogram holds the 7 µs only.
	const over, flushCost = 7 * time.Microsecond, 20 * time.Microsecond
	clock := &fakeClock{over: over}
	wake := NewRecorder()
	loop := OpenLoop{Clock: clock, Rate: 1000, Duration: 50 * time.Millisecond, Wake: wake}
	_, err := loop.Run(context.Background(), func(int64, time.Duration, time.Duration, bool) error { return nil },
		func() error { clock.now += flushCost; return nil })
	require.NoError(t, err)
	require.Positive(t, wake.Count())
	assert.EqualValues(t, over, wake.Histogram().Min())
	assert.Equal(t, over, time.Duration(wake.Histogram().Max()).Truncate(10*time.Nanosecond))
}

func TestGeneratorBound(t *testing.T) {
	rec := func(d time.Duration) *Recorder {
		r := NewRecorder()
		for range 1000 {
			r.Record(d)
		}
		return r
	}
	const interval, tick = 10 * time.Microsecond, 50 * time.Microsecond
	// Lag within an interval, a tick and the sleeps' lateness is the
	// machine's, not the generator's.
	assert.False(t, generatorBound(rec(150*time.Microsecond), rec(100*time.Microsecond), interval, tick))
	assert.True(t, generatorBound(rec(170*time.Microsecond), rec(100*time.Microsecond), interval, tick))
	// Without sleeps (always behind) only the interval and tick excuse lag.
	assert.True(t, generatorBound(rec(70*time.Microsecond), NewRecorder(), interval, tick))
	assert.False(t, generatorBound(rec(55*time.Microsecond), nil, interval, tick))
	assert.False(t, generatorBound(nil, nil, interval, tick))
}

func TestOpenLoopRejectsBadRate(t *testing.T) {
	for _, l := range []OpenLoop{{Rate: 0, Duration: time.Second}, {Rate: 10}, {Rate: -1, Duration: time.Second}, {Rate: 10, Duration: time.Second, Tick: -1}} {
		l.Clock = &fakeClock{}
		_, err := l.Run(context.Background(), nil, nil)
		assert.ErrorIs(t, err, ErrBadRate)
	}
}

func TestOpenLoopStopsOnContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clock := &fakeClock{}
	n := 0
	_, err := OpenLoop{Clock: clock, Rate: 1000, Duration: time.Hour}.Run(ctx, func(int64, time.Duration, time.Duration, bool) error {
		n++
		if n == 5 {
			cancel()
		}
		return nil
	}, nil)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 5, n)
}

// recordingConn completes every Go from the test, in order, as a Conn
// whose replies arrive when the test says.
type recordingConn struct {
	clock   *fakeClock
	latency time.Duration
	pending []func([]byte, error)
	closed  bool
}

func (c *recordingConn) Send(context.Context, []byte) error { return nil }
func (c *recordingConn) Sync(context.Context) error         { return nil }
func (c *recordingConn) Call(context.Context, []byte) ([]byte, error) {
	return nil, nil
}
func (c *recordingConn) Go(_ context.Context, _ []byte, done func([]byte, error)) error {
	// Replies come back after a fixed service time, which the fake
	// clock's next sleep covers; deliver them at the next flush.
	c.pending = append(c.pending, done)
	return nil
}
func (c *recordingConn) Flush(context.Context) error {
	save := c.clock.now
	c.clock.now += c.latency
	for _, d := range c.pending {
		d(nil, nil)
	}
	c.pending = nil
	c.clock.now = save
	return nil
}
func (c *recordingConn) Close() error {
	for _, d := range c.pending {
		d(nil, ErrClosed)
	}
	c.pending, c.closed = nil, true
	return nil
}

func TestRunFixedRateRecordsFromIntendedTime(t *testing.T) {
	clock := &fakeClock{}
	conn := &recordingConn{clock: clock, latency: 200 * time.Microsecond}
	spec := ClientSpec{Scenario: FixedRate, Rate: 1000, Warmup: 5 * time.Millisecond, Duration: 100 * time.Millisecond, Timeout: time.Second}
	res, err := runFixedRate(context.Background(), conn, clock, nil, spec, nil)
	require.NoError(t, err)
	assert.True(t, conn.closed)
	assert.EqualValues(t, 100, res.Sent)
	assert.EqualValues(t, 100, res.Records)
	assert.Zero(t, res.Errors)
	lat, err := DecodeRecorder(res.Histograms[HistLatency])
	require.NoError(t, err)
	assert.EqualValues(t, 100, lat.Count())
	assert.True(t, lat.Histogram().ValuesAreEquivalent(int64(200*time.Microsecond), lat.Histogram().ValueAtPercentile(50)))
	lag, err := DecodeRecorder(res.Histograms[HistLag])
	require.NoError(t, err)
	assert.Zero(t, lag.Histogram().Max(), "the fake generator is never late")
	// The warm-up runs inside the scenario: its CPU counts from the
	// measured window's start (ClientChild subtracts this).
	assert.NotNil(t, res.measureFrom, "the process's use at the measured window's start")
}
