package bench

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// The chart is hand-written SVG: one small function is less to keep than a
// plotting dependency, and the output is plain text that diffs and embeds in
// docs.

// ChartLine is one configuration's latency distribution.
type ChartLine struct {
	Name string
	Hist *Recorder
}

// chartPercentileTicks label the x axis, which is log10(1/(1-p)): each
// decade is one more nine.
var chartPercentileTicks = []struct {
	label string
	p     float64
}{
	{"0%", 0}, {"50%", 50}, {"90%", 90}, {"99%", 99}, {"99.9%", 99.9},
	{"99.99%", 99.99}, {"99.999%", 99.999}, {"99.9999%", 99.9999},
}

var chartColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

// percentileX maps a percentile to the chart's x coordinate in nines.
func percentileX(p float64) float64 {
	if p >= 100 {
		return math.Inf(1)
	}
	return math.Log10(100 / (100 - p))
}

// WriteChart renders latency by percentile: x is log10(1/(1-p)), so the
// tail gets as much room as the body; y is latency on a log scale, so a
// 20 µs median and a 20 ms tail are both legible. Each line stops where its
// sample count stops resolving percentiles.
func WriteChart(w io.Writer, title string, lines []ChartLine) error {
	const (
		width, height          = 960, 560
		left, right, top, bott = 80, 30, 50, 60
	)
	plotW, plotH := float64(width-left-right), float64(height-top-bott)

	type pt struct{ x, y float64 }
	series := make([][]pt, len(lines))
	xMax, yMin, yMax := 2.0, math.Inf(1), math.Inf(-1)
	for i, l := range lines {
		h := l.Hist.Histogram()
		n := h.TotalCount()
		if n == 0 {
			continue
		}
		// Beyond log10(n) a percentile is the maximum of too few samples.
		last := math.Min(math.Log10(float64(n)), 6)
		xMax = math.Max(xMax, math.Ceil(last))
		const steps = 240
		for s := 0; s <= steps; s++ {
			x := last * float64(s) / steps
			p := 100 * (1 - math.Pow(10, -x))
			v := float64(h.ValueAtPercentile(p)) / 1e3
			v = math.Max(v, 0.001)
			series[i] = append(series[i], pt{x, v})
			yMin, yMax = math.Min(yMin, v), math.Max(yMax, v)
		}
	}
	if math.IsInf(yMin, 1) {
		yMin, yMax = 1, 10
	}
	lo, hi := math.Floor(math.Log10(yMin)), math.Ceil(math.Log10(yMax))
	if hi <= lo {
		hi = lo + 1
	}
	sx := func(x float64) float64 { return float64(left) + x/xMax*plotW }
	sy := func(v float64) float64 { return float64(top) + plotH - (math.Log10(v)-lo)/(hi-lo)*plotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(title))
	// Grid and y labels: 1-2-5 steps per decade.
	for d := lo; d <= hi; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, d)
			if math.Log10(v) > hi+1e-9 {
				break
			}
			y := sy(v)
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
			}
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", left, y, width-right, y, stroke)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, y, esc(fmtMicros(v)))
		}
	}
	for _, t := range chartPercentileTicks {
		x := percentileX(t.p)
		if x > xMax+1e-9 {
			break
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ccc"/>`+"\n", sx(x), top, sx(x), height-bott)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", sx(x), height-bott+18, t.label)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">percentile</text>`+"\n", float64(left)+plotW/2, height-16)
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">latency (µs, log scale)</text>`+"\n", float64(top)+plotH/2)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#888"/>`+"\n", left, top, plotW, plotH)
	for i, s := range series {
		if len(s) == 0 {
			continue
		}
		color := chartColors[i%len(chartColors)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="`, color)
		for _, p := range s {
			fmt.Fprintf(&b, "%.1f,%.1f ", sx(p.x), sy(p.y))
		}
		b.WriteString("\"/>\n")
		ly := top + 16 + 16*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", left+10, ly, left+30, ly, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d" dominant-baseline="middle">%s (n=%d)</text>`+"\n", left+36, ly, esc(lines[i].Name), lines[i].Hist.Count())
	}
	b.WriteString("</svg>\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	return nil
}

func fmtMicros(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%gs", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%gms", us/1e3)
	default:
		return fmt.Sprintf("%gµs", us)
	}
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
