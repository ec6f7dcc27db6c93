package membership

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeFeed serves lists set by the test; each call with the current
// version waits until the list changes or the call's context ends.
type fakeFeed struct {
	mu      sync.Mutex
	list    []Meta
	version uint64
	fail    error
	failed  int // calls answered with fail
	changed chan struct{}
}

func newFakeFeed() *fakeFeed { return &fakeFeed{changed: make(chan struct{})} }

func (f *fakeFeed) set(list []Meta, fail error) {
	f.mu.Lock()
	f.list, f.fail = list, fail
	f.version++
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeFeed) feed(ctx context.Context, have uint64) ([]Meta, uint64, error) {
	for {
		f.mu.Lock()
		list, version, fail, changed := f.list, f.version, f.fail, f.changed
		f.mu.Unlock()
		if fail != nil {
			f.mu.Lock()
			f.failed++
			f.mu.Unlock()
			return nil, 0, fail
		}
		if version != have {
			return list, version, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

func server(id string) Meta {
	return Meta{ID: id, Resource: "users", Role: RoleServer, Addr: "127.0.0.1:1", Boot: 7, Version: 1}
}

func TestFeedKeepsTheServersItReports(t *testing.T) {
	f := newFakeFeed()
	f.set([]Meta{server("a"), server("b")}, nil)
	m, err := New(WithID(AttachedPrefix+"c"), WithResource("users"), WithRole(RoleClient), WithPreset(PresetLocal), WithFeed(f.feed))
	require.NoError(t, err)
	require.NoError(t, m.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	require.Equal(t, []string{"a", "b", AttachedPrefix + "c"}, ids(m.Members()), "the first list is in place when Start returns")
	require.Equal(t, StatusClient, m.Local().Status)

	sub := m.Subscribe()
	defer sub.Close()
	// b leaves the list, a server of another resource and one with a bad
	// meta are ignored, d joins.
	other := server("x")
	other.Resource = "orders"
	f.set([]Meta{server("a"), other, {ID: "", Resource: "users", Role: RoleServer}, server("d")}, nil)
	waitStatus(t, sub, "b", StatusDead, 5*time.Second)
	require.Eventually(t, func() bool {
		return len(m.Members()) == 3 && m.Members()[1].ID == "d"
	}, 5*time.Second, 5*time.Millisecond, "members %v", ids(m.Members()))

	// A feed that fails leaves the members as they were.
	f.set(nil, errors.New("no server answers"))
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.failed >= 3
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, []string{"a", "d", AttachedPrefix + "c"}, ids(m.Members()))
	f.set([]Meta{server("a")}, nil)
	waitStatus(t, sub, "d", StatusDead, 5*time.Second)
}

func TestFeedOptionsAreChecked(t *testing.T) {
	f := newFakeFeed()
	for name, opts := range map[string][]Option{
		"server":            {WithID(AttachedPrefix + "c"), WithFeed(f.feed)},
		"no prefix":         {WithID("c"), WithRole(RoleClient), WithFeed(f.feed)},
		"seeds":             {WithID(AttachedPrefix + "c"), WithRole(RoleClient), WithFeed(f.feed), WithSeeds("127.0.0.1:1")},
		"gossip key":        {WithID(AttachedPrefix + "c"), WithRole(RoleClient), WithFeed(f.feed), WithSecretKey(make([]byte, 32))},
		"prefix and gossip": {WithID(AttachedPrefix + "c"), WithRole(RoleClient)},
	} {
		_, err := New(opts...)
		require.ErrorIs(t, err, ErrInvalidOption, name)
	}
	// Gossip never carries an attached client's ID.
	b, err := EncodeMeta(Meta{ID: AttachedPrefix + "c", Resource: "users", Role: RoleClient})
	require.NoError(t, err)
	_, err = DecodeMeta(b)
	require.ErrorIs(t, err, ErrInvalidMeta)
}
