package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fero-go/fero/internal/chaos"
)

func newSoak() *cobra.Command {
	var cfg chaos.SoakConfig
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "The hostile soak: a quiet phase, then fero-hostile from several addresses, with Majority writers throughout",
		Long: `soak starts three fero servers with the cluster secret (and with --tls,
over TLS) in network namespaces, and Majority writers with the client token
writing through every server from a client's namespace. After a warm-up it
runs a quiet phase of --phase, then --phase with fero-hostile attacking
every server from --attackers namespaces (one source address each, at
nice --nice), then --after of calm. Each phase SIGKILLs and restarts n3 at
its middle. It passes (exit 0) if no acked write is lost, the writes' p99
under attack is at most twice the quiet phase's, the restarted server
votes and takes writes again, each server's peak RSS under attack is at
most twice its quiet peak, and --after the attack each server's RSS is at
most twice what it was before it. The report is in OUT/soak.txt
(docs/security.md). Needs root and ip.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := chaos.Preflight(); err != nil {
				return err
			}
			if cfg.Out == "" {
				cfg.Out = filepath.Join(".soak", time.Now().Format("20060102-150405"))
			}
			out, err := filepath.Abs(cfg.Out)
			if err != nil {
				return err
			}
			cfg.Out = out
			bin, err := os.MkdirTemp("", "fero-soak-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(bin)
			if cfg.Fero == "" {
				if cfg.Fero, err = buildCmd(ctx, bin, "fero"); err != nil {
					return err
				}
			}
			if cfg.Hostile == "" {
				if cfg.Hostile, err = buildCmd(ctx, bin, "fero-hostile"); err != nil {
					return err
				}
			}
			w := cmd.OutOrStdout()
			t0 := time.Now()
			cfg.Logf = func(format string, args ...any) {
				fmt.Fprintf(w, "soak %7.1fs: %s\n", time.Since(t0).Seconds(), fmt.Sprintf(format, args...))
			}
			res, err := chaos.Soak(ctx, cfg)
			if res != nil {
				fmt.Fprint(w, res.Report)
				fmt.Fprintf(w, "soak: report in %s\n", filepath.Join(cfg.Out, "soak.txt"))
			}
			if err != nil {
				return err
			}
			if len(res.Failures) > 0 {
				return errors.New("soak failed: " + strings.Join(res.Failures, "; "))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&cfg.Phase, "phase", 10*time.Minute, "the quiet phase, and the attack")
	fl.DurationVar(&cfg.After, "after", time.Minute, "the calm after the attack, when memory must come back")
	fl.BoolVar(&cfg.TLS, "tls", false, "serve the data plane over TLS (the attack too)")
	fl.IntVar(&cfg.Attackers, "attackers", 5, "attacking namespaces, one source address each")
	fl.IntVar(&cfg.Nice, "nice", 19, "the attackers' nice value")
	fl.BoolVar(&cfg.Idle, "idle", false, "run the attackers under SCHED_IDLE instead of --nice (the CPU only when nothing else wants it, as an attacker on other hosts)")
	fl.StringVar(&cfg.CPUs, "attacker-cpus", "", "pin the attackers to these CPUs (taskset -c list, say 1)")
	fl.BoolVar(&cfg.Decoy, "decoy", false, "control run: aim the attack at an idle decoy cluster on the same machine, not at the servers written through")
	fl.StringSliceVar(&cfg.AttackArgs, "attack-args", nil, "extra fero-hostile flags")
	fl.StringSliceVar(&cfg.ServerArgs, "server-args", nil, "extra fero serve flags (--pprof 127.0.0.1:6060 profiles each server inside its namespace)")
	fl.StringVar(&cfg.Out, "out", "", "output directory (default .soak/<time>)")
	fl.StringVar(&cfg.Fero, "fero", "", "the fero binary (default: built from this module)")
	fl.StringVar(&cfg.Hostile, "hostile", "", "the fero-hostile binary (default: built from this module)")
	return cmd
}

// buildCmd builds ./cmd/<name> of the module fero-chaos runs in into dir.
func buildCmd(ctx context.Context, dir, name string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("build %s: run fero-chaos inside fero's module, or give its binary (go env GOMOD: %q, %v)", name, mod, err)
	}
	bin := filepath.Join(dir, name)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/"+name)
	build.Dir = filepath.Dir(mod)
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %w\n%s", name, err, b)
	}
	return bin, nil
}
