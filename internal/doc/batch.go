package doc

import (
	"errors"
	"unsafe"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// Batch is several changes committed as one record (wire.RecordBatch):
// a copy applies all of them or none (Store.ApplyBatch).
type Batch struct {
	Changes []Change
	// Writer, Seq and Reply identify the write the batch commits and keep
	// its answer, so that a writer's retry can be answered without
	// applying the batch twice: ApplyBatch records them in the
	// partition's exactly-once table (Store.Outcome). Seq must not be 0
	// when Writer is set; without a Writer nothing is recorded.
	Writer string
	Seq    uint64
	Reply  []byte // raw bytes; nil for none
}

// Bounds on a batch, which DecodeBatch enforces on a stranger's bytes
// and ApplyBatch on any batch.
const (
	MaxBatchChanges = 1024
	MaxBatchWriter  = 256 // bytes of Batch.Writer
)

// batchFormat is the number a batch's encoding starts with:
//
//	[batchFormat, writer str, seq uint, reply bin|nil, [change, ...]]
//	change: [type uint, key str, value bin|nil, ifVersion uint|nil]
//
// A value travels as bin, so decoding a batch does not parse it (the
// store checks it when it applies it); ifVersion is nil for a change
// without a condition.
const batchFormat = 1

// AppendBatch appends the encoding of bt, one msgpack value, to b.
func AppendBatch(b []byte, bt *Batch) []byte {
	b = wire.AppendArrayHeader(b, 5)
	b = wire.AppendUint(b, batchFormat)
	b = wire.AppendStr(b, bt.Writer)
	b = wire.AppendUint(b, bt.Seq)
	b = wire.AppendBin(b, bt.Reply)
	b = wire.AppendArrayHeader(b, len(bt.Changes))
	for i := range bt.Changes {
		c := &bt.Changes[i]
		b = wire.AppendArrayHeader(b, 4)
		b = wire.AppendUint(b, uint64(c.Type))
		b = wire.AppendStr(b, c.Key)
		b = wire.AppendBin(b, c.Value)
		if c.Cond {
			b = wire.AppendUint(b, c.IfVersion)
		} else {
			b = wire.AppendNil(b)
		}
	}
	return b
}

// DecodeBatch decodes a batch that AppendBatch encoded. The bytes may come
// from anyone: a batch with no changes or more than MaxBatchChanges, a
// change of a type other than ADD, UPDATE and REMOVE (a batch in a batch
// included), an ADD or UPDATE without a value or a REMOVE with one, and
// anything malformed, are refused (InvalidArgument, ErrBatch). Values are
// not checked here; ApplyBatch checks them.
//
// The result aliases b (keys, writer, values and reply): b must not change
// while it is in use.
func DecodeBatch(b []byte) (Batch, error) {
	bad := func(format string, args ...any) (Batch, error) {
		return Batch{}, errs.Errorf(errs.InvalidArgument, "%w: "+format, append([]any{ErrBatch}, args...)...)
	}
	c := wire.NewCursor(b)
	n := c.Array("batch", -1)
	if c.Err() == nil && n < 1 {
		return bad("an empty array")
	}
	if f := c.Uint("format"); c.Err() == nil && f != batchFormat {
		return bad("format %d, want %d", f, batchFormat)
	}
	if c.Err() == nil && n != 5 {
		return bad("%d fields, want 5", n)
	}
	var bt Batch
	bt.Writer = aliasString(c.Bytes("writer"))
	bt.Seq = c.Uint("seq")
	bt.Reply = c.Bytes("reply")
	k := c.Array("changes", -1)
	switch {
	case c.Err() != nil:
		return bad("%v", c.Err())
	case len(bt.Writer) > MaxBatchWriter:
		return bad("a writer of %d bytes, more than %d", len(bt.Writer), MaxBatchWriter)
	case k == 0:
		return bad("no changes")
	case k > MaxBatchChanges:
		return bad("%d changes, more than %d", k, MaxBatchChanges)
	}
	bt.Changes = make([]Change, k)
	for i := range bt.Changes {
		ch := &bt.Changes[i]
		c.Array("change", 4)
		ch.Type = wire.RecordType(c.Uint8("type"))
		ch.Key = aliasString(c.Bytes("key"))
		ch.Value = c.Bytes("value")
		if !c.Nil() {
			ch.Cond, ch.IfVersion = true, c.Uint("ifVersion")
		}
		if c.Err() != nil {
			return bad("change %d: %v", i, c.Err())
		}
		switch ch.Type {
		case wire.RecordAdd, wire.RecordUpdate:
			if len(ch.Value) == 0 {
				return bad("change %d: %s %q without a value", i, ch.Type, ch.Key)
			}
		case wire.RecordRemove:
			if len(ch.Value) != 0 {
				return bad("change %d: REMOVE %q with a value", i, ch.Key)
			}
		case wire.RecordBatch:
			return bad("change %d: a batch in a batch", i)
		default:
			return bad("change %d: unknown record type %d", i, uint8(ch.Type))
		}
	}
	if err := c.End(); err != nil {
		return bad("%v", err)
	}
	return bt, nil
}

// BatchWriter reads only the writer and sequence a batch names, without
// its changes: what the owner asks its exactly-once table before it
// decodes the whole batch to apply it. ok is false for bytes that do not
// start as a batch (DecodeBatch says why).
func BatchWriter(b []byte) (writer string, seq uint64, ok bool) {
	c := wire.NewCursor(b)
	if n := c.Array("batch", -1); n != 5 || c.Uint("format") != batchFormat {
		return "", 0, false
	}
	writer = aliasString(c.Bytes("writer"))
	seq = c.Uint("seq")
	return writer, seq, c.Err() == nil && len(writer) <= MaxBatchWriter
}

func aliasString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// ApplyBatch applies bt's changes to partition p in order, as one change
// committed at offset version: each change sees the state the earlier ones
// left (ADD k and then UPDATE k.x applies; ADD k twice fails), and every
// top-level key they leave present gets version (1 for 0, as ApplyAt).
//
// It is all or nothing: if a change fails, the store is exactly as it was,
// and the error, with the failing change's code, wraps the change's error
// and names its index and key. Readers never see part of a batch: the new
// entries are all made first, and swapped in under one lock.
//
// A condition (Change.Cond) is checked against the state the earlier
// changes left. A key an earlier change of the batch left present is at
// the batch's own version, which nothing can know before the commit
// (CheckBatch has no version to compare), so a condition on it fails in
// both, reporting the key's version before the batch; one it left absent
// is at 0.
//
// A batch with a Writer also records its outcome in the partition's
// exactly-once table, with the keys, so a reader that sees the batch's
// changes sees its Outcome too; a batch whose (Writer, Seq) the table
// remembers, or whose Seq is at or below the writer's floor, keeps what
// the table held. A failed batch records nothing.
//
// The batch's values and reply are not retained, as with Apply.
func (s *Store) ApplyBatch(p int, version uint64, bt *Batch) error {
	return s.applyBatch(p, max(version, 1), bt, true)
}

// CheckBatch reports the error ApplyBatch would return, without changing
// anything; see Check for how long its answer holds.
func (s *Store) CheckBatch(p int, bt *Batch) error { return s.applyBatch(p, 0, bt, false) }

// pending is a top-level key a batch changes: its cell before the batch
// (nil: absent) and what the batch's changes so far left there.
type pending struct {
	top     string
	h       uint64
	cl      *cell
	e       *entry // nil: absent
	touched bool   // a change of the batch has been applied to it
	added   *cell  // the cell made for a key the batch adds
}

func (s *Store) applyBatch(p int, version uint64, bt *Batch, commit bool) error {
	switch n := len(bt.Changes); {
	case n == 0:
		return errs.Errorf(errs.InvalidArgument, "%w: no changes", ErrBatch)
	case n > MaxBatchChanges:
		return errs.Errorf(errs.InvalidArgument, "%w: %d changes, more than %d", ErrBatch, n, MaxBatchChanges)
	case len(bt.Writer) > MaxBatchWriter:
		return errs.Errorf(errs.InvalidArgument, "%w: a writer of %d bytes, more than %d", ErrBatch, len(bt.Writer), MaxBatchWriter)
	case bt.Writer != "" && bt.Seq == 0:
		return errs.Errorf(errs.InvalidArgument, "%w: writer %q without a sequence number", ErrBatch, bt.Writer)
	}
	pcs := make([]prepared, len(bt.Changes))
	for i := range bt.Changes {
		pc, err := s.prepare(p, bt.Changes[i], true)
		if err != nil {
			return batchError(i, &bt.Changes[i], err)
		}
		pcs[i] = pc
	}
	pt := &s.parts[p]
	pt.write.Lock()
	defer pt.write.Unlock()
	// Writers hold write, so the table can be read without mu; nothing is
	// stored in it until every change has applied to the pending keys.
	pend := make([]pending, 0, len(pcs))
	for i := range pcs {
		pc := &pcs[i]
		h := keyHash(pc.top)
		k := 0
		for k < len(pend) && (pend[k].h != h || pend[k].top != pc.top) {
			k++
		}
		if k == len(pend) {
			pd := pending{top: pc.top, h: h, cl: pt.t.get(pc.top, h)}
			if pd.cl != nil {
				pd.e = pd.cl.e
			}
			pend = append(pend, pd)
		}
		pd := &pend[k]
		if c := &pc.c; c.Cond {
			if err := pd.check(c.IfVersion); err != nil {
				return batchError(i, c, err)
			}
		}
		ne, err := pc.result(pd.e, true)
		if err != nil {
			return batchError(i, &pc.c, err)
		}
		pd.e, pd.touched = ne, true
	}
	if !commit {
		return nil
	}
	var added int64
	for i := range pend {
		if pd := &pend[i]; pd.cl == nil && pd.e != nil {
			pd.added = newCell(pd.top, pd.e, version)
			added++
		}
	}
	var o outcome
	if bt.Writer != "" {
		o = newOutcome(bt, version)
	}
	pt.mu.Lock()
	for i := range pend {
		switch pd := &pend[i]; {
		case pd.added != nil:
			pt.t.add(pd.added, pd.h)
		case pd.cl == nil:
			// Absent before and after.
		case pd.e != nil:
			pd.cl.e, pd.cl.ver = pd.e, version
		default:
			pt.t.remove(pd.top, pd.h)
			added--
		}
	}
	if bt.Writer != "" {
		pt.dd.record(bt.Writer, o)
	}
	pt.ver++
	pt.mu.Unlock()
	s.n.Add(added)
	return nil
}

// check reports whether a condition on the key's version want holds in
// the state the batch's earlier changes left.
func (pd *pending) check(want uint64) error {
	var before uint64
	if pd.cl != nil {
		before = pd.cl.ver
	}
	switch {
	case !pd.touched:
		if want != before {
			return versionError(pd.top, want, before, "")
		}
	case pd.e != nil:
		return versionError(pd.top, want, before, "before this batch, which changed it earlier")
	case want != 0:
		return versionError(pd.top, want, 0, "this batch removed it earlier")
	}
	return nil
}

// batchError is err, the error of change i, with the change named.
func batchError(i int, c *Change, err error) error {
	var e *errs.Error
	if !errors.As(err, &e) {
		e = errs.Errorf(errs.Internal, "%w", err)
	}
	return errs.Wrapf(e, "change %d of the batch, %s %q", i, c.Type, c.Key)
}
