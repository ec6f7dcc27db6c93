package partition

import (
	"maps"
	"slices"
	"strings"
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
//
// A fetch answered Busy also waits at the server, one per partition and
// peer, in the order they came: when a slot for the peer frees, the server
// answers the oldest waiting fetch at once, so a slot does not sit idle
// until the copy asks again. (With the copy's retry alone, rounded up to
// the node's 100 ms tick, each slot waited up to a tick between snapshots:
// 271 partitions from two servers are about 34 rounds of 4 snapshots
// each, and a resync of 1 GB into memory took 6.6 s against 3.2 s with
// the wait, both measured beside a fuzzer.) A fetch waits at most half the
// fetch retry: past that the copy may have given it up, and asks again
// anyway.

// MaxSnapshotsInFlight bounds the snapshots a server has in flight to one
// peer.
const MaxSnapshotsInFlight = 4

// busyRetry is how soon, at the latest, a copy asks again after a Busy
// reply, as a fraction of the fetch retry: the server answers sooner when a
// slot frees (waitingFetch), and a fetch re-asked replaces the one waiting.
const busyRetry = 4

// CatchUp counts what a copy's catching up took since the engine started:
// snapshot replies and their bytes, the replies it could not use (its
// fetch had moved on), the partitions restored, the Busy replies, and the
// fetches asked again because no answer came within the fetch retry. A
// catch-up that goes well restores each partition once, with few stale
// replies and retries.
type CatchUp struct {
	Pieces, PieceBytes, Stale, Restored, Busy, Retries uint64
}

// CatchUp returns the engine's catch-up counters.
func (e *Engine) CatchUp() CatchUp { return e.catchUp }

// waitingFetch is a fetch answered Busy, waiting at the server for a slot.
type waitingFetch struct {
	m  Fetch
	at time.Time
}

// snapOut is one snapshot in flight to a peer.
type snapOut struct {
	p      int
	sent   time.Time
	stream *snapStream // the pieces, for a snapshot sent in pieces
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

// slotFree reports whether a snapshot could go to peer now.
func (e *Engine) slotFree(peer string) bool {
	n := 0
	for _, s := range e.snapsOut[peer] {
		if e.now.Sub(s.sent) < 2*e.cfg.fetchRetry {
			n++
		}
	}
	return n < MaxSnapshotsInFlight
}

// waitForSlot keeps a fetch answered Busy until a slot to its asker frees;
// one that asks again for the same partition takes its place in line.
func (e *Engine) waitForSlot(from string, m *Fetch) {
	w := waitingFetch{m: *m, at: e.now}
	// The message may alias a receive buffer: keep copies.
	w.m.BaseEpoch.Owner = strings.Clone(m.BaseEpoch.Owner)
	w.m.Runs = slices.Clone(m.Runs)
	for i := range w.m.Runs {
		w.m.Runs[i].Epoch.Owner = strings.Clone(w.m.Runs[i].Epoch.Owner)
	}
	q := e.snapWait[from]
	for i := range q {
		if q[i].m.Partition == m.Partition {
			q[i] = w
			return
		}
	}
	if e.snapWait == nil {
		e.snapWait = map[string][]waitingFetch{}
	}
	e.snapWait[from] = append(q, w)
}

// serveWaiting answers the fetches waiting for a slot to peer, oldest
// first, while slots are free; those waiting longer than half the fetch
// retry are dropped (the copy asks again).
func (e *Engine) serveWaiting(peer string) {
	for len(e.snapWait[peer]) > 0 && e.slotFree(peer) {
		q := e.snapWait[peer]
		w := q[0]
		q[0] = waitingFetch{}
		if q = q[1:]; len(q) == 0 {
			delete(e.snapWait, peer)
		} else {
			e.snapWait[peer] = q
		}
		if e.now.Sub(w.at) >= e.cfg.fetchRetry/2 || int(w.m.Partition) >= len(e.parts) {
			continue
		}
		// An error here is the state failing to encode; the copy asks
		// again.
		_ = e.serveFetch(e.parts[w.m.Partition], peer, &w.m)
	}
}

// serveAllWaiting runs serveWaiting for every peer, in a fixed order.
func (e *Engine) serveAllWaiting() {
	if len(e.snapWait) == 0 {
		return
	}
	for _, peer := range slices.Sorted(maps.Keys(e.snapWait)) {
		e.serveWaiting(peer)
	}
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

// Snapshots in pieces. A state larger than a message (ChunkedState) goes
// in pieces of at most the message bound: the server keeps the pieces of
// a snapshot while it is in flight (its slot), and the copy asks for each
// in turn, staging them, so neither holds the partition as one message and
// the copy's asking paces the server. The copy swaps the staged state in
// with the last piece, and only if it did not move meanwhile; a server
// that no longer has the pieces (the slot expired) starts a new snapshot.

// snapStream is a snapshot in pieces that a server keeps for a copy.
type snapStream struct {
	id     uint64
	pieces [][]byte
	reply  SnapshotReply // the first piece's reply, State aside
}

// keepPieces keeps stream in peer's slot for partition p.
func (e *Engine) keepPieces(peer string, p int, s *snapStream) {
	out := e.snapsOut[peer]
	for i := range out {
		if out[i].p == p {
			out[i].stream = s
		}
	}
}

// sendPiece answers a fetch for a piece of a snapshot in flight, and
// reports whether it could.
func (e *Engine) sendPiece(pt *part, from string, m *Fetch) bool {
	out := e.snapsOut[from]
	for i := range out {
		s := out[i].stream
		if out[i].p != pt.p || s == nil || s.id != m.Snap || m.Chunk == 0 || int(m.Chunk) >= len(s.pieces) {
			continue
		}
		out[i].sent = e.now // in flight for as long as it is asked for
		r := s.reply
		r.ID, r.Chunk, r.State = m.ID, m.Chunk, s.pieces[m.Chunk]
		r.More = int(m.Chunk)+1 < len(s.pieces)
		e.send(from, &r)
		return true
	}
	return false
}

// stagePiece stages one piece of a snapshot (f is the fetch it answers).
// It reports whether it was the last, and false for ok when the piece
// could not be staged (the fetch retry asks again).
func (e *Engine) stagePiece(pt *part, from string, m *SnapshotReply, f fetchState) (done, ok bool) {
	cs, chunked := e.st.(ChunkedState)
	if !chunked {
		return false, false
	}
	r := &pt.restore
	if m.Chunk == 0 {
		e.dropRestore(pt)
		*r = restoring{snap: m.Snap, from: from, pos: f.pos, base: f.base}
	} else if r.snap != m.Snap || r.from != from || r.next != m.Chunk {
		// Not the piece this copy is waiting for: start over.
		e.dropRestore(pt)
		return false, true
	}
	if err := cs.StageChunk(pt.p, m.State, m.Chunk == 0); err != nil {
		e.dropRestore(pt)
		return false, false
	}
	r.next = m.Chunk + 1
	if m.More {
		return false, true
	}
	*r = restoring{}
	if err := cs.RestoreStaged(pt.p); err != nil {
		return false, false
	}
	return true, true
}

// dropRestore abandons a snapshot the copy was restoring in pieces.
func (e *Engine) dropRestore(pt *part) {
	if pt.restore.snap == 0 {
		return
	}
	pt.restore = restoring{}
	if cs, ok := e.st.(ChunkedState); ok {
		cs.DropStaged(pt.p)
	}
}
