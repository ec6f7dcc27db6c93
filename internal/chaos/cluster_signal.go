// The process faults a Cluster injects: signals to a server (Kill, Pause,
// Resume, Leave), and retiring the spare server for good.

package chaos

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"
)

// signal sends sig to node's server process.
func (c *Cluster) signal(node string, sig syscall.Signal) (*proc, error) {
	c.mu.Lock()
	p := c.procs[node]
	if p != nil && !p.gone() {
		switch sig {
		case syscall.SIGKILL:
			p.ended = true
		case syscall.SIGTERM:
			p.ended, p.leaving = true, time.Now()
		}
	}
	c.mu.Unlock()
	if p == nil || p.gone() {
		return nil, fmt.Errorf("chaos: %s to %s: not running", sigName[sig], node)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return nil, fmt.Errorf("chaos: %s to %s (pid %d): %w", sigName[sig], node, p.cmd.Process.Pid, err)
	}
	c.logf("%s: %s to pid %d", node, sigName[sig], p.cmd.Process.Pid)
	return p, nil
}

// sigName names the signals the harness sends, as kill(1) does.
var sigName = map[syscall.Signal]string{
	syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGSTOP: "SIGSTOP", syscall.SIGCONT: "SIGCONT",
}

// Kill sends SIGKILL to node and waits until it is gone.
func (c *Cluster) Kill(ctx context.Context, node string) error {
	p, err := c.signal(node, syscall.SIGKILL)
	if err != nil {
		return err
	}
	select {
	case <-p.exited:
	case <-ctx.Done():
		return fmt.Errorf("chaos: %s (pid %d) still there after SIGKILL: %w", node, p.cmd.Process.Pid, ctx.Err())
	}
	c.forget(node, p)
	c.logf("%s: exited (%v)", node, p.err)
	return nil
}

// Pause stops node with SIGSTOP.
func (c *Cluster) Pause(node string) error {
	p, err := c.signal(node, syscall.SIGSTOP)
	if err == nil {
		c.mu.Lock()
		p.paused = true
		c.mu.Unlock()
	}
	return err
}

// Resume continues node with SIGCONT.
func (c *Cluster) Resume(node string) error {
	p, err := c.signal(node, syscall.SIGCONT)
	if err == nil {
		c.mu.Lock()
		p.paused = false
		c.mu.Unlock()
	}
	return err
}

// Leave sends SIGTERM, on which `fero serve` leaves the cluster
// gracefully, and returns at once: the node leaves while the schedule
// goes on. A restart of the node kills it if it is still leaving then.
func (c *Cluster) Leave(node string) error {
	p, err := c.signal(node, syscall.SIGTERM)
	if err != nil {
		return err
	}
	c.wg.Go(func() {
		<-p.exited
		c.logf("%s: exited %v after SIGTERM (%v)", node, time.Since(p.leaving).Round(time.Millisecond), p.err)
	})
	return nil
}

// Retire stops the spare server node for good, as an operator retires a
// machine: it leaves gracefully, then, once it has exited, an operator's
// `fero forget` through a live server removes it from the configuration
// (a server that left stays in it, docs/engine.md rule 9). It waits up to
// 10 s for the exit and 15 s for the forget; a server that cannot be
// forgotten in that time is noted.
func (c *Cluster) Retire(ctx context.Context, node string) error {
	p, err := c.signal(node, syscall.SIGTERM)
	if err != nil {
		return err
	}
	// A graceful leave from a cut-off node can take long: after 10 s it is
	// killed, and the forget gets its own 15 s (a slow leave once used it
	// all, and the spare stayed in the configuration).
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		stopProc(p, 0)
	case <-ctx.Done():
		stopProc(p, 0)
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var last string
	for ctx.Err() == nil {
		for _, s := range c.cfg.Servers {
			if s == node {
				continue
			}
			out, err := c.net.Exec(ctx, s, append([]string{c.cfg.Fero, "forget", node, "--addr", c.Addr(s), "--timeout", "2s", "--unknown"}, c.CLIArgs()...)...)
			if err == nil {
				// Through a node that never heard the spare take its vote
				// too: the peers that list it drop it (seed 2286).
				c.logf("%s: forgotten through %s", node, s)
				return nil
			}
			last = fmt.Sprintf("through %s: %v %s", s, err, strings.TrimSpace(out))
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	c.note("%s: could not be forgotten within 15s of its retirement (last %s)", node, last)
	return nil
}

// stopProc ends p: SIGTERM, then SIGKILL after grace.
func stopProc(p *proc, grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}
