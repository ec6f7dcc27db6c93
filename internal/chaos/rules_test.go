package chaos

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNftScript(t *testing.T) {
	got := NftScript([]Drop{
		{From: "10.201.7.4", Percent: 20, Fault: 5},
		{From: "10.201.7.2", Percent: 100, Fault: 3},
	})
	want := `add table inet fchaos
flush table inet fchaos
table inet fchaos {
	chain input {
		type filter hook input priority filter; policy accept;
		ip saddr 10.201.7.2 drop comment "fault 3"
		ip saddr 10.201.7.4 numgen random mod 100 < 20 drop comment "fault 5"
	}
}
`
	if got != want {
		t.Fatalf("NftScript:\n%s\nwant:\n%s", got, want)
	}
	empty := NftScript(nil)
	if strings.Contains(empty, "drop") || !strings.Contains(empty, "policy accept") {
		t.Fatalf("NftScript(nil) should accept everything:\n%s", empty)
	}
}

func TestTCArgs(t *testing.T) {
	for _, c := range []struct {
		s     Shape
		netem bool
		want  string
		err   bool
	}{
		{Shape{}, true, "", false},
		{Shape{Delay: 100 * time.Millisecond, Jitter: 25 * time.Millisecond}, true, "netem delay 100ms 25ms distribution normal", false},
		{Shape{Delay: 40 * time.Millisecond, Reorder: 30}, true, "netem delay 40ms reorder 30% 50%", false},
		{Shape{Delay: 40 * time.Millisecond, RateKbit: 256}, true, "netem delay 40ms rate 256kbit", false},
		{Shape{RateKbit: 64}, false, "tbf rate 64kbit burst 32kb latency 400ms", false},
		{Shape{Delay: 40 * time.Millisecond}, false, "", true},
		{Shape{Reorder: 10}, true, "", true},
	} {
		args, err := TCArgs(c.s, c.netem)
		if (err != nil) != c.err || strings.Join(args, " ") != c.want {
			t.Errorf("TCArgs(%+v, netem %v) = %q, %v; want %q, error %v", c.s, c.netem, strings.Join(args, " "), err, c.want, c.err)
		}
	}
}

func TestShapeMerge(t *testing.T) {
	got := Shape{Delay: 10 * time.Millisecond, RateKbit: 256}.merge(Shape{Jitter: 5 * time.Millisecond, RateKbit: 64, Reorder: 20})
	want := Shape{Delay: 10 * time.Millisecond, Jitter: 5 * time.Millisecond, Reorder: 20, RateKbit: 64}
	if got != want {
		t.Fatalf("merge = %+v, want %+v", got, want)
	}
}

// ip maps n1 to 10.0.0.1, c2 to 10.0.0.102.
func testIP(node string) string {
	if node[0] == 'c' {
		return "10.0.0.10" + node[1:]
	}
	return "10.0.0." + node[1:]
}

// dropsText prints DropsFor's result as "node<-from%" lines, sorted.
func dropsText(d map[string][]Drop) string {
	var lines []string
	for _, n := range slices.Sorted(maps.Keys(d)) {
		for _, x := range d[n] {
			s := n + "<-" + x.From
			if x.Percent < 100 {
				s += "@" + strconv.Itoa(x.Percent)
			}
			lines = append(lines, s)
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, " ")
}

func TestDropsFor(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "c1"}
	for _, c := range []struct {
		f    Fault
		want string
	}{
		// Both sides drop what comes from the other.
		{Fault{Kind: KindPartition, Groups: [][]string{{"n1"}, {"c1", "n2", "n3"}}},
			"c1<-10.0.0.1 n1<-10.0.0.101 n1<-10.0.0.2 n1<-10.0.0.3 n2<-10.0.0.1 n3<-10.0.0.1"},
		{Fault{Kind: KindIsolate, Node: "n2"},
			"c1<-10.0.0.2 n1<-10.0.0.2 n2<-10.0.0.1 n2<-10.0.0.101 n2<-10.0.0.3 n3<-10.0.0.2"},
		// Only the receiver drops: n1's packets to n3 are lost, n3's to n1 arrive.
		{Fault{Kind: KindOneWay, From: "n1", To: "n3"}, "n3<-10.0.0.1"},
		// n2 bridges: it drops nothing and nobody drops it.
		{Fault{Kind: KindBridge, Node: "n2", Groups: [][]string{{"c1", "n1"}, {"n3"}}},
			"c1<-10.0.0.3 n1<-10.0.0.3 n3<-10.0.0.1 n3<-10.0.0.101"},
		{Fault{Kind: KindLoss, Node: "n3", Percent: 25},
			"c1<-10.0.0.3@25 n1<-10.0.0.3@25 n2<-10.0.0.3@25 n3<-10.0.0.101@25 n3<-10.0.0.1@25 n3<-10.0.0.2@25"},
	} {
		if got := dropsText(DropsFor(c.f, nodes, testIP)); got != c.want {
			t.Errorf("DropsFor(%s):\n got %s\nwant %s", c.f, got, c.want)
		}
	}
	if d := DropsFor(Fault{Kind: KindKill, Node: "n1"}, nodes, testIP); d != nil {
		t.Errorf("DropsFor(kill) = %v, want nil", d)
	}
}

func TestOwnerPID(t *testing.T) {
	for name, want := range map[string]int{
		"fchaos-123-4-n1": 123, "fchaos-123-4-br": 123,
		"fchaos-x-4-n1": 0, "fchaos-123": 0, "fero-mc-5": 0, "fchaos-0-1-n1": 0,
	} {
		if got, _ := ownerPID(name); got != want {
			t.Errorf("ownerPID(%q) = %d, want %d", name, got, want)
		}
	}
}
