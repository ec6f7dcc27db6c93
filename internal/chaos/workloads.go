// The workload processes a run starts on its clients: their flags, and
// starting, waiting for and stopping them.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fero-go/fero/internal/chaos/history"
)

// workload is one running workload process.
type workload struct {
	node   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    string // its history file
	exited chan struct{}
	err    error
}

// WorkloadArgs are the flags the runner gives the workload process of
// client node (number proc, address ip) that writes for d; the
// `fero-chaos workload` command reads them. seeds are the servers' gossip
// addresses, data their data addresses. Every second client (even proc)
// is an attached client (docs/engine.md, "Attached clients"): it proves
// the cluster's client token to the servers at data and joins no gossip;
// the others hold the cluster secret and gossip.
func WorkloadArgs(cfg Config, seeds, data []string, node, ip string, proc int, d time.Duration) []string {
	n, prefix := cfg.Keys, "k"
	switch cfg.Kind {
	case history.Counter:
		n, prefix = counterKeys, "ctr"
	case history.Bank:
		n, prefix = 1, "bank"
	case history.CAS:
		n, prefix = casKeys, "cas"
	case history.Set:
		n, prefix = setKeys, "set"
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
		if cfg.Scenario != "" {
			// No '.': the partitioner hashes only what comes before it.
			keys[i] = fmt.Sprintf("s%d-%s%d", cfg.Seed, prefix, i)
		}
	}
	kind := cfg.Kind
	if kind == "" {
		kind = history.Register
	}
	join := []string{
		"--seeds", strings.Join(seeds, ","),
		"--cluster-secret-file", SecretFile(cfg.Out),
		"--bind", fmt.Sprintf("%s:%d", ip, GossipPort),
		"--id", node,
	}
	if Attached(proc) {
		join = []string{"--attach", strings.Join(data, ","), "--token-file", TokenFile(cfg.Out), "--id", "~" + node}
	}
	return append(join,
		"--resource", "chaos",
		"--kind", kind,
		"--listen", fmt.Sprintf("%s:%d", ip, DataPort),
		"--proc", strconv.Itoa(proc),
		"--keys", strings.Join(keys, ","),
		"--rate", strconv.FormatFloat(cfg.Rate, 'f', -1, 64),
		"--duration", d.String(),
		// Each client its own stream of operations, fixed by the seed.
		"--seed", strconv.FormatUint(cfg.Seed*1000+uint64(proc), 10),
		"--servers", strconv.Itoa(cfg.Servers),
		"--out", filepath.Join(cfg.Out, node+".history.jsonl"),
	)
}

// counterKeys is how many counters the counter workload's clients share:
// few, so that INCRs of one key queue for its turn.
const counterKeys = 3

// casKeys and setKeys are the registers of the cas workload and the
// arrays of the set workload: few, so that operations contend.
const (
	casKeys = 3
	setKeys = 3
)

// Attached reports whether workload client proc attaches with a token
// rather than gossip with the secret (WorkloadArgs).
func Attached(proc int) bool { return proc%2 == 0 }

func (r *runner) startWorkloads(ctx context.Context, nt *Net, cl *Cluster, clients []string, d time.Duration) ([]*workload, error) {
	var wls []*workload
	for i, node := range clients {
		argv := append(slices.Clone(r.cfg.Workload), WorkloadArgs(r.cfg, cl.Seeds(), cl.DataAddrs(), node, nt.IP(node), i+1, d)...)
		logf, err := os.Create(filepath.Join(r.cfg.Out, node+".log"))
		if err != nil {
			return wls, fmt.Errorf("chaos: %w", err)
		}
		fmt.Fprintf(logf, "--- chaos: %s\n", strings.Join(argv, " "))
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", nt.NS(node)}, argv...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		cmd.Stdout, cmd.Stderr = logf, logf
		stdin, err := cmd.StdinPipe()
		if err != nil {
			logf.Close()
			return wls, fmt.Errorf("chaos: %w", err)
		}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return wls, fmt.Errorf("chaos: start workload %s: %w", node, err)
		}
		logf.Close()
		w := &workload{node: node, cmd: cmd, stdin: stdin, exited: make(chan struct{}), out: filepath.Join(r.cfg.Out, node+".history.jsonl")}
		go func() {
			w.err = cmd.Wait()
			close(w.exited)
		}()
		r.logf("workload %s: pid %d", node, cmd.Process.Pid)
		wls = append(wls, w)
	}
	return wls, nil
}

// OpsDoneFile is the marker a workload process writes beside its history
// (history path out) once its operations have ended.
func OpsDoneFile(out string) string { return out + ".opsdone" }

// waitOpsDone waits, up to limit, until every workload has ended its
// operations (its marker exists) or exited.
func waitOpsDone(ctx context.Context, wls []*workload, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for _, w := range wls {
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if _, err := os.Stat(OpsDoneFile(w.out)); err == nil {
				break
			}
			select {
			case <-w.exited:
			case <-time.After(50 * time.Millisecond):
				continue
			}
			break
		}
	}
}

// stopWorkloads closes every workload's stdin, which tells it the
// cluster healed, and waits up to grace for it to write its final line
// and exit; then SIGTERM, then SIGKILL. A workload that exited with an
// error, or had to be killed, is a harness error.
func stopWorkloads(wls []*workload, grace time.Duration) error {
	for _, w := range wls {
		_ = w.stdin.Close()
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	var errs []error
	for _, w := range wls {
		select {
		case <-w.exited:
		case <-deadline.C:
		}
		select {
		case <-w.exited:
		default:
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
			t := time.NewTimer(10 * time.Second)
			select {
			case <-w.exited:
			case <-t.C:
				_ = w.cmd.Process.Kill()
				<-w.exited
			}
			t.Stop()
			errs = append(errs, fmt.Errorf("chaos: workload %s did not finish within %v of the heal", w.node, grace))
			continue
		}
		if w.err != nil {
			errs = append(errs, fmt.Errorf("chaos: workload %s: %w (see %s.log)", w.node, w.err, w.node))
		}
	}
	return errors.Join(errs...)
}
