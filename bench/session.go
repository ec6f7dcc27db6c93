package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
)

// Session is one fero-bench invocation: systems, scenarios and the
// permutations of the original's flags, repeated Runs times with the trials
// interleaved.
type Session struct {
	Runner    *Runner
	Systems   []string
	Baseline  string
	Scenarios []Scenario
	Matrix    Matrix
	Params    Params
	Runs      int
	// Sweep, if set, derives FixedRate's rates instead of Matrix.Rates:
	// each is a fraction of the lowest request→reply throughput any system
	// reaches in a calibration trial, so every system is offered the same
	// loads and none is pushed past its own maximum by a faster one.
	Sweep []float64
	// SweepBase, if set, names the one system whose request→reply
	// throughput the sweep's fractions are of, in place of the lowest of
	// all (its own maximum, whatever the others reach).
	SweepBase string
	// OnTrial, if set, is called before each trial with its position.
	OnTrial func(t Trial, i, n int)
	// OnCalibrated, if set, reports the rate the sweep is based on.
	OnCalibrated func(rate float64)
	// Skip, if set, says which trials a system cannot run: a non-nil
	// error leaves out every trial of that system, scenario and number of
	// servers (the other systems still run it), and keeps the system out
	// of the sweep's calibration when it cannot run FixedRate.
	Skip func(system string, s Scenario, servers int) error
}

// Run runs every trial and returns the report.
func (s *Session) Run(ctx context.Context, env Environment) (*Report, error) {
	if err := s.Matrix.Validate(); err != nil {
		return nil, err
	}
	if s.Runs < 1 {
		return nil, fmt.Errorf("bench: runs must be >= 1, got %d", s.Runs)
	}
	m := s.Matrix
	if len(s.Sweep) > 0 && hasScenario(s.Scenarios, FixedRate) {
		maxRate, err := s.calibrate(ctx)
		if err != nil {
			return nil, err
		}
		if s.OnCalibrated != nil {
			s.OnCalibrated(maxRate)
		}
		m.Rates = SweepRates(maxRate, s.Sweep)
	}
	if hasScenario(s.Scenarios, FixedRate) && len(m.Rates) == 0 {
		return nil, fmt.Errorf("bench: the rate scenario needs --rate or --sweep")
	}
	trials := s.trials(m)
	results := make([]TrialResult, 0, len(trials))
	for i, t := range trials {
		if s.OnTrial != nil {
			s.OnTrial(t, i, len(trials))
		}
		r, err := s.Runner.Run(ctx, t, s.Params)
		if err != nil {
			return nil, fmt.Errorf("run %d %s %s (%s): %w", t.Run, t.System, t.Scenario, t.Config, err)
		}
		results = append(results, r)
	}
	return BuildReport(env, s.Params, s.Systems, s.Baseline, s.Runs, results), nil
}

// trials is every trial of the session over m, interleaved (Trials),
// less those Skip leaves out.
func (s *Session) trials(m Matrix) []Trial {
	trials := Trials(s.Systems, s.Scenarios, m, s.Runs)
	if s.Skip != nil {
		trials = slices.DeleteFunc(trials, func(t Trial) bool { return s.Skip(t.System, t.Scenario, t.Config.Servers) != nil })
	}
	return trials
}

// calibrate measures request→reply throughput for every system with the
// first configuration and returns the lowest.
func (s *Session) calibrate(ctx context.Context) (float64, error) {
	c := s.Matrix.Expand(RequestReply)[0]
	lowest := math.Inf(1)
	for _, sys := range s.Systems {
		if s.Skip != nil && (s.Skip(sys, FixedRate, c.Servers) != nil || s.Skip(sys, RequestReply, c.Servers) != nil) {
			continue
		}
		if s.SweepBase != "" && sys != s.SweepBase {
			continue
		}
		t := Trial{Run: 0, System: sys, Scenario: RequestReply, Config: c}
		if s.OnTrial != nil {
			s.OnTrial(t, -1, 0)
		}
		r, err := s.Runner.Run(ctx, t, s.Params)
		if err != nil {
			return 0, fmt.Errorf("calibrate %s: %w", sys, err)
		}
		lowest = math.Min(lowest, r.Rate(Sacks))
	}
	if lowest <= 0 || math.IsInf(lowest, 0) {
		return 0, fmt.Errorf("bench: calibration measured no throughput")
	}
	return lowest, nil
}

// SweepRates turns fractions of max into whole rates per second.
func SweepRates(max float64, fractions []float64) []float64 {
	out := make([]float64, 0, len(fractions))
	for _, f := range fractions {
		out = append(out, math.Max(1, math.Round(f*max)))
	}
	return out
}

func hasScenario(ss []Scenario, s Scenario) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
