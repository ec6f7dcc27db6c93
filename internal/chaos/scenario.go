package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/fero-go/fero/internal/ring"
)

// The scenarios: issue 16's two regression cases, each a fixed schedule
// that every seed runs the same way. The seed varies only the workload:
// its keys (see [Config.Scenario]) and its operations and their timing.
const (
	// ScenarioPausedOwner SIGSTOPs the server that owns the most
	// partitions for PausedOwnerPause, past gossip's dead timeout (about
	// 1.5 s with the lan preset), while the clients write and read
	// through the owners, then SIGCONTs it and lets the workload run on.
	// Writes held up in the paused owner must never take effect after
	// their callers were answered, nor replace newer Majority writes.
	ScenarioPausedOwner = "paused-owner"
	// ScenarioLongSplit cuts the server that owns the most partitions,
	// with the first client, off from the other servers and clients for
	// LongSplitLength, longer than every timeout and window of a server
	// with default settings, so both sides write throughout; then heals.
	// The cut-off side must never replace the majority's Majority writes.
	ScenarioLongSplit = "long-split"
	// ScenarioOneWay drops the packets of the server that owns the most
	// partitions to another server for OneWayLength, gossip left to see
	// both alive (issue 42), while writers through every server
	// (via.go) write Majority; then heals. Besides the safety checkers,
	// CheckVia holds writes through every server to half their rate
	// from OneWayBound on, and every acked one must be there after the
	// heal.
	ScenarioOneWay = "oneway"
	// ScenarioUpgrade is a rolling upgrade (issue 43): the cluster starts
	// on one build (Config.Fero, an earlier one) and each server in turn,
	// UpgradeEvery apart, is stopped as an orchestrator stops it (SIGTERM:
	// it leaves gracefully) and started UpgradeDown later on the same data
	// directory with the other build (Config.Upgrade), while the clients
	// and writers through every server (via.go) write Majority. Besides
	// the safety checkers, CheckUpgradeVia holds every failed write through
	// a server to the window of some server's upgrade, and every acked one
	// must be there at the end.
	ScenarioUpgrade = "upgrade"
)

// Scenarios lists the scenarios by name.
var Scenarios = []string{ScenarioPausedOwner, ScenarioLongSplit, ScenarioOneWay, ScenarioUpgrade}

const (
	// scenarioWarmup runs the workload unhindered first: clients up,
	// every partition synced, Majority writes acked everywhere.
	scenarioWarmup = 5 * time.Second
	// PausedOwnerPause is the pause, four times lan's dead timeout.
	PausedOwnerPause = 6 * time.Second
	// pausedOwnerAfter is the workload after SIGCONT, before the heal:
	// time for the resumed node to read what it held and take its
	// partitions back.
	pausedOwnerAfter = 8 * time.Second
	// LongSplitLength is the split: longer than every timeout of a
	// server with default settings, the longest being the membership's
	// rejoin backoff cap (60 s). (The quorum window the split
	// outlasted is gone: nothing ages out of the configuration, rule 9.)
	LongSplitLength = 65 * time.Second
	// OneWayLength is the one-way drop, issue 42's measurement.
	OneWayLength = 60 * time.Second
	// oneWayAfter is the workload after the heal.
	oneWayAfter = 5 * time.Second
	// UpgradeDown is how long an upgraded server is down: from its
	// SIGTERM to the start of the new build (its graceful leave takes 1-3 s
	// with lan's timers).
	UpgradeDown = 4 * time.Second
	// UpgradeEvery is the time between two servers' upgrades: as a
	// rolling deploy waits for each server's readiness, the next goes
	// down once the last votes again (the injector also waits for that,
	// up to 20 s).
	UpgradeEvery = 20 * time.Second
	// UpgradeWindow is how long after its new build starts a server's
	// upgrade may still fail writes: the server comes up, catches up and
	// takes its partitions back (lan's failover is 1.7-2.2 s).
	UpgradeWindow = 10 * time.Second
	// upgradeAfter is the workload after the last upgrade.
	upgradeAfter = 15 * time.Second
)

// The placement options `fero serve` uses by default; the harness passes
// no others, so it places partitions as every server does (placement
// depends on member IDs alone).
var servePlacement = []ring.Option{ring.WithPartitions(271), ring.WithVNodes(200), ring.WithReplicas(2)}

// BiggestOwner returns the server of servers that owns the most
// partitions under `fero serve`'s default placement; a tie goes to the
// first.
func BiggestOwner(servers []string) (string, error) {
	r, err := ring.New(servePlacement...)
	if err != nil {
		return "", err
	}
	ms := make([]ring.Member, len(servers))
	for i, s := range servers {
		ms[i] = ring.Member{ID: s}
	}
	m, err := r.Build(ms)
	if err != nil {
		return "", fmt.Errorf("chaos: ring of %v: %w", servers, err)
	}
	best := servers[0]
	for _, s := range servers[1:] {
		if len(m.Owned(s)) > len(m.Owned(best)) {
			best = s
		}
	}
	return best, nil
}

// scenario builds the schedule of cfg.Scenario. Its own timings replace
// cfg.Duration and cfg.Gap, and no fault is random.
func scenario(cfg ScheduleConfig) (*Schedule, error) {
	if !slices.Contains(Scenarios, cfg.Scenario) {
		return nil, fmt.Errorf("chaos: unknown scenario %q (scenarios: %v)", cfg.Scenario, Scenarios)
	}
	owner, err := BiggestOwner(cfg.Servers)
	if err != nil {
		return nil, err
	}
	f := Fault{ID: 1, Start: scenarioWarmup}
	switch cfg.Scenario {
	case ScenarioPausedOwner:
		if len(cfg.Servers) < 3 {
			return nil, fmt.Errorf("chaos: %s needs 3 servers or more, so a majority runs on", cfg.Scenario)
		}
		f.Kind, f.Node = KindPause, owner
		f.Stop = f.Start + PausedOwnerPause
		cfg.Duration = f.Stop + pausedOwnerAfter
	case ScenarioLongSplit:
		if len(cfg.Servers) < 3 || len(cfg.Clients) < 2 {
			return nil, fmt.Errorf("chaos: %s needs 3 servers or more and 2 clients or more, so both sides write", cfg.Scenario)
		}
		cut := []string{owner, cfg.Clients[0]}
		var rest []string
		for _, n := range slices.Concat(cfg.Servers, cfg.Clients[1:], []string{cfg.Spare}) {
			if n != "" && n != owner {
				rest = append(rest, n)
			}
		}
		slices.Sort(cut)
		slices.Sort(rest)
		f.Kind, f.Groups = KindPartition, [][]string{cut, rest}
		slices.SortFunc(f.Groups, func(a, b []string) int { return cmp.Compare(a[0], b[0]) })
		f.Stop = f.Start + LongSplitLength
		cfg.Duration = f.Stop
	case ScenarioOneWay:
		if len(cfg.Servers) < 3 {
			return nil, fmt.Errorf("chaos: %s needs 3 servers or more, so a third can carry what the two cannot send each other", cfg.Scenario)
		}
		f.Kind, f.From = KindOneWay, owner
		for _, s := range cfg.Servers {
			if s != owner {
				f.To = s
				break
			}
		}
		f.Stop = f.Start + OneWayLength
		cfg.Duration = f.Stop + oneWayAfter
	case ScenarioUpgrade:
		if len(cfg.Servers) < 3 {
			return nil, fmt.Errorf("chaos: %s needs 3 servers or more, so a majority runs on while one is upgraded", cfg.Scenario)
		}
		var fs []Fault
		for i, srv := range cfg.Servers {
			start := scenarioWarmup + time.Duration(i)*UpgradeEvery
			fs = append(fs, Fault{ID: i + 1, Kind: KindLeave, Node: srv, Start: start, Stop: start + UpgradeDown})
		}
		cfg.Duration = fs[len(fs)-1].Stop + upgradeAfter
		cfg.Kinds, cfg.Gap = []Kind{KindLeave}, 0
		s := &Schedule{Config: cfg, Faults: fs}
		s.steps()
		return s, nil
	}
	cfg.Kinds, cfg.Gap = []Kind{f.Kind}, 0
	s := &Schedule{Config: cfg, Faults: []Fault{f}}
	s.steps()
	return s, nil
}
