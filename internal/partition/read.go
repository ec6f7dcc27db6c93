package partition

import (
	"time"

	"github.com/fero-go/fero/internal/errs"
)

// ErrOwnerSyncing: a read reached the partition's owner while it syncs; it
// holds no confirmed history yet. Definite: retry.
var ErrOwnerSyncing = errs.New(errs.Unavailable, "owner syncing, retry")

// ReadRequest asks the owner of a partition to confirm a read: that the
// state it read at the moment it proposed the read was, at that moment,
// the partition's latest history, and is durable. The driver reads the
// value when it proposes and answers with it once the read completes.
type ReadRequest struct {
	Partition int
	// Token identifies the read in its [Completion].
	Token uint64
	// Deadline bounds the wait; zero means the write timeout from now.
	Deadline time.Time
}

// read is a read the owner holds until a majority of the configuration
// confirms it.
type read struct {
	index    uint64 // the log's last offset when the read arrived
	seq      uint64 // the probe that must confirm it
	token    uint64
	deadline time.Time
}

// readAck is the newest ReadAck from one copy.
type readAck struct {
	seq uint64
	pos Position
	inc uint64
}

// ProposeRead proposes a linearizable read on the owner (docs/engine.md,
// rule 13). The read completes, with Position {epoch, index}, once a
// majority of the configuration (this node included) answered a probe
// sent after the read arrived, each still accepting this node's epoch and
// holding the log up to index: no later epoch had started when the read
// arrived (it would have needed promises from a majority, which would
// then refuse the probe), and what the read saw is on a majority, so no
// later history can lose it. It refuses at once (definite errors) on a
// node that is not the owner, has no quorum, or is syncing.
func (e *Engine) ProposeRead(r ReadRequest) error {
	if e.m == nil {
		return ErrNoMap
	}
	if why := e.Forming(); why != "" {
		return errs.Wrapf(ErrNotFormed, "%s", why)
	}
	if r.Partition < 0 || r.Partition >= len(e.parts) {
		return errs.Errorf(errs.InvalidArgument, "partition %d out of range [0, %d)", r.Partition, len(e.parts))
	}
	pt := e.parts[r.Partition]
	switch {
	case e.cfg.client || e.ownerOf(pt.p) != e.id:
		return ErrNotOwner
	case !e.hasQuorum():
		return e.noQuorum()
	case !pt.active:
		return ErrOwnerSyncing
	}
	deadline := e.now.Add(e.cfg.writeTimeout)
	if !r.Deadline.IsZero() && r.Deadline.Before(deadline) {
		deadline = r.Deadline
	}
	// One probe, sent at the next Ready, confirms every read that arrived
	// before it.
	pt.readSeq = pt.readSent + 1
	pt.reads = append(pt.reads, read{index: pt.log.last(), seq: pt.readSeq, token: r.Token, deadline: deadline})
	e.markDirty(pt)
	e.checkReads(pt)
	return nil
}

// sendReadProbe sends the pending probe to every other live server.
func (e *Engine) sendReadProbe(pt *part) {
	if !pt.active || pt.readSeq <= pt.readSent {
		return
	}
	pt.readSent = pt.readSeq
	rp := &ReadProbe{Partition: uint32(pt.p), Epoch: pt.accepted, Seq: pt.readSeq}
	for _, s := range e.m.Members() {
		if s.ID != e.id {
			e.send(s.ID, rp)
		}
	}
}

func (e *Engine) stepReadProbe(pt *part, from string, m *ReadProbe) {
	if m.Epoch.Owner != from {
		return
	}
	if m.Epoch.Less(pt.accepted) {
		e.send(from, &Fenced{Partition: uint32(pt.p), Epoch: pt.accepted})
		return
	}
	e.adopt(pt, m.Epoch)
	e.send(from, &ReadAck{Partition: uint32(pt.p), Epoch: m.Epoch, Seq: m.Seq, Position: pt.position(), Inc: e.inc})
}

func (e *Engine) stepReadAck(pt *part, from string, m *ReadAck) {
	if !pt.active || m.Epoch != pt.accepted {
		return
	}
	if pt.readAcks == nil {
		pt.readAcks = map[string]readAck{}
	}
	if a, ok := pt.readAcks[from]; !ok || m.Seq >= a.seq {
		pt.readAcks[from] = readAck{seq: m.Seq, pos: m.Position, inc: m.Inc}
	}
	e.checkReads(pt)
}

// checkReads completes the reads a majority of the configuration has
// confirmed.
func (e *Engine) checkReads(pt *part) {
	if len(pt.reads) == 0 {
		return
	}
	kept := pt.reads[:0]
	for _, r := range pt.reads {
		n := 0
		if e.isVoter(e.id) {
			n++
		}
		for id, a := range pt.readAcks {
			if a.seq >= r.seq && a.pos.Epoch == pt.accepted && a.pos.Offset >= r.index && e.votes(id, a.inc) {
				n++
			}
		}
		if n >= e.majority() {
			e.rd.Completions = append(e.rd.Completions, Completion{Token: r.token, Partition: pt.p, Position: Position{Epoch: pt.accepted, Offset: r.index}})
		} else {
			kept = append(kept, r)
		}
	}
	clear(pt.reads[len(kept):])
	pt.reads = kept
}

// endReads fails every read held, as the owner steps down or at the
// deadline (expiredOnly).
func (e *Engine) endReads(pt *part, err error, expiredOnly bool) {
	kept := pt.reads[:0]
	for _, r := range pt.reads {
		if expiredOnly && e.now.Before(r.deadline) {
			kept = append(kept, r)
			continue
		}
		e.rd.Completions = append(e.rd.Completions, Completion{Token: r.token, Partition: pt.p, Err: err})
	}
	clear(pt.reads[len(kept):])
	pt.reads = kept
	if !expiredOnly {
		pt.readAcks = nil
	}
}
