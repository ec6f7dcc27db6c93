package node

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/ring"
)

// view follows the membership of the resource and keeps the ring map of
// its live members, and how to reach each of them.
//
// A server enters the map once it publishes a data address: before that no
// one could send it a request. A client is listed whether or not it
// listens; owners push commits to it over the connection it opened.
type view struct {
	ring   *ring.Ring
	ms     *membership.Membership
	logger *slog.Logger
	// attached lists a server's attached clients (attach.go), which are
	// copies while their connections live but are not in its membership.
	attached func() []string

	refreshing sync.Mutex // one refresh at a time: a later one reads later state

	mu      sync.Mutex
	cur     *ring.Map
	clients []string
	unseen  []string          // seeds no member of cur answers at
	addrs   map[string]string // live member ID → data address
	changed chan struct{}     // capacity 1: the map, the client list or the unseen seeds changed
	watched chan struct{}     // closed and replaced at every refresh (watch)
}

func newView(r *ring.Ring, ms *membership.Membership, logger *slog.Logger) *view {
	return &view{ring: r, ms: ms, logger: logger, addrs: map[string]string{}, changed: make(chan struct{}, 1), watched: make(chan struct{})}
}

// refresh rebuilds the map from the live members and reports whether it
// or the client list changed.
func (v *view) refresh() bool {
	v.refreshing.Lock()
	defer v.refreshing.Unlock()
	defer v.wake()
	live := v.ms.Members()
	rms := make([]ring.Member, 0, len(live))
	var clients []string
	addrs := make(map[string]string, len(live))
	inMap := make([]membership.Member, 0, len(live))
	for _, m := range live {
		client := m.Role == membership.RoleClient
		if !client && m.Addr == "" {
			continue
		}
		inMap = append(inMap, m)
		rms = append(rms, ring.Member{ID: m.ID, Incarnation: m.Boot, Client: client})
		if client {
			clients = append(clients, m.ID)
		}
		addrs[m.ID] = m.Addr
	}
	if v.attached != nil {
		for _, id := range v.attached() {
			if _, member := addrs[id]; !member {
				rms = append(rms, ring.Member{ID: id, Client: true})
				clients = append(clients, id)
			}
		}
		slices.Sort(clients)
	}
	version, err := v.ring.Version(rms)
	if err != nil {
		v.logger.Error("fero: node: cannot place members", "err", err)
		return false
	}
	// Seeds are matched against the members of this map, not the live list
	// of a later moment: the engine forms a new cluster only once the map
	// it holds has every seed (rule 9).
	unseen := v.ms.UnseenSeeds(inMap)
	v.mu.Lock()
	same := v.cur != nil && v.cur.Version() == version && slices.Equal(v.clients, clients) && slices.Equal(v.unseen, unseen)
	v.addrs = addrs
	v.mu.Unlock()
	if same {
		return false
	}
	m, err := v.ring.Build(rms)
	if err != nil {
		v.logger.Error("fero: node: cannot build the partition map", "err", err)
		return false
	}
	v.mu.Lock()
	v.cur, v.clients, v.unseen = m, clients, unseen
	v.mu.Unlock()
	select {
	case v.changed <- struct{}{}:
	default:
	}
	return true
}

// watch returns a channel closed at the next refresh.
func (v *view) watch() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.watched
}

func (v *view) wake() {
	v.mu.Lock()
	close(v.watched)
	v.watched = make(chan struct{})
	v.mu.Unlock()
}

// run refreshes on every membership event until ctx ends.
func (v *view) run(ctx context.Context) {
	sub := v.ms.Subscribe()
	defer sub.Close()
	v.refresh()
	for {
		select {
		case _, ok := <-sub.Events():
			if !ok {
				return
			}
			v.refresh()
		case <-ctx.Done():
			return
		}
	}
}

// current returns the map, the client IDs and the seeds no member of the
// map answers at.
func (v *view) current() (*ring.Map, []string, []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cur, v.clients, v.unseen
}

// addr returns a live member's data address.
func (v *view) addr(id string) (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	a, ok := v.addrs[id]
	return a, ok
}
