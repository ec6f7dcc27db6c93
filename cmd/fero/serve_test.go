package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a `fero serve` process whose stdout and stderr the test reads
// as they grow.
type proc struct {
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{} // closed once it exited; err is Wait's
	err    error
}

func startServe(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(os.Args[0], append([]string{"serve"}, args...)...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), childEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	require.NoError(t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("fero serve %v:\nstdout:\n%s\nstderr:\n%s", args, p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// waitFor waits until the process's stderr (or stdout, with out) holds s.
func (p *proc) waitFor(t *testing.T, stdout bool, s string) {
	t.Helper()
	buf := &p.stderr
	if stdout {
		buf = &p.stdout
	}
	require.Eventually(t, func() bool { return strings.Contains(buf.String(), s) }, time.Minute, 20*time.Millisecond, "waiting for %q", s)
}

// logKeys returns the keys of one line of slog's text output, in order.
func logKeys(line string) []string {
	var keys []string
	for i := 0; i < len(line); {
		j := strings.IndexByte(line[i:], '=')
		if j < 0 {
			break
		}
		keys = append(keys, line[i:i+j])
		i += j + 1
		if i < len(line) && line[i] == '"' {
			q, err := strconv.QuotedPrefix(line[i:])
			if err != nil {
				break
			}
			i += len(q)
		} else if k := strings.IndexByte(line[i:], ' '); k >= 0 {
			i += k
		} else {
			i = len(line)
		}
		for i < len(line) && line[i] == ' ' {
			i++
		}
	}
	return keys
}

// TestServeWarnsWhenNoSeedAnswers (issue 19): serve given a seed where
// nothing listens warns at its default level that it has joined nothing,
// naming the seed and why it failed; with --require-seeds it exits with
// an error instead. Each attribute of a log line appears once (the
// membership's lines said resource= and the node's ID twice).
func TestServeWarnsWhenNoSeedAnswers(t *testing.T) {
	nobody := deadAddr(t)
	refused := nobody + " (dial tcp " + nobody + ": connect: connection refused)"

	p := startServe(t, "kv", "--in-memory", "--partitions", "7", "--id", "n1", "--seeds", nobody)
	p.waitFor(t, true, "fero: node n1")
	p.waitFor(t, false, "level=WARN msg=\"fero: node: no seed answered: this node has joined no cluster")
	p.waitFor(t, false, `seeds="`+refused+`"`)

	dbg := startServe(t, "kv", "--in-memory", "--partitions", "7", "--id", "n2", "--seeds", nobody, "--log-level", "debug")
	dbg.waitFor(t, true, "fero: node n2")
	dbg.waitFor(t, false, "component=membership") // memberlist's failed joins, at DEBUG
	for _, line := range strings.Split(dbg.stderr.String(), "\n") {
		if !strings.HasPrefix(line, "time=") {
			continue
		}
		seen := map[string]bool{}
		for _, k := range logKeys(line) {
			require.False(t, seen[k], "%s twice in %s", k, line)
			seen[k] = true
		}
		if seen["component"] {
			require.True(t, seen["resource"] && seen["node"], "a membership line names the resource and node: %s", line)
		}
	}

	must := startServe(t, "kv", "--in-memory", "--partitions", "7", "--seeds", nobody, "--require-seeds", "--seed-wait", "1s")
	select {
	case <-must.done:
	case <-time.After(time.Minute):
		t.Fatal("serve --require-seeds did not exit")
	}
	var exit *exec.ExitError
	require.True(t, errors.As(must.err, &exit) && exit.ExitCode() == 1, "exit: %v", must.err)
	require.Contains(t, must.stderr.String(), "fero: unavailable: no seed answered within 1s: "+refused+"; this node must join its cluster through a seed, so it does not start alone")
	require.NotContains(t, must.stdout.String(), "fero: node", "it never served")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := run(ctx, "serve", "kv", "--in-memory", "--require-seeds")
	require.ErrorContains(t, err, "--require-seeds needs --seeds")
	_, err = run(ctx, "serve", "kv", "--in-memory", "--seed-wait", "5s", "--seeds", nobody)
	require.ErrorContains(t, err, "--seed-wait needs --require-seeds")
}

// TestServeRequireSeedsWaitsForASeed: with --require-seeds, a server whose
// seed starts later waits for it (it warns meanwhile), then serves, and
// says the seed answered.
func TestServeRequireSeedsWaitsForASeed(t *testing.T) {
	gossip := freeAddr(t)
	late := startServe(t, "kv", "--in-memory", "--partitions", "7", "--id", "late", "--seeds", gossip, "--require-seeds", "--seed-wait", "1m")
	late.waitFor(t, false, "no seed answered")
	require.NotContains(t, late.stdout.String(), "fero: node", "it waits for its seed before it serves")
	serve(t, "kv", "--partitions", "7", "--id", "first", "--bind", gossip)
	late.waitFor(t, true, "fero: node late")
	late.waitFor(t, false, `msg="fero: node: a seed answered; this node has joined its cluster" resource=kv node=late seed=`+gossip)
	require.NoError(t, late.cmd.Process.Signal(syscall.SIGINT))
	<-late.done
	require.NoError(t, late.err)
}
