// What a Cluster knows of its servers (which run, what crashed, notes)
// and what they say of themselves (fero status).

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"time"
)

// Running returns the servers that run now and are not leaving, sorted.
func (c *Cluster) Running() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for n, p := range c.procs {
		if !p.gone() && p.leaving.IsZero() {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Notes lists what the cluster saw that breaks no promise but is worth a
// look, like a graceful leave that did not finish.
func (c *Cluster) Notes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.notes)
}

func (c *Cluster) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.mu.Lock()
	c.notes = append(c.notes, msg)
	c.mu.Unlock()
	c.logf("note: %s", msg)
}

// Crashes lists the servers that exited without the harness telling them
// to: each one a finding (fero serve died by itself).
func (c *Cluster) Crashes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.crashes)
	for n, p := range c.procs {
		if p.gone() && !p.ended {
			out = append(out, fmt.Sprintf("%s (pid %d) exited by itself: %v", n, p.cmd.Process.Pid, p.err))
		}
	}
	slices.Sort(out)
	return out
}

// running reports whether node's process runs now: started, not exited,
// not paused, not leaving.
func (c *Cluster) running(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.procs[node]
	return ok && !p.gone() && !p.paused && p.leaving.IsZero()
}

// PIDs returns the PID of every server that runs now.
func (c *Cluster) PIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for n, p := range c.procs {
		if !p.gone() {
			out[n] = p.cmd.Process.Pid
		}
	}
	return out
}

// Status is what `fero status --json` says of one node; the fields the
// harness reads.
type Status struct {
	ID      string `json:"id"`
	Keys    int    `json:"keys"`
	Digest  uint64 `json:"digest"`
	Members []struct {
		ID     string `json:"id"`
		Client bool   `json:"client"`
		Status string `json:"status"`
	} `json:"members"`
	Roles map[string]int `json:"roles"`
	Stats map[string]any `json:"stats"`
	// Voting: the server's vote counts (false while a restarted server
	// catches up).
	Voting bool `json:"voting"`
	// Parts: every partition's detail, from StatusFull only.
	Parts []struct {
		P        int    `json:"p"`
		Role     string `json:"role"`
		Accepted string `json:"accepted"`
		Position string `json:"position"`
		Keys     int    `json:"keys"`
		Digest   uint64 `json:"digest"`
	} `json:"parts"`
}

// WaitVoting waits, up to limit, until every running server but except
// reports that its vote counts. Servers keep nothing across a restart, and
// a restarted one votes again only once it has caught up (docs/engine.md
// rule 9); a process fault that strikes while earlier ones have not caught
// up would have a majority of the configuration lose its memory, which no
// memory-only cluster survives. It reports false, and notes which, after
// limit.
func (c *Cluster) WaitVoting(ctx context.Context, except string, limit time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		var behind []string
		for _, s := range c.cfg.Servers {
			if s == except || !c.running(s) {
				continue
			}
			if st, _, err := c.Status(ctx, s); err != nil || !st.Voting {
				behind = append(behind, s)
			}
		}
		if len(behind) == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			c.note("%v had not caught up (voting) %v before the next process fault, which is skipped", behind, limit)
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CLIArgs are the credentials a `fero` command needs to talk to the
// servers: the cluster secret, and the CA for a TLS cluster.
func (c *Cluster) CLIArgs() []string {
	args := []string{"--cluster-secret-file", SecretFile(c.cfg.Dir)}
	if c.cfg.TLS {
		args = append(args, "--tls-ca", filepath.Join(PKIDir(c.cfg.Dir), "ca.pem"))
	}
	return args
}

// Status asks node for its status, from inside its namespace.
func (c *Cluster) Status(ctx context.Context, node string) (*Status, string, error) {
	return c.status(ctx, node, false)
}

// StatusFull is Status with every partition's detail (Status.Parts).
func (c *Cluster) StatusFull(ctx context.Context, node string) (*Status, string, error) {
	return c.status(ctx, node, true)
}

func (c *Cluster) status(ctx context.Context, node string, parts bool) (*Status, string, error) {
	args := append([]string{c.cfg.Fero, "status", "--json", "--addr", c.Addr(node), "--timeout", "3s"}, c.CLIArgs()...)
	if parts {
		args = append(args, "--partitions")
	}
	out, err := c.net.Exec(ctx, node, args...)
	if err != nil {
		return nil, "", err
	}
	var st Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, out, fmt.Errorf("chaos: status of %s: %w", node, err)
	}
	return &st, out, nil
}
