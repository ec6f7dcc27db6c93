package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Report is everything one fero-bench invocation measured.
type Report struct {
	Environment Environment `json:"environment"`
	Params      Params      `json:"params"`
	Systems     []string    `json:"systems"`
	// Baseline is the system every other is quoted against, if any.
	Baseline string        `json:"baseline,omitempty"`
	Runs     int           `json:"runs"`
	Groups   []*Group      `json:"groups"`
	Trials   []TrialResult `json:"trials"`
}

// Spread is a figure over the runs: median with min and max.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// SpreadOf summarizes xs; the median of an even count is the mean of the
// middle two.
func SpreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

// MilestoneSpread is one throughput milestone over the runs.
type MilestoneSpread struct {
	Name string `json:"name"`
	// Seconds, records per second and MB (10^6 bytes) of payload per second.
	Seconds       Spread `json:"seconds"`
	RecordsPerSec Spread `json:"records_per_sec"`
	MBPerSec      Spread `json:"mb_per_sec"`
}

// LatencySpread is one histogram's report figures over the runs, in
// nanoseconds; Merged is over every run's samples together.
type LatencySpread struct {
	Percentiles []Spread `json:"percentiles_ns"`
	Max         Spread   `json:"max_ns"`
	Count       int64    `json:"count"`
	Merged      Summary  `json:"merged"`
}

// Group is one system, scenario and configuration over all runs.
type Group struct {
	System     string                    `json:"system"`
	Scenario   Scenario                  `json:"scenario"`
	Label      string                    `json:"label"`
	Config     Config                    `json:"config"`
	Runs       int                       `json:"runs"`
	Milestones []MilestoneSpread         `json:"milestones,omitempty"`
	Latency    map[string]*LatencySpread `json:"latency,omitempty"`
	Errors     int64                     `json:"errors"`
	Timeouts   int64                     `json:"timeouts,omitempty"`
	Clamped    int64                     `json:"clamped,omitempty"`
	// Rates per second for FixedRate: requested, sends issued, completions.
	RequestedRate float64 `json:"requested_rate,omitempty"`
	SentRate      Spread  `json:"sent_rate"`
	CompletedRate Spread  `json:"completed_rate"`
	// BytesPerSec is payload throughput over the measured window.
	BytesPerSec Spread `json:"bytes_per_sec"`
	// GeneratorBound counts runs whose generator lag p99 exceeded the send
	// interval, the tick and the sleeps' lateness (see TrialResult).
	GeneratorBound int           `json:"generator_bound_runs,omitempty"`
	Interval       time.Duration `json:"interval_ns,omitempty"`
	Tick           time.Duration `json:"tick_ns,omitempty"`
	ClientCPU      Spread        `json:"client_cpu_seconds"`
	ServerCPU      Spread        `json:"server_cpu_seconds"`
	ClientMaxRSS   Spread        `json:"client_max_rss_bytes"`
	// ClientWaits and ServerWaits are the voluntary context switches per
	// record completed, all client or all server processes together:
	// how often their threads blocked, and had to be woken, per write or
	// per round trip (CPUTimes.Waits).
	ClientWaits  Spread `json:"client_waits_per_record"`
	ServerWaits  Spread `json:"server_waits_per_record"`
	ServerMaxRSS Spread `json:"server_max_rss_bytes"`
	// Processes is each process's CPU seconds and peak RSS, by name, in
	// the order of the first run's.
	Processes []ProcessSpread `json:"processes,omitempty"`
	// Attached: the group ran against servers it did not start.
	Attached bool `json:"attached,omitempty"`
	// Stable and Connected are the start-up times before each trial (see
	// TrialResult).
	Stable       Spread `json:"stable_seconds"`
	Connected    Spread `json:"connected_seconds"`
	MachineBusy  Spread `json:"machine_busy"`
	MachineSteal Spread `json:"machine_steal"`
	// OtherCPU is the machine's busy CPU seconds in the window minus our
	// processes': load from elsewhere that the figures competed with.
	OtherCPU Spread `json:"other_cpu_seconds"`
	Window   Spread `json:"window_seconds"`
	// Durability is when the system's servers fsync (TrialResult);
	// empty for a system that keeps nothing on disk.
	Durability string `json:"durability,omitempty"`
	// FsyncsPerSec is the servers' fsyncs, all together, per second of the
	// trial. RecordsPerFsync is the trial's records over those fsyncs,
	// over the runs that made at least one. Each is nil where the system
	// does not count its fsyncs, and RecordsPerFsync where no run fsynced.
	FsyncsPerSec    *Spread `json:"fsyncs_per_sec,omitempty"`
	RecordsPerFsync *Spread `json:"records_per_fsync,omitempty"`

	merged map[string]*Recorder
}

// BuildReport groups trial results by system, scenario and configuration,
// in the order they first ran.
func BuildReport(env Environment, p Params, systems []string, baseline string, runs int, results []TrialResult) *Report {
	r := &Report{Environment: env, Params: p, Systems: systems, Baseline: baseline, Runs: runs, Trials: results}
	byKey := map[trialKey][]*TrialResult{}
	var order []trialKey
	for i := range results {
		k := results[i].key()
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], &results[i])
	}
	for _, k := range order {
		r.Groups = append(r.Groups, buildGroup(k, byKey[k]))
	}
	return r
}

func buildGroup(k trialKey, trs []*TrialResult) *Group {
	g := &Group{System: k.System, Scenario: k.Scenario, Label: k.Scenario.Label(), Config: k.Config, Runs: len(trs), merged: map[string]*Recorder{}}
	collect := func(f func(*TrialResult) float64) Spread {
		xs := make([]float64, len(trs))
		for i, t := range trs {
			xs[i] = f(t)
		}
		return SpreadOf(xs)
	}
	for _, t := range trs {
		g.Attached = g.Attached || t.Attached
		g.Errors += t.Errors
		g.Timeouts += t.Timeouts
		g.Clamped += t.Clamped
		if t.GeneratorBound {
			g.GeneratorBound++
		}
		g.Interval = t.Interval
		g.Tick = t.Tick
		for name, h := range t.hists {
			if g.merged[name] == nil {
				g.merged[name] = NewRecorder()
			}
			g.merged[name].Merge(h)
		}
	}
	if len(trs) > 0 {
		for _, m := range trs[0].Milestones {
			name := m.Name
			ms := MilestoneSpread{Name: name}
			ms.Seconds = collect(func(t *TrialResult) float64 { return milestone(t, name).Seconds() })
			ms.RecordsPerSec = collect(func(t *TrialResult) float64 { return t.Rate(name) })
			ms.MBPerSec = collect(func(t *TrialResult) float64 {
				return t.Rate(name) * float64(t.Config.Size) / 1e6
			})
			g.Milestones = append(g.Milestones, ms)
		}
	}
	if len(g.merged) > 0 {
		g.Latency = map[string]*LatencySpread{}
		for name, h := range g.merged {
			ls := &LatencySpread{Merged: h.Summarize(), Count: h.Count()}
			for i := range ReportPercentiles {
				ls.Percentiles = append(ls.Percentiles, collect(func(t *TrialResult) float64 {
					return float64(t.Summaries[name].Values[i])
				}))
			}
			ls.Max = collect(func(t *TrialResult) float64 { return float64(t.Summaries[name].Max) })
			g.Latency[name] = ls
		}
	}
	g.RequestedRate = k.Config.Rate
	g.SentRate = collect(func(t *TrialResult) float64 { return perSec(t.Sent, t.Window) })
	g.CompletedRate = collect(func(t *TrialResult) float64 { return perSec(t.Records, t.Window) })
	g.BytesPerSec = collect(func(t *TrialResult) float64 { return perSec(t.Bytes, t.Window) })
	g.ClientCPU = collect(func(t *TrialResult) float64 { return t.ClientCPU.Total().Seconds() })
	g.ServerCPU = collect(func(t *TrialResult) float64 { return t.ServerCPU.Total().Seconds() })
	g.ClientMaxRSS = collect(func(t *TrialResult) float64 { return float64(t.ClientMaxRSS) })
	g.ClientWaits = collect(func(t *TrialResult) float64 { return perRecord(t.ClientCPU.Waits, t.Records) })
	g.ServerWaits = collect(func(t *TrialResult) float64 { return perRecord(t.ServerCPU.Waits, t.Records) })
	g.ServerMaxRSS = collect(func(t *TrialResult) float64 { return float64(t.ServerMaxRSS) })
	if len(trs) > 0 {
		for _, pu := range trs[0].Processes {
			name := pu.Name
			g.Processes = append(g.Processes, ProcessSpread{
				Name:   name,
				CPU:    collect(func(t *TrialResult) float64 { return t.process(name).CPU.Total().Seconds() }),
				MaxRSS: collect(func(t *TrialResult) float64 { return float64(t.process(name).MaxRSS) }),
			})
		}
	}
	g.Stable = collect(func(t *TrialResult) float64 { return t.Stable.Seconds() })
	g.Connected = collect(func(t *TrialResult) float64 { return t.Connected.Seconds() })
	g.MachineBusy = collect(func(t *TrialResult) float64 { return t.Machine.Busy })
	g.MachineSteal = collect(func(t *TrialResult) float64 { return t.Machine.Steal })
	g.OtherCPU = collect(func(t *TrialResult) float64 {
		return math.Max(0, t.Machine.Seconds-t.ClientCPU.Total().Seconds()-t.ServerCPU.Total().Seconds())
	})
	g.Window = collect(func(t *TrialResult) float64 { return t.Window.Seconds() })
	if len(trs) > 0 {
		g.Durability = trs[0].Durability
	}
	if len(trs) > 0 && trs[0].Fsyncs != nil {
		var perSecond, perFsync []float64
		for _, t := range trs {
			if t.Fsyncs == nil {
				continue
			}
			perSecond = append(perSecond, perSec(int64(*t.Fsyncs), t.span()))
			if *t.Fsyncs > 0 {
				perFsync = append(perFsync, float64(t.Records)/float64(*t.Fsyncs))
			}
		}
		s := SpreadOf(perSecond)
		g.FsyncsPerSec = &s
		if len(perFsync) > 0 {
			s := SpreadOf(perFsync)
			g.RecordsPerFsync = &s
		}
	}
	return g
}

// span is the trial's time from its start to its last milestone or the end
// of its measured window, whichever is later: what the servers' fsyncs are
// quoted per second of.
func (t *TrialResult) span() time.Duration {
	d := t.Window
	for _, m := range t.Milestones {
		d = max(d, m.Nanos)
	}
	return d
}

// ProcessSpread is one process's costs over a group's runs.
type ProcessSpread struct {
	Name   string `json:"name"`
	CPU    Spread `json:"cpu_seconds"`
	MaxRSS Spread `json:"max_rss_bytes"`
}

func (t *TrialResult) process(name string) ProcessUsage {
	for _, p := range t.Processes {
		if p.Name == name {
			return p
		}
	}
	return ProcessUsage{}
}

func milestone(t *TrialResult, name string) time.Duration {
	for _, m := range t.Milestones {
		if m.Name == name {
			return m.Nanos
		}
	}
	return 0
}

func perSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Merged returns the group's histogram over all runs, or nil.
func (g *Group) Merged(name string) *Recorder { return g.merged[name] }

// baselineFor finds the baseline system's group for the same scenario and
// configuration as g.
func (r *Report) baselineFor(g *Group) *Group {
	if r.Baseline == "" || g.System == r.Baseline {
		return nil
	}
	for _, b := range r.Groups {
		if b.System == r.Baseline && b.Scenario == g.Scenario && b.Config == g.Config {
			return b
		}
	}
	return nil
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report JSON: %w", err)
	}
	return nil
}

// WriteText writes the human report.
func (r *Report) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	r.writeHeader(ew)
	var lastScenario Scenario
	for _, g := range r.Groups {
		if g.Scenario != lastScenario {
			fmt.Fprintf(ew, "\n== %s ==\n", g.Label)
			r.writeScenarioNote(ew, g.Scenario)
			lastScenario = g.Scenario
		}
		if g.Scenario.Throughput() {
			r.writeThroughput(ew, g)
		} else {
			r.writeLatency(ew, g)
		}
	}
	return ew.err
}

func (r *Report) writeHeader(w io.Writer) {
	e := r.Environment
	cpu := e.CPU.Model
	if cpu == "" {
		cpu = "unknown CPU"
	}
	fmt.Fprintf(w, "fero-bench · %s\n", e.Started.Format(time.RFC3339))
	fmt.Fprintf(w, "machine:  %s × %d logical CPUs (NumCPU %d) · %s · %s %s/%s · GOMAXPROCS %d\n",
		cpu, e.CPU.Count, e.NumCPU, orUnknown(e.Kernel), e.GoVersion, e.GOOS, e.GOARCH, e.GOMAXPROCS)
	if len(r.Params.Attach) > 0 {
		fmt.Fprintf(w, "topology: clients are separate OS processes on this host, over loopback; attached to %d server(s) this run did not start: %s\n",
			len(r.Params.Attach), strings.Join(r.Params.Attach, ", "))
	} else {
		fmt.Fprintf(w, "topology: %s %s\n", e.Topology, r.Params.Host)
	}
	fmt.Fprintf(w, "units:    MB = 10^6 bytes of payload, counted once per record · latency in µs · ")
	if r.Runs > 1 {
		fmt.Fprintf(w, "%d runs, configurations interleaved: median [min … max]\n", r.Runs)
	} else {
		fmt.Fprintf(w, "1 run\n")
	}
	fmt.Fprintf(w, "cpu:      seconds of CPU used during the measured window by all client / all server processes;\n")
	fmt.Fprintf(w, "          machine busy = share of all CPUs busy in that window (from /proc/stat), ours included\n")
	if r.durable() {
		// Attached servers keep their data where they were told to.
		if len(r.Params.Attach) == 0 {
			dir := r.Params.DataDir
			if dir == "" {
				dir = os.TempDir()
			}
			fmt.Fprintf(w, "disk:     each server of a durable system keeps a fresh data directory under %s, removed after its trial;\n", dir)
			fmt.Fprintf(w, "          ")
		} else {
			fmt.Fprintf(w, "disk:     ")
		}
		fmt.Fprintf(w, "fsyncs are the servers' own counts, all servers together, per second of the trial\n")
	}
}

// durable reports whether any system measured kept its records on disk.
func (r *Report) durable() bool {
	for _, g := range r.Groups {
		if g.Durability != "" {
			return true
		}
	}
	return false
}

func (r *Report) writeScenarioNote(w io.Writer, s Scenario) {
	p := r.Params
	switch s {
	case OneWay:
		fmt.Fprintf(w, "tacks = every record handed to the socket · yacks = server confirmed it received them all (final sync round trip)\n")
		fmt.Fprintf(w, "warm-up: %s records per client, unmeasured\n", groupDigits(p.WarmupRecords))
	case RequestReply:
		fmt.Fprintf(w, "tacks = every request handed to the socket · sacks = every reply back · window %s requests in flight per client\n", groupDigits(int64(p.Window)))
		fmt.Fprintf(w, "warm-up: %s records per client, unmeasured\n", groupDigits(p.WarmupRecords))
	case RoundTrip:
		fmt.Fprintf(w, "%s sequential calls per client after %s unmeasured warm-up calls\n", groupDigits(p.Count), groupDigits(p.WarmupCount))
	case FixedRate:
		fmt.Fprintf(w, "send i is due at t0 + i/R, never rescheduled · latency = reply − intended send (headline) · service = reply − actual send · lag = actual − intended send (generator) · wake = how late the generator's sleeps ended\n")
		gen := "the generator sleeps until each send is due"
		if p.Tick > 0 {
			gen = fmt.Sprintf("the generator sleeps at least %s and sends what fell due meanwhile together", p.Tick)
		}
		fmt.Fprintf(w, "%s · warm-up %s unmeasured on the same schedule, then %s measured · a request slower than %s is an error and keeps its latency\n", gen, p.Warmup, p.Duration, p.Timeout)
	}
}

func (r *Report) writeThroughput(w io.Writer, g *Group) {
	fmt.Fprintf(w, "\n%s · %s\n", g.System, g.Config)
	base := r.baselineFor(g)
	for i, m := range g.Milestones {
		fmt.Fprintf(w, "  * %s: %9.2f ms | %12s records/s | %9.2f MB/s", m.Name,
			m.Seconds.Median*1e3, groupDigits(int64(m.RecordsPerSec.Median)), m.MBPerSec.Median)
		if g.Runs > 1 {
			fmt.Fprintf(w, "  [%s … %s records/s]", groupDigits(int64(m.RecordsPerSec.Min)), groupDigits(int64(m.RecordsPerSec.Max)))
		}
		if base != nil && i < len(base.Milestones) && base.Milestones[i].Name == m.Name && base.Milestones[i].RecordsPerSec.Median > 0 {
			fmt.Fprintf(w, "  %.2f× %s", m.RecordsPerSec.Median/base.Milestones[i].RecordsPerSec.Median, r.Baseline)
		}
		fmt.Fprintln(w)
	}
	r.writeCosts(w, g)
}

// writeDisk writes a durable system's policy and fsync figures.
func (r *Report) writeDisk(w io.Writer, g *Group) {
	if g.Durability == "" {
		return
	}
	fmt.Fprintf(w, "  disk: %s · ", g.Durability)
	switch {
	case g.FsyncsPerSec == nil:
		fmt.Fprintf(w, "fsyncs/s n/a · records per fsync n/a (the system does not count its fsyncs)\n")
	case g.RecordsPerFsync == nil:
		fmt.Fprintf(w, "%s fsyncs/s · records per fsync n/a (no fsync)\n", spreadF(*g.FsyncsPerSec, 1, "%.0f"))
	default:
		fmt.Fprintf(w, "%s fsyncs/s · %s records per fsync\n", spreadF(*g.FsyncsPerSec, 1, "%.0f"), spreadF(*g.RecordsPerFsync, 1, "%.1f"))
	}
}

func (r *Report) writeCosts(w io.Writer, g *Group) {
	r.writeDisk(w, g)
	if g.Attached {
		fmt.Fprintf(w, "  errors %d · cpu client %s s · peak RSS client %s · servers attached: their cpu and RSS not measured\n",
			g.Errors, spreadF(g.ClientCPU, 1, "%.2f"), spreadF(g.ClientMaxRSS, 1e-6, "%.1f MB"))
		fmt.Fprintf(w, "  machine busy %s during the trial, other processes' share %s CPU-s (the attached servers' included)",
			spreadF(g.MachineBusy, 100, "%.0f%%"), spreadF(g.OtherCPU, 1, "%.2f"))
	} else {
		fmt.Fprintf(w, "  errors %d · cpu client %s s, server %s s · peak RSS client %s, server %s\n",
			g.Errors, spreadF(g.ClientCPU, 1, "%.2f"), spreadF(g.ServerCPU, 1, "%.2f"),
			spreadF(g.ClientMaxRSS, 1e-6, "%.1f MB"), spreadF(g.ServerMaxRSS, 1e-6, "%.1f MB"))
		fmt.Fprintf(w, "  machine busy %s during the trial, other processes' share %s CPU-s",
			spreadF(g.MachineBusy, 100, "%.0f%%"), spreadF(g.OtherCPU, 1, "%.2f"))
	}
	if g.MachineSteal.Max > 0.01 {
		fmt.Fprintf(w, " (steal %s)", spreadF(g.MachineSteal, 100, "%.0f%%"))
	}
	fmt.Fprintln(w)
	if g.ClientWaits.Max > 0 {
		fmt.Fprintf(w, "  thread wake-ups per record (voluntary context switches): client %s", spreadF(g.ClientWaits, 1, "%.2f"))
		if !g.Attached {
			fmt.Fprintf(w, ", server %s", spreadF(g.ServerWaits, 1, "%.2f"))
		}
		fmt.Fprintln(w)
	}
	if g.Clamped > 0 {
		fmt.Fprintf(w, "  %d latencies fell outside the histogram range and were clamped to it\n", g.Clamped)
	}
	if len(g.Processes) > 2 {
		// Several servers or clients: each one's share.
		fmt.Fprint(w, "  per process, cpu and peak RSS:")
		for i, p := range g.Processes {
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(w, "%s %s %s s %s", sep, p.Name, spreadF(p.CPU, 1, "%.2f"), spreadF(p.MaxRSS, 1e-6, "%.0f MB"))
		}
		fmt.Fprintln(w)
	}
	stable := "servers stable " + spreadF(g.Stable, 1e3, "%.0f") + " ms"
	if g.Attached {
		stable = "servers attached"
	}
	fmt.Fprintf(w, "  start-up, before the trial: %s, clients connected %s ms\n", stable, spreadF(g.Connected, 1e3, "%.0f"))
}

// latencyRows lists a scenario's histograms in report order.
func latencyRows(s Scenario) []string {
	if s == FixedRate {
		return []string{HistLatency, HistService, HistLag, HistWake}
	}
	return []string{HistLatency}
}

func (r *Report) writeLatency(w io.Writer, g *Group) {
	fmt.Fprintf(w, "\n%s · %s\n", g.System, g.Config)
	head := append([]string{"µs"}, PercentileLabels()...)
	rows := [][]string{append(head, "max", "count")}
	unresolved := false
	base := r.baselineFor(g)
	for _, name := range latencyRows(g.Scenario) {
		ls := g.Latency[name]
		if ls == nil {
			continue
		}
		// Per-run counts decide resolution: a median over runs is no better
		// resolved than one run.
		perRun := ls.Count / int64(max(g.Runs, 1))
		row := []string{name}
		for i, p := range ReportPercentiles {
			mark := ""
			if !Meaningful(p, perRun) {
				mark, unresolved = "*", true
			}
			row = append(row, micros(ls.Percentiles[i].Median)+mark)
		}
		rows = append(rows, append(row, micros(ls.Max.Median), groupDigits(perRun)))
		if g.Runs > 1 {
			row := []string{"  min…max"}
			for i := range ReportPercentiles {
				row = append(row, micros(ls.Percentiles[i].Min)+"…"+micros(ls.Percentiles[i].Max))
			}
			rows = append(rows, append(row, micros(ls.Max.Min)+"…"+micros(ls.Max.Max), ""))
		}
		if base != nil && name == HistLatency && base.Latency[name] != nil {
			bl := base.Latency[name]
			row := []string{"  × " + r.Baseline}
			for i := range ReportPercentiles {
				row = append(row, ratio(ls.Percentiles[i].Median, bl.Percentiles[i].Median))
			}
			rows = append(rows, append(row, ratio(ls.Max.Median, bl.Max.Median), ""))
		}
	}
	writeTable(w, "  ", rows)
	if unresolved {
		fmt.Fprintf(w, "  * fewer than 10 samples lie beyond this percentile in a run: it is not resolved\n")
	}
	if g.Scenario == FixedRate {
		fmt.Fprintf(w, "  requested %s/s · sent %s/s · completed %s/s · measured %s s",
			groupDigits(int64(g.RequestedRate)), spreadF(g.SentRate, 1, "%.0f"), spreadF(g.CompletedRate, 1, "%.0f"), spreadF(g.Window, 1, "%.1f"))
		fmt.Fprintf(w, " · timeouts %d\n", g.Timeouts)
		if g.GeneratorBound > 0 {
			fmt.Fprintf(w, "  !! generator-bound in %d of %d runs: lag p99 exceeded the %s send interval plus the %s tick plus wake p99, so the load generator, not the system, set the pace\n",
				g.GeneratorBound, g.Runs, g.Interval, g.Tick)
		}
	}
	fmt.Fprintf(w, "  payload %s MB/s\n", spreadF(g.BytesPerSec, 1e-6, "%.2f"))
	r.writeCosts(w, g)
}

// writeTable aligns rows: the first column left, the others right.
func writeTable(w io.Writer, indent string, rows [][]string) {
	var widths []int
	for _, r := range rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		b.WriteString(indent)
		for i, c := range r {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

func ratio(a, b float64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func micros(ns float64) string {
	us := ns / 1e3
	switch {
	case us >= 10000:
		return fmt.Sprintf("%.0f", us)
	case us >= 100:
		return fmt.Sprintf("%.1f", us)
	default:
		return fmt.Sprintf("%.2f", us)
	}
}

// spreadF formats a spread scaled by k: the median, and the range when the
// runs differ.
func spreadF(s Spread, k float64, format string) string {
	m := fmt.Sprintf(format, s.Median*k)
	if s.Min == s.Max {
		return m
	}
	return fmt.Sprintf("%s ["+format+" … "+format+"]", m, s.Min*k, s.Max*k)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown kernel"
	}
	return s
}

// errWriter keeps the first write error so the report code stays linear.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return len(p), nil
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, nil
}

// hgrmScale writes .hgrm values in microseconds: three decimals of
// microseconds keep nanosecond detail, and milliseconds would round loopback
// latencies to nothing.
const hgrmScale = 1e3

// WriteFiles writes one .hgrm percentile distribution per group and
// histogram (merged over runs, values in µs) and one SVG chart per latency
// scenario into dir, and returns the paths.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	var paths []string
	charts := map[Scenario][]ChartLine{}
	var chartOrder []Scenario
	for _, g := range r.Groups {
		names := make([]string, 0, len(g.merged))
		for n := range g.merged {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			p := filepath.Join(dir, fmt.Sprintf("%s_%s_%s_%s.hgrm", g.System, g.Scenario, g.Config.slug(), n))
			if err := writeHgrm(p, g.merged[n]); err != nil {
				return paths, err
			}
			paths = append(paths, p)
		}
		if h := g.merged[HistLatency]; h != nil && h.Count() > 0 {
			if _, ok := charts[g.Scenario]; !ok {
				chartOrder = append(chartOrder, g.Scenario)
			}
			charts[g.Scenario] = append(charts[g.Scenario], ChartLine{Name: g.System + " · " + g.Config.String(), Hist: h})
		}
	}
	for _, s := range chartOrder {
		p := filepath.Join(dir, fmt.Sprintf("%s.svg", s))
		f, err := os.Create(p)
		if err != nil {
			return paths, fmt.Errorf("create %s: %w", p, err)
		}
		title := s.Label() + ": latency by percentile"
		if s == FixedRate {
			title += " (reply − intended send)"
		}
		err = WriteChart(f, title, charts[s])
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", p, cerr)
		}
		if err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

func writeHgrm(path string, h *Recorder) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	_, err = h.Histogram().PercentilesPrint(f, 5, hgrmScale)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// perRecord is n per record, or 0 without records.
func perRecord(n uint64, records int64) float64 {
	if records <= 0 {
		return 0
	}
	return float64(n) / float64(records)
}
