package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/fero-go/fero/bench"
)

// A target is one of the speed targets of issue 21, stated as a ratio of
// two figures measured side by side in one run: fero's against its peer's
// (Redis, with the faster of its two drivers; the echo floor; the original
// fero 1.7.1; fero itself in another configuration).
type target struct {
	name  string
	want  string  // "≥ 1.00×"
	ratio float64 // 0: not measured in this run
	met   bool
	// detail gives the two figures; missing, when ratio is 0, says what
	// the run lacks.
	detail, missing string
}

// targets works out every target the run has the groups for. It takes
// fero's one-client, one-server groups of the smallest size as the
// configuration to judge; the replication target takes fero's three-server
// group of that size.
func targets(rep *bench.Report) []target {
	ow := groupOf(rep, "fero", bench.OneWay, nil)
	rr := groupOf(rep, "fero", bench.RequestReply, nil)
	rt := groupOf(rep, "fero", bench.RoundTrip, nil)
	size := 0
	for _, g := range []*bench.Group{ow, rr, rt} {
		if g != nil && (size == 0 || g.Config.Size < size) {
			size = g.Config.Size
		}
	}
	one := func(c bench.Config) bool { return c.Size == size && c.Clients == 1 && c.Servers == 1 && c.Rate == 0 }
	ow = groupOf(rep, "fero", bench.OneWay, one)
	rr = groupOf(rep, "fero", bench.RequestReply, one)
	rt = groupOf(rep, "fero", bench.RoundTrip, one)

	var out []target
	add := func(t target) { out = append(out, t) }
	ratioTarget := func(name, want string, num, den float64, numWhat, denWhat string, atLeast float64, higher bool, missing string) {
		t := target{name: name, want: want, missing: missing}
		if num > 0 && den > 0 {
			t.ratio = num / den
			t.met = t.ratio >= atLeast
			if !higher {
				t.met = t.ratio <= atLeast
			}
			t.detail = numWhat + " ÷ " + denWhat
			t.missing = ""
		}
		add(t)
	}

	// Throughput against Redis.
	for _, c := range []struct {
		name      string
		g         *bench.Group
		scenario  bench.Scenario
		milestone string
	}{
		{"yacks ÷ Redis", ow, bench.OneWay, bench.Yacks},
		{"sacks ÷ Redis", rr, bench.RequestReply, bench.Sacks},
	} {
		var f, p float64
		var pname string
		if c.g != nil {
			f = milestone(c.g, c.milestone)
			if peer := fasterRedis(rep, "", c.scenario, c.g.Config); peer != nil {
				p, pname = milestone(peer, c.milestone), peer.System
			}
		}
		ratioTarget(c.name, "≥ 1.00×", f, p, "fero "+rate(f), pname+" "+rate(p), 1, true,
			fmt.Sprintf("needs fero and redis (or redis-rueidis), scenario %s", c.scenario))
	}

	// The round trip against the echo floor and Redis.
	var rtF50, rtF999, rtE50, rtE999, rtR50 float64
	var rtR string
	if rt != nil {
		rtF50, rtF999 = percentile(rt, 50), percentile(rt, 99.9)
		if e := groupOf(rep, "echo", bench.RoundTrip, func(c bench.Config) bool { return c == rt.Config }); e != nil {
			rtE50, rtE999 = percentile(e, 50), percentile(e, 99.9)
		}
		if peer := fasterRedis(rep, "", bench.RoundTrip, rt.Config); peer != nil {
			rtR50, rtR = percentile(peer, 50), peer.System
		}
	}
	ratioTarget("round trip p50 ÷ echo", "≤ 1.30×", rtF50, rtE50, "fero "+micros(rtF50), "echo "+micros(rtE50), 1.3, false,
		"needs fero and echo, scenario roundtrip")
	ratioTarget("round trip p50 ÷ Redis", "≤ 1.00×", rtF50, rtR50, "fero "+micros(rtF50), rtR+" "+micros(rtR50), 1, false,
		"needs fero and redis, scenario roundtrip")
	ratioTarget("round trip p99.9 ÷ echo", "≤ 2.00×", rtF999, rtE999, "fero "+micros(rtF999), "echo "+micros(rtE999), 2, false,
		"needs fero and echo, scenario roundtrip")

	// CPU per one-way write, client and servers, against the Redis driver
	// quoted for yacks.
	var cpuF, cpuR float64
	var cpuRName string
	if ow != nil {
		cpuF = cpuPerRecord(ow)
		if peer := fasterRedis(rep, "", bench.OneWay, ow.Config); peer != nil {
			cpuR, cpuRName = cpuPerRecord(peer), peer.System
		}
	}
	ratioTarget("CPU per write ÷ Redis", "≤ 1.50×", cpuF, cpuR, fmt.Sprintf("fero %.2f µs", cpuF*1e6), fmt.Sprintf("%s %.2f µs", cpuRName, cpuR*1e6), 1.5, false,
		"needs fero and redis, scenario oneway")

	// Replication to three servers against one server's yacks.
	var rep3, y1 float64
	if ow != nil {
		y1 = milestone(ow, bench.Yacks)
		three := groupOf(rep, "fero", bench.OneWay, func(c bench.Config) bool {
			return c.Size == size && c.Clients == 1 && c.Servers == 3 && c.Rate == 0
		})
		if three != nil {
			rep3 = milestone(three, bench.Replicated)
		}
	}
	ratioTarget("replicated to 3 ÷ 1-server yacks", "≥ 0.50×", rep3, y1, "3 servers "+rate(rep3), "1 server "+rate(y1), 0.5, true,
		"needs fero at -c 1,3, scenario oneway")

	// A fixed rate: fero's p99.9 against the echo's at the same rate.
	{
		t := target{name: "fixed rate p99.9 ÷ echo", want: "≤ 2.00×", missing: "needs fero and echo, scenario rate (--sweep 0.5)"}
		var best *bench.Group
		for _, g := range rep.Groups {
			if g.System == "fero" && g.Scenario == bench.FixedRate && g.Config.Size == size && g.Config.Clients == 1 && g.Config.Servers == 1 {
				if e := groupOf(rep, "echo", bench.FixedRate, func(c bench.Config) bool { return c == g.Config }); e != nil {
					f, ef := percentile(g, 99.9), percentile(e, 99.9)
					if f > 0 && ef > 0 && (best == nil || g.Config.Rate > best.Config.Rate) {
						best = g
						t.ratio = f / ef
						t.met = t.ratio <= 2
						t.detail = fmt.Sprintf("at %s req/s: fero %s ÷ echo %s", digits(int64(g.Config.Rate)), micros(f), micros(ef))
						if rr != nil {
							if max := milestone(rr, bench.Sacks); max > 0 {
								t.detail += fmt.Sprintf(" (%.0f%% of fero's sacks)", 100*g.Config.Rate/max)
							}
						}
						t.missing = ""
					}
				}
			}
		}
		add(t)
	}

	// Memory: a server's peak RSS against the payload it holds, every
	// record of the trial being kept in its history.
	{
		t := target{name: "server peak RSS ÷ payload", want: "≤ 2.50×", missing: "needs fero, scenario oneway"}
		if ow != nil && ow.Config.Records > 0 {
			payload := float64(ow.Config.Records) * float64(ow.Config.Size)
			if rss := ow.ServerMaxRSS.Median; rss > 0 {
				t.ratio = rss / payload
				t.met = t.ratio <= 2.5
				t.detail = fmt.Sprintf("%.0f MB ÷ %.0f MB (%s × %d B)", rss/1e6, payload/1e6, digits(ow.Config.Records), ow.Config.Size)
				t.missing = ""
			}
		}
		add(t)
	}

	// Durable: fero fsyncing before every ack against Redis's appendfsync
	// always.
	{
		var f, p float64
		var pname string
		d := groupOf(rep, "fero-group", bench.OneWay, one)
		if d != nil {
			f = milestone(d, bench.Yacks)
			if peer := fasterRedis(rep, "-always", bench.OneWay, d.Config); peer != nil {
				p, pname = milestone(peer, bench.Yacks), peer.System
			}
		}
		ratioTarget("durable yacks ÷ Redis always", "≥ 1.00×", f, p, "fero-group "+rate(f), pname+" "+rate(p), 1, true,
			"needs --fsync group (fero-group and redis-always)")
	}

	// The stateful path against the original fero.
	{
		var f, o float64
		if rr != nil {
			f = milestone(rr, bench.Sacks)
			if g := groupOf(rep, "fero-1.7.1", bench.RequestReply, func(c bench.Config) bool { return c == rr.Config }); g != nil {
				o = milestone(g, bench.Sacks)
			}
		}
		ratioTarget("sacks ÷ fero 1.7.1", "≥ 30×", f, o, "fero "+rate(f), "fero-1.7.1 "+rate(o), 30, true,
			"needs fero and fero-1.7.1, scenario reqreply")
	}
	return out
}

// writeTargets prints the targets table when fero ran.
func writeTargets(w io.Writer, rep *bench.Report) error {
	if !slices.ContainsFunc(rep.Groups, func(g *bench.Group) bool { return g.System == "fero" }) {
		return nil
	}
	ts := targets(rep)
	var b strings.Builder
	b.WriteString("\n== Speed targets (issue 21): fero against its peers in this run, medians ==\n")
	met, measured := 0, 0
	for _, t := range ts {
		switch {
		case t.ratio == 0:
			fmt.Fprintf(&b, "  %-34s %-8s %9s   not measured: %s\n", t.name, t.want, "-", t.missing)
		default:
			measured++
			verdict := "short"
			if t.met {
				met++
				verdict = "met"
			}
			fmt.Fprintf(&b, "  %-34s %-8s %8.2f×   %-5s  %s\n", t.name, t.want, t.ratio, verdict, t.detail)
		}
	}
	fmt.Fprintf(&b, "  %d of %d measured targets met; %d not measured in this run\n", met, measured, len(ts)-measured)
	_, err := io.WriteString(w, b.String())
	return err
}

// groupOf is the first group of system and scenario whose configuration
// ok accepts (nil: any), or nil.
func groupOf(rep *bench.Report, system string, s bench.Scenario, ok func(bench.Config) bool) *bench.Group {
	for _, g := range rep.Groups {
		if g.System == system && g.Scenario == s && (ok == nil || ok(g.Config)) {
			return g
		}
	}
	return nil
}

// fasterRedis is the group of the faster Redis driver (redis or
// redis-rueidis, with suffix for a durable configuration) for s and c,
// by measureOf; nil if neither ran without errors.
func fasterRedis(rep *bench.Report, suffix string, s bench.Scenario, c bench.Config) *bench.Group {
	var best *bench.Group
	var bestV float64
	for _, sys := range []string{"redis" + suffix, "redis-rueidis" + suffix} {
		g := groupOf(rep, sys, s, func(o bench.Config) bool { return o == c })
		if g == nil || g.Errors > 0 {
			continue
		}
		_, v, higher := measureOf(g)
		if v <= 0 {
			continue
		}
		if best == nil || (v > bestV) == higher {
			best, bestV = g, v
		}
	}
	return best
}

// milestone is g's median records/s at the named milestone, or 0.
func milestone(g *bench.Group, name string) float64 {
	for _, m := range g.Milestones {
		if m.Name == name {
			return m.RecordsPerSec.Median
		}
	}
	return 0
}

// percentile is g's median latency at percentile p, in nanoseconds, or 0.
func percentile(g *bench.Group, p float64) float64 {
	i := slices.Index(bench.ReportPercentiles, p)
	if ls := g.Latency[bench.HistLatency]; ls != nil && i >= 0 && i < len(ls.Percentiles) {
		return ls.Percentiles[i].Median
	}
	return 0
}

// cpuPerRecord is the client and server CPU seconds, medians, per record
// of g's trial, or 0.
func cpuPerRecord(g *bench.Group) float64 {
	if g.Config.Records <= 0 {
		return 0
	}
	return (g.ClientCPU.Median + g.ServerCPU.Median) / float64(g.Config.Records)
}

func rate(v float64) string { return digits(int64(v)) + " rec/s" }

func micros(ns float64) string { return fmt.Sprintf("%.1f µs", ns/1e3) }
