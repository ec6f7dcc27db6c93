package membership

import (
	"runtime"
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

// TestHugeDeclaredStringsStaySmall: gossip metadata and leave messages
// whose string declares 2 GB and holds a few bytes are refused, and
// refusing them allocates about what each holds. Decoded by msgpack's
// pooled decoders, each grew a kept buffer by a quarter or more: an
// outsider's 30 packets allocated gigabytes.
func TestHugeDeclaredStringsStaySmall(t *testing.T) {
	meta := []byte{0x81, 0xa1, 'i', 0xdb, 0x7f, 0xff, 0xff, 0xff, 'n', '1'}
	leaving := append([]byte{msgLeaving}, meta...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 30 {
		_, err := DecodeMeta(meta)
		require.ErrorIs(t, err, ErrInvalidMeta)
		_, _, err = decodeLeaving(leaving)
		require.ErrorIs(t, err, ErrInvalidMeta)
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	require.Less(t, allocated, uint64(128<<20), "60 refused messages allocated %d MB", allocated>>20)
}
