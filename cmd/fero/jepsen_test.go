package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/pkg/fero"
)

// TestJepsenVerbs: INCR counts from absent, TRANSFER moves money and
// refuses an overdraft with a definite FailedPrecondition, BANKINIT
// writes once.
func TestJepsenVerbs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := fero.Open(ctx, "jepsen", fero.WithPreset(fero.PresetLocal), fero.WithoutMulticast(), fero.WithHandler(jepsenHandler))
	require.NoError(t, err)
	defer r.Close()
	require.NoError(t, r.WaitServers(ctx, 1))

	var v int64
	require.NoError(t, r.Call(ctx, "INCR", "c", nil, &v))
	assert.EqualValues(t, 1, v)
	require.NoError(t, r.Call(ctx, "INCR", "c", 4, &v))
	assert.EqualValues(t, 5, v)

	var bank map[string]int64
	require.NoError(t, r.Call(ctx, "BANKINIT", "bank", map[string]int64{"a0": 10, "a1": 10}, &bank))
	assert.Equal(t, map[string]int64{"a0": 10, "a1": 10}, bank)
	require.NoError(t, r.Call(ctx, "BANKINIT", "bank", map[string]int64{"a0": 99}, &bank))
	assert.Equal(t, map[string]int64{"a0": 10, "a1": 10}, bank, "a second BANKINIT leaves the bank")

	var moved map[string]int64
	require.NoError(t, r.Call(ctx, "TRANSFER", "bank", transferArgs{From: "a0", To: "a1", Amount: 7}, &moved))
	assert.Equal(t, map[string]int64{"a0": 3, "a1": 17}, moved)
	err = r.Call(ctx, "TRANSFER", "bank", transferArgs{From: "a0", To: "a1", Amount: 4}, nil)
	assert.Equal(t, fero.CodeFailedPrecondition, fero.CodeOf(err), "%v", err)
	assert.True(t, fero.Definite(err))
	err = r.Call(ctx, "TRANSFER", "bank", transferArgs{From: "a0", To: "a9", Amount: 1}, nil)
	assert.Equal(t, fero.CodeFailedPrecondition, fero.CodeOf(err), "%v", err)
	require.NoError(t, r.Call(ctx, "GET", "bank", nil, &bank))
	assert.Equal(t, map[string]int64{"a0": 3, "a1": 17}, bank)
	require.NoError(t, r.Call(ctx, "UPDATE", "k", "v", nil), "built-in verbs pass through")
}
