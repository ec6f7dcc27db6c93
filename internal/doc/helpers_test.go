package doc

import (
	"strings"
	"testing"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
	"github.com/stretchr/testify/require"
)

const testPartitions = 8

func newStore(t testing.TB, opts ...Option) *Store {
	t.Helper()
	s, err := New(testPartitions, opts...)
	require.NoError(t, err)
	return s
}

// partOf returns the partition a key's records are routed to.
func partOf(s *Store, key string) int { return s.PartitionOf(key) }

func apply(s *Store, c Change) error { return s.Apply(partOf(s, c.Key), c) }

// mustApply builds and applies a change through the Builder.
func mustApply(t testing.TB, s *Store, typ wire.RecordType, key string, v any) {
	t.Helper()
	require.NoError(t, apply(s, change(t, s, typ, key, v)))
}

func change(t testing.TB, s *Store, typ wire.RecordType, key string, v any) Change {
	t.Helper()
	b := s.Builder()
	var c Change
	var err error
	switch typ {
	case wire.RecordUpdate:
		c, err = b.Update(key, v)
	case wire.RecordAdd:
		c, err = b.Add(key, v)
	default:
		c = b.Remove(key)
	}
	require.NoError(t, err)
	return c
}

// storeOf returns a store holding the given top-level values.
func storeOf(t testing.TB, state map[string]any, opts ...Option) *Store {
	t.Helper()
	s := newStore(t, opts...)
	for k, v := range state {
		mustApply(t, s, wire.RecordUpdate, k, v)
	}
	return s
}

// canon returns the canonical encoding of a Go value.
func canon(t testing.TB, v any) []byte {
	t.Helper()
	c, err := Builder{}.Update("k", v)
	require.NoError(t, err)
	return c.Value
}

// requireCode checks that err is a coded error with the code and cause.
func requireCode(t testing.TB, err error, code errs.Code, cause error) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, errs.CodeOf(err), "%v", err)
	require.ErrorIs(t, err, cause)
	require.True(t, strings.HasPrefix(err.Error(), "fero: "), err.Error())
}

// snapshots returns every partition's snapshot.
func snapshots(t testing.TB, s *Store) [][]byte {
	t.Helper()
	out := make([][]byte, s.Partitions())
	for p := range out {
		b, err := s.Snapshot(p)
		require.NoError(t, err)
		out[p] = b
	}
	return out
}
