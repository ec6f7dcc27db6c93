package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fero-go/fero/internal/ring"
)

func scenarioConfig(name string, seed uint64, servers int) ScheduleConfig {
	cfg := Config{Seed: seed, Servers: servers, Clients: 2, Settle: 6 * time.Second, Scenario: name}
	return cfg.ScheduleConfig(false)
}

// TestBiggestOwner: the node a scenario faults owns the most partitions
// under fero serve's defaults (271 partitions), the way the servers
// place them.
func TestBiggestOwner(t *testing.T) {
	for _, servers := range [][]string{{"n1", "n2", "n3"}, {"n1", "n2", "n3", "n4", "n5"}} {
		got, err := BiggestOwner(servers)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := ring.New(ring.WithPartitions(271))
		ms := make([]ring.Member, len(servers))
		for i, s := range servers {
			ms[i] = ring.Member{ID: s}
		}
		m, err := r.Build(ms)
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, s := range servers {
			total += len(m.Owned(s))
			if len(m.Owned(s)) > len(m.Owned(got)) {
				t.Errorf("%v: BiggestOwner = %s (%d partitions), but %s owns %d", servers, got, len(m.Owned(got)), s, len(m.Owned(s)))
			}
		}
		if total != 271 {
			t.Fatalf("%v: the servers own %d partitions, want 271", servers, total)
		}
	}
}

// TestScenarioPausedOwner: one pause of the biggest owner, past lan's dead
// timeout, after a warm-up, undone with workload time left before the
// heal; the same for every seed.
func TestScenarioPausedOwner(t *testing.T) {
	for _, servers := range []int{3, 5} {
		s, err := NewSchedule(scenarioConfig(ScenarioPausedOwner, 1, servers))
		if err != nil {
			t.Fatal(err)
		}
		owner, _ := BiggestOwner(s.Config.Servers)
		checkScenario(t, s)
		f := s.Faults[0]
		if f.Kind != KindPause || f.Node != owner {
			t.Fatalf("%d servers: fault %s, want a pause of %s", servers, f, owner)
		}
		if f.Start < 5*time.Second || f.Stop-f.Start < 6*time.Second || s.Config.Duration-f.Stop < 8*time.Second {
			t.Fatalf("%d servers: %s from %v to %v, heal at %v: want a 5s warm-up, a 6s pause, 8s after it",
				servers, f, f.Start, f.Stop, s.Config.Duration)
		}
		other, _ := NewSchedule(scenarioConfig(ScenarioPausedOwner, 2, servers))
		if strings.ReplaceAll(other.String(), "seed=2", "seed=1") != s.String() {
			t.Fatalf("seeds 1 and 2 gave different schedules:\n%s\n%s", s, other)
		}
	}
}

// TestScenarioLongSplit: one partition, at least 60s long, cuts the
// biggest owner and one client off from every other node, so both sides
// have a client writing; it is undone at the heal.
func TestScenarioLongSplit(t *testing.T) {
	for _, servers := range []int{3, 5} {
		cfg := scenarioConfig(ScenarioLongSplit, 7, servers)
		s, err := NewSchedule(cfg)
		if err != nil {
			t.Fatal(err)
		}
		owner, _ := BiggestOwner(cfg.Servers)
		checkScenario(t, s)
		f := s.Faults[0]
		if f.Kind != KindPartition || len(f.Groups) != 2 {
			t.Fatalf("%d servers: fault %s, want a partition in two", servers, f)
		}
		if f.Stop-f.Start < 60*time.Second || f.Stop != s.Config.Duration {
			t.Fatalf("%d servers: split from %v to %v, heal at %v: want at least 60s, until the heal", servers, f.Start, f.Stop, s.Config.Duration)
		}
		cut := f.Groups[slices.IndexFunc(f.Groups, func(g []string) bool { return slices.Contains(g, owner) })]
		if !slices.Equal(cut, []string{"c1", owner}) {
			t.Fatalf("%d servers: %s: the cut-off side is %v, want [c1 %s]", servers, f, cut, owner)
		}
		all := slices.Concat(f.Groups...)
		slices.Sort(all)
		want := slices.Concat(cfg.Servers, cfg.Clients)
		slices.Sort(want)
		if !slices.Equal(all, want) {
			t.Fatalf("%d servers: %s covers %v, want every node once: %v", servers, f, all, want)
		}
	}
	if _, err := NewSchedule(ScheduleConfig{Servers: []string{"n1", "n2", "n3"}, Clients: []string{"c1"}, Scenario: ScenarioLongSplit}); err == nil {
		t.Fatal("long-split with one client: no error, but one side would not write")
	}
}

// checkScenario: a scenario is one fault, started after a warm-up and
// undone once, by the heal.
func checkScenario(t *testing.T, s *Schedule) {
	t.Helper()
	if len(s.Faults) != 1 || len(s.Steps) != 2 {
		t.Fatalf("want one fault, started and undone:\n%s", s)
	}
	start, undo := s.Steps[0], s.Steps[1]
	if start.Undo || !undo.Undo || start.At < 5*time.Second || undo.At <= start.At || undo.At > s.Config.Duration {
		t.Fatalf("want a start after 5s and its undo by the heal at %v:\n%s", s.Config.Duration, s)
	}
}

func TestScenarioUnknown(t *testing.T) {
	if _, err := NewSchedule(scenarioConfig("meteor", 1, 3)); err == nil {
		t.Fatal("an unknown scenario gave a schedule")
	}
}

// TestScenarioKeysRotate: in a scenario, each seed's workload uses other
// keys, so a fixed schedule meets other partition layouts; random
// schedules keep k0… (their recorded seeds replay with them).
func TestScenarioKeysRotate(t *testing.T) {
	keys := func(cfg Config) string {
		args := WorkloadArgs(cfg, nil, nil, "c1", "10.0.0.1", 1, time.Second)
		return args[slices.Index(args, "--keys")+1]
	}
	a := Config{Seed: 1, Servers: 3, Keys: 3, Scenario: ScenarioPausedOwner}
	b := a
	b.Seed = 2
	if keys(a) == keys(b) {
		t.Fatalf("seeds 1 and 2 share keys %s", keys(a))
	}
	if strings.Contains(keys(a), ".") {
		t.Fatalf("keys %s: the partitioner hashes only what comes before '.'", keys(a))
	}
	if got := keys(Config{Seed: 1, Servers: 3, Keys: 3}); got != "k0,k1,k2" {
		t.Fatalf("random schedule's keys = %s, want k0,k1,k2", got)
	}
}

// TestScenarioOneWay: the biggest owner's packets to another server are
// dropped for 60 s after the warm-up, with workload time after the heal;
// the same for every seed.
func TestScenarioOneWay(t *testing.T) {
	for _, servers := range []int{3, 5} {
		s, err := NewSchedule(scenarioConfig(ScenarioOneWay, 1, servers))
		if err != nil {
			t.Fatal(err)
		}
		owner, _ := BiggestOwner(s.Config.Servers)
		checkScenario(t, s)
		f := s.Faults[0]
		if f.Kind != KindOneWay || f.From != owner || f.To == owner || !slices.Contains(s.Config.Servers, f.To) {
			t.Fatalf("%d servers: fault %s, want %s's packets to another server dropped", servers, f, owner)
		}
		if f.Start < 5*time.Second || f.Stop-f.Start != OneWayLength || s.Config.Duration-f.Stop < 5*time.Second {
			t.Fatalf("%d servers: %s from %v to %v, heal at %v: want a 5s warm-up, 60s of drops, 5s after", servers, f, f.Start, f.Stop, s.Config.Duration)
		}
		other, _ := NewSchedule(scenarioConfig(ScenarioOneWay, 2, servers))
		if strings.ReplaceAll(other.String(), "seed=2", "seed=1") != s.String() {
			t.Fatalf("seeds 1 and 2 gave different schedules:\n%s\n%s", s, other)
		}
	}
	if _, err := NewSchedule(scenarioConfig(ScenarioOneWay, 1, 2)); err == nil {
		t.Fatal("a oneway scenario with 2 servers: no error, want one (no third server to relay)")
	}
}

// TestScenarioUpgrade: every server in turn leaves and comes back (on
// the new build), one at a time, UpgradeEvery apart, with workload time
// after the last.
func TestScenarioUpgrade(t *testing.T) {
	for _, servers := range []int{3, 5} {
		s, err := NewSchedule(scenarioConfig(ScenarioUpgrade, 1, servers))
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Steps) != 2*servers {
			t.Fatalf("%d servers: want each upgrade started and undone:\n%s", servers, s)
		}
		if len(s.Faults) != servers {
			t.Fatalf("%d servers: %d faults, want one upgrade each:\n%s", servers, len(s.Faults), s)
		}
		for i, f := range s.Faults {
			if f.Kind != KindLeave || f.Node != s.Config.Servers[i] || f.Stop-f.Start != UpgradeDown {
				t.Fatalf("%d servers: fault %d is %s, want %s leaving for %v", servers, i, f, s.Config.Servers[i], UpgradeDown)
			}
			if i > 0 && f.Start-s.Faults[i-1].Start != UpgradeEvery {
				t.Fatalf("%d servers: upgrades at %v and %v, want %v apart", servers, s.Faults[i-1].Start, f.Start, UpgradeEvery)
			}
		}
		if last := s.Faults[len(s.Faults)-1]; s.Config.Duration-last.Stop < UpgradeWindow {
			t.Fatalf("%d servers: the run ends %v after the last upgrade, want at least its window %v", servers, s.Config.Duration-last.Stop, UpgradeWindow)
		}
	}
	if _, err := NewSchedule(scenarioConfig(ScenarioUpgrade, 1, 2)); err == nil {
		t.Fatal("an upgrade scenario with 2 servers: no error, want one")
	}
}
