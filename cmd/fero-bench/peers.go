package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/fero-go/fero/bench"
)

// redisDrivers pairs, for each Redis configuration, the system that drives
// it with the hand-written pipelined client and the one that drives it
// with rueidis. The Redis figure to quote is the faster of the two.
var redisDrivers = [][2]string{
	{"redis", "redis-rueidis"},
	{"redis-always", "redis-rueidis-always"},
	{"redis-everysec", "redis-rueidis-everysec"},
	{"redis-no", "redis-rueidis-no"},
}

// driverRace is one scenario and configuration that both drivers of one
// Redis ran.
type driverRace struct {
	groups [2]*bench.Group // as in redisDrivers
	values [2]float64      // the measure, median over the runs
	// measure names what is compared; higher says whether more is faster.
	measure string
	higher  bool
	// faster indexes groups; -1 where neither ran without errors.
	faster int
}

// measureOf is what decides the race in g's scenario: the completion
// milestone's records/s for throughput, the round trip's median latency,
// and at a fixed rate, where both complete the same rate, the p99.
func measureOf(g *bench.Group) (name string, value float64, higher bool) {
	switch g.Scenario {
	case bench.OneWay, bench.RequestReply:
		last := bench.Yacks
		if g.Scenario == bench.RequestReply {
			last = bench.Sacks
		}
		for _, m := range g.Milestones {
			if m.Name == last {
				return last + " records/s", m.RecordsPerSec.Median, true
			}
		}
		return last + " records/s", 0, true
	default:
		p := 50.0
		if g.Scenario == bench.FixedRate {
			p = 99
		}
		name = fmt.Sprintf("latency p%g µs", p)
		i := slices.Index(bench.ReportPercentiles, p)
		if ls := g.Latency[bench.HistLatency]; ls != nil && i >= 0 && i < len(ls.Percentiles) {
			return name, ls.Percentiles[i].Median, false
		}
		return name, 0, false
	}
}

// driverRaces finds every scenario and configuration that both drivers of
// a Redis ran, in the report's order, and names the faster. A group with
// errors, or without the measure, cannot win.
func driverRaces(rep *bench.Report) []driverRace {
	var out []driverRace
	for _, g := range rep.Groups {
		for _, pair := range redisDrivers {
			if g.System != pair[0] {
				continue
			}
			i := slices.IndexFunc(rep.Groups, func(o *bench.Group) bool {
				return o.System == pair[1] && o.Scenario == g.Scenario && o.Config == g.Config
			})
			if i < 0 {
				continue
			}
			r := driverRace{groups: [2]*bench.Group{g, rep.Groups[i]}, faster: -1}
			for k, dg := range r.groups {
				r.measure, r.values[k], r.higher = measureOf(dg)
				if dg.Errors > 0 || r.values[k] <= 0 {
					continue
				}
				if r.faster < 0 || (r.values[k] > r.values[r.faster]) == r.higher {
					r.faster = k
				}
			}
			out = append(out, r)
		}
	}
	return out
}

// writeDriverRaces prints, when both drivers of a Redis ran, which was the
// faster in each scenario and configuration: the peer figure to quote,
// with its ratio to the baseline as the report gives it.
func writeDriverRaces(w io.Writer, rep *bench.Report) error {
	races := driverRaces(rep)
	if len(races) == 0 {
		return nil
	}
	if _, err := fmt.Fprintf(w, "\n== Redis peer: the faster driver ==\n"+
		"redis* = the hand-written pipelined RESP client · redis-rueidis* = github.com/redis/rueidis, auto-pipelining\n"+
		"medians over the runs; a driver with errors cannot win. Quote the faster as Redis's figure.\n"); err != nil {
		return err
	}
	for _, r := range races {
		line := fmt.Sprintf("  %s · %s · %s: %s %s, %s %s", r.groups[0].Scenario, r.groups[0].Config, r.measure,
			r.groups[0].System, figure(r, 0), r.groups[1].System, figure(r, 1))
		if r.faster < 0 {
			line += " → neither without errors"
		} else {
			win, lose := r.values[r.faster], r.values[1-r.faster]
			line += fmt.Sprintf(" → faster: %s", r.groups[r.faster].System)
			// By how much, only against a clean figure.
			if lose > 0 && r.groups[1-r.faster].Errors == 0 {
				lead := win / lose
				if !r.higher {
					lead = lose / win
				}
				line += fmt.Sprintf(" (%.2f×)", lead)
			}
			if b := baselineOf(rep, r.groups[r.faster]); b != nil {
				if _, bv, _ := measureOf(b); bv > 0 {
					line += fmt.Sprintf(" · %.2f× %s", win/bv, rep.Baseline)
				}
			}
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// figure formats one driver's measure, marking errors.
func figure(r driverRace, k int) string {
	var s string
	if r.higher {
		s = digits(int64(r.values[k]))
	} else {
		s = fmt.Sprintf("%.2f", r.values[k]/1e3)
	}
	if e := r.groups[k].Errors; e > 0 {
		s += fmt.Sprintf(" (%d errors)", e)
	}
	return s
}

// baselineOf is the baseline system's group for g's scenario and
// configuration, or nil.
func baselineOf(rep *bench.Report, g *bench.Group) *bench.Group {
	if rep.Baseline == "" {
		return nil
	}
	for _, b := range rep.Groups {
		if b.System == rep.Baseline && b.Scenario == g.Scenario && b.Config == g.Config {
			return b
		}
	}
	return nil
}

// digits groups n's digits in threes, as the report does.
func digits(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
