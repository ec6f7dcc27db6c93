package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// nftTable is the nftables table the harness owns in each node's
// namespace (family inet).
const nftTable = "fchaos"

// Drop is one rule in a node's input chain: packets arriving from the
// address From are dropped, all of them (Percent 100) or that share of
// them at random.
type Drop struct {
	From    string
	Percent int
	// Fault is the schedule's fault id, kept in the rule's comment so a
	// listing of the ruleset says which fault put each rule there.
	Fault int
}

// NftScript is the nft -f input that makes a node's table hold exactly
// drops. It creates the table if needed and flushes it in the same
// transaction, so applying it twice is the same as once, and the empty
// list leaves an empty chain that accepts everything.
func NftScript(drops []Drop) string {
	drops = slices.Clone(drops)
	// A stable order: the same set of drops gives the same text.
	slices.SortFunc(drops, func(a, b Drop) int {
		return cmp.Or(cmp.Compare(a.Fault, b.Fault), cmp.Compare(a.From, b.From), cmp.Compare(a.Percent, b.Percent))
	})
	var b strings.Builder
	fmt.Fprintf(&b, "add table inet %s\nflush table inet %s\n", nftTable, nftTable)
	fmt.Fprintf(&b, "table inet %s {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n", nftTable)
	for _, d := range drops {
		b.WriteString("\t\tip saddr " + d.From)
		if d.Percent < 100 {
			// numgen draws 0..99 per packet: Percent of them are below it.
			fmt.Fprintf(&b, " numgen random mod 100 < %d", d.Percent)
		}
		fmt.Fprintf(&b, " drop comment \"fault %d\"\n", d.Fault)
	}
	b.WriteString("\t}\n}\n")
	return b.String()
}

// Shape is what tc does to everything a node sends on its link.
type Shape struct {
	Delay, Jitter time.Duration
	// Reorder is the share (percent) of packets sent at once, ahead of
	// the delayed ones; it needs a Delay.
	Reorder int
	// RateKbit limits the link's rate; its queue adds delay under load.
	RateKbit int
}

// IsZero reports whether s shapes nothing.
func (s Shape) IsZero() bool { return s == Shape{} }

// merge combines two shapes on one link: the larger of each setting.
func (s Shape) merge(o Shape) Shape {
	return Shape{
		Delay: max(s.Delay, o.Delay), Jitter: max(s.Jitter, o.Jitter),
		Reorder: max(s.Reorder, o.Reorder), RateKbit: minRate(s.RateKbit, o.RateKbit),
	}
}

// minRate is the tighter of two rate limits, where 0 means none.
func minRate(a, b int) int {
	if a == 0 || b == 0 {
		return max(a, b)
	}
	return min(a, b)
}

// TCArgs is the qdisc part of `tc qdisc replace dev eth0 root …` for s:
// netem when s delays or reorders (an error without netem), tbf when it
// only limits the rate, nil for the zero Shape.
func TCArgs(s Shape, netem bool) ([]string, error) {
	switch {
	case s.IsZero():
		return nil, nil
	case s.Delay == 0 && s.Reorder == 0:
		// 400ms of queue: a slow link, not a black hole.
		return []string{"tbf", "rate", kbit(s.RateKbit), "burst", "32kb", "latency", "400ms"}, nil
	case !netem:
		return nil, fmt.Errorf("delay and reordering need the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM)")
	case s.Reorder > 0 && s.Delay == 0:
		return nil, fmt.Errorf("reordering %d%% needs a delay to reorder around", s.Reorder)
	}
	args := []string{"netem", "delay", ms(s.Delay)}
	if s.Jitter > 0 {
		args = append(args, ms(s.Jitter), "distribution", "normal")
	}
	if s.Reorder > 0 {
		// Correlation 50%: reordered packets come in bursts, as on a
		// real multipath link.
		args = append(args, "reorder", strconv.Itoa(s.Reorder)+"%", "50%")
	}
	if s.RateKbit > 0 {
		args = append(args, "rate", kbit(s.RateKbit))
	}
	return args, nil
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }

func kbit(k int) string { return strconv.Itoa(k) + "kbit" }
