package node

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
)

func TestDocState(t *testing.T) {
	store, err := doc.New(8)
	require.NoError(t, err)
	var logs bytes.Buffer
	st := docState{store: store, logger: slog.New(slog.NewTextHandler(&logs, nil))}
	var b doc.Builder
	add, err := b.Add("users.ada", map[string]any{"name": "Ada"})
	require.NoError(t, err)
	p := store.PartitionOf("users")
	e := partition.Entry{Offset: 1, Type: add.Type, Key: add.Key, Value: add.Value}

	require.NoError(t, st.Check(p, e))
	st.Apply(p, e)
	v, ok := store.Get("users.ada.name")
	require.True(t, ok)
	assert.Equal(t, "Ada", v)

	// The same ADD again does not fit: Check refuses it with the store's
	// code, which the engine hands to the caller.
	err = st.Check(p, e)
	assert.Equal(t, errs.FailedPrecondition, errs.CodeOf(err))
	// Applied anyway (copies diverged), it is logged and skipped.
	st.Apply(p, e)
	assert.Contains(t, logs.String(), "has diverged")

	snap, err := st.Snapshot(p)
	require.NoError(t, err)
	other, err := doc.New(8)
	require.NoError(t, err)
	require.NoError(t, docState{store: other, logger: st.logger}.Restore(p, snap))
	assert.Equal(t, store.Digest(), other.Digest())
}
