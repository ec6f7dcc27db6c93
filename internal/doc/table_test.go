package doc

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"unsafe"

	"github.com/fero-go/fero/internal/wire"
	"github.com/stretchr/testify/require"
)

// TestTableMatchesMap runs random adds, lookups and removes against a Go
// map. Hashes are drawn from a handful of values, so probe runs are long,
// wrap around the end of the slots, and distinct keys share whole hashes:
// only the key comparison tells them apart, and removal has runs to mend.
func TestTableMatchesMap(t *testing.T) {
	for _, hashes := range []uint64{1, 3, 16, 1 << 20} {
		t.Run("hashes="+strconv.FormatUint(hashes, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, hashes))
			hashOf := map[string]uint64{}
			hash := func(k string) uint64 {
				if h, ok := hashOf[k]; ok {
					return h
				}
				// High bit set as keyHash's; low bits pick a home near
				// the end of the slots now and then, to wrap.
				h := 1<<63 | rng.Uint64N(hashes)*0x9e3779b97f4a7c15>>1
				hashOf[k] = h
				return h
			}
			var tb table
			want := map[string]*entry{}
			for i := range 20000 {
				k := "k" + strconv.Itoa(rng.IntN(300))
				h := hash(k)
				switch op := rng.IntN(10); {
				case op < 5:
					e := &entry{}
					if c := tb.get(k, h); c != nil {
						c.e = e
					} else {
						tb.add(newCell(k, e, 1), h)
					}
					want[k] = e
				case op < 8:
					tb.remove(k, h)
					delete(want, k)
				default:
					c := tb.get(k, h)
					if e, ok := want[k]; ok {
						require.NotNil(t, c, "step %d: %q missing", i, k)
						require.Same(t, e, c.e, "step %d: %q", i, k)
					} else {
						require.Nil(t, c, "step %d: %q present", i, k)
					}
				}
				require.Equal(t, len(want), tb.n, "step %d", i)
			}
			// Every key is found, and nothing else is held.
			for k, e := range want {
				c := tb.get(k, hash(k))
				require.NotNil(t, c, "%q missing", k)
				require.Same(t, e, c.e)
			}
			seen := 0
			for c := range tb.all {
				require.Same(t, want[c.key], c.e)
				seen++
			}
			require.Equal(t, len(want), seen)
		})
	}
}

func TestCellCopiesKey(t *testing.T) {
	for _, n := range []int{0, 1, 24, 25, 40, 41, 72, 73, 500} {
		buf := make([]byte, n+1)
		for i := range buf {
			buf[i] = 'a' + byte(i%26)
		}
		want := string(buf[:n])
		c := newCell(unsafe.String(&buf[0], n), nil, 0) // aliases buf, as a decoded key may
		clear(buf)
		require.Equal(t, want, c.key, "key of %d bytes", n)
	}
}

// TestWarmChangesNothing warms keys present and absent, nested, in empty
// and in out-of-range partitions, with fewer partitions than keys, and
// more keys than one pass of Warm takes: nothing changes, nothing panics.
func TestWarmChangesNothing(t *testing.T) {
	s := newStore(t)
	var parts []int
	var keys []string
	for i := range 100 {
		k := "user" + strconv.Itoa(i)
		require.NoError(t, apply(s, Change{Type: wire.RecordUpdate, Key: k, Value: wire.AppendBin(nil, []byte{byte(i)})}))
		parts = append(parts, s.PartitionOf(k))
		keys = append(keys, k)
	}
	parts = append(parts, s.PartitionOf("absent"), s.PartitionOf("user1"), -1, s.Partitions(), 0)
	keys = append(keys, "absent", "user1.nested.path", "user2", "user3", "")
	digest, n := s.Digest(), s.Len()
	require.NotZero(t, s.Warm(parts, keys), "the keys' cells were loaded")
	s.Warm(parts[:10], keys)
	s.Warm(nil, keys)
	empty := newStore(t)
	require.Zero(t, empty.Warm(parts, keys))
	require.Equal(t, digest, s.Digest())
	require.Equal(t, n, s.Len())
}
