package fero

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStoredValueCannotCrashAReader: anyone who may write can store
// {"Label": 1}; decoding it into a type whose Label is a fmt.Stringer made
// msgpack panic (reflect.Set) in GetInto, Map.Get, Map.All and
// Change.Decode, so every process that read the key crashed (found by
// FuzzRemoteReply). Each now returns an error, or skips the value.
func TestStoredValueCannotCrashAReader(t *testing.T) {
	type labelled struct{ Label fmt.Stringer }
	c := newTestCluster(t, 17)
	r := c.open("a")
	c.settle(1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, r.Update(ctx, "k", map[string]any{"Label": 1}, Majority))
	var v labelled
	_, err := r.GetInto("k", &v)
	require.Error(t, err)
	m := Typed[labelled](r)
	_, _, err = m.Get("k")
	require.Error(t, err)
	require.Empty(t, m.Snapshot(), "All skips a value that does not decode")
	var e struct{ Err error }
	_, err = r.GetInto("k", &e)
	require.NoError(t, err, "no Err field in the value: nothing to decode")
	require.NoError(t, r.Update(ctx, "e", map[string]any{"Err": 1}, Majority))
	_, err = r.GetInto("e", &e)
	require.Error(t, err)
}
