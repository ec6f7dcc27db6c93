// Command fero-chaos is fero's fault suite: it runs real `fero serve`
// processes in Linux network namespaces, injects faults on a seeded
// schedule while client processes read and write, and checks the
// histories they recorded. It needs root, ip, nft and tc. The library
// behind it is internal/chaos.
//
//	fero-chaos run --seeds 1-250 --nodes 3,5   # many schedules, a summary table
//	fero-chaos run --seed 17 --nodes 5         # replay one
//	fero-chaos failover --runs 5               # failover times per preset (no root)
//	fero-chaos failover --mode failfast        # writes in flight at a kill, as callers see them
//	fero-chaos soak --phase 10m --tls          # the hostile soak (issue 42)
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fero-chaos:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "fero-chaos",
		Short: "Run fero's fault suite: real processes, real network faults, checked histories",
		Long: `fero-chaos runs fero servers and client workloads as separate processes, each
in a network namespace of its own joined by a private bridge, injects faults
(partitions, one-way drops, packet loss, delay and reordering, SIGKILL and
restart, SIGSTOP and SIGCONT, graceful leaves and joins) on a schedule drawn
from a seed, heals, waits for every copy to agree, and checks the recorded
histories. A seed replays its schedule. Needs root, ip, nft and tc.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRun(), newWorkload(), newFailover(), newVia(), newSoak())
	return root
}
