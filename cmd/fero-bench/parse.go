// Reading run's flags: the quick profile's defaults, the fsync peers, the
// matrix, scenarios and number lists, and the loopback check.

package main

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fero-go/fero/bench"
)

// withFsyncPeers adds to systems, after them and repeating none, fero
// with each fsync policy in list and that policy's Redis peer.
func withFsyncPeers(systems []string, list string) ([]string, error) {
	out := slices.Clone(systems)
	add := func(name string) {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	for _, policy := range splitList(list) {
		i := slices.IndexFunc(fsyncPeers, func(p fsyncPeer) bool { return p.policy == policy })
		if i < 0 {
			return nil, fmt.Errorf("--fsync %s: want group, interval or never, comma-separated", policy)
		}
		add(fsyncPeers[i].fero)
		add(fsyncPeers[i].redis)
	}
	return out, nil
}

// applyShort sets the quick profile's defaults for every flag the user did
// not set.
func applyShort(cmd *cobra.Command, f *benchFlags) {
	set := func(name string, apply func()) {
		if !cmd.Flags().Changed(name) {
			apply()
		}
	}
	set("records", func() { f.records = "200000" })
	set("sweep", func() {
		if !cmd.Flags().Changed("rate") {
			f.sweep = "0.25"
		}
	})
	set("duration", func() { f.duration = 5 * time.Second })
	set("warmup", func() { f.warmup = time.Second })
	set("scenario", func() { f.scenarios = "oneway,reqreply,roundtrip,rate" })
}

// loopbackOnly checks that every host:port in s (a server prints one or
// two, space-separated) is on loopback: fero-bench measures over loopback
// only.
func loopbackOnly(s string) error {
	for _, hp := range strings.Fields(s) {
		host, _, err := net.SplitHostPort(hp)
		if err != nil {
			return err
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("%s is not a loopback address: fero-bench measures over loopback only", hp)
		}
	}
	return nil
}

func parseMatrix(f *benchFlags) (bench.Matrix, error) {
	var m bench.Matrix
	ints := func(flag, s string) ([]int, error) {
		vs, err := bench.ParseInts(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		out := make([]int, len(vs))
		for i, v := range vs {
			out[i] = int(v)
		}
		return out, nil
	}
	var err error
	if m.Sizes, err = ints("-m", f.sizes); err != nil {
		return m, err
	}
	if m.Records, err = bench.ParseInts(f.records); err != nil {
		return m, fmt.Errorf("-r: %w", err)
	}
	if m.Clients, err = ints("-l", f.clients); err != nil {
		return m, err
	}
	if m.Servers, err = ints("-c", f.servers); err != nil {
		return m, err
	}
	if m.Rates, err = parseFloats(f.rates); err != nil {
		return m, fmt.Errorf("--rate: %w", err)
	}
	return m, m.Validate()
}

func parseScenarios(f *benchFlags) ([]bench.Scenario, error) {
	names := f.scenarios
	if names == "" {
		names = "oneway,reqreply,roundtrip"
		if f.rates != "" || f.sweep != "" {
			names += ",rate"
		}
	}
	var out []bench.Scenario
	for _, n := range splitList(names) {
		s, err := bench.ParseScenario(n)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, f := range splitList(s) {
		mult := 1.0
		switch {
		case strings.HasSuffix(f, "k"):
			mult, f = 1e3, strings.TrimSuffix(f, "k")
		case strings.HasSuffix(f, "m"):
			mult, f = 1e6, strings.TrimSuffix(f, "m")
		}
		v, err := strconv.ParseFloat(strings.ReplaceAll(f, "_", ""), 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number: %w", f, err)
		}
		if v <= 0 {
			return nil, fmt.Errorf("%q must be positive", f)
		}
		out = append(out, v*mult)
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
