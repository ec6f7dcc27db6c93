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
