package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// ErrMissingTool is returned when a command the harness needs is not
// installed.
var ErrMissingTool = errors.New("chaos: missing tool")

// Tools are the programs the harness runs, with the Debian package of each.
var Tools = map[string]string{"ip": "iproute2", "nft": "nftables", "tc": "iproute2"}

// Preflight says why this process cannot run the harness: not root, or a
// tool missing. It returns nil when it can.
func Preflight() error {
	if syscall.Geteuid() != 0 {
		return errors.New("chaos: network namespaces need root (run as root, or under sudo)")
	}
	var missing []string
	for _, tool := range []string{"ip", "nft", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, fmt.Sprintf("%s (apt-get install %s)", tool, Tools[tool]))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrMissingTool, strings.Join(missing, ", "))
	}
	return nil
}

// run runs one command to completion, with stdin when it is not empty,
// and returns its standard output. The error names the command and carries
// what it printed on stderr.
func run(ctx context.Context, stdin string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	// Once ctx ends and the process is killed, return within a second
	// even if something still holds its output open: in the fault suite a
	// status call's Run outlived its 5 s context by 55 s, and took the
	// whole wait for the servers to agree with it (seed 7552).
	cmd.WaitDelay = time.Second
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}
