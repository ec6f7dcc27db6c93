package membership

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOptionsValidated: bad options fail New with ErrInvalidOption; the
// defaults are the documented ones, and multicast is off in test binaries
// unless asked for.
func TestOptionsValidated(t *testing.T) {
	t.Parallel()
	bad := map[string]Option{
		"preset":          WithPreset(9),
		"bind":            WithBind("localhost"),
		"seed":            WithSeeds("no-port"),
		"range reversed":  WithPortRange(5000, 4000),
		"range too wide":  WithPortRange(1000, 1000+MaxPortRange),
		"range zero":      WithPortRange(0, 10),
		"key size":        WithSecretKey([]byte("short")),
		"rejoin":          WithRejoin(time.Second, time.Millisecond, 0.5),
		"jitter":          WithRejoin(time.Second, time.Minute, 2),
		"forget":          WithForgetAfter(0),
		"leave":           WithLeaveTimeout(-1),
		"dns port":        WithDNS("x", 70000),
		"resolver":        WithResolver(nil),
		"id too long":     WithID(strings.Repeat("x", MaxIDLen+1)),
		"resource":        WithResource(strings.Repeat("x", MaxResourceLen+1)),
		"role":            WithRole(0),
		"multicast group": WithMulticast(MulticastConfig{Group: "127.0.0.1:5354"}),
		"multicast ttl":   WithMulticast(MulticastConfig{TTL: 300}),
	}
	for name, o := range bad {
		_, err := New(o)
		require.Error(t, err, name)
		require.True(t, strings.HasPrefix(err.Error(), "fero: "), name)
	}

	c, err := newConfig(nil)
	require.NoError(t, err)
	require.Equal(t, PresetLAN, c.preset)
	require.Nil(t, c.multicast, "multicast is off by default in tests")
	require.Equal(t, "0.0.0.0:0", c.bind)
	require.Equal(t, DefaultResource, c.meta.Resource)
	require.Equal(t, RoleServer, c.meta.Role)
	require.True(t, strings.HasPrefix(c.meta.ID, "fero-"))
	require.Equal(t, DefaultRejoinBase, c.rejoinBase)
	require.Equal(t, DefaultRejoinCap, c.rejoinCap)

	c, err = newConfig([]Option{WithMulticast(MulticastConfig{})})
	require.NoError(t, err)
	require.Equal(t, MulticastConfig{Group: DefaultMulticastGroup, TTL: DefaultMulticastTTL,
		Jitter: DefaultMulticastJitter, Interval: DefaultMulticastInterval}, *c.multicast)

	c, err = newConfig([]Option{WithPortRange(7000, 7009), WithPreset(PresetLocal)})
	require.NoError(t, err)
	require.Equal(t, []string{"127.0.0.1"}, c.scanHosts)
	require.Equal(t, "127.0.0.1:0", c.bind)
}

func TestStatusStrings(t *testing.T) {
	t.Parallel()
	for s, want := range map[Status]string{
		StatusConnecting: "connecting", StatusConnected: "connected", StatusClient: "client",
		StatusSuspect: "suspect", StatusDead: "dead", StatusRemoved: "removed", Status(0): "Status(0)",
	} {
		require.Equal(t, want, s.String())
	}
	require.True(t, StatusSuspect.Live())
	require.False(t, StatusDead.Live())
}
