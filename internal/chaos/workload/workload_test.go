package workload

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/chaos/check"
	"github.com/fero-go/fero/internal/chaos/history"
	"github.com/fero-go/fero/pkg/fero"
)

// TestRunInProcess runs a short workload against one in-process server and
// checks its history: the short-mode cover of what TestSmoke does with
// processes.
func TestRunInProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := fero.Open(ctx, "inproc", fero.WithPreset(fero.PresetLAN), fero.WithoutMulticast(),
		fero.WithBind("127.0.0.1:0"), fero.WithListen("127.0.0.1:0"), fero.WithID("s1"))
	require.NoError(t, err)
	defer srv.Close()

	dir := t.TempDir()
	pr, pw := io.Pipe()
	cfg := Config{
		Resource: "inproc", Seeds: []string{srv.GossipAddr()}, Bind: "127.0.0.1:0", Listen: "127.0.0.1:0",
		ID: "c1", Proc: 1, Keys: []string{"a", "b", "c"}, Rate: 200, Duration: time.Second, Seed: 7,
		Out: filepath.Join(dir, "p1"+history.HistorySuffix), Stdin: pr,
		OpsDone: func() { pw.Close() },
	}
	require.NoError(t, Run(ctx, cfg))

	rep, err := check.Run(dir)
	require.NoError(t, err)
	require.True(t, rep.Passed(), "%s", rep)
	require.Greater(t, rep.OK, 100)
	require.Equal(t, 3, rep.Keys)
}

func TestRunNeedsKeysRateAndOut(t *testing.T) {
	err := Run(context.Background(), Config{Rate: 1, Out: "x" + history.HistorySuffix})
	require.ErrorContains(t, err, "required")
}

func TestAsString(t *testing.T) {
	_, absent, err := asString(nil)
	require.NoError(t, err)
	require.True(t, absent)
	s, absent, err := asString("")
	require.NoError(t, err)
	require.False(t, absent)
	require.Empty(t, s)
	_, _, err = asString(int64(3))
	require.True(t, err != nil && strings.Contains(err.Error(), "not a string"))
}

// TestSameInts: a GET's reply (uint64 for a positive integer) and the
// node's copy (int64) show alike, in maps too.
func TestSameInts(t *testing.T) {
	assert.Equal(t, show(int64(681)), show(uint64(681)))
	assert.Equal(t, show(map[string]any{"a0": int64(3)}), show(map[string]any{"a0": uint64(3)}))
	assert.NotEqual(t, show(int64(3)), show(int64(4)))
}
