package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Scenario names one way of loading a system.
type Scenario string

// The scenarios. Every output labels a figure with its scenario's Label.
const (
	// OneWay is closed-loop pipelined one-way sends: tacks, then a final
	// Sync gives yacks.
	OneWay Scenario = "oneway"
	// RequestReply is closed-loop pipelined requests with at most Window in
	// flight: tacks, then sacks when every reply is back.
	RequestReply Scenario = "reqreply"
	// RoundTrip is sequential ping-pong on an otherwise idle connection.
	RoundTrip Scenario = "roundtrip"
	// FixedRate is open-loop requests at a fixed rate, latency measured from
	// each request's intended send time.
	FixedRate Scenario = "rate"
)

// Scenarios lists every scenario in report order.
var Scenarios = []Scenario{OneWay, RequestReply, RoundTrip, FixedRate}

// Label is the scenario's name in reports.
func (s Scenario) Label() string {
	switch s {
	case OneWay:
		return "throughput (closed loop, pipelined): one-way"
	case RequestReply:
		return "throughput (closed loop, pipelined): request→reply"
	case RoundTrip:
		return "unloaded round trip (sequential ping-pong)"
	case FixedRate:
		return "latency at a fixed rate (open loop)"
	}
	return string(s)
}

// Throughput reports whether s is a closed-loop throughput scenario, whose
// figures are milestones rather than latency percentiles.
func (s Scenario) Throughput() bool { return s == OneWay || s == RequestReply }

// ParseScenario checks a scenario name.
func ParseScenario(name string) (Scenario, error) {
	for _, s := range Scenarios {
		if string(s) == name {
			return s, nil
		}
	}
	return "", fmt.Errorf("bench: unknown scenario %q (known: oneway, reqreply, roundtrip, rate)", name)
}

// Milestone names. The original's vocabulary: tacks is every record handed
// to the connection, yacks every record acknowledged, sacks every reply back.
const (
	Tacks = "tacks"
	Yacks = "yacks"
	Sacks = "sacks"
	// Replicated is every record applied by every server (systems that
	// replicate; see Replicator).
	Replicated = "replicated"
)

// Histogram names in a FixedRate or RoundTrip result.
const (
	// HistLatency is the headline: reply time minus intended send time for
	// FixedRate, the round trip for RoundTrip.
	HistLatency = "latency"
	// HistService is reply time minus actual send time.
	HistService = "service"
	// HistLag is actual send time minus intended send time: the
	// generator's own lateness.
	HistLag = "lag"
	// HistWake is how late the generator's sleeps ended: the share of the
	// lag that the machine's timers and scheduler explain.
	HistWake = "wake"
)

// ClientSpec is everything a client process needs to run its share of one
// trial. The parent sends it as JSON.
type ClientSpec struct {
	System   string      `json:"system"`
	Scenario Scenario    `json:"scenario"`
	Dial     DialOptions `json:"dial"`
	Size     int         `json:"size"`
	// Records is this client's share of a throughput trial.
	Records int64 `json:"records,omitempty"`
	// WarmupRecords precede a throughput trial, unmeasured.
	WarmupRecords int64 `json:"warmup_records,omitempty"`
	// Window bounds requests in flight in RequestReply.
	Window int `json:"window,omitempty"`
	// Count and WarmupCount are RoundTrip's measured and warm-up calls.
	Count       int64 `json:"count,omitempty"`
	WarmupCount int64 `json:"warmup_count,omitempty"`
	// Rate is this client's share of a FixedRate trial, per second.
	Rate     float64       `json:"rate,omitempty"`
	Warmup   time.Duration `json:"warmup,omitempty"`
	Duration time.Duration `json:"duration,omitempty"`
	// Timeout is how long a FixedRate request may take before it counts as
	// an error, and how long the client waits for the stragglers.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Tick is the FixedRate generator's shortest sleep (OpenLoop.Tick).
	Tick time.Duration `json:"tick,omitempty"`
	// ProgressEvery is how often the client reports progress; 0 never.
	ProgressEvery time.Duration `json:"progress_every,omitempty"`
}

// Milestone is a point a throughput trial reached, timed from its start.
type Milestone struct {
	Name  string        `json:"name"`
	Nanos time.Duration `json:"ns"`
}

// ClientResult is what one client process measured.
type ClientResult struct {
	Index      int         `json:"index"`
	Milestones []Milestone `json:"milestones,omitempty"`
	// Records counts completed measured operations; Sent counts issued ones.
	Records int64 `json:"records"`
	Sent    int64 `json:"sent"`
	// Bytes is payload bytes of the measured records, one direction.
	Bytes    int64 `json:"bytes"`
	Errors   int64 `json:"errors"`
	Timeouts int64 `json:"timeouts,omitempty"`
	// Window is the measured wall time.
	Window time.Duration `json:"window_ns"`
	// Histograms maps a histogram name to its HdrHistogram base64 encoding.
	Histograms map[string]string `json:"histograms,omitempty"`
	Clamped    int64             `json:"clamped,omitempty"`
	// Lagged counts FixedRate sends issued more than one interval and one
	// tick late; Interval and Tick are those.
	Lagged     int64         `json:"lagged,omitempty"`
	Interval   time.Duration `json:"interval_ns,omitempty"`
	Tick       time.Duration `json:"tick_ns,omitempty"`
	CPU        CPUTimes      `json:"cpu"`
	GOMAXPROCS int           `json:"gomaxprocs"`
	// MaxRSS is the client process's peak resident set when its scenario
	// ended (SelfUsage); 0 from a client that does not say.
	MaxRSS int64 `json:"max_rss_bytes,omitempty"`

	// measureFrom is the process's use where the measured window began,
	// for a scenario whose warm-up runs inside it (FixedRate); CPU counts
	// from there.
	measureFrom *Usage
}

// progress is what a running scenario publishes for the progress line. Only
// atomics: the hot path must not lock.
type progress struct{ done atomic.Int64 }

// warmUp runs the scenario's unmeasured warm-up on conn.
func warmUp(ctx context.Context, conn Conn, spec ClientSpec) error {
	payload := make([]byte, spec.Size)
	switch spec.Scenario {
	case OneWay:
		if spec.WarmupRecords == 0 {
			return nil
		}
		_, err := runOneWay(ctx, conn, payload, spec.WarmupRecords, nil)
		return err
	case RequestReply:
		if spec.WarmupRecords == 0 {
			return nil
		}
		_, err := runRequestReply(ctx, conn, payload, spec.WarmupRecords, spec.Window, nil)
		return err
	case RoundTrip:
		for i := int64(0); i < spec.WarmupCount; i++ {
			if _, err := conn.Call(ctx, payload); err != nil {
				return fmt.Errorf("warm-up call: %w", err)
			}
		}
	}
	// FixedRate warms up inside its own schedule so t0 never moves.
	return nil
}

// runScenario runs the measured part of spec on conn.
func runScenario(ctx context.Context, conn Conn, spec ClientSpec, p *progress) (ClientResult, error) {
	payload := make([]byte, spec.Size)
	res := ClientResult{Index: spec.Dial.Index}
	switch spec.Scenario {
	case OneWay:
		t, err := runOneWay(ctx, conn, payload, spec.Records, p)
		if err != nil {
			return res, err
		}
		res.Milestones = []Milestone{{Tacks, t.tacks}, {Yacks, t.last}}
		if t.replicated > 0 {
			res.Milestones = append(res.Milestones, Milestone{Replicated, t.replicated})
		}
		res.Records, res.Sent, res.Window, res.Errors = spec.Records, spec.Records, t.last, t.errors
	case RequestReply:
		t, err := runRequestReply(ctx, conn, payload, spec.Records, spec.Window, p)
		if err != nil {
			return res, err
		}
		res.Milestones = []Milestone{{Tacks, t.tacks}, {Sacks, t.last}}
		res.Records, res.Sent, res.Window, res.Errors = spec.Records, spec.Records, t.last, t.errors
	case RoundTrip:
		return runRoundTrip(ctx, conn, payload, spec, p)
	case FixedRate:
		return runFixedRate(ctx, conn, NewRealClock(), payload, spec, p)
	default:
		return res, fmt.Errorf("bench: unknown scenario %q", spec.Scenario)
	}
	res.Bytes = res.Records * int64(spec.Size)
	return res, nil
}

type throughputTimes struct {
	tacks, last, replicated time.Duration
	errors                  int64
}

// runOneWay sends n records back to back, then syncs.
func runOneWay(ctx context.Context, conn Conn, payload []byte, n int64, p *progress) (throughputTimes, error) {
	start := time.Now()
	for i := int64(0); i < n; i++ {
		if err := conn.Send(ctx, payload); err != nil {
			return throughputTimes{}, fmt.Errorf("send %d: %w", i, err)
		}
		// A store per record would cost more than the progress is worth.
		if p != nil && i&1023 == 0 {
			p.done.Store(i)
		}
	}
	if err := flush(ctx, conn); err != nil {
		return throughputTimes{}, err
	}
	t := throughputTimes{tacks: time.Since(start)}
	if err := conn.Sync(ctx); err != nil {
		return t, fmt.Errorf("sync: %w", err)
	}
	t.last = time.Since(start)
	if r, ok := conn.(Replicator); ok {
		if err := r.Replicated(ctx); err != nil {
			return t, fmt.Errorf("replicated: %w", err)
		}
		t.replicated = time.Since(start)
	}
	if p != nil {
		p.done.Store(n)
	}
	return t, nil
}

// runRequestReply issues n requests keeping at most window in flight, then
// waits for every reply.
func runRequestReply(ctx context.Context, conn Conn, payload []byte, n int64, window int, p *progress) (throughputTimes, error) {
	if window <= 0 {
		return throughputTimes{}, fmt.Errorf("bench: request→reply needs a window > 0, got %d", window)
	}
	var (
		completed atomic.Int64
		errs      atomic.Int64
		// One token, offered by every reply: a waiting sender always
		// finds one after the reply it waits for, and an offer to a full
		// channel costs no lock.
		wake = make(chan struct{}, 1)
	)
	done := func(_ []byte, err error) {
		if err != nil {
			errs.Add(1)
		}
		completed.Add(1)
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	wait := func(until func() bool) error {
		for !until() {
			select {
			case <-wake:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	w := int64(window)
	start := time.Now()
	for i := int64(0); i < n; i++ {
		if i-completed.Load() >= w {
			if err := flush(ctx, conn); err != nil {
				return throughputTimes{}, err
			}
			if err := wait(func() bool { return i-completed.Load() < w }); err != nil {
				return throughputTimes{}, fmt.Errorf("waiting for the window: %w", err)
			}
			if p != nil {
				p.done.Store(completed.Load())
			}
		}
		if err := conn.Go(ctx, payload, done); err != nil {
			return throughputTimes{}, fmt.Errorf("request %d: %w", i, err)
		}
	}
	if err := flush(ctx, conn); err != nil {
		return throughputTimes{}, err
	}
	t := throughputTimes{tacks: time.Since(start)}
	if err := wait(func() bool { return completed.Load() >= n }); err != nil {
		return t, fmt.Errorf("waiting for replies: %w", err)
	}
	t.last = time.Since(start)
	t.errors = errs.Load()
	if p != nil {
		p.done.Store(n)
	}
	return t, nil
}

// runRoundTrip times count sequential calls.
func runRoundTrip(ctx context.Context, conn Conn, payload []byte, spec ClientSpec, p *progress) (ClientResult, error) {
	res := ClientResult{Index: spec.Dial.Index}
	rec := NewRecorder()
	start := time.Now()
	for i := int64(0); i < spec.Count; i++ {
		t := time.Now()
		_, err := conn.Call(ctx, payload)
		rec.Record(time.Since(t))
		res.Sent++
		if err != nil {
			// An error keeps its latency in the histogram; if the
			// connection is gone there is nothing more to measure.
			res.Errors++
			if ctx.Err() != nil {
				break
			}
			continue
		}
		res.Records++
		if p != nil && i&63 == 0 {
			p.done.Store(i)
		}
	}
	res.Window = time.Since(start)
	res.Bytes = res.Records * int64(len(payload))
	if err := res.addHistograms(map[string]*Recorder{HistLatency: rec}); err != nil {
		return res, err
	}
	return res, ctx.Err()
}

// ErrTimeout marks a FixedRate request that took longer than the timeout.
var ErrTimeout = errors.New("bench: request timed out")

// runFixedRate runs the open loop on conn: the generator records lag, the
// completion callbacks (serialized by the Conn contract) record latency and
// service time, so no histogram is shared.
func runFixedRate(ctx context.Context, conn Conn, clock Clock, payload []byte, spec ClientSpec, p *progress) (ClientResult, error) {
	res := ClientResult{Index: spec.Dial.Index}
	if spec.Timeout <= 0 {
		return res, fmt.Errorf("bench: fixed rate needs a timeout > 0")
	}
	var (
		lag, latency, service = NewRecorder(), NewRecorder(), NewRecorder()
		wake                  = NewRecorder()
		// Written only by done (serialized), read after Close returns.
		records, errCount, timeouts int64
		completed                   atomic.Int64
		target                      atomic.Int64
		drained                     = make(chan struct{})
		drainOnce                   sync.Once
	)
	target.Store(-1)
	finish := func() {
		n := completed.Add(1)
		if n == target.Load() {
			drainOnce.Do(func() { close(drained) })
		}
	}
	loop := OpenLoop{Clock: clock, Rate: spec.Rate, Warmup: spec.Warmup, Duration: spec.Duration, Tick: spec.Tick, Wake: wake}
	loop.OnMeasure = func() {
		if u, err := SelfUsage(); err == nil {
			res.measureFrom = &u
		}
	}
	send := func(i int64, intended, actual time.Duration, measured bool) error {
		if !measured {
			return conn.Go(ctx, payload, func([]byte, error) { finish() })
		}
		lag.Record(actual - intended)
		err := conn.Go(ctx, payload, func(_ []byte, err error) {
			done := clock.Now()
			latency.Record(done - intended)
			service.Record(done - actual)
			switch {
			case err != nil:
				errCount++
			case done-intended > spec.Timeout:
				timeouts++
				errCount++
			default:
				records++
			}
			finish()
		})
		if p != nil && i&63 == 0 {
			p.done.Store(i)
		}
		return err
	}
	st, err := loop.Run(ctx, send, func() error { return flush(ctx, conn) })
	res.Sent = st.Measured
	res.Lagged = st.Lagged
	res.Interval = st.Schedule.Interval()
	res.Tick = spec.Tick
	res.Window = st.End - st.MeasureStart
	if err != nil {
		return res, err
	}
	// Wait for the stragglers up to the timeout past the last due send;
	// Close then fails the rest, whose callbacks record them as errors with
	// the latency they reached.
	target.Store(st.Sent)
	if completed.Load() >= st.Sent {
		drainOnce.Do(func() { close(drained) })
	}
	wait := st.End + spec.Timeout - clock.Now()
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-drained:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	if err := conn.Close(); err != nil && !errors.Is(err, ErrClosed) {
		return res, fmt.Errorf("close: %w", err)
	}
	res.Records, res.Errors, res.Timeouts = records, errCount, timeouts
	res.Bytes = res.Records * int64(len(payload))
	if err := res.addHistograms(map[string]*Recorder{HistLatency: latency, HistService: service, HistLag: lag, HistWake: wake}); err != nil {
		return res, err
	}
	return res, nil
}

// ErrClosed is returned by a Conn used after Close, and given to the done of
// every Go that Close failed.
var ErrClosed = errors.New("bench: connection closed")

func (r *ClientResult) addHistograms(hs map[string]*Recorder) error {
	r.Histograms = make(map[string]string, len(hs))
	for name, h := range hs {
		s, err := h.Encode()
		if err != nil {
			return err
		}
		r.Histograms[name] = s
		r.Clamped += h.Clamped()
	}
	return nil
}
