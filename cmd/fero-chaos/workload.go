package main

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fero-go/fero/internal/chaos"
	"github.com/fero-go/fero/internal/chaos/workload"
	"github.com/fero-go/fero/pkg/fero"
)

// newWorkload is the hidden command the runner starts in each client's
// namespace (with ip netns exec): one workload process. Its flags are the
// ones chaos.Config's runner passes.
func newWorkload() *cobra.Command {
	var cfg workload.Config
	var logLevel, secretFile, tokenFile string
	cmd := &cobra.Command{
		Use:    "workload",
		Short:  "Run one workload client process (started by fero-chaos run)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			if secretFile != "" {
				var err error
				if cfg.Secrets, err = fero.ReadSecretFile(secretFile); err != nil {
					return err
				}
			}
			if tokenFile != "" {
				tokens, err := fero.ReadSecretFile(tokenFile)
				if err != nil {
					return err
				}
				cfg.Token = tokens[0]
			}
			// The runner waits for every client's op phase to end before
			// it asks for the final lines (chaos.OpsDoneFile).
			cfg.OpsDone = func() {
				if err := os.WriteFile(chaos.OpsDoneFile(cfg.Out), nil, 0o644); err != nil {
					cfg.Logger.Error("fero-chaos: workload: ops-done marker", "err", err)
				}
			}
			return workload.Run(cmd.Context(), cfg)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Resource, "resource", "chaos", "resource name")
	fl.StringVar(&cfg.Kind, "kind", "register", "workload: register, counter, bank, cas or set (counter and bank need fero serve --jepsen-verbs)")
	fl.StringSliceVar(&cfg.Seeds, "seeds", nil, "gossip addresses of the servers")
	fl.StringVar(&cfg.Bind, "bind", "", "this client node's gossip address ip:port")
	fl.StringVar(&cfg.Listen, "listen", "", "this client node's data address ip:port")
	fl.StringVar(&cfg.ID, "id", "", "node ID")
	fl.IntVar(&cfg.Proc, "proc", 0, "process number, unique in the run")
	fl.StringSliceVar(&cfg.Keys, "keys", nil, "keys to operate on")
	fl.Float64Var(&cfg.Rate, "rate", 40, "operations per second")
	fl.DurationVar(&cfg.Duration, "duration", 20*time.Second, "how long to invoke operations")
	fl.Uint64Var(&cfg.Seed, "seed", 0, "seed of the operation mix")
	fl.StringVar(&cfg.Out, "out", "", "history file (…"+".history.jsonl); the trace goes beside it")
	fl.IntVar(&cfg.Servers, "servers", 1, "servers to wait for before the first operation")
	fl.StringVar(&logLevel, "log-level", "info", "the client node's log level on stderr")
	fl.StringVar(&secretFile, "cluster-secret-file", "", "the cluster's secret file (fero serve's)")
	fl.StringSliceVar(&cfg.Attach, "attach", nil, "attach to the servers at these data addresses instead of gossiping (with --token-file)")
	fl.StringVar(&tokenFile, "token-file", "", "the client token an attached client proves")
	return cmd
}
