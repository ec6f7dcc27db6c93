package origsut

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/fero-go/fero/bench"
)

const (
	// stopTimeout is how long Node has to exit after SIGTERM before it is
	// killed.
	stopTimeout = 5 * time.Second
	// tailSize is how much of Node's stderr is kept for error messages.
	tailSize = 8 << 10
	// maxLine bounds one line of a script's output (a client's round trip
	// latencies come 1,000 to a line).
	maxLine = 1 << 20
)

// nodeProc is one running Node script: its stdout as lines, its stderr in a
// tail, and its stdin when the script reads one.
type nodeProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser // nil for a script that reads none
	lines  chan string    // stdout, a line at a time; closed at its end
	stderr *bench.Tail
	quit   chan struct{} // closed by stop: lines are no longer read
	exited chan struct{} // closed once Wait returned, into waitErr
	// waitErr is Wait's result, set before exited closes.
	waitErr error
}

// startNode runs node on script in dir with arg as its one argument,
// piping its stdin if withStdin.
func startNode(node, dir, script string, arg []byte, withStdin bool) (*nodeProc, error) {
	cmd := exec.Command(node, script, string(arg))
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	p := &nodeProc{
		cmd:    cmd,
		lines:  make(chan string, 64),
		stderr: bench.NewTail(tailSize),
		quit:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	cmd.Stderr = p.stderr
	// Node closes its output as it exits; this only bounds the wait for a
	// process that would inherit it.
	cmd.WaitDelay = time.Second
	var err error
	if withStdin {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, fmt.Errorf("origsut: node stdin: %w", err)
		}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("origsut: node stdout: %w", err)
	}
	started := make(chan error, 1)
	go func() {
		// Linux sends the parent-death signal when the thread that
		// started the child ends, and Go ends a thread when a goroutine
		// locked to it exits: holding this one until the child is reaped
		// keeps the signal for the process's death only.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("origsut: start node %s: %w", script, err)
			return
		}
		started <- nil
		p.read(stdout)
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// read passes stdout's lines on until its end, or until stop, after which
// it discards the rest so that Node never blocks writing.
func (p *nodeProc) read(stdout io.Reader) {
	defer close(p.lines)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		select {
		case p.lines <- sc.Text():
		case <-p.quit:
			_, _ = io.Copy(io.Discard, stdout)
			return
		}
	}
	// A line over maxLine ends the scan early: drain, so that Wait can
	// return, and let the reader see the lines end.
	_, _ = io.Copy(io.Discard, stdout)
}

// send writes one line to the script's stdin.
func (p *nodeProc) send(line string) error {
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		return fmt.Errorf("origsut: write %q to node: %w", line, err)
	}
	return nil
}

// stop ends the script, SIGTERM first (and closing its stdin) and SIGKILL
// stopTimeout later, and waits until it is reaped. How it exits once asked
// to is no failure; only ignoring SIGTERM is.
func (p *nodeProc) stop() error {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	if p.stdin != nil {
		_ = p.stdin.Close()
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		// Already gone, or a system without SIGTERM.
		_ = p.cmd.Process.Kill()
	}
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-p.exited:
		return nil
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("origsut: node ignored SIGTERM for %v and was killed; stderr:\n%s", stopTimeout, p.stderr)
	}
}

// exitError describes the script's end, with the end of its stderr.
func (p *nodeProc) exitError(what string) error {
	err := p.waitErr
	if err == nil {
		err = errors.New("exit status 0")
	}
	return fmt.Errorf("origsut: %s: %w; stderr:\n%s", what, err, p.stderr)
}
