package main

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fero-go/fero/internal/chaos"
)

func TestParseSeeds(t *testing.T) {
	got, err := parseSeeds("1-3, 7,2,10-11")
	if err != nil || !slices.Equal(got, []uint64{1, 2, 3, 7, 10, 11}) {
		t.Fatalf("parseSeeds = %v, %v", got, err)
	}
	for _, bad := range []string{"", "x", "5-2", "1-", "1-200000"} {
		if _, err := parseSeeds(bad); err == nil {
			t.Errorf("parseSeeds(%q) accepted", bad)
		}
	}
}

// TestWorkloadFlags: the flags the runner gives a workload process are
// the ones the workload command reads, with the same values.
func TestWorkloadFlags(t *testing.T) {
	cfg := chaos.Config{Seed: 7, Servers: 5, Keys: 3, Rate: 12.5, Out: "/tmp/x"}
	seeds, data := []string{"10.201.1.1:7946", "10.201.1.2:7946"}, []string{"10.201.1.1:7400", "10.201.1.2:7400"}
	common := map[string]string{
		"resource": "chaos", "listen": "10.201.1.8:7400",
		"keys": "[k0,k1,k2]", "rate": "12.5", "duration": "25s", "servers": "5",
	}
	for proc, want := range map[int]map[string]string{
		// An odd client gossips with the secret, an even one attaches.
		1: {"seeds": "[10.201.1.1:7946,10.201.1.2:7946]", "bind": "10.201.1.8:7946", "id": "c1", "proc": "1", "seed": "7001",
			"cluster-secret-file": "/tmp/x/cluster.secret", "attach": "[]", "out": "/tmp/x/c1.history.jsonl"},
		2: {"seeds": "[]", "bind": "", "id": "~c2", "proc": "2", "seed": "7002", "attach": "[10.201.1.1:7400,10.201.1.2:7400]",
			"token-file": "/tmp/x/client.token", "cluster-secret-file": "", "out": "/tmp/x/c2.history.jsonl"},
	} {
		node := fmt.Sprint("c", proc)
		args := chaos.WorkloadArgs(cfg, seeds, data, node, "10.201.1.8", proc, 25*time.Second)
		cmd := newWorkload()
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatalf("workload flags %q: %v", args, err)
		}
		get := func(name string) string { return cmd.Flags().Lookup(name).Value.String() }
		maps.Copy(want, common)
		for name, w := range want {
			if got := get(name); got != w {
				t.Errorf("%s: --%s = %q, want %q", node, name, got, w)
			}
		}
	}
}

func TestReplayCommand(t *testing.T) {
	f := &runFlags{clients: 2, duration: 18 * time.Second, settle: 6 * time.Second, gap: 2 * time.Second,
		rate: 40, keys: 16, kinds: "kill,pause", args: []string{"--quorum=2"}}
	got := replay(f, 17, 5, "register")
	want := "go run ./cmd/fero-chaos run --seed 17 --nodes 5 --clients 2 --duration 18s --settle 6s --gap 2s --rate 40 --keys 16 --kinds kill,pause --server-arg=--quorum=2"
	if got != want {
		t.Fatalf("replay:\n got %s\nwant %s", got, want)
	}
}

func TestSummary(t *testing.T) {
	var s summary
	s.add(&chaos.Result{Seed: 1, Servers: 3, Ops: 100, Injected: map[chaos.Kind]int{chaos.KindKill: 2, chaos.KindPartition: 1}})
	s.add(&chaos.Result{Seed: 2, Servers: 5, Ops: 50, Injected: map[chaos.Kind]int{chaos.KindKill: 1},
		Anomalies: []chaos.Anomaly{{Kind: "majority-write-lost", Key: "k1"}}})
	var b bytes.Buffer
	s.print(&b, "/out")
	out := b.String()
	for _, want := range []string{"2      3,5       4         150          1", "kill       3", "majority-write-lost  1", "failed seeds: 2(n5)"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

func TestReplayScenario(t *testing.T) {
	f := &runFlags{scenario: "long-split", clients: 2, duration: 20 * time.Second, settle: 6 * time.Second, rate: 40, keys: 16}
	got := replay(f, 9, 3, "register")
	want := "go run ./cmd/fero-chaos run --scenario long-split --seed 9 --nodes 3 --clients 2 --settle 6s --rate 40 --keys 16"
	if got != want {
		t.Fatalf("replay:\n got %s\nwant %s", got, want)
	}
}

// TestFailoverFlags: --mode failfast's flags parse, and a mode not known is
// refused before anything is built or started.
func TestFailoverFlags(t *testing.T) {
	cmd := newFailover()
	if err := cmd.ParseFlags([]string{"--mode", "failfast", "--rate", "300", "--after", "5s", "--without-retry", "--presets", "local"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"mode": "failfast", "rate": "300", "after": "5s", "without-retry": "true",
		"presets": "[local]", "deadline": "30s", "warmup": "3s", "arrays": "48"} {
		if got := cmd.Flags().Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}
	cmd = newFailover()
	cmd.SetArgs([]string{"--mode", "fast"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), `--mode "fast"`) {
		t.Errorf("--mode fast: %v", err)
	}
}
