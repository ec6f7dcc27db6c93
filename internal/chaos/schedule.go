package chaos

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The kinds of fault. Each has an undo, applied at its Stop step.
const (
	// Network, by nftables drop rules in the receiving nodes' namespaces.
	KindPartition Kind = "partition" // Groups: nodes in different groups cannot talk
	KindIsolate   Kind = "isolate"   // Node cut off from every other node
	KindOneWay    Kind = "oneway"    // From's packets to To dropped, not To's to From
	KindBridge    Kind = "bridge"    // Node sees both Groups, which do not see each other
	KindLoss      Kind = "loss"      // Percent of Node's packets, both ways, dropped at random
	// Link shaping, by tc on Node's link.
	KindDelay   Kind = "delay"   // Delay ± Jitter on what Node sends (netem)
	KindReorder Kind = "reorder" // Percent of what Node sends overtakes the rest, delayed by Delay (netem)
	KindSlow    Kind = "slow"    // Node's sending rate limited to RateKbit (tbf)
	// Processes.
	KindKill  Kind = "kill"  // SIGKILL; undo: restart with the same --id and addresses
	KindPause Kind = "pause" // SIGSTOP; undo: SIGCONT
	KindLeave Kind = "leave" // SIGTERM, so the node leaves gracefully; undo: start it again
	KindJoin  Kind = "join"  // the spare server starts and joins; undo: it leaves gracefully
	// KindClock jumps Node's clock by Jump. Nothing generates it unless
	// asked (fero's rules do not rely on clocks agreeing yet), and the
	// runner needs a Config.ClockJump to apply it.
	KindClock Kind = "clock"
)

// AllKinds lists every kind in a fixed order (the order of summaries).
var AllKinds = []Kind{
	KindPartition, KindIsolate, KindOneWay, KindBridge, KindLoss,
	KindDelay, KindReorder, KindSlow,
	KindKill, KindPause, KindLeave, KindJoin, KindClock,
}

// DefaultKinds are the kinds a schedule draws from unless told otherwise.
var DefaultKinds = []Kind{
	KindPartition, KindIsolate, KindOneWay, KindBridge, KindLoss,
	KindDelay, KindReorder, KindSlow,
	KindKill, KindPause, KindLeave, KindJoin,
}

// NetemKinds are the kinds that need the netem qdisc.
var NetemKinds = []Kind{KindDelay, KindReorder}

// process reports whether k stops or starts a server process.
func (k Kind) process() bool {
	return k == KindKill || k == KindPause || k == KindLeave || k == KindJoin
}

// shape reports whether k shapes a link with tc.
func (k Kind) shape() bool { return k == KindDelay || k == KindReorder || k == KindSlow }

// ParseKinds reads a comma-separated list of kinds.
func ParseKinds(s string) ([]Kind, error) {
	var out []Kind
	for _, f := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(f))
		if !slices.Contains(AllKinds, k) {
			return nil, fmt.Errorf("chaos: unknown fault kind %q (kinds: %s)", k, joinKinds(AllKinds))
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

func joinKinds(ks []Kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ",")
}

// Fault is one fault of a schedule. Which fields matter depends on Kind.
type Fault struct {
	ID       int
	Kind     Kind
	Node     string
	From, To string
	Groups   [][]string
	Percent  int
	Delay    time.Duration
	Jitter   time.Duration
	RateKbit int
	Jump     time.Duration
	// Start and Stop are offsets from the schedule's start; Stop is when
	// the fault is undone.
	Start, Stop time.Duration
}

// String describes the fault in one line, the way a schedule prints it.
func (f Fault) String() string {
	var d string
	switch f.Kind {
	case KindPartition, KindBridge:
		g := make([]string, len(f.Groups))
		for i, grp := range f.Groups {
			g[i] = "[" + strings.Join(grp, " ") + "]"
		}
		d = strings.Join(g, " ")
		if f.Kind == KindBridge {
			d = f.Node + " bridges " + d
		}
	case KindOneWay:
		d = f.From + " -> " + f.To + " dropped"
	case KindLoss:
		d = fmt.Sprintf("%s %d%%", f.Node, f.Percent)
	case KindDelay:
		d = fmt.Sprintf("%s %v ± %v", f.Node, f.Delay, f.Jitter)
	case KindReorder:
		d = fmt.Sprintf("%s %d%% around %v", f.Node, f.Percent, f.Delay)
	case KindSlow:
		d = fmt.Sprintf("%s %dkbit", f.Node, f.RateKbit)
	case KindClock:
		d = fmt.Sprintf("%s %+v", f.Node, f.Jump)
	default:
		d = f.Node
	}
	return fmt.Sprintf("#%d %s %s", f.ID, f.Kind, d)
}

// Step is one timed action of a schedule: a fault's start or its undo.
type Step struct {
	At   time.Duration
	Undo bool
	// Fault indexes Schedule.Faults.
	Fault int
}

// ScheduleConfig is what a schedule is generated from. The same config
// and seed always give the same schedule.
type ScheduleConfig struct {
	Seed uint64
	// Servers run from the start; Spare is the server a join starts
	// (none: no joins). Clients are the workload's nodes: partitions put
	// them in groups like servers, and no other fault touches them.
	Servers []string
	Spare   string
	Clients []string
	// Duration is how long faults are injected; every fault still active
	// then is undone at Duration. Settle follows, with no fault.
	Duration, Settle time.Duration
	// Kinds to draw from; nil means DefaultKinds.
	Kinds []Kind
	// Gap is the mean time between two fault starts (default 2s); faults
	// last longer than that on average, so they overlap.
	Gap time.Duration
	// Scenario, if set, names a fixed schedule (see [Scenarios]) that
	// replaces the random one, with its own Duration.
	Scenario string
}

// Schedule is a timed list of faults and their undos.
type Schedule struct {
	Config ScheduleConfig
	Faults []Fault
	// Steps, in time order; undos at equal times come first, so a fault
	// that ends as another begins never overlaps it.
	Steps []Step
}

// maxFaults bounds a schedule whatever its duration and gap.
const maxFaults = 500

// NewSchedule generates the schedule for cfg: the scenario's, if cfg
// names one (see [Scenarios]), or else a random one. Faults start at
// random gaps; each lasts a random time for its kind, and is undone at
// Duration at the latest. Process faults touch at most a minority of the
// servers at any moment, and a node has at most one process fault and
// one link shape at a time.
func NewSchedule(cfg ScheduleConfig) (*Schedule, error) {
	if len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("chaos: a schedule needs servers")
	}
	if cfg.Scenario != "" {
		return scenario(cfg)
	}
	if cfg.Duration <= 0 {
		return nil, fmt.Errorf("chaos: schedule duration %v: want more than 0", cfg.Duration)
	}
	if cfg.Kinds == nil {
		cfg.Kinds = DefaultKinds
	}
	if cfg.Gap <= 0 {
		cfg.Gap = 2 * time.Second
	}
	g := &generator{
		cfg: cfg,
		// The seed alone decides the schedule: both PCG words come from
		// it, so a seed replays on any machine and Go version that keeps
		// PCG (math/rand/v2 promises its output is stable).
		r: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		s: &Schedule{Config: cfg},
	}
	g.generate()
	return g.s, nil
}

type generator struct {
	cfg ScheduleConfig
	r   *rand.Rand
	s   *Schedule
}

func (g *generator) generate() {
	cfg := g.cfg
	t := g.between(500*time.Millisecond, 1500*time.Millisecond)
	for t < cfg.Duration && len(g.s.Faults) < maxFaults {
		// Draw a kind, then try to place it; a kind that cannot be
		// placed now (no free node) just skips this slot.
		k := cfg.Kinds[g.r.IntN(len(cfg.Kinds))]
		if f, ok := g.fault(k, t); ok {
			f.ID = len(g.s.Faults) + 1
			f.Start = t
			f.Stop = min(t+g.length(k), cfg.Duration)
			g.s.Faults = append(g.s.Faults, f)
		}
		t += g.between(cfg.Gap/4, cfg.Gap*7/4)
	}
	g.s.steps()
}

// steps lists the start and the undo of every fault, in time order.
func (s *Schedule) steps() {
	for i, f := range s.Faults {
		s.Steps = append(s.Steps, Step{At: f.Start, Fault: i}, Step{At: f.Stop, Undo: true, Fault: i})
	}
	slices.SortStableFunc(s.Steps, func(a, b Step) int {
		if c := cmp.Compare(a.At, b.At); c != 0 {
			return c
		}
		if a.Undo != b.Undo {
			if a.Undo {
				return -1
			}
			return 1
		}
		if a.Undo {
			// Undo in the reverse order of starting, like a stack.
			return cmp.Compare(b.Fault, a.Fault)
		}
		return cmp.Compare(a.Fault, b.Fault)
	})
}

// between draws a duration in [lo, hi), in whole milliseconds so the
// schedule prints exactly.
func (g *generator) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	ms := lo.Milliseconds() + g.r.Int64N(hi.Milliseconds()-lo.Milliseconds())
	return time.Duration(ms) * time.Millisecond
}

// length draws how long a fault of kind k lasts.
func (g *generator) length(k Kind) time.Duration {
	switch k {
	case KindPause:
		// Half shorter than lan's dead timeout (about 4s), half past it.
		return g.between(1*time.Second, 10*time.Second)
	case KindKill:
		return g.between(1*time.Second, 8*time.Second)
	case KindLeave:
		// Long enough for an unhindered leave (1–3s on lan) to finish.
		return g.between(3*time.Second, 10*time.Second)
	case KindJoin:
		return g.between(4*time.Second, 14*time.Second)
	default:
		return g.between(2*time.Second, 12*time.Second)
	}
}

// active returns the faults active at t.
func (g *generator) active(t time.Duration) []Fault {
	var out []Fault
	for _, f := range g.s.Faults {
		if f.Start <= t && t < f.Stop {
			out = append(out, f)
		}
	}
	return out
}

func (g *generator) all() []string {
	out := append(append([]string(nil), g.cfg.Servers...), g.cfg.Clients...)
	if g.cfg.Spare != "" {
		out = append(out, g.cfg.Spare)
	}
	return out
}

func (g *generator) pick(from []string) string { return from[g.r.IntN(len(from))] }

// fault builds a fault of kind k that can start at t, or reports that
// none can.
func (g *generator) fault(k Kind, t time.Duration) (Fault, bool) {
	act := g.active(t)
	servers := g.cfg.Servers
	f := Fault{Kind: k}
	switch k {
	case KindPartition:
		// Two groups most of the time, sometimes three; every node in
		// one. Shuffle, then cut at random points, each group non-empty.
		nodes := g.all()
		g.r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		parts := 2
		if len(nodes) >= 5 && g.r.IntN(4) == 0 {
			parts = 3
		}
		cuts := g.r.Perm(len(nodes) - 1)[:parts-1]
		slices.Sort(cuts)
		prev := 0
		for _, c := range append(cuts, len(nodes)-1) {
			grp := slices.Clone(nodes[prev : c+1])
			slices.Sort(grp)
			f.Groups = append(f.Groups, grp)
			prev = c + 1
		}
		slices.SortFunc(f.Groups, func(a, b []string) int { return cmp.Compare(a[0], b[0]) })
	case KindIsolate:
		f.Node = g.pick(servers)
	case KindOneWay:
		nodes := g.all()
		i := g.r.IntN(len(nodes))
		j := g.r.IntN(len(nodes) - 1)
		if j >= i {
			j++
		}
		f.From, f.To = nodes[i], nodes[j]
	case KindBridge:
		if len(servers) < 3 {
			return f, false
		}
		nodes := slices.Clone(servers)
		g.r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		f.Node = nodes[0]
		rest := nodes[1:]
		cut := 1 + g.r.IntN(len(rest)-1)
		a, b := slices.Clone(rest[:cut]), slices.Clone(rest[cut:])
		// Clients and the spare land on either side.
		for _, n := range append(slices.Clone(g.cfg.Clients), g.spare()...) {
			if g.r.IntN(2) == 0 {
				a = append(a, n)
			} else {
				b = append(b, n)
			}
		}
		slices.Sort(a)
		slices.Sort(b)
		f.Groups = [][]string{a, b}
		slices.SortFunc(f.Groups, func(a, b []string) int { return cmp.Compare(a[0], b[0]) })
	case KindLoss:
		f.Node = g.pick(servers)
		f.Percent = 5 + g.r.IntN(36)
	case KindDelay, KindReorder, KindSlow:
		free := g.without(servers, act, func(a Fault) bool { return a.Kind.shape() })
		if len(free) == 0 {
			return f, false
		}
		f.Node = g.pick(free)
		switch k {
		case KindDelay:
			f.Delay = g.between(20*time.Millisecond, 300*time.Millisecond)
			f.Jitter = f.Delay / time.Duration(2+g.r.IntN(3))
		case KindReorder:
			f.Percent = 10 + g.r.IntN(41)
			f.Delay = g.between(10*time.Millisecond, 100*time.Millisecond)
		case KindSlow:
			f.RateKbit = []int{64, 256, 1024}[g.r.IntN(3)]
		}
	case KindKill, KindPause, KindLeave:
		busy := 0
		for _, a := range act {
			if a.Kind.process() && a.Kind != KindJoin {
				busy++
			}
		}
		if busy >= (len(servers)-1)/2 {
			return f, false
		}
		free := g.without(servers, act, func(a Fault) bool { return a.Kind.process() })
		if len(free) == 0 {
			return f, false
		}
		f.Node = g.pick(free)
	case KindJoin:
		if g.cfg.Spare == "" || len(g.without([]string{g.cfg.Spare}, act, func(a Fault) bool { return a.Kind == KindJoin })) == 0 {
			return f, false
		}
		f.Node = g.cfg.Spare
	case KindClock:
		f.Node = g.pick(servers)
		f.Jump = time.Duration(g.r.IntN(61)-30) * time.Second
	default:
		return f, false
	}
	return f, true
}

func (g *generator) spare() []string {
	if g.cfg.Spare == "" {
		return nil
	}
	return []string{g.cfg.Spare}
}

// without returns the nodes of from that no active fault matching busy
// names as its Node.
func (g *generator) without(from []string, act []Fault, busy func(Fault) bool) []string {
	var out []string
	for _, n := range from {
		if !slices.ContainsFunc(act, func(a Fault) bool { return busy(a) && a.Node == n }) {
			out = append(out, n)
		}
	}
	return out
}

// Counts is how many faults of each kind the schedule injects.
func (s *Schedule) Counts() map[Kind]int {
	out := map[Kind]int{}
	for _, f := range s.Faults {
		out[f.Kind]++
	}
	return out
}

// Length is the whole schedule: faults, then settling.
func (s *Schedule) Length() time.Duration { return s.Config.Duration + s.Config.Settle }

// String prints the schedule: a header with everything it was generated
// from, then one line per step. The same seed and config print the same
// text, byte for byte.
func (s *Schedule) String() string {
	c := s.Config
	var b strings.Builder
	b.WriteString("schedule ")
	if c.Scenario != "" {
		fmt.Fprintf(&b, "scenario=%s ", c.Scenario)
	}
	fmt.Fprintf(&b, "seed=%d servers=%s spare=%s clients=%s duration=%v settle=%v gap=%v kinds=%s\n",
		c.Seed, strings.Join(c.Servers, ","), orNone(c.Spare), orNone(strings.Join(c.Clients, ",")),
		c.Duration, c.Settle, c.Gap, joinKinds(c.Kinds))
	for _, st := range s.Steps {
		f := s.Faults[st.Fault]
		verb := "start"
		if st.Undo {
			verb = "undo "
		}
		fmt.Fprintf(&b, "%9.3fs  %s %s\n", st.At.Seconds(), verb, f)
	}
	fmt.Fprintf(&b, "%9.3fs  healed; settle until %.3fs\n", c.Duration.Seconds(), s.Length().Seconds())
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
