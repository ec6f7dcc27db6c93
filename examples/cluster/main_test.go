package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDemo builds the demo and runs it as a new user would: three real
// processes gossiping on loopback must end with the same digest.
func TestDemo(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cluster")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(bin, "-nodes", "3", "-keys", "200").CombinedOutput()
	require.NoError(t, err, "%s", out)
	digests := regexp.MustCompile(`holds all 200 keys \(digest ([0-9a-f]{16})\)`).FindAllStringSubmatch(string(out), -1)
	require.Len(t, digests, 3, "every node reports holding every key:\n%s", out)
	for _, d := range digests {
		require.Equal(t, digests[0][1], d[1], "every node holds the same state:\n%s", out)
	}
}
