package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/fero-go/fero/internal/chaos/failover"
)

// newFailover times failovers (internal/chaos/failover): the figures
// docs/engine.md quotes per gossip preset. It runs on loopback and needs
// no root.
func newFailover() *cobra.Command {
	var (
		presets []string
		runs    int
		mode    string
		cfg     failover.Config
		ff      failover.FailFastConfig
		jsonOut string
	)
	cmd := &cobra.Command{
		Use:   "failover",
		Short: "Time how long a killed owner's keys stay unwritable, per gossip preset",
		Long: `failover starts fero serve processes on loopback, writes Majority updates to
keys of the server that owns the most partitions, SIGKILLs it, and reports
the time until every one of those keys took a write invoked after the kill
(first key and all keys), for each preset and run, with the median.

--mode failfast measures fail fast as a caller sees it (issue 41, point 5):
a default client (fero's exactly-once retries on, each write given
--deadline) pushes unique elements onto --arrays arrays at --rate writes/s,
open loop, for --warmup, SIGKILLs the biggest owner, keeps writing for
--after, waits for every write to return and the copies to agree, and
reports the failover time, latency from intended send time of the writes in
flight at the kill or invoked after it, how many took longer than the
failover + 1s, the errors that reached the caller, and, read through an
owner, acked writes lost and elements duplicated. --without-retry shows the
before.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runs < 1 {
				return fmt.Errorf("--runs %d: want at least 1", runs)
			}
			if mode != "times" && mode != "failfast" {
				return fmt.Errorf("--mode %q: want times or failfast", mode)
			}
			ctx := cmd.Context()
			dir, err := os.MkdirTemp("", "fero-failover-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			if cfg.Fero == "" {
				if cfg.Fero, err = failover.Build(ctx, dir); err != nil {
					return fmt.Errorf("build fero: %w", err)
				}
			}
			out := cmd.OutOrStdout()
			if mode == "failfast" {
				ff.Config = cfg
				return runFailFast(cmd, out, presets, runs, ff, jsonOut)
			}
			for _, p := range presets {
				c := cfg
				c.Preset = p
				var all []time.Duration
				for i := range runs {
					r, err := failover.Once(ctx, c)
					if err != nil {
						return fmt.Errorf("preset %s, run %d: %w", p, i+1, err)
					}
					fmt.Fprintf(out, "%-5s run %d: victim %s, first key %v, all keys %v\n", p, i+1, r.Victim,
						r.First.Round(time.Millisecond), r.All.Round(time.Millisecond))
					all = append(all, r.All)
				}
				slices.Sort(all)
				fmt.Fprintf(out, "%-5s all keys writable again: median %v, min %v, max %v (%d runs)\n", p,
					all[len(all)/2].Round(time.Millisecond), all[0].Round(time.Millisecond), all[len(all)-1].Round(time.Millisecond), runs)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&presets, "presets", []string{"lan", "local"}, "gossip presets to measure")
	fl.IntVar(&runs, "runs", 3, "kills per preset")
	fl.IntVar(&cfg.Servers, "servers", 3, "servers per cluster")
	fl.StringVar(&cfg.Fero, "fero", "", "a fero binary (default: go build ./cmd/fero)")
	fl.StringVar(&mode, "mode", "times", "times (how long the keys stay unwritable) or failfast (writes in flight at a kill, as the caller sees them)")
	fl.Float64Var(&ff.Rate, "rate", 600, "failfast: writes per second, open loop")
	fl.IntVar(&ff.Arrays, "arrays", 48, "failfast: arrays pushed onto, round robin")
	fl.DurationVar(&ff.Warmup, "warmup", 3*time.Second, "failfast: writing before the kill")
	fl.DurationVar(&ff.After, "after", 15*time.Second, "failfast: writing after the kill")
	fl.DurationVar(&ff.Deadline, "deadline", 30*time.Second, "failfast: each write's context deadline")
	fl.BoolVar(&ff.WithoutRetry, "without-retry", false, "failfast: open the client with WithoutRetry (the before)")
	fl.StringVar(&jsonOut, "json", "", "failfast: append each run's report to this file, one JSON object a line")
	return cmd
}

// runFailFast runs --mode failfast: runs kills per preset, a report each.
func runFailFast(cmd *cobra.Command, out io.Writer, presets []string, runs int, ff failover.FailFastConfig, jsonOut string) error {
	var enc *json.Encoder
	if jsonOut != "" {
		f, err := os.OpenFile(jsonOut, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		enc = json.NewEncoder(f)
	}
	for _, p := range presets {
		for i := range runs {
			c := ff
			c.Preset = p
			r, err := failover.FailFast(cmd.Context(), c)
			if err != nil {
				return fmt.Errorf("preset %s, run %d: %w", p, i+1, err)
			}
			fmt.Fprintf(out, "run %d: ", i+1)
			r.Print(out)
			if enc != nil {
				if err := enc.Encode(r); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
