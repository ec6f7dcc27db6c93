package doc

import (
	"cmp"
	"container/heap"
	"slices"
	"strings"

	"github.com/fero-go/fero/internal/wire"
)

// Bounds of a partition's exactly-once table (see the package comment).
// Every copy applies the same batches, so every copy forgets the same
// outcomes at the same offset.
const (
	// DedupPerWriter is the most sequence numbers a partition remembers
	// per writer; recording one more forgets the lowest, which becomes
	// the writer's floor.
	DedupPerWriter = 64
	// DedupWriters is the most writers a partition remembers; recording
	// a new one forgets the writer whose latest record has the lowest
	// offset, with all its outcomes.
	DedupWriters = 1024
	// DedupMaxReply is the largest reply a partition keeps, in bytes; an
	// outcome with a larger one is remembered without it
	// (DedupReplyTooLarge).
	DedupMaxReply = 64 << 10
	// DedupReplyBytes bounds the replies a partition keeps, in bytes: past
	// it the oldest replies are let go (their outcomes stay, as
	// DedupReplyTooLarge), so the table's memory is bounded whatever the
	// writers send (without it, DedupWriters × DedupPerWriter replies of
	// DedupMaxReply each: 4 GiB).
	DedupReplyBytes = 1 << 20
)

// Outcome is how a committed write was answered: the offset its batch was
// committed at and the batch's reply (nil for none, or when the reply was
// too large to keep).
type Outcome struct {
	Version uint64
	Reply   []byte
}

// DedupStatus is what a partition knows of a writer's sequence number.
type DedupStatus uint8

const (
	// DedupNew: the partition has no record of the write (the writer is
	// unknown, or the sequence number is above its floor and was never
	// committed): apply it.
	DedupNew DedupStatus = iota
	// DedupDone: the write was committed; Outcome holds how.
	DedupDone
	// DedupReplyTooLarge: the write was committed at Outcome.Version,
	// but its reply, larger than DedupMaxReply, was not kept.
	DedupReplyTooLarge
	// DedupTooOld: the sequence number is at or below the writer's
	// floor and not remembered: the write may have been committed and
	// forgotten, so the partition cannot tell.
	DedupTooOld
)

func (st DedupStatus) String() string {
	switch st {
	case DedupNew:
		return "new"
	case DedupDone:
		return "done"
	case DedupReplyTooLarge:
		return "done, reply too large"
	case DedupTooOld:
		return "too old"
	}
	return "unknown"
}

// Outcome reports what partition p knows of writer's write seq: whether a
// batch with that Writer and Seq was committed and, if so, its Outcome.
// The reply is shared with the store: do not modify it. An out-of-range p
// knows of nothing; ApplyBatch would refuse the batch.
//
// An owner asks before committing a batch with a Writer: DedupNew is
// applied, DedupDone and DedupReplyTooLarge are answered with the first
// outcome, DedupTooOld is refused. The answer holds until the next change
// to p, as Check's does.
func (s *Store) Outcome(p int, writer string, seq uint64) (Outcome, DedupStatus) {
	if p < 0 || p >= len(s.parts) {
		return Outcome{}, DedupNew
	}
	pt := &s.parts[p]
	pt.mu.RLock()
	defer pt.mu.RUnlock()
	return pt.dd.outcome(writer, seq)
}

// dedup is a partition's exactly-once table: per writer, the outcomes of
// its latest sequence numbers. Only a successful ApplyBatch records, in
// log order, and nothing depends on map order or time, so every copy
// holds the same table. The zero value is an empty table.
type dedup struct {
	byName  map[string]*writerLog
	writers writerHeap // the next writer to forget first
	// replies are the outcomes that keep a reply, oldest first (record
	// order is offset order), and bytes their replies' size: past
	// DedupReplyBytes the oldest let go of theirs.
	replies []replyRef
	bytes   int
}

// replyRef names an outcome that keeps a reply.
type replyRef struct {
	w   *writerLog
	seq uint64
}

// writerLog is what a partition remembers of one writer.
type writerLog struct {
	name string
	// floor is the highest sequence number forgotten (0: none); every
	// remembered one is above it.
	floor uint64
	// last is the highest offset the writer's batches were recorded at,
	// which orders writers for forgetting.
	last uint64
	seqs []outcome // by seq
	at   int       // index in dedup.writers
}

type outcome struct {
	seq, version uint64
	reply        []byte // nil for none; never modified once stored
	tooLarge     bool
}

// newOutcome returns the outcome of bt, committed at version, with a copy
// of its reply: the batch's bytes may sit in a receive buffer, and a kept
// reply must not hold a whole buffer in memory.
func newOutcome(bt *Batch, version uint64) outcome {
	o := outcome{seq: bt.Seq, version: version}
	switch n := len(bt.Reply); {
	case n > DedupMaxReply:
		o.tooLarge = true
	case n > 0:
		o.reply = slices.Clone(bt.Reply)
	}
	return o
}

func (d *dedup) outcome(writer string, seq uint64) (Outcome, DedupStatus) {
	w := d.byName[writer]
	if w == nil {
		return Outcome{}, DedupNew
	}
	if i, ok := w.find(seq); ok {
		o := &w.seqs[i]
		if o.tooLarge {
			return Outcome{Version: o.version}, DedupReplyTooLarge
		}
		return Outcome{Version: o.version, Reply: o.reply}, DedupDone
	}
	if seq <= w.floor {
		return Outcome{}, DedupTooOld
	}
	return Outcome{}, DedupNew
}

func (w *writerLog) find(seq uint64) (int, bool) {
	return slices.BinarySearchFunc(w.seqs, seq, func(o outcome, seq uint64) int { return cmp.Compare(o.seq, seq) })
}

// record remembers o as writer's. A sequence number already remembered
// keeps its first outcome, and one at or below the floor is not recorded:
// neither can be told from a retry of a write committed before.
func (d *dedup) record(writer string, o outcome) {
	w := d.byName[writer]
	if w == nil {
		if len(d.writers) == DedupWriters {
			old := heap.Pop(&d.writers).(*writerLog)
			delete(d.byName, old.name)
			for i := range old.seqs {
				d.bytes -= len(old.seqs[i].reply)
			}
		}
		if d.byName == nil {
			d.byName = make(map[string]*writerLog)
		}
		// The writer's name may alias the batch's receive buffer.
		w = &writerLog{name: strings.Clone(writer), last: o.version}
		d.byName[w.name] = w
		heap.Push(&d.writers, w)
	}
	i, found := w.find(o.seq)
	if found || o.seq <= w.floor {
		return
	}
	if len(o.reply) > 0 {
		d.replies = append(d.replies, replyRef{w: w, seq: o.seq})
		d.bytes += len(o.reply)
	}
	switch {
	case len(w.seqs) < DedupPerWriter:
		w.seqs = slices.Insert(w.seqs, i, o)
	case i == 0:
		// Below every remembered one: forgotten as soon as recorded.
		w.floor = o.seq
		d.bytes -= len(o.reply)
	default:
		// Forget the lowest in place, so that a full writer's slice
		// stays DedupPerWriter long and recording allocates nothing.
		w.floor = w.seqs[0].seq
		d.bytes -= len(w.seqs[0].reply)
		copy(w.seqs, w.seqs[1:i])
		w.seqs[i-1] = o
	}
	if o.version > w.last {
		w.last = o.version
		heap.Fix(&d.writers, w.at)
	}
	d.trimReplies()
}

// trimReplies lets go of the oldest replies while they take more than
// DedupReplyBytes, and of references to outcomes forgotten since.
func (d *dedup) trimReplies() {
	for len(d.replies) > 0 {
		r := d.replies[0]
		o := r.w.outcomeOf(r.seq, d.byName)
		switch {
		case o == nil || len(o.reply) == 0:
			// Forgotten (counted out then) or let go already.
		case d.bytes > DedupReplyBytes:
			d.bytes -= len(o.reply)
			o.reply, o.tooLarge = nil, true
		default:
			return
		}
		d.replies[0] = replyRef{}
		d.replies = d.replies[1:]
	}
}

// outcomeOf returns w's outcome of seq, if w is still remembered and
// still has it.
func (w *writerLog) outcomeOf(seq uint64, byName map[string]*writerLog) *outcome {
	if byName[w.name] != w {
		return nil
	}
	if i, ok := w.find(seq); ok {
		return &w.seqs[i]
	}
	return nil
}

// writerHeap orders writers by their latest offset, then by name, so
// that which writer is forgotten depends on nothing but the records.
type writerHeap []*writerLog

func (h writerHeap) Len() int { return len(h) }

func (h writerHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	return a.last < b.last || a.last == b.last && a.name < b.name
}

func (h writerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}

func (h *writerHeap) Push(x any) {
	w := x.(*writerLog)
	w.at = len(*h)
	*h = append(*h, w)
}

func (h *writerHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}

// appendTo appends the table's encoding (see snapshotFormat): writers
// sorted by name, each's outcomes by sequence number.
func (d *dedup) appendTo(b []byte) []byte {
	ws := slices.Clone(d.writers)
	slices.SortFunc(ws, func(a, b *writerLog) int { return strings.Compare(a.name, b.name) })
	b = wire.AppendArrayHeader(b, len(ws))
	for _, w := range ws {
		b = wire.AppendArrayHeader(b, 4)
		b = wire.AppendStr(b, w.name)
		b = wire.AppendUint(b, w.floor)
		b = wire.AppendUint(b, w.last)
		b = wire.AppendArrayHeader(b, len(w.seqs))
		for i := range w.seqs {
			o := &w.seqs[i]
			if o.tooLarge {
				b = wire.AppendUint(wire.AppendArrayHeader(b, 2), o.seq)
				b = wire.AppendUint(b, o.version)
				continue
			}
			b = wire.AppendUint(wire.AppendArrayHeader(b, 3), o.seq)
			b = wire.AppendUint(b, o.version)
			b = wire.AppendBin(b, o.reply)
		}
	}
	return b
}

// parseDedup reads a table that appendTo wrote, from anyone: it takes
// only what appendTo could have written (writers sorted and at most
// DedupWriters, each with 1 to DedupPerWriter outcomes above its floor,
// sorted, at offsets from 1 to its latest; replies at most DedupMaxReply
// bytes), so a table restores to one that snapshots to the same bytes.
//
// Replies are copied, even for RestoreShared: an idle writer's outcome
// may be kept indefinitely, and a reply of a few bytes would keep the
// whole snapshot in memory with it.
func parseDedup(c *wire.Cursor) dedup {
	var d dedup
	n := c.Array("the exactly-once table", -1)
	if n > DedupWriters {
		c.Fail("%d writers, more than %d", n, DedupWriters)
		return dedup{}
	}
	if n > 0 {
		d.byName = make(map[string]*writerLog, n)
		d.writers = make(writerHeap, 0, n)
	}
	prev := ""
	for i := range n {
		c.Array("a writer", 4)
		name := c.Bytes("writer")
		w := &writerLog{floor: c.Uint("floor"), last: c.Uint("latest offset"), at: i}
		k := c.Array("outcomes", -1)
		switch {
		case c.Err() != nil:
			return dedup{}
		case len(name) == 0 || len(name) > MaxBatchWriter:
			c.Fail("a writer of %d bytes, not 1 to %d", len(name), MaxBatchWriter)
		case i > 0 && string(name) <= prev:
			c.Fail("writer %q after %q", name, prev)
		case k == 0 || k > DedupPerWriter:
			c.Fail("writer %q with %d outcomes, not 1 to %d", name, k, DedupPerWriter)
		}
		if c.Err() != nil {
			return dedup{}
		}
		w.name = string(name)
		w.seqs = make([]outcome, k)
		for j := range w.seqs {
			o := &w.seqs[j]
			m := c.Array("an outcome", -1)
			o.seq, o.version = c.Uint("seq"), c.Uint("offset")
			switch m {
			case 2:
				o.tooLarge = true
			case 3:
				o.reply = c.Bytes("reply")
			default:
				c.Fail("an outcome of %d fields, not 2 or 3", m)
			}
			switch {
			case c.Err() != nil:
				return dedup{}
			case o.seq <= w.floor || j > 0 && o.seq <= w.seqs[j-1].seq:
				c.Fail("writer %q: seq %d out of order (floor %d)", name, o.seq, w.floor)
			case o.version == 0 || o.version > w.last:
				c.Fail("writer %q: seq %d at offset %d, not 1 to %d", name, o.seq, o.version, w.last)
			case len(o.reply) > DedupMaxReply:
				c.Fail("writer %q: a reply of %d bytes, more than %d", name, len(o.reply), DedupMaxReply)
			}
			if c.Err() != nil {
				return dedup{}
			}
			if len(o.reply) > 0 {
				o.reply = slices.Clone(o.reply)
			} else {
				o.reply = nil
			}
		}
		d.byName[w.name] = w
		d.writers = append(d.writers, w)
		prev = w.name
		for j := range w.seqs {
			if r := w.seqs[j].reply; len(r) > 0 {
				d.replies = append(d.replies, replyRef{w: w, seq: w.seqs[j].seq})
				d.bytes += len(r)
			}
		}
	}
	if d.bytes > DedupReplyBytes {
		c.Fail("replies of %d bytes, more than %d", d.bytes, DedupReplyBytes)
		return dedup{}
	}
	// Oldest first, as recorded: by the offset each was committed at.
	slices.SortFunc(d.replies, func(a, b replyRef) int {
		return cmp.Compare(a.w.seqs[mustFind(a)].version, b.w.seqs[mustFind(b)].version)
	})
	heap.Init(&d.writers)
	return d
}

func mustFind(r replyRef) int {
	i, _ := r.w.find(r.seq)
	return i
}
