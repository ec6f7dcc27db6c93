package partition

import (
	"sort"
	"unsafe"

	"github.com/fero-go/fero/internal/wire"
)

// entryLog is one partition's kept history: entries base+1 … last in a ring
// buffer that grows by doubling up to the history cap, then drops its
// oldest entry for each new one. Entries at or below base are gone; base
// is where a snapshot or the trimming left the log, and baseEpoch is the
// epoch of the entry at base (needed to compare histories at that point).
//
// The history is most of a node's heap, so nothing in it holds a pointer
// the garbage collector must follow: a slot locates its key and value in
// the log's blocks, byte arrays that fill up one after another. Bytes
// written to a block never change, so the entries the log hands out alias
// them (keys as strings, values as slices capped at their end); nothing is
// ever copied as the log grows, and a block goes once trimming has passed
// every entry in it.
type entryLog struct {
	buf       []slot
	head      int
	n         int
	base      uint64
	baseEpoch Epoch
	// runs is the epoch column, run-length encoded, of every offset from
	// runs[0].First to last: trimming and snapshots drop entries but keep
	// the epochs of the offsets they held (the newest maxRuns epochs), so a
	// fetch from a copy far behind the cap can still be checked against
	// this history (rule 8).
	runs []Run
	// blocks hold each entry's key then value, in offset order; an entry
	// never spans two blocks. blocks[0] is block number firstBlock.
	blocks     [][]byte
	firstBlock uint64
	// bytes is the key and value bytes of the kept entries.
	bytes int
}

// slot is what the log keeps of an entry: its offset is its place in the
// ring, its epoch is in the runs, and its key and value are in a block.
type slot struct {
	block  uint64 // the block's number
	off    uint32 // the key's place in the block; the value follows
	keyLen uint32
	valLen uint32
	typ    wire.RecordType
}

// Blocks start small, so a partition written rarely holds little, and
// double up to maxBlock; an entry larger than that gets a block of its own.
const (
	minBlock = 1 << 10
	maxBlock = 64 << 10
)

// maxRuns bounds the epoch history a log keeps below its base.
const maxRuns = 1024

func (l *entryLog) last() uint64 { return l.base + uint64(l.n) }

func (l *entryLog) slotAt(o uint64) *slot {
	return &l.buf[(l.head+int(o-l.base-1))%len(l.buf)]
}

// key and value return a slot's key and value, aliasing its block.
func (l *entryLog) key(s *slot) string {
	if s.keyLen == 0 {
		return ""
	}
	return unsafe.String(&l.blocks[s.block-l.firstBlock][s.off], int(s.keyLen))
}

func (l *entryLog) value(s *slot) []byte {
	if s.valLen == 0 {
		return nil
	}
	i := s.off + s.keyLen
	j := i + s.valLen
	return l.blocks[s.block-l.firstBlock][i:j:j]
}

// store copies an entry's key and value into the last block, starting a
// new block when they do not fit, and returns where they went.
func (l *entryLog) store(key string, value []byte) (block uint64, off uint32) {
	need := len(key) + len(value)
	if k := len(l.blocks); k == 0 || cap(l.blocks[k-1])-len(l.blocks[k-1]) < need {
		size := minBlock
		if k > 0 {
			size = min(2*cap(l.blocks[k-1]), maxBlock)
		}
		l.blocks = append(l.blocks, make([]byte, 0, max(size, need)))
	}
	k := len(l.blocks) - 1
	b := l.blocks[k]
	off = uint32(len(b))
	l.blocks[k] = append(append(b, key...), value...)
	return l.firstBlock + uint64(k), off
}

// dropBlocks lets go of the blocks before block number first.
func (l *entryLog) dropBlocks(first uint64) {
	k := int(min(first-l.firstBlock, uint64(len(l.blocks))))
	clear(l.blocks[:k])
	l.blocks = l.blocks[k:]
	l.firstBlock = first
}

// at returns the entry at offset o; base < o <= last.
func (l *entryLog) at(o uint64) Entry {
	s := l.slotAt(o)
	ep, _ := l.epochAt(o)
	return Entry{Epoch: ep, Offset: o, Type: s.typ, Key: l.key(s), Value: l.value(s)}
}

// epochAt returns the epoch of the entry at o, for o in [base, last].
func (l *entryLog) epochAt(o uint64) (Epoch, bool) {
	switch {
	case o == l.base:
		return l.baseEpoch, true
	case o < l.base || o > l.last():
		return Epoch{}, false
	}
	i := sort.Search(len(l.runs), func(i int) bool { return l.runs[i].First > o })
	return l.runs[i-1].Epoch, true
}

func (l *entryLog) lastEpoch() Epoch {
	e, _ := l.epochAt(l.last())
	return e
}

// append adds e, which must have offset last+1, trimming the oldest
// entries while the log holds limit entries or its entries' keys and
// values would pass byteLimit bytes with e's (e itself is kept whatever its
// size). It returns e with its key and value replaced by the log's copies,
// which never change.
func (l *entryLog) append(e Entry, limit, byteLimit int) Entry {
	need := len(e.Key) + len(e.Value)
	for l.n > 0 && l.bytes+need > byteLimit {
		l.trimOne()
	}
	if l.n == len(l.buf) {
		if len(l.buf) < limit {
			l.grow(min(limit, max(16, 2*len(l.buf))))
		} else {
			l.trimOne()
		}
	}
	block, off := l.store(e.Key, e.Value)
	sl := &l.buf[(l.head+l.n)%len(l.buf)]
	*sl = slot{block: block, off: off, keyLen: uint32(len(e.Key)), valLen: uint32(len(e.Value)), typ: e.Type}
	l.n++
	l.bytes += need
	if len(l.runs) == 0 || l.runs[len(l.runs)-1].Epoch != e.Epoch {
		l.runs = append(l.runs, Run{Epoch: e.Epoch, First: e.Offset})
		if len(l.runs) > maxRuns && l.runs[1].First <= l.base+1 {
			l.runs = l.runs[1:] // the oldest run lies wholly at or below base
		}
	}
	e.Key, e.Value = l.key(sl), l.value(sl)
	return e
}

func (l *entryLog) grow(size int) {
	buf := make([]slot, size)
	for i := range l.n {
		buf[i] = l.buf[(l.head+i)%len(l.buf)]
	}
	l.buf, l.head = buf, 0
}

func (l *entryLog) trimOne() {
	s := &l.buf[l.head]
	l.bytes -= int(s.keyLen) + int(s.valLen)
	l.baseEpoch, _ = l.epochAt(l.base + 1)
	l.base++
	l.head = (l.head + 1) % len(l.buf)
	l.n--
	if l.n == 0 {
		l.dropBlocks(l.firstBlock + uint64(len(l.blocks)))
		return
	}
	l.dropBlocks(l.buf[l.head].block)
}

// reset empties the log at a new base (after restoring a snapshot), with
// the epoch history of the offsets up to base (the server's runs; none when
// unknown or not valid for base and baseEpoch).
func (l *entryLog) reset(base uint64, baseEpoch Epoch, runs []Run) {
	l.head, l.n, l.bytes = 0, 0, 0
	l.dropBlocks(l.firstBlock + uint64(len(l.blocks)))
	l.base, l.baseEpoch = base, baseEpoch
	l.runs = l.runs[:0]
	if validRuns(runs, base, baseEpoch) {
		l.runs = append(l.runs, runs[max(0, len(runs)-maxRuns):]...)
	}
}

// validRuns reports whether runs can be the epoch history of a log whose
// last offset is last, with epoch lastEpoch: offsets and epochs strictly
// rising, the last run holding last.
func validRuns(runs []Run, last uint64, lastEpoch Epoch) bool {
	if len(runs) == 0 {
		return false
	}
	for i := range runs {
		if runs[i].First == 0 || (i > 0 && (runs[i].First <= runs[i-1].First || !runs[i-1].Epoch.Less(runs[i].Epoch))) {
			return false
		}
	}
	r := runs[len(runs)-1]
	return r.First <= last && r.Epoch == lastEpoch
}

// describedFrom is the first offset whose epoch the log can tell: its
// oldest run's start, or its base.
func (l *entryLog) describedFrom() uint64 {
	if len(l.runs) > 0 {
		return min(l.runs[0].First, l.base)
	}
	return l.base
}

// entryOverhead approximates an encoded entry's bytes beyond its key and
// value: its epoch (owner included), offset, type and headers.
const entryOverhead = 64

// fit returns the last offset in [from, to] such that the entries from
// from on fit in budget bytes, always including from itself.
func (l *entryLog) fit(from, to uint64, budget int) uint64 {
	size := 0
	for o := from; o <= to; o++ {
		e := l.slotAt(o)
		size += int(e.keyLen) + int(e.valLen) + entryOverhead
		if size > budget && o > from {
			return o - 1
		}
	}
	return to
}

// appendRange appends entries from … to (inclusive, within the log) to dst.
func (l *entryLog) appendRange(dst []Entry, from, to uint64) []Entry {
	i := sort.Search(len(l.runs), func(i int) bool { return l.runs[i].First > from }) - 1
	for o := from; o <= to; o++ {
		for i+1 < len(l.runs) && l.runs[i+1].First <= o {
			i++
		}
		s := l.slotAt(o)
		dst = append(dst, Entry{Epoch: l.runs[i].Epoch, Offset: o, Type: s.typ, Key: l.key(s), Value: l.value(s)})
	}
	return dst
}

// span returns the offsets the log describes (held or trimmed) whose
// entries have epoch e. Because epochs only grow along a log, they form
// one interval.
func (l *entryLog) span(e Epoch) (lo, hi uint64, ok bool) {
	i := sort.Search(len(l.runs), func(i int) bool { return !l.runs[i].Epoch.Less(e) })
	if i < len(l.runs) && l.runs[i].Epoch == e {
		lo, hi, ok = l.runs[i].First, l.last(), true
		if i+1 < len(l.runs) {
			hi = l.runs[i+1].First - 1
		}
	}
	if l.baseEpoch == e {
		if !ok {
			lo, hi, ok = l.base, l.base, true
		}
		lo, hi = min(lo, l.base), max(hi, l.base)
	}
	return lo, hi, ok
}

// agreement finds the last offset at which the log described by f (its
// base, base epoch and runs, up to f.From-1) and l hold the same entry. Two
// logs that hold an entry of the same epoch at the same offset agree on
// everything before it (one writer per epoch, and a copy only extends a
// prefix of that writer's log), so comparing epochs suffices. It looks only
// at offsets whose epochs both logs describe, [lo, hi], whether their
// entries are still held or were trimmed; found is false when they differ
// at every one of them (or there is none, lo > hi).
func (l *entryLog) agreement(f *Fetch) (a, lo, hi uint64, found bool) {
	cLast := f.From - 1
	cFrom := f.Base
	if len(f.Runs) > 0 {
		cFrom = min(f.Runs[0].First, f.Base)
	}
	lo, hi = max(cFrom, l.describedFrom()), min(cLast, l.last())
	if lo > hi {
		return 0, lo, hi, false
	}
	// The asker's runs from the newest, then its base point (j = -1).
	for j := len(f.Runs) - 1; j >= -1; j-- {
		var e Epoch
		var cLo, cHi uint64
		if j < 0 {
			e, cLo, cHi = f.BaseEpoch, f.Base, f.Base
		} else {
			e, cLo, cHi = f.Runs[j].Epoch, f.Runs[j].First, cLast
			if j+1 < len(f.Runs) {
				cHi = f.Runs[j+1].First - 1
			}
		}
		sLo, sHi, ok := l.span(e)
		if !ok {
			continue
		}
		if x, y := max(cLo, sLo, lo), min(cHi, sHi, hi); x <= y {
			return y, lo, hi, true
		}
	}
	return 0, lo, hi, false
}

// warmSlot loads the slot the next append will write, and the last
// block's header; warmTail then loads the first two cache lines of the
// block's bytes that the next append will write (see Engine.Warm).
func (l *entryLog) warmSlot() uint64 {
	var v uint64
	if len(l.buf) > 0 {
		v = l.buf[(l.head+l.n)%len(l.buf)].block
	}
	if k := len(l.blocks); k > 0 {
		v += uint64(len(l.blocks[k-1]))
	}
	return v
}

func (l *entryLog) warmTail() uint64 {
	if k := len(l.blocks); k > 0 {
		if b := l.blocks[k-1]; len(b) < cap(b) {
			// A key and a value of 100 bytes or so span two lines.
			at := len(b)
			b = b[:cap(b)]
			return uint64(b[at]) + uint64(b[min(len(b)-1, at+64)])
		}
	}
	return 0
}
