package bench

import (
	"fmt"
	"math"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram geometry: nanoseconds, three significant figures, and a ceiling
// far above any timeout we use so that nothing real is clamped.
const (
	histLowest  = 1
	histHighest = int64(10 * time.Minute)
	histSigFigs = 3
)

// Recorder is one goroutine's latency histogram. It is not safe for
// concurrent use; each recording goroutine owns one and they are merged at
// the end.
type Recorder struct {
	h       *hdrhistogram.Histogram
	clamped int64
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{h: hdrhistogram.New(histLowest, histHighest, histSigFigs)}
}

// Record adds one latency. A value outside the histogram's range is clamped
// to it and counted, rather than dropped: a lost sample would flatter the
// tail.
func (r *Recorder) Record(d time.Duration) {
	v := int64(d)
	switch {
	case v < 0:
		v = 0
		r.clamped++
	case v > histHighest:
		v = histHighest
		r.clamped++
	}
	// Cannot fail: v is within the geometry and the count cannot overflow.
	_ = r.h.RecordValue(v)
}

// Count is the number of recorded values.
func (r *Recorder) Count() int64 { return r.h.TotalCount() }

// Clamped is the number of values that fell outside the range.
func (r *Recorder) Clamped() int64 { return r.clamped }

// Merge adds every value of o.
func (r *Recorder) Merge(o *Recorder) {
	r.h.Merge(o.h)
	r.clamped += o.clamped
}

// Histogram exposes the underlying histogram for output.
func (r *Recorder) Histogram() *hdrhistogram.Histogram { return r.h }

// Encode returns the histogram in HdrHistogram's compressed base64 "HIST"
// form, readable by every HdrHistogram implementation.
func (r *Recorder) Encode() (string, error) {
	b, err := r.h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return "", fmt.Errorf("encode histogram: %w", err)
	}
	return string(b), nil
}

// DecodeRecorder reverses Encode.
func DecodeRecorder(s string) (*Recorder, error) {
	h, err := hdrhistogram.Decode([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("decode histogram: %w", err)
	}
	// Re-home the values in our own geometry so every merge target agrees.
	r := NewRecorder()
	if dropped := r.h.Merge(h); dropped != 0 {
		return nil, fmt.Errorf("decode histogram: %d values outside the range", dropped)
	}
	return r, nil
}

// ReportPercentiles are the percentiles every latency report shows.
var ReportPercentiles = []float64{50, 90, 99, 99.9, 99.99, 99.999}

// Summary is a latency histogram reduced to the figures the report shows,
// in nanoseconds.
type Summary struct {
	Count int64 `json:"count"`
	// Values holds one value per ReportPercentiles entry.
	Values []int64  `json:"values_ns"`
	Max    int64    `json:"max_ns"`
	Mean   float64  `json:"mean_ns"`
	Labels []string `json:"labels"`
}

// Summarize reduces r to a Summary.
func (r *Recorder) Summarize() Summary {
	s := Summary{Count: r.h.TotalCount(), Max: 0, Labels: PercentileLabels()}
	s.Values = r.h.ValueAtPercentilesSlice(ReportPercentiles)
	if s.Count > 0 {
		s.Max = r.h.Max()
		s.Mean = r.h.Mean()
	}
	return s
}

// PercentileLabels names ReportPercentiles as the table heads them.
func PercentileLabels() []string {
	out := make([]string, len(ReportPercentiles))
	for i, p := range ReportPercentiles {
		out[i] = "p" + trimFloat(p)
	}
	return out
}

// Meaningful reports whether count samples can resolve percentile p: the
// tail beyond p must hold at least ten samples, so p99.99 needs 10^5.
func Meaningful(p float64, count int64) bool {
	return float64(count)*(100-p)/100 >= 10-1e-9
}

func trimFloat(f float64) string {
	s := fmt.Sprintf("%g", f)
	if math.Trunc(f) == f {
		s = fmt.Sprintf("%d", int64(f))
	}
	return s
}
