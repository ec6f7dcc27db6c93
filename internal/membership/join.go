// Joining a cluster: Join and the parallel attempts behind it, and what a
// member knows of its seeds (their addresses, which have answered, why
// the others did not).

package membership

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// joinLanes is how many attempts at once join the targets that are not
// seeds.
const joinLanes = 8

// join joins targets as Join does: each seed in an attempt of its own, so
// that Seeds can say why a seed did not answer, and the rest shared among
// up to joinLanes more. The attempts run at once. memberlist tries the
// addresses of one call one after another, each for up to its TCP timeout
// (10 s), so a member whose first seeds are cut off would wait out each of
// them before reaching one that answers. join returns as soon as one
// attempt has merged state with a peer, when every attempt has failed, or
// when ctx ends; the attempts still running finish in the background and
// record their seeds' errors. An attempt still running is not started
// again meanwhile, so a re-join loop faster than the TCP timeout does not
// pile attempts up.
func (m *Membership) join(ctx context.Context, targets []string) (int, error) {
	var seeds, rest []string
	for _, t := range targets {
		if slices.Contains(m.cfg.seeds, t) {
			seeds = append(seeds, t)
		} else {
			rest = append(rest, t)
		}
	}
	type result struct {
		n   int
		err error
	}
	results := make(chan result, len(seeds)+joinLanes) // no attempt waits for join
	// attempt joins addrs in the background unless the attempt named key
	// (a seed, or a lane of other targets) is still running.
	attempt := func(key string, addrs []string) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.closed || m.joining[key] {
			return false
		}
		if m.joining == nil {
			m.joining = map[string]bool{}
		}
		m.joining[key] = true
		m.wg.Add(1) // under mu, so it cannot race Close's Wait
		go func() {
			defer m.wg.Done()
			k, err := m.Join(m.ctx, addrs...)
			m.mu.Lock()
			delete(m.joining, key)
			switch {
			case !slices.Contains(m.cfg.seeds, key) || m.ctx.Err() != nil:
			case err != nil:
				if m.seedErrs == nil {
					m.seedErrs = map[string]string{}
				}
				m.seedErrs[key] = joinReason(key, err)
			default:
				delete(m.seedErrs, key)
			}
			m.mu.Unlock()
			results <- result{k, err}
		}()
		return true
	}
	running := 0
	for _, s := range seeds {
		if attempt(s, []string{s}) {
			running++
		}
	}
	// The other targets (the port range, DNS answers, peers that died:
	// up to thousands) share a few attempts, each trying its share in turn.
	lanes := make([][]string, min(len(rest), joinLanes))
	for i, t := range rest {
		lanes[i%len(lanes)] = append(lanes[i%len(lanes)], t)
	}
	for i, lane := range lanes {
		if attempt(fmt.Sprintf("\x00lane %d", i), lane) { // never a seed's address
			running++
		}
	}
	if running == 0 {
		return 0, fmt.Errorf("%w: the earlier attempts to join are still running", ErrNoPeers)
	}
	var errs []error
	for range running {
		select {
		case r := <-results:
			if r.n > 0 {
				return r.n, nil
			}
			errs = append(errs, r.err)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return 0, errors.Join(errs...)
}

// joinReason words why joining seed failed: memberlist's error lists each
// address the seed resolved to ("failed to join ADDR: cause"); the address
// is dropped where it is the seed itself.
func joinReason(seed string, err error) string {
	var parts []string
	var multi interface{ WrappedErrors() []error }
	if errors.As(err, &multi) {
		for _, e := range multi.WrappedErrors() {
			parts = append(parts, strings.TrimPrefix(e.Error(), "failed to join "+seed+": "))
		}
	}
	if len(parts) == 0 {
		return err.Error()
	}
	return strings.Join(parts, "; ")
}

// Join contacts the given gossip addresses (host:port) and merges state with
// each reachable one; it returns how many answered. ErrNoPeers when none did.
// memberlist's join cannot be interrupted; if ctx ends first Join returns
// ctx.Err() and the attempt finishes in the background within the TCP
// timeout (Close waits for it).
func (m *Membership) Join(ctx context.Context, addrs ...string) (int, error) {
	if len(addrs) == 0 {
		return 0, ErrNoPeers
	}
	m.mu.Lock()
	ml, closed := m.ml, m.closed
	if !closed && ml != nil {
		// Added under mu so it cannot race Close's Wait.
		m.wg.Add(1)
	}
	m.mu.Unlock()
	switch {
	case closed:
		return 0, ErrClosed
	case m.cfg.feed != nil:
		return 0, errFed
	case ml == nil:
		return 0, ErrNotStarted
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer m.wg.Done()
		n, err := ml.Join(addrs)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		if r.n == 0 {
			return 0, fmt.Errorf("%w: %w", ErrNoPeers, r.err)
		}
		return r.n, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// gossipAddr returns the local member's gossip address, recorded when
// memberlist announced the local node; callers hold m.mu.
func (m *Membership) gossipAddr() string {
	if p, ok := m.peers[m.meta.ID]; ok {
		return p.m.Gossip
	}
	return ""
}

// HasSeeds reports whether the member was given seeds to join: it joins an
// existing cluster rather than founding one.
func (m *Membership) HasSeeds() bool { return len(m.cfg.seeds) > 0 }

// resolveSeeds records the addresses each seed names: a literal IP
// itself, a host name every address it resolves to (kept from the last
// lookup that worked). UnseenSeeds matches them against members' gossip
// addresses.
func (m *Membership) resolveSeeds(ctx context.Context) {
	out := make(map[string][]string, len(m.cfg.seeds))
	m.mu.Lock()
	for s, as := range m.seedAddrs {
		out[s] = as
	}
	m.mu.Unlock()
	for _, s := range m.cfg.seeds {
		host, port, _ := net.SplitHostPort(s) // checked by the options
		if ip := net.ParseIP(host); ip != nil {
			out[s] = []string{net.JoinHostPort(ip.String(), port)}
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ips, err := m.cfg.resolver.LookupHost(lctx, host)
		cancel()
		if err != nil {
			m.log.Debug("seed lookup", "seed", s, "err", err)
			continue
		}
		as := make([]string, 0, len(ips))
		for _, ip := range ips {
			if p := net.ParseIP(ip); p != nil {
				ip = p.String()
			}
			as = append(as, net.JoinHostPort(ip, port))
		}
		out[s] = as
	}
	m.mu.Lock()
	m.seedAddrs = out
	m.mu.Unlock()
}

// UnseenSeeds returns the seeds this member was given at which none of
// members, nor the local member, answers: its gossip address is not one a
// seed names. A server given seeds forms a new cluster only once it has
// seen every one of them (docs/engine.md, rule 9), so seeds must be given
// at the addresses members gossip from (fero status shows them).
func (m *Membership) UnseenSeeds(members []Member) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	at := make(map[string]bool, len(members)+1)
	for _, mem := range members {
		at[canonicalAddr(mem.Gossip)] = true
	}
	at[canonicalAddr(m.gossipAddr())] = true
	var out []string
	for _, s := range m.cfg.seeds {
		if !slices.ContainsFunc(m.seedAddrs[s], func(a string) bool { return at[a] }) {
			out = append(out, s)
		}
	}
	return out
}

// SeedStatus is what a member knows of one of its seeds.
type SeedStatus struct {
	Seed string
	// Answered: a live peer gossips from an address the seed names.
	Answered bool
	// Self: the seed names this member's own gossip address.
	Self bool
	// Err is why the last attempt to join the seed failed; "" when it
	// worked or none was made yet.
	Err string
}

// String describes the seed for a log line or an error: the seed, and
// why it did not answer.
func (s SeedStatus) String() string {
	switch {
	case s.Answered:
		return s.Seed + " (answered)"
	case s.Self:
		return s.Seed + " (this node's own address)"
	case s.Err != "":
		return s.Seed + " (" + s.Err + ")"
	}
	return s.Seed + " (not tried yet)"
}

// Seeds reports on each seed the member was given, in the order given.
func (m *Membership) Seeds() []SeedStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	peers := make(map[string]bool, len(m.peers))
	for _, p := range m.peers {
		if p.m.ID != m.meta.ID && p.m.Status.Live() {
			peers[canonicalAddr(p.m.Gossip)] = true
		}
	}
	self := canonicalAddr(m.gossipAddr())
	out := make([]SeedStatus, 0, len(m.cfg.seeds))
	for _, s := range m.cfg.seeds {
		st := SeedStatus{Seed: s, Err: m.seedErrs[s]}
		for _, a := range m.seedAddrs[s] {
			st.Answered = st.Answered || peers[a]
			st.Self = st.Self || a == self
		}
		out = append(out, st)
	}
	return out
}

// canonicalAddr writes host:port with the IP in its canonical form, so
// "::ffff:10.0.0.1" and "10.0.0.1" compare equal.
func canonicalAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	}
	return net.JoinHostPort(host, port)
}
