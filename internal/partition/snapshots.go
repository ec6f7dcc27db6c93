package partition

import (
	"slices"
	"time"
)

// Snapshots in flight. A copy far behind (a server that joins, or restarts
// without its disk) fetches every partition at once, and each fetch its
// log cannot answer is answered with the partition's whole state. Sent all
// at once, the snapshots of a large resource are the whole resource in one
// burst of messages, in the server's outbox and the copy's inbox together:
// 1 GB of state made three servers' gossip time out for minutes, and the
// copy never caught up. So a server has at most MaxSnapshotsInFlight
// snapshots in flight to any one peer; a fetch beyond that is answered
// Busy, and the copy asks again after busyRetry. A snapshot counts as in
// flight until the peer fetches that partition again (which it does once
// it has restored it, or when its fetch retry fires) or until the fetch
// retry interval has passed twice.

// MaxSnapshotsInFlight bounds the snapshots a server has in flight to one
// peer.
const MaxSnapshotsInFlight = 4

// busyRetry is how soon a copy asks again after a Busy reply; the
// engine's ticks round it up.
const busyRetry = 50 * time.Millisecond

// snapOut is one snapshot in flight to a peer.
type snapOut struct {
	p    int
	sent time.Time
}

// takeSnapshotSlot reports whether a snapshot of partition p may go to
// peer now, and if so counts it in flight.
func (e *Engine) takeSnapshotSlot(peer string, p int) bool {
	out := e.snapsOut[peer]
	out = slices.DeleteFunc(out, func(s snapOut) bool { return s.p == p || e.now.Sub(s.sent) >= 2*e.cfg.fetchRetry })
	if len(out) >= MaxSnapshotsInFlight {
		e.snapsOut[peer] = out
		return false
	}
	if e.snapsOut == nil {
		e.snapsOut = map[string][]snapOut{}
	}
	e.snapsOut[peer] = append(out, snapOut{p: p, sent: e.now})
	return true
}

// releaseSnapshot ends the snapshot of partition p in flight to peer, if
// one is.
func (e *Engine) releaseSnapshot(peer string, p int) {
	out, ok := e.snapsOut[peer]
	if !ok {
		return
	}
	out = slices.DeleteFunc(out, func(s snapOut) bool { return s.p == p })
	if len(out) == 0 {
		delete(e.snapsOut, peer)
		return
	}
	e.snapsOut[peer] = out
}
