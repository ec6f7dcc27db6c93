package main

import (
	"fmt"
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
		cfg     failover.Config
	)
	cmd := &cobra.Command{
		Use:   "failover",
		Short: "Time how long a killed owner's keys stay unwritable, per gossip preset",
		Long: `failover starts fero serve processes on loopback, writes Majority updates to
keys of the server that owns the most partitions, SIGKILLs it, and reports
the time until every one of those keys took a write invoked after the kill
(first key and all keys), for each preset and run, with the median.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runs < 1 {
				return fmt.Errorf("--runs %d: want at least 1", runs)
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
	return cmd
}
