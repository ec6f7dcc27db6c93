// The server subcommand (one server on its own, for run --attach), the
// hidden child subcommands a run starts (serve, client), and the profiles
// and traces those children write.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fero-go/fero/bench"
)

// newServerCmd runs one server of a system on its own, for `run
// --attach`: it prints the address clients dial, then serves until
// interrupted.
func newServerCmd() *cobra.Command {
	var system, listen, peers, dataDir string
	var index int
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run one server of a system until interrupted, for run --attach",
		Long: `server starts one server of a system under test and prints, on stdout, the
address that run --attach takes, once it is ready. Servers of a clustered
system (fero) join the ones given with --peers. Two fero servers and a run
against them:

  fero-bench server --index 0 > s0 &  until [ -s s0 ]; do sleep 0.1; done
  fero-bench server --index 1 --peers "$(cat s0)" > s1 &  until [ -s s1 ]; do sleep 0.1; done
  fero-bench run --systems fero --attach "$(cat s0),$(cat s1)"

Stop it with Ctrl-C or SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sys, err := registry.Lookup(system)
			if err != nil {
				return err
			}
			if err := loopbackOnly(listen); err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			opts := bench.ServeOptions{Addr: listen, Index: index, Peers: splitList(peers), DataDir: dataDir}
			out := cmd.OutOrStdout()
			return sys.Serve(cmd.Context(), opts, func(addr string) { fmt.Fprintln(out, addr) })
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&system, "system", "fero", "system to serve (known: "+strings.Join(registry.Names(), ", ")+")")
	fl.StringVar(&listen, "listen", "127.0.0.1:0", "address to listen on (port 0: any free port)")
	fl.IntVar(&index, "index", 0, "this server's place among the cluster's servers, from 0")
	fl.StringVar(&peers, "peers", "", "addresses the servers started before this one printed, comma-separated")
	fl.StringVar(&dataDir, "data-dir", os.TempDir(), "directory in which a durable system makes this server's data directory, removed when it stops")
	return cmd
}

// The hidden child subcommands. Their only input is a JSON spec from the
// parent; their protocol is documented in package bench.

func newServeCmd() *cobra.Command {
	var spec string
	cmd := &cobra.Command{
		Use:    bench.ServeCommand,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var s bench.ServeSpec
			if err := json.Unmarshal([]byte(spec), &s); err != nil {
				return fmt.Errorf("serve --spec: %w", err)
			}
			stop, err := startProfile("server")
			if err != nil {
				return err
			}
			defer stop()
			return bench.ServeChild(cmd.Context(), registry, s, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&spec, "spec", "", "server spec (JSON)")
	return cmd
}

func newClientCmd() *cobra.Command {
	var spec string
	cmd := &cobra.Command{
		Use:    bench.ClientCommand,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var s bench.ClientSpec
			if err := json.Unmarshal([]byte(spec), &s); err != nil {
				return fmt.Errorf("client --spec: %w", err)
			}
			stop, err := startProfile("client")
			if err != nil {
				return err
			}
			defer stop()
			if p, ok := registry[s.System].(clientProgram); ok {
				err = p.RunClient(cmd.Context(), s, cmd.InOrStdin(), cmd.OutOrStdout())
			} else {
				err = bench.ClientChild(cmd.Context(), registry, s, cmd.InOrStdin(), cmd.OutOrStdout())
			}
			if errors.Is(err, context.Canceled) {
				return fmt.Errorf("client stopped: %w", err)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&spec, "spec", "", "client spec (JSON)")
	return cmd
}

// profileDirEnv names a directory into which every child process writes a
// CPU profile of its whole life (role-pid.pprof), and at its end a heap
// profile (role-pid.heap, as of the last collection), for finding where a
// system under test spends its time and its memory. Profiling slows what
// it measures: never quote figures from a profiled run.
const profileDirEnv = "FERO_BENCH_PROFILE_DIR"

// traceDirEnv names a directory into which every child process writes an
// execution trace of its whole life (role-pid.trace), for seeing where a
// request waits rather than where CPU goes: `go tool trace
// -pprof=sched FILE` gives the time goroutines spent ready but not
// running, by stack. A trace costs more than a profile; never quote
// figures from a traced run.
const traceDirEnv = "FERO_BENCH_TRACE_DIR"

// startProfile starts what profileDirEnv and traceDirEnv ask for.
func startProfile(role string) (stop func(), err error) {
	stopCPU, err := startCPUProfile(role)
	if err != nil {
		return nil, err
	}
	dir := os.Getenv(traceDirEnv)
	if dir == "" {
		return stopCPU, nil
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.trace", role, os.Getpid())))
	if err != nil {
		stopCPU()
		return nil, fmt.Errorf("%s: %w", traceDirEnv, err)
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		stopCPU()
		return nil, fmt.Errorf("%s: %w", traceDirEnv, err)
	}
	return func() {
		trace.Stop()
		f.Close()
		stopCPU()
	}, nil
}

func startCPUProfile(role string) (stop func(), err error) {
	dir := os.Getenv(profileDirEnv)
	if dir == "" {
		return func() {}, nil
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", role, os.Getpid())))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", profileDirEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", profileDirEnv, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		// The heap as of the last collection, which ran during the
		// trial: what the process held then, by where it was allocated.
		if h, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.heap", role, os.Getpid()))); err == nil {
			_ = pprof.Lookup("heap").WriteTo(h, 0)
			h.Close()
		}
	}, nil
}
