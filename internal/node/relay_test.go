package node

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/fero-go/fero/internal/ring"
)

func relayMap(t *testing.T, ids ...string) *ring.Map {
	t.Helper()
	r, err := ring.New(ring.WithPartitions(16))
	if err != nil {
		t.Fatal(err)
	}
	ms := make([]ring.Member, len(ids))
	for i, id := range ids {
		ms[i] = ring.Member{ID: id}
	}
	m, err := r.Build(ms)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRelayRoutesAroundACutPeer steps rule 17 on a clock: a server not
// heard from directly for a lease is sent to through the first server
// heard from within one, and directly again once it is heard from.
func TestRelayRoutesAroundACutPeer(t *testing.T) {
	const lease = 750 * time.Millisecond
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	a := newRelays()
	a.setMap(relayMap(t, "a", "b", "c", "d"), "a", lease, t0)

	// New to the map: each has a lease to be heard from.
	for _, id := range []string{"b", "c", "d"} {
		if v := a.via(id, at(lease)); v != "" {
			t.Fatalf("via(%s) at the lease's end = %q, want direct", id, v)
		}
	}
	// b falls silent at 100ms (its packets, or ours to it, dropped); c
	// and d are heard every 250ms.
	a.heard("b", at(100*time.Millisecond))
	for d := 250 * time.Millisecond; d <= 3*time.Second; d += 250 * time.Millisecond {
		a.heard("c", at(d))
		a.heard("d", at(d))
	}
	if v := a.via("b", at(850*time.Millisecond)); v != "" {
		t.Fatalf("via(b) a lease after it was heard = %q, want direct", v)
	}
	if v := a.via("b", at(851*time.Millisecond)); v != "c" {
		t.Fatalf("via(b) past the lease = %q, want c (the first server heard from)", v)
	}
	if got := a.routes(at(851 * time.Millisecond)); len(got) != 1 || got["b"] != "c" {
		t.Fatalf("routes past b's lease = %v, want b through c", got)
	}
	for _, id := range []string{"c", "d", "x", "a"} {
		if v := a.via(id, at(2*time.Second)); v != "" {
			t.Fatalf("via(%s) = %q, want direct (heard from, or not a server of the map)", id, v)
		}
	}
	// c falls silent too: d relays.
	if v := a.via("b", at(3*time.Second+lease+time.Millisecond)); v != "" {
		t.Fatalf("via(b) with every other server silent = %q, want direct (no relay heard from)", v)
	}
	a.heard("d", at(3900*time.Millisecond))
	if v := a.via("b", at(4*time.Second)); v != "d" {
		t.Fatalf("via(b) with c silent = %q, want d", v)
	}
	// b's probe arrives: direct again.
	a.heard("b", at(4100*time.Millisecond))
	if v := a.via("b", at(4200*time.Millisecond)); v != "" {
		t.Fatalf("via(b) after a probe from b = %q, want direct", v)
	}
	// A map without b forgets it; back in a later map it has a lease again.
	a.setMap(relayMap(t, "a", "c", "d"), "a", lease, at(5*time.Second))
	if v := a.via("b", at(10*time.Second)); v != "" {
		t.Fatalf("via(b) with b out of the map = %q, want direct", v)
	}
	a.setMap(relayMap(t, "a", "b", "c", "d"), "a", lease, at(10*time.Second))
	a.heard("c", at(10*time.Second))
	if v := a.via("b", at(10*time.Second+lease)); v != "" {
		t.Fatalf("via(b) back in the map = %q, want direct for a lease", v)
	}
}

// TestRelayPassesOnlyBetweenServers: a relay passes a message on only
// from a server of its map to another, never to the sender itself nor
// for a client; whether it heard from the destination lately does not
// matter (over a slow connection the message still arrives).
func TestRelayPassesOnlyBetweenServers(t *testing.T) {
	const lease = 750 * time.Millisecond
	t0 := time.Unix(1000, 0)
	c := newRelays()
	c.setMap(relayMap(t, "a", "b", "c"), "c", lease, t0)
	for _, tc := range []struct {
		from, to string
		want     bool
	}{
		{"a", "b", true},
		{"b", "a", true},
		{"a", "a", false},  // to its sender
		{"~x", "b", false}, // an attached client
		{"a", "d", false},  // not a server of the map
		{"d", "b", false},
		{"a", "c", false}, // itself: it is the destination, not a relay
	} {
		if got := c.passes(tc.from, tc.to); got != tc.want {
			t.Errorf("passes(%s, %s) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

// TestRelayProbesEveryServerEachInterval: a server sends every other
// server of its map one direct probe per probe interval (a third of the
// lease), cut or not, so that a path that works is heard from well
// within a lease even when the engine sends nothing.
func TestRelayProbesEveryServerEachInterval(t *testing.T) {
	const lease = 750 * time.Millisecond
	t0 := time.Unix(1000, 0)
	a := newRelays()
	a.setMap(relayMap(t, "a", "b", "c"), "a", lease, t0)
	var sent []time.Duration
	for d := time.Duration(0); d <= time.Second; d += 50 * time.Millisecond {
		got := a.probes(t0.Add(d))
		switch {
		case slices.Equal(got, []string{"b", "c"}):
			sent = append(sent, d)
		case len(got) != 0:
			t.Fatalf("probes at %v = %v, want b and c or none", d, got)
		}
	}
	want := []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond, time.Second}
	if !slices.Equal(sent, want) {
		t.Fatalf("probes at %v, want %v", sent, want)
	}
	// A map change keeps the schedule: no burst of probes.
	a.setMap(relayMap(t, "a", "b", "c", "d"), "a", lease, t0.Add(1100*time.Millisecond))
	if got := a.probes(t0.Add(1100 * time.Millisecond)); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("probes just after d joined = %v, want d alone", got)
	}
}

func TestRelayFrames(t *testing.T) {
	for _, tc := range []struct {
		kind byte
		id   string
		body []byte
	}{{relayBatch, "n2", []byte("batch")}, {relayDeliver, "n1", nil}, {relayProbe, "", nil}, {relayRequest, string(bytes.Repeat([]byte("x"), 200)), []byte{0}}} {
		b := appendRelay(nil, tc.kind, tc.id, tc.body)
		kind, id, body, err := parseRelay(b)
		if err != nil || kind != tc.kind || id != tc.id || !bytes.Equal(body, tc.body) {
			t.Fatalf("parseRelay(appendRelay(%d, %q, %q)) = %d, %q, %q, %v", tc.kind, tc.id, tc.body, kind, id, body, err)
		}
		for i := range len(b) - len(tc.body) { // every cut inside the header
			if _, _, _, err := parseRelay(b[:i]); err == nil {
				t.Fatalf("parseRelay of %d of %d bytes: no error", i, len(b))
			}
		}
	}
	if _, _, _, err := parseRelay([]byte{relayBatch, 0xff, 0xff, 0xff, 0xff, 0x0f}); err == nil {
		t.Fatal("parseRelay of a length past the frame: no error")
	}
}
