package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDemo builds the demo and runs it as a new user would: three real
// processes gossiping on loopback must end with the same digest, and again
// after all three are killed and restarted on their data directories.
func TestDemo(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cluster")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(bin, "-nodes", "3", "-keys", "200").CombinedOutput()
	require.NoError(t, err, "%s", out)
	digests := regexp.MustCompile(`holds all 200 keys \(digest ([0-9a-f]{16})\)`).FindAllStringSubmatch(string(out), -1)
	require.Len(t, digests, 6, "every node reports holding every key, before and after the restart:\n%s", out)
	require.Len(t, regexp.MustCompile(`restarted on its data directory; holds 200 keys`).FindAllString(string(out), -1), 3,
		"every node loads every key from its data directory:\n%s", out)
	for _, d := range digests {
		require.Equal(t, digests[0][1], d[1], "every node holds the same state:\n%s", out)
	}
}
