package backup

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/protocol"
)

func sample(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := NewWriter(&b, Header{Resource: "kv", Partitions: 3, Created: time.Unix(1e9, 0).UTC(), Via: "n1"})
	require.NoError(t, err)
	for p := range 3 {
		require.NoError(t, w.Part(&protocol.BackupPart{Partition: 2 - p, Owner: "n1", Offset: uint64(p + 1), Keys: p, Snapshot: bytes.Repeat([]byte{byte(p)}, 100*p)}))
	}
	end, err := w.Close()
	require.NoError(t, err)
	require.Equal(t, End{Parts: 3, Keys: 3, Bytes: 300}, end)
	return b.Bytes()
}

// TestRoundTrip: what a Writer writes, Read gives back, in order.
func TestRoundTrip(t *testing.T) {
	var parts []int
	h, end, err := Read(bytes.NewReader(sample(t)), nil, func(p *protocol.BackupPart) error {
		parts = append(parts, p.Partition)
		require.Len(t, p.Snapshot, 100*(2-p.Partition))
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, "kv", h.Resource)
	require.Equal(t, 3, h.Partitions)
	require.Equal(t, End{Parts: 3, Keys: 3, Bytes: 300}, end)
	require.Equal(t, []int{2, 1, 0}, parts)
}

// TestDamagedRefused: every single-byte change, every cut, and bytes
// added after the checksum are refused as damaged (or, for the version
// byte, as another format).
func TestDamagedRefused(t *testing.T) {
	good := sample(t)
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		_, _, err := Read(bytes.NewReader(b), nil, nil)
		require.Error(t, err, "byte %d changed", i)
		if i != len(Magic) {
			require.True(t, errors.Is(err, ErrDamaged), "byte %d: %v", i, err)
		}
	}
	for n := range len(good) {
		_, _, err := Read(bytes.NewReader(good[:n]), nil, nil)
		require.ErrorIs(t, err, ErrDamaged, "cut at %d", n)
	}
	_, _, err := Read(bytes.NewReader(append(bytes.Clone(good), 0)), nil, nil)
	require.ErrorIs(t, err, ErrDamaged)
	_, _, err = Read(bytes.NewReader([]byte("not a backup at all, just text")), nil, nil)
	require.ErrorContains(t, err, "not a fero backup file")
}
