package partition

import (
	"bytes"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// A message on the wire is one byte of MsgKind followed by the message as
// msgpack. The messages sent per write or per round of writes (commits,
// acks, forwarded writes and their replies, fetch replies, epoch
// announcements, heartbeats) are written and read by hand, as msgpack
// arrays, with no reflection and no allocation but one buffer for a
// message's keys and values, and the few other strings (owners, error
// messages). The rest, rare, go through the msgpack
// library's struct tags.
//
//	Commit        [partition, term, owner, first offset, [[type, key, value]…]]
//	CommitAck     [partition, term, owner, offset, incarnation]
//	Forward       [partition, id, hops, type, key, value, wait, k, term, owner, deadline(, trace)]
//	ForwardReply  [partition, id, term, owner, offset, code, msg, owner hint]
//	FetchReply    [partition, id, term, owner, offset, start, [entry…], busy]
//	EpochStart    [partition, term, owner, start, prev term, prev owner, last]
//	Heartbeat     [partition]
//	entry         [term, owner, offset, type, key, value]
//
// A Commit's entries share the epoch and follow each other, which is what
// the owner sends (and what a copy checks); the encoding states both once.

// maxTrace bounds a Forward's trace context (a W3C traceparent is 55
// bytes).
const maxTrace = 256

// AppendMessage appends m's wire form to b.
func AppendMessage(b []byte, m Message) ([]byte, error) {
	b = append(b, byte(m.Kind()))
	switch m := m.(type) {
	case *Commit:
		return m.append(b)
	case *CommitAck:
		b = wire.AppendArrayHeader(b, 5)
		b = wire.AppendUint(b, uint64(m.Partition))
		b = appendPosition(b, m.Position)
		return wire.AppendUint(b, m.Inc), nil
	case *Forward:
		n := 11
		if m.Trace != "" {
			n = 12
		}
		b = wire.AppendArrayHeader(b, n)
		b = appendUints(b, uint64(m.Partition), m.ID, uint64(m.Hops), uint64(m.Type))
		b = wire.AppendStr(b, m.Key)
		b = wire.AppendBin(b, m.Value)
		b = appendUints(b, uint64(m.Wait), uint64(m.K), m.Epoch.Term)
		b = wire.AppendStr(b, m.Epoch.Owner)
		b = wire.AppendUint(b, uint64(max(m.Deadline, 0)))
		if m.Trace != "" {
			b = wire.AppendStr(b, m.Trace)
		}
		return b, nil
	case *ForwardReply:
		n := 8
		if len(m.Details) > 0 {
			n = 9
		}
		b = wire.AppendArrayHeader(b, n)
		b = appendUints(b, uint64(m.Partition), m.ID)
		b = appendPosition(b, m.Position)
		b = wire.AppendUint(b, uint64(m.Code))
		b = wire.AppendStr(b, m.Msg)
		b = wire.AppendStr(b, m.Owner)
		if n == 9 {
			// An error frame's payload, whose bounds its parser checks.
			b = wire.AppendBin(b, wire.AppendErrorPayload(nil, m.Code, "", m.Details))
		}
		return b, nil
	case *FetchReply:
		b = wire.AppendArrayHeader(b, 8)
		b = appendUints(b, uint64(m.Partition), m.ID)
		b = appendPosition(b, m.Position)
		b = wire.AppendUint(b, m.Start)
		b = wire.AppendArrayHeader(b, len(m.Entries))
		for i := range m.Entries {
			b = appendEntry(b, &m.Entries[i])
		}
		busy := uint64(0)
		if m.Busy {
			busy = 1
		}
		return wire.AppendUint(b, busy), nil
	case *EpochStart:
		b = wire.AppendArrayHeader(b, 7)
		b = wire.AppendUint(b, uint64(m.Partition))
		b = appendEpoch(b, m.Epoch)
		b = wire.AppendUint(b, m.Start)
		b = appendEpoch(b, m.PrevEpoch)
		return wire.AppendUint(b, m.Last), nil
	case *Heartbeat:
		b = wire.AppendArrayHeader(b, 1)
		return wire.AppendUint(b, uint64(m.Partition)), nil
	case *SnapshotReply:
		// By hand, so that the copy decodes the state without copying it
		// (DecodeShared): a reply carries megabytes.
		b = wire.AppendArrayHeader(b, 14)
		b = appendUints(b, uint64(m.Partition), m.ID)
		b = appendPosition(b, m.Position)
		b = wire.AppendUint(b, m.Start)
		b = appendEpoch(b, m.OffsetEpoch)
		b = wire.AppendUint(b, m.TruncateTo)
		b = wire.AppendBin(b, m.State)
		b = wire.AppendArrayHeader(b, len(m.Runs))
		for _, r := range m.Runs {
			b = wire.AppendArrayHeader(b, 3)
			b = appendEpoch(b, r.Epoch)
			b = wire.AppendUint(b, r.First)
		}
		more := uint64(0)
		if m.More {
			more = 1
		}
		return appendUints(b, m.Snap, uint64(m.Chunk), more), nil
	}
	return appendReflect(b, m)
}

func (m *Commit) append(b []byte) ([]byte, error) {
	if len(m.Entries) == 0 {
		return b, fmt.Errorf("partition: encoding an empty commit of partition %d", m.Partition)
	}
	first := &m.Entries[0]
	for i := range m.Entries {
		if e := &m.Entries[i]; e.Epoch != first.Epoch || e.Offset != first.Offset+uint64(i) {
			return b, fmt.Errorf("partition: commit of partition %d mixes epochs or skips offsets", m.Partition)
		}
	}
	b = wire.AppendArrayHeader(b, 5)
	b = wire.AppendUint(b, uint64(m.Partition))
	b = appendPosition(b, first.Position())
	b = wire.AppendArrayHeader(b, len(m.Entries))
	for i := range m.Entries {
		e := &m.Entries[i]
		b = wire.AppendArrayHeader(b, 3)
		b = wire.AppendUint(b, uint64(e.Type))
		b = wire.AppendStr(b, e.Key)
		b = wire.AppendBin(b, e.Value)
	}
	return b, nil
}

func appendEntry(b []byte, e *Entry) []byte {
	b = wire.AppendArrayHeader(b, 6)
	b = appendPosition(b, e.Position())
	b = wire.AppendUint(b, uint64(e.Type))
	b = wire.AppendStr(b, e.Key)
	return wire.AppendBin(b, e.Value)
}

func appendEpoch(b []byte, e Epoch) []byte {
	return wire.AppendStr(wire.AppendUint(b, e.Term), e.Owner)
}

func appendPosition(b []byte, p Position) []byte {
	return wire.AppendUint(appendEpoch(b, p.Epoch), p.Offset)
}

func appendUints(b []byte, us ...uint64) []byte {
	for _, u := range us {
		b = wire.AppendUint(b, u)
	}
	return b
}

var encPool = sync.Pool{New: func() any {
	b := new(bytes.Buffer)
	e := msgpack.NewEncoder(b)
	e.UseCompactInts(true)
	return &msgEncoder{buf: b, enc: e}
}}

type msgEncoder struct {
	buf *bytes.Buffer
	enc *msgpack.Encoder
}

func appendReflect(b []byte, m Message) ([]byte, error) {
	me := encPool.Get().(*msgEncoder)
	defer encPool.Put(me)
	me.buf.Reset()
	if err := me.enc.Encode(m); err != nil {
		return b, fmt.Errorf("partition: encoding %T: %w", m, err)
	}
	return append(b, me.buf.Bytes()...), nil
}

// DecodeMessage reads one message that AppendMessage wrote. The bytes come
// from the network: everything is checked as it is read, and nothing is
// allocated beyond what the bytes hold. The message keeps no reference to
// b: its keys and values are copied (those of one message into one
// buffer).
func DecodeMessage(b []byte) (Message, error) {
	var d Decoder
	return d.Decode(b)
}

// Decoder decodes many messages, such as one batch from a peer, sharing
// allocations between them: the hot messages and commit entries come from
// chunks, and epoch owners already seen are reused. A message it returns
// stays valid until Reset.
type Decoder struct {
	owner string // the last epoch owner read
	chunks
	msgs []Message // Messages' room, reused after Reset
}

// Messages returns room for n messages, to hold what the decoder decodes
// until Reset.
func (dec *Decoder) Messages(n int) []Message {
	if cap(dec.msgs) < n {
		dec.msgs = make([]Message, 0, n)
	}
	return dec.msgs[:0]
}

// Reset lets the decoder hand out again the messages and entries it has
// returned, zeroed: call it only once nothing refers to any of them (the
// node calls it once the round that stepped them has been acted on; the
// engine keeps nothing of a message past its step). It keeps the memory
// of up to keep messages of each kind, and of keep entries, for what it
// decodes next; the zeroed slots hold no reference to the bytes their
// messages aliased.
func (dec *Decoder) Reset(keep int) {
	dec.chunks.reset(keep)
	clear(dec.msgs[:cap(dec.msgs)])
	if cap(dec.msgs) > keep {
		dec.msgs = nil
	}
}

// Kept returns how many slots of messages and entries the decoder keeps
// spare since its last Reset.
func (dec *Decoder) Kept() int { return dec.chunks.kept() + cap(dec.msgs) }

// chunks allocates the hot messages and commit entries many at a time.
type chunks struct {
	commits  slab[Commit]
	acks     slab[CommitAck]
	forwards slab[Forward]
	replies  slab[ForwardReply]
	entries  slab[Entry]
}

// reset zeroes every slot handed out and hands them out again (see slab).
func (d *chunks) reset(keep int) {
	d.commits.reset(keep)
	d.acks.reset(keep)
	d.forwards.reset(keep)
	d.replies.reset(keep)
	d.entries.reset(keep)
}

// chunk is how many slots the first chunk of a slab holds; each next one
// holds twice as many as the one before, up to maxChunk.
const (
	chunk    = 32
	maxChunk = 1024
)

// engineKeep is how many slots of each kind the engine keeps between
// rounds for the messages it sends: a round sends up to maxRound-ish
// messages (the node bounds a round by Pending).
const engineKeep = 8192

// slab hands out slots of T from chunks, one at a time or a few side by
// side. A slot is handed out once until reset, which zeroes every slot
// handed out and makes the chunks spare for what comes next, up to a
// number of slots; so a driver that resets every round soon allocates
// nothing for its messages.
type slab[T any] struct {
	cur   []T   // the chunk slots are taken from
	used  [][]T // the chunks filled since reset
	spare [][]T // zeroed chunks to take from next
}

func take[T any](s *slab[T]) *T { return &s.slice(1)[0] }

// slice returns n zero slots side by side.
func (s *slab[T]) slice(n int) []T {
	if cap(s.cur)-len(s.cur) < n {
		s.next(n)
	}
	l := len(s.cur)
	s.cur = s.cur[:l+n]
	return s.cur[l : l+n : l+n]
}

// next makes a chunk with room for n the current one.
func (s *slab[T]) next(n int) {
	size := min(max(chunk, 2*cap(s.cur)), maxChunk)
	if s.cur != nil {
		s.used = append(s.used, s.cur)
	}
	if k := len(s.spare); k > 0 && cap(s.spare[k-1]) >= n {
		s.cur, s.spare[k-1] = s.spare[k-1], nil
		s.spare = s.spare[:k-1]
		return
	}
	s.cur = make([]T, 0, max(size, n))
}

// kept returns the slots of its spare chunks.
func (s *slab[T]) kept() int {
	n := 0
	for _, c := range s.spare {
		n += cap(c)
	}
	return n
}

// reset zeroes what was handed out and keeps chunks of up to keep slots
// in all as spares: the last made, which are the largest.
func (s *slab[T]) reset(keep int) {
	for i, c := range s.used {
		clear(c)
		s.spare = append(s.spare, c[:0])
		s.used[i] = nil
	}
	s.used = s.used[:0]
	if s.cur != nil {
		clear(s.cur)
		s.spare = append(s.spare, s.cur[:0])
		s.cur = nil
	}
	i, kept := len(s.spare), 0
	for i > 0 && kept+cap(s.spare[i-1]) <= keep {
		i--
		kept += cap(s.spare[i])
	}
	if i > 0 {
		n := copy(s.spare, s.spare[i:])
		clear(s.spare[n:])
		s.spare = s.spare[:n]
	}
}

func (d *chunks) kept() int {
	return d.commits.kept() + d.acks.kept() + d.forwards.kept() + d.replies.kept() + d.entries.kept()
}

func (d *chunks) newMessage(kind MsgKind) Message {
	switch kind {
	case KindCommit:
		return take(&d.commits)
	case KindCommitAck:
		return take(&d.acks)
	case KindForward:
		return take(&d.forwards)
	case KindForwardReply:
		return take(&d.replies)
	}
	return NewMessage(kind)
}

// entrySlice returns n zero entries side by side.
func (d *chunks) entrySlice(n int) []Entry { return d.entries.slice(n) }

// Decode reads one message, as DecodeMessage does.
func (dec *Decoder) Decode(b []byte) (Message, error) { return dec.decode(b, false) }

// DecodeShared is Decode without copying: the message's keys and values
// alias b, which must never change afterwards (a receive buffer the
// transport keeps, see transport.Request.Keep). The engine keeps nothing
// of a message past the step that takes it, except what it copies: the
// log and the state copy what they apply, events carry the log's copy,
// and an entry held past a gap or a write queued during a sync is copied
// when it is held. The one exception is a restored snapshot's state, held
// until the next Ready hands it to the driver for the disk (which writes
// it before that Ready's Advance). So a stepped message lets go of b by
// the end of its round.
func (dec *Decoder) DecodeShared(b []byte) (Message, error) { return dec.decode(b, true) }

func (dec *Decoder) decode(b []byte, shared bool) (Message, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty engine message", wire.ErrMalformed)
	}
	kind := MsgKind(b[0])
	m := dec.newMessage(kind)
	if m == nil {
		return nil, fmt.Errorf("%w: unknown engine message kind %d", wire.ErrMalformed, b[0])
	}
	d := decoding{c: wire.NewCursor(b[1:]), dec: dec, shared: shared}
	c := &d.c
	switch m := m.(type) {
	case *Commit:
		d.commit(m)
	case *CommitAck:
		c.Array("commit ack", 5)
		m.Partition = c.Uint32("partition")
		m.Position = d.position()
		m.Inc = c.Uint("incarnation")
	case *Forward:
		n := c.Array("forward", -1)
		if n != 11 && n != 12 {
			c.Fail("forward: array of %d elements, want 11 or 12", n)
		}
		m.Partition = c.Uint32("partition")
		m.ID = c.Uint("id")
		m.Hops = c.Uint8("hops")
		m.Type = wire.RecordType(c.Uint8("type"))
		m.Key = d.key()
		m.Value = d.value()
		m.Wait = Wait(c.Uint8("wait"))
		m.K = c.Uint8("k")
		m.Epoch = d.epoch()
		m.Deadline = int64(min(c.Uint("deadline"), math.MaxInt64))
		m.Trace = ""
		if n == 12 {
			if m.Trace = c.Str("trace", ""); len(m.Trace) > maxTrace {
				c.Fail("forward: trace of %d bytes, at most %d", len(m.Trace), maxTrace)
			}
		}
	case *ForwardReply:
		n := c.Array("forward reply", -1)
		if n != 8 && n != 9 {
			c.Fail("forward reply: array of %d elements, want 8 or 9", n)
		}
		m.Partition = c.Uint32("partition")
		m.ID = c.Uint("id")
		m.Position = d.position()
		m.Code = c.Uint32("code")
		m.Msg = c.Str("msg", "")
		m.Owner = c.Str("owner", m.Position.Epoch.Owner)
		m.Details = nil
		if n == 9 {
			_, _, ds, err := wire.ParseErrorPayload(c.Bytes("details"))
			if err != nil {
				c.Fail("forward reply: details: %v", err)
			}
			// The caller's error outlives the receive buffer.
			for _, d := range ds {
				m.Details = append(m.Details, errs.Detail{Type: d.Type, Value: bytes.Clone(d.Value)})
			}
		}
	case *FetchReply:
		c.Array("fetch reply", 8)
		m.Partition = c.Uint32("partition")
		m.ID = c.Uint("id")
		m.Position = d.position()
		m.Start = c.Uint("start")
		d.entries(&m.Entries)
		m.Busy = c.Uint("busy") != 0
	case *EpochStart:
		c.Array("epoch start", 7)
		m.Partition = c.Uint32("partition")
		m.Epoch = d.epoch()
		m.Start = c.Uint("start")
		m.PrevEpoch = d.epoch()
		m.Last = c.Uint("last")
	case *Heartbeat:
		c.Array("heartbeat", 1)
		m.Partition = c.Uint32("partition")
	case *SnapshotReply:
		c.Array("snapshot reply", 14)
		m.Partition = c.Uint32("partition")
		m.ID = c.Uint("id")
		m.Position = d.position()
		m.Start = c.Uint("start")
		m.OffsetEpoch = d.epoch()
		m.TruncateTo = c.Uint("truncate to")
		m.State = d.keep(c.Bytes("state"))
		d.runs(&m.Runs)
		m.Snap = c.Uint("snap")
		m.Chunk = c.Uint32("chunk")
		m.More = c.Uint("more") != 0
	default:
		if err := wire.DecodeValue(b[1:], m); err != nil {
			return nil, fmt.Errorf("%w: engine message kind %d: %v", wire.ErrMalformed, kind, err)
		}
		return m, nil
	}
	if err := c.End(); err != nil {
		return nil, fmt.Errorf("engine message kind %d: %w", kind, err)
	}
	return m, nil
}

// The fewest bytes an entry takes (array header, type, key, value; the
// epoch and offset too outside a commit), which bounds the entries a
// message of some size may declare before any is allocated.
const (
	minCommitEntry = 4
	minEntry       = 7
)

// decoding reads one message's fields; buf is where the message's keys
// and values are copied. The decoder keeps the last epoch owner read, so the entries
// of one epoch share one string. (The cursor stays on the stack only while
// nothing read from decoding is stored on the heap: keep owner in dec.)
type decoding struct {
	c      wire.Cursor
	buf    []byte
	dec    *Decoder
	shared bool // keys and values alias the input (DecodeShared)
}

func (d *decoding) epoch() Epoch {
	t := d.c.Uint("term")
	d.dec.owner = d.c.Str("owner", d.dec.owner)
	return Epoch{Term: t, Owner: d.dec.owner}
}

func (d *decoding) position() Position {
	ep := d.epoch()
	return Position{Epoch: ep, Offset: d.c.Uint("offset")}
}

// value copies a bin into the message's buffer, sized once at the
// message's length, so all its keys and values take one allocation.
func (d *decoding) value() []byte {
	return d.keep(d.c.Bytes("value"))
}

// key copies a key into the message's buffer, as value does.
func (d *decoding) key() string {
	k := d.keep(d.c.Bytes("key"))
	if len(k) == 0 {
		return ""
	}
	return unsafe.String(&k[0], len(k))
}

func (d *decoding) keep(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	if d.shared {
		return v[:len(v):len(v)]
	}
	if cap(d.buf)-len(d.buf) < len(v) {
		d.buf = make([]byte, 0, max(len(v), d.c.Left()+len(v)))
	}
	n := len(d.buf)
	d.buf = append(d.buf, v...)
	return d.buf[n:len(d.buf):len(d.buf)]
}

func (d *decoding) commit(m *Commit) {
	c := &d.c
	c.Array("commit", 5)
	m.Partition = c.Uint32("partition")
	first := d.position()
	n := c.Array("commit entries", -1)
	if n == 0 || n > c.Left()/minCommitEntry {
		c.Fail("commit of %d entries in %d bytes", n, c.Left())
		return
	}
	m.Entries = d.dec.entrySlice(n)
	for i := range m.Entries {
		e := &m.Entries[i]
		c.Array("commit entry", 3)
		e.Epoch, e.Offset = first.Epoch, first.Offset+uint64(i)
		e.Type = wire.RecordType(c.Uint8("type"))
		e.Key = d.key()
		e.Value = d.value()
	}
}

// minRun is the fewest bytes a run takes (array header, term, owner,
// first offset).
const minRun = 4

func (d *decoding) runs(dst *[]Run) {
	c := &d.c
	n := c.Array("runs", -1)
	if n == 0 {
		return
	}
	if n > c.Left()/minRun {
		c.Fail("%d runs in %d bytes", n, c.Left())
		return
	}
	rs := make([]Run, n)
	for i := range rs {
		c.Array("run", 3)
		rs[i].Epoch = d.epoch()
		rs[i].First = c.Uint("first")
	}
	*dst = rs
}

func (d *decoding) entries(dst *[]Entry) {
	c := &d.c
	n := c.Array("entries", -1)
	if n == 0 {
		return
	}
	if n > c.Left()/minEntry {
		c.Fail("%d entries in %d bytes", n, c.Left())
		return
	}
	es := make([]Entry, n)
	for i := range es {
		e := &es[i]
		c.Array("entry", 6)
		e.Epoch = d.epoch()
		e.Offset = c.Uint("offset")
		e.Type = wire.RecordType(c.Uint8("type"))
		e.Key = d.key()
		e.Value = d.value()
	}
	*dst = es
}
