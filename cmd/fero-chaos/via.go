package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/fero-go/fero/internal/chaos"
)

func newVia() *cobra.Command {
	var start, stop time.Duration
	var servers []string
	cmd := &cobra.Command{
		Use:   "via DIR...",
		Short: "Judge the writes through the servers of oneway runs again (CheckVia)",
		Long: `via reads DIR/via.records.txt of each oneway scenario run and runs the
one-way fault's availability checker (CheckVia) on it again, as the run
does, printing the figures and any anomaly: for runs judged by an
earlier version of the checker.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			failed := 0
			for _, dir := range args {
				recs, err := chaos.ReadViaRecords(filepath.Join(dir, "via.records.txt"))
				if err != nil {
					return err
				}
				reps, anomalies := chaos.CheckVia(recs, servers, start, stop, chaos.OneWayBound)
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n%s", dir, chaos.FormatVia(reps, start, stop))
				for _, a := range anomalies {
					fmt.Fprintf(cmd.OutOrStdout(), "  %s: %s\n", a.Kind, a.Message)
				}
				if len(anomalies) > 0 {
					failed++
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d runs fail CheckVia", failed, len(args))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&start, "start", 5*time.Second, "when the one-way fault started, from the run's start")
	fl.DurationVar(&stop, "stop", 65*time.Second, "when it was undone")
	fl.StringSliceVar(&servers, "servers", []string{"n1", "n2", "n3"}, "the servers written through")
	return cmd
}
