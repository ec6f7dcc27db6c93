package membership

import (
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// TestMetaRoundTrip: metadata survives encode/decode, and the largest
// metadata the limits allow still fits memberlist's 512 bytes.
func TestMetaRoundTrip(t *testing.T) {
	t.Parallel()
	m := Meta{ID: "n1", Resource: "users", Addr: "10.0.0.1:7000", Role: RoleClient, Version: 3, Boot: 1 << 63}
	b, err := EncodeMeta(m)
	require.NoError(t, err)
	got, err := DecodeMeta(b)
	require.NoError(t, err)
	require.Equal(t, m, got)

	big := Meta{
		ID: strings.Repeat("i", MaxIDLen), Resource: strings.Repeat("r", MaxResourceLen),
		Addr: strings.Repeat("a", MaxAddrLen), Role: RoleServer, Version: ^uint64(0), Boot: ^uint64(0),
	}
	b, err = EncodeMeta(big)
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), memberlist.MetaMaxSize)
	t.Logf("largest metadata: %d bytes of %d", len(b), memberlist.MetaMaxSize)
}

// TestMetaValidate: out-of-range fields are refused on both sides.
func TestMetaValidate(t *testing.T) {
	t.Parallel()
	ok := Meta{ID: "n", Resource: "r", Role: RoleServer}
	bad := []Meta{
		{Resource: "r", Role: RoleServer},
		{ID: strings.Repeat("i", MaxIDLen+1), Resource: "r", Role: RoleServer},
		{ID: "n", Role: RoleServer},
		{ID: "n", Resource: strings.Repeat("r", MaxResourceLen+1), Role: RoleServer},
		{ID: "n", Resource: "r", Addr: strings.Repeat("a", MaxAddrLen+1), Role: RoleServer},
		{ID: "n", Resource: "r"},
		{ID: "n", Resource: "r", Role: 9},
	}
	require.NoError(t, ok.Validate())
	for _, m := range bad {
		_, err := EncodeMeta(m)
		require.ErrorIs(t, err, ErrInvalidMeta, "%+v", m)
		raw, err := msgpack.Marshal(&m)
		require.NoError(t, err)
		_, err = DecodeMeta(raw)
		require.ErrorIs(t, err, ErrInvalidMeta, "%+v", m)
	}
	for _, raw := range [][]byte{nil, {0xc1}, make([]byte, memberlist.MetaMaxSize+1), {0x81, 0xa1, 'i', 0x01}} {
		_, err := DecodeMeta(raw)
		require.ErrorIs(t, err, ErrInvalidMeta)
	}
	require.Equal(t, "server", RoleServer.String())
	require.Equal(t, "client", RoleClient.String())
	require.Equal(t, "Role(9)", Role(9).String())
}

// FuzzDecodeMeta: any bytes from the network either decode to metadata
// that validates and re-encodes within the limit, or give ErrInvalidMeta;
// never a panic.
func FuzzDecodeMeta(f *testing.F) {
	for _, m := range []Meta{
		{ID: "n1", Resource: "users", Addr: "10.0.0.1:7000", Role: RoleServer, Version: 1, Boot: 42},
		{ID: "c", Resource: "*", Role: RoleClient},
	} {
		b, err := EncodeMeta(m)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte{0xc1})
	f.Add([]byte{0xde, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidMeta)
			return
		}
		again, err := EncodeMeta(m)
		require.NoError(t, err)
		m2, err := DecodeMeta(again)
		require.NoError(t, err)
		require.Equal(t, m, m2)
	})
}
