package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDemo builds the demo and runs it as a new user would, small.
func TestDemo(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "echo")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(bin, "-nodes", "3", "-calls", "200").CombinedOutput()
	require.NoError(t, err, "%s", out)
	text := string(out)
	require.Equal(t, 6, strings.Count(text, "one-way messages in"), "every node reports on both others:\n%s", text)
	require.NotContains(t, text, "error")
}
