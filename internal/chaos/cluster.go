// Cluster: the `fero serve` processes of a run, their flags, files and
// secrets, starting and restarting them, and Close. The faults it injects
// into them are in cluster_signal.go, what it knows of them in
// cluster_status.go.

package chaos

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The ports every node uses on its own address (each node has a namespace
// and an address of its own, so they never clash).
const (
	DataPort   = 7400
	GossipPort = 7946
)

// ClusterConfig says how to run a cluster's servers.
type ClusterConfig struct {
	// Fero is the fero binary (built once per harness run).
	Fero     string
	Resource string
	// Servers start with the cluster; Spare (optional) only when a join
	// fault starts it. Both must be nodes of the Net.
	Servers []string
	Spare   string
	// Args are extra `fero serve` flags, appended after the harness's own
	// (a later flag wins, so they can override --preset or --log-level).
	Args []string
	// Dir receives, per node, <node>.log (stdout and stderr of every run
	// of the node, one after another) and <node>.tail.jsonl (`fero tail`
	// of the node: every change it applied; the checker reads the
	// clients' traces, these are for people).
	Dir string
	// Ready bounds how long a start waits for the node's first line
	// (default 20s); a start of the whole cluster also waits that long
	// for every node to see every server.
	Ready time.Duration
	// Logf, when set, receives one line per process event.
	Logf func(format string, args ...any)
	// DataDirs gives every server <Dir>/<node>.data as its data directory,
	// with the group fsync policy: a restarted server loads its data.
	DataDirs bool
	// Upgrade, when set, is the binary every server runs from its second
	// start on (ScenarioUpgrade): a server restarted after a leave comes
	// back on it, as in a rolling upgrade.
	Upgrade string
	// TLS runs the data plane over TLS: StartCluster makes a CA and one
	// node certificate in PKIDir(Dir) (`fero certs`), every server serves
	// with it, and the harness's own commands and clients check it
	// against the CA.
	TLS bool
}

// PKIDir is where a TLS cluster's CA and certificate are, in its Dir.
func PKIDir(dir string) string { return filepath.Join(dir, "pki") }

// SecretFile is the cluster secret file in a cluster's Dir: the servers
// and the workload clients authenticate each other with it, as nodes on
// a real network must (fero serve refuses to serve beyond loopback
// without one).
func SecretFile(dir string) string { return filepath.Join(dir, "cluster.secret") }

// TokenFile is the client token file in a cluster's Dir: the servers
// take it (--token-file), and the attached workload clients prove it
// (WorkloadArgs).
func TokenFile(dir string) string { return filepath.Join(dir, "client.token") }

// writeSecret writes a fresh random secret to SecretFile(dir) and a
// token to TokenFile(dir), unless they are there (a replayed seed keeps
// its own).
func writeSecret(dir string) error {
	for _, path := range []string{SecretFile(dir), TokenFile(dir)} {
		if _, err := os.Stat(path); err == nil {
			continue
		}
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		if err := os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Cluster runs `fero serve` in the servers' namespaces. It knows the PID
// of every process it started and signals only those.
type Cluster struct {
	net *Net
	cfg ClusterConfig

	mu     sync.Mutex
	procs  map[string]*proc // the node's current process, while it runs
	starts map[string]int
	// crashes are servers that exited without being told to, as found by
	// a later start and by Crashes.
	crashes []string
	// notes are things worth a look that break no promise (a graceful
	// leave that did not finish).
	notes  []string
	closed bool
	// wg tracks the goroutines that wait for restarted nodes.
	wg sync.WaitGroup
}

// proc is one process the cluster started: a server or a tail.
type proc struct {
	name   string
	cmd    *exec.Cmd
	lines  chan string   // the first stdout lines, for readiness
	exited chan struct{} // closed once Wait returned
	err    error         // Wait's error, set before exited closes
	tail   *proc         // a server's `fero tail`
	// ended is set before the harness sends SIGKILL or SIGTERM: an exit
	// without it is a crash.
	ended bool
	// leaving is when SIGTERM was sent, if it was.
	leaving time.Time
	paused  bool // SIGSTOP sent, no SIGCONT yet
}

// gone reports whether p has exited.
func (p *proc) gone() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// StartCluster starts every server of cfg at once and waits until each
// sees all of them.
func StartCluster(ctx context.Context, n *Net, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Ready <= 0 {
		cfg.Ready = 20 * time.Second
	}
	for _, s := range append(slices.Clone(cfg.Servers), cfg.Spare) {
		if s != "" && n.IP(s) == "" {
			return nil, fmt.Errorf("chaos: server %q is not a node of the net", s)
		}
	}
	if err := writeSecret(cfg.Dir); err != nil {
		return nil, fmt.Errorf("chaos: cluster secret: %w", err)
	}
	if cfg.TLS {
		if _, err := os.Stat(filepath.Join(PKIDir(cfg.Dir), "ca.pem")); err != nil {
			out, err := exec.CommandContext(ctx, cfg.Fero, "certs", "--dir", PKIDir(cfg.Dir), "--nodes", "node").CombinedOutput()
			if err != nil {
				return nil, fmt.Errorf("chaos: fero certs: %w: %s", err, out)
			}
		}
	}
	c := &Cluster{net: n, cfg: cfg, procs: map[string]*proc{}, starts: map[string]int{}}
	errc := make(chan error, len(cfg.Servers))
	for _, s := range cfg.Servers {
		go func() { errc <- c.Start(ctx, s, len(cfg.Servers)) }()
	}
	var errs []error
	for range cfg.Servers {
		errs = append(errs, <-errc)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// Addr returns node's data address.
func (c *Cluster) Addr(node string) string { return fmt.Sprintf("%s:%d", c.net.IP(node), DataPort) }

// Gossip returns node's gossip address.
func (c *Cluster) Gossip(node string) string {
	return fmt.Sprintf("%s:%d", c.net.IP(node), GossipPort)
}

// DataAddrs returns the data addresses of every server, the spare
// included: what an attached client is given.
func (c *Cluster) DataAddrs() []string {
	var out []string
	for _, s := range c.servers() {
		out = append(out, c.Addr(s))
	}
	return out
}

// Seeds returns the gossip addresses of every server, the spare included.
func (c *Cluster) Seeds() []string {
	var out []string
	for _, s := range c.servers() {
		out = append(out, c.Gossip(s))
	}
	return out
}

func (c *Cluster) servers() []string {
	out := slices.Clone(c.cfg.Servers)
	if c.cfg.Spare != "" {
		out = append(out, c.cfg.Spare)
	}
	return out
}

// ServeArgs is the `fero serve` command line for node (without the
// binary). waitServers > 0 adds --wait-servers.
func (c *Cluster) ServeArgs(node string, waitServers int) []string {
	// The servers seed each other; the spare, which joins a formed
	// cluster, seeds them all. Not the other way round: a server forms a
	// new cluster only once it sees every seed (docs/engine.md, rule 9),
	// and the spare is not there when the cluster forms.
	var seeds []string
	for _, s := range c.cfg.Servers {
		if s != node {
			seeds = append(seeds, c.Gossip(s))
		}
	}
	args := []string{
		"serve", c.cfg.Resource, "--id", node,
		"--listen", c.Addr(node), "--bind", c.Gossip(node),
		"--seeds", strings.Join(seeds, ","),
		"--cluster-secret-file", SecretFile(c.cfg.Dir), "--token-file", TokenFile(c.cfg.Dir),
		// lan's timings, without multicast: there is no multicast route in
		// the namespaces, and the seeds are known.
		"--preset", "lan", "--multicast=false", "--log-level", "info",
	}
	if waitServers > 0 {
		args = append(args, "--wait-servers", fmt.Sprint(waitServers))
	}
	if c.cfg.TLS {
		pki := PKIDir(c.cfg.Dir)
		args = append(args, "--tls-cert", filepath.Join(pki, "node.pem"), "--tls-key", filepath.Join(pki, "node.key"),
			"--tls-ca", filepath.Join(pki, "ca.pem"))
	}
	if c.cfg.DataDirs {
		args = append(args, "--data-dir", filepath.Join(c.cfg.Dir, node+".data"), "--fsync", "group")
	} else {
		args = append(args, "--in-memory")
	}
	return append(args, c.cfg.Args...)
}

// Start starts node and waits until it sees waitServers servers (or
// only for its first line, with 0), then starts its tail. The whole
// cluster starts this way.
func (c *Cluster) Start(ctx context.Context, node string, waitServers int) error {
	p, err := c.launch(node, waitServers)
	if err != nil {
		return err
	}
	return c.ready(ctx, node, p, waitServers)
}

// Restart starts node again (after a kill or a leave: same id, same
// addresses), or the spare for a join, and returns at once: a node
// restarted into a partition can take long to come up (its joins time
// out), and the schedule must not wait for it. A goroutine waits for its
// first line (up to Ready) and starts its tail.
func (c *Cluster) Restart(node string) error {
	p, err := c.launch(node, 0)
	if err != nil {
		return err
	}
	c.wg.Go(func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			// A node killed while it starts ends the wait.
			select {
			case <-p.exited:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := c.ready(ctx, node, p, 0); err != nil {
			c.note("%v", err)
		}
	})
	return nil
}

// launch starts node's process. A previous process of node that is still
// leaving gracefully is killed first: its leave had the fault's time.
func (c *Cluster) launch(node string, waitServers int) (*proc, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errors.New("chaos: cluster closed")
	}
	old := c.procs[node]
	c.mu.Unlock()
	if old != nil && !old.gone() {
		if old.leaving.IsZero() {
			return nil, fmt.Errorf("chaos: start %s: already running (pid %d)", node, old.cmd.Process.Pid)
		}
		_ = old.cmd.Process.Kill()
		<-old.exited
		c.note("%s (pid %d): graceful leave did not finish in %v; killed before the restart",
			node, old.cmd.Process.Pid, time.Since(old.leaving).Round(time.Millisecond))
	}
	if old != nil {
		c.forget(node, old)
	}
	c.mu.Lock()
	c.starts[node]++
	nth := c.starts[node]
	c.mu.Unlock()

	logPath := filepath.Join(c.cfg.Dir, node+".log")
	args := c.ServeArgs(node, waitServers)
	bin := c.cfg.Fero
	if c.cfg.Upgrade != "" && nth > 1 {
		bin = c.cfg.Upgrade
	}
	header := fmt.Sprintf("--- chaos: start %d of %s at %s: %s %s\n", nth, node, time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	if err := appendFile(logPath, header); err != nil {
		return nil, fmt.Errorf("chaos: start %s: %w", node, err)
	}
	p, err := c.spawn(node, append([]string{bin}, args...), logPath, logPath)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs[node] = p
	c.mu.Unlock()
	c.logf("%s: started, pid %d", node, p.cmd.Process.Pid)
	return p, nil
}

// ready waits for p's readiness line, then starts node's tail.
func (c *Cluster) ready(ctx context.Context, node string, p *proc, waitServers int) error {
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Ready)
	defer cancel()
	want := "fero: node " + node + " of "
	if waitServers > 0 {
		want = fmt.Sprintf("fero: node %s sees %d servers", node, waitServers)
	}
	if err := p.await(rctx, want); err != nil {
		return fmt.Errorf("chaos: start %s (pid %d): %w (log: %s)", node, p.cmd.Process.Pid, err, filepath.Join(c.cfg.Dir, node+".log"))
	}
	c.logf("%s: ready after %v", node, time.Since(start).Round(time.Millisecond))
	return c.startTail(node, p)
}

// startTail runs `fero tail` against node, appending to its trace.
func (c *Cluster) startTail(node string, server *proc) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed || server.gone() {
		return nil
	}
	dir := c.cfg.Dir
	t, err := c.spawn(node+"/tail", append([]string{c.cfg.Fero, "tail", "--addr", c.Addr(node)}, c.CLIArgs()...),
		filepath.Join(dir, node+".tail.jsonl"), filepath.Join(dir, node+".log"))
	if err != nil {
		return err
	}
	c.mu.Lock()
	server.tail = t
	c.mu.Unlock()
	return nil
}

// forget drops p, node's process that has exited, and ends its tail; an
// exit the harness did not ask for is recorded as a crash.
func (c *Cluster) forget(node string, p *proc) {
	c.mu.Lock()
	if c.procs[node] == p {
		delete(c.procs, node)
	}
	if !p.ended {
		c.crashes = append(c.crashes, fmt.Sprintf("%s (pid %d) exited by itself: %v", node, p.cmd.Process.Pid, p.err))
	}
	t := p.tail
	c.mu.Unlock()
	if t != nil {
		// The tail's connection died with the server; end it in case it
		// has not noticed yet.
		stopProc(t, 5*time.Second)
	}
}

// spawn starts argv in node's namespace (name is node or node/tail),
// appending its stdout to the file outPath and its stderr to errPath. The
// first stdout lines are also kept for await.
func (c *Cluster) spawn(name string, argv []string, outPath, errPath string) (_ *proc, err error) {
	node, _, _ := strings.Cut(name, "/")
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("chaos: %s: %w", name, err)
	}
	errw, err := os.OpenFile(errPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("chaos: %s: %w", name, err)
	}
	// The child holds its own descriptor for stderr.
	defer errw.Close()
	defer func() {
		if err != nil {
			out.Close()
		}
	}()
	cmd := exec.Command("ip", append([]string{"netns", "exec", c.net.NS(node)}, argv...)...)
	// ip execs the command, so the PID is fero's. Pdeathsig: a harness
	// killed with -9 takes its servers with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = errw
	p := &proc{name: name, cmd: cmd, lines: make(chan string, 16), exited: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("chaos: %s: %w", name, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("chaos: start %s: %w", name, err)
	}
	go func() {
		defer out.Close()
		// Copy every line to out; hand the first ones to await. Wait only
		// once stdout is drained, as os/exec requires.
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			_, _ = io.WriteString(out, sc.Text()+"\n")
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		p.err = cmd.Wait()
		close(p.lines)
		close(p.exited)
	}()
	return p, nil
}

// appendFile appends s to the file at path.
func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, s)
	return errors.Join(err, f.Close())
}

// await waits for a stdout line that starts with prefix.
func (p *proc) await(ctx context.Context, prefix string) error {
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				<-p.exited
				return fmt.Errorf("exited before %q: %v", prefix, p.err)
			}
			if strings.HasPrefix(l, prefix) {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("no %q: %w", prefix, ctx.Err())
		}
	}
}

// StopTails ends every node's tail (SIGTERM), so the traces are complete.
func (c *Cluster) StopTails() {
	c.mu.Lock()
	var tails []*proc
	for _, p := range c.procs {
		if p.tail != nil {
			tails = append(tails, p.tail)
		}
	}
	c.mu.Unlock()
	for _, t := range tails {
		stopProc(t, 5*time.Second)
	}
}

// Close ends every process the cluster started: tails first (SIGTERM),
// then servers (SIGCONT in case they are stopped, then SIGKILL: their
// state is not needed any more), and waits for its goroutines. A server
// still leaving gracefully is noted. It is idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.StopTails()
	c.mu.Lock()
	procs := c.procs
	c.procs = map[string]*proc{}
	c.mu.Unlock()
	for n, p := range procs {
		if !p.leaving.IsZero() && !p.gone() {
			c.note("%s (pid %d): graceful leave did not finish in %v; killed at the end of the run",
				n, p.cmd.Process.Pid, time.Since(p.leaving).Round(time.Millisecond))
		}
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		<-p.exited
		if p.tail != nil {
			stopProc(p.tail, 5*time.Second)
		}
	}
	c.wg.Wait()
	return nil
}

func (c *Cluster) logf(format string, args ...any) {
	if c.cfg.Logf != nil {
		c.cfg.Logf(format, args...)
	}
}
