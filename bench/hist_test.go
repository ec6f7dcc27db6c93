package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecorderMergeEqualsRecordingTogether(t *testing.T) {
	a, b, all := NewRecorder(), NewRecorder(), NewRecorder()
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * time.Microsecond
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
		all.Record(d)
	}
	a.Merge(b)
	assert.True(t, a.Histogram().Equals(all.Histogram()))
	s := a.Summarize()
	assert.EqualValues(t, 1000, s.Count)
	// Three significant figures: 500 µs is reported within 0.1%.
	assert.InDelta(t, 500_000, s.Values[0], 500)
	assert.InDelta(t, 990_000, s.Values[2], 990)
	assert.InDelta(t, 1_000_000, s.Max, 1000)
}

func TestRecorderEncodeRoundTrip(t *testing.T) {
	r := NewRecorder()
	for i := 0; i < 10_000; i++ {
		r.Record(time.Duration(i*i) * time.Nanosecond)
	}
	enc, err := r.Encode()
	require.NoError(t, err)
	assert.Regexp(t, `^[A-Za-z0-9+/=]+$`, enc, "HdrHistogram's base64 form")
	back, err := DecodeRecorder(enc)
	require.NoError(t, err)
	assert.True(t, r.Histogram().Equals(back.Histogram()))
	_, err = DecodeRecorder("not a histogram")
	assert.Error(t, err)
}

func TestRecorderClampsInsteadOfDropping(t *testing.T) {
	r := NewRecorder()
	r.Record(-time.Second)
	r.Record(time.Hour)
	assert.EqualValues(t, 2, r.Count())
	assert.EqualValues(t, 2, r.Clamped())
}

func TestMeaningful(t *testing.T) {
	assert.True(t, Meaningful(99.99, 100_000))
	assert.False(t, Meaningful(99.99, 99_999))
	assert.True(t, Meaningful(99, 1000))
	assert.False(t, Meaningful(99.999, 100_000))
	assert.True(t, Meaningful(50, 20))
}

func TestPercentileLabels(t *testing.T) {
	assert.Equal(t, []string{"p50", "p90", "p99", "p99.9", "p99.99", "p99.999"}, PercentileLabels())
}
