// Package procs starts the child processes of the examples' multi-process
// demos and relays what they print.
package procs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// Child is one started process. Its first stdout line is kept apart; the
// rest arrive on Lines until the process closes stdout.
type Child struct {
	Cmd   *exec.Cmd
	First string
	Lines <-chan string
	stdin io.WriteCloser
}

// Start runs this program again with args. The child's stderr goes to
// ours; Start returns once the child printed its first line.
func Start(ctx context.Context, args ...string) (*Child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Child{Cmd: cmd, stdin: stdin}
	out := bufio.NewScanner(stdout)
	if !out.Scan() {
		c.Stop()
		return nil, fmt.Errorf("%s exited before it started", strings.Join(args, " "))
	}
	c.First = out.Text()
	lines := make(chan string)
	c.Lines = lines
	go func() {
		defer close(lines)
		for out.Scan() {
			lines <- out.Text()
		}
	}()
	return c, nil
}

// Send writes one line to the child's stdin.
func (c *Child) Send(line string) error {
	_, err := fmt.Fprintln(c.stdin, line)
	return err
}

// Stop closes the child's stdin, which tells the demos' children to exit,
// and waits for it.
func (c *Child) Stop() {
	c.stdin.Close()
	_ = c.Cmd.Wait()
}

// Relay prints each child's lines, prefixed with its name, until the child
// prints "done" or exits. It reports whether any line began with "error".
func Relay(children []*Child, name func(i int) string) (failed bool) {
	for i, c := range children {
		for line := range c.Lines {
			if line == "done" {
				break
			}
			failed = failed || strings.HasPrefix(line, "error")
			fmt.Printf("  %s %s\n", name(i), line)
		}
	}
	return failed
}
