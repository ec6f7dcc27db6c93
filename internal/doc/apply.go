// Changing a Store: Apply and Check, which prepare a change against the
// current value and store it, the version checks, and Warm, which loads
// the memory a batch of changes will touch first.

package doc

import (
	"strings"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// Apply makes change c to partition p. On error the store is unchanged.
// c.Value is not retained, so it may alias a receive buffer.
// Given the same state and change, every store returns the same error or
// reaches the same state, so a change the owner applied without error
// applies on every copy.
//
// Apply is ApplyAt with no offset: the key's version becomes 1, as
// though it was last written before versions were kept.
func (s *Store) Apply(p int, c Change) error { return s.ApplyAt(p, 0, c) }

// ApplyAt is Apply for the change committed at offset version: the
// change's top-level key gets that version, unless the change leaves the
// key absent. Versions derive only from the offsets passed in, so copies
// that apply the same commits keep the same versions. Version 0 (no
// offset) records 1, since 0 is the version of an absent key.
func (s *Store) ApplyAt(p int, version uint64, c Change) error {
	return s.apply(p, max(version, 1), c, true)
}

// Check reports the error Apply would return, without changing anything.
// It costs as much as Apply. Its answer holds until the next change to p,
// so an owner that checks before committing must check against a state
// that includes every change it committed before.
func (s *Store) Check(p int, c Change) error { return s.apply(p, 0, c, false) }

func (s *Store) apply(p int, version uint64, c Change, commit bool) error {
	pc, err := s.prepare(p, c, commit)
	if err != nil {
		return err
	}
	pt := &s.parts[p]
	pt.write.Lock()
	defer pt.write.Unlock()
	h := keyHash(pc.top)
	cl := pt.t.get(pc.top, h)
	if !pc.nested && c.Type == wire.RecordUpdate && !c.Cond {
		// The commonest change needs no look at the old value.
		if commit {
			s.store(pt, pc.top, h, cl, newRawEntry(c.Value), version)
		}
		return nil
	}
	var old *entry
	var cur uint64
	if cl != nil {
		old, cur = cl.e, cl.ver
	}
	if c.Cond && c.IfVersion != cur {
		return versionError(pc.top, c.IfVersion, cur, "")
	}
	ne, err := pc.result(old, commit)
	switch {
	case err != nil || !commit:
		return err
	case ne != nil:
		s.store(pt, pc.top, h, cl, ne, version)
	case cl != nil:
		pt.mu.Lock()
		pt.t.remove(pc.top, h)
		pt.ver++
		pt.mu.Unlock()
		s.n.Add(-1)
	}
	return nil
}

// prepared is a change that passed every check that does not depend on
// the state, split at its top-level key.
type prepared struct {
	c         Change
	top, rest string
	nested    bool
	e         edit
}

// prepare checks c for every error that does not depend on the state
// (InvalidArgument). keep: the change is to be stored, so the parts of its
// key the stored tree keeps are copied.
func (s *Store) prepare(p int, c Change, keep bool) (prepared, error) {
	top, rest, nested := strings.Cut(c.Key, s.sep)
	if nested && keep {
		// The path's segments become map keys in the stored tree, and
		// the key may sit in a receive buffer (TestNestedApplyCopiesThePath).
		// (A top-level key is copied where it is stored.)
		rest = strings.Clone(rest)
	}
	if err := s.checkPartition(p, top, c.Key); err != nil {
		return prepared{}, err
	}
	pc := prepared{c: c, top: top, rest: rest, nested: nested, e: edit{typ: c.Type, key: c.Key, sep: s.sep}}
	switch c.Type {
	case wire.RecordAdd, wire.RecordUpdate:
		var level int
		var err error
		if nested {
			// A value placed inside another is decoded now, into the tree.
			pc.e.val, level, err = decodeValue(c.Value)
		} else {
			level, err = wire.ValueLevel(c.Value, true)
		}
		if err != nil {
			return prepared{}, errs.Errorf(errs.InvalidArgument, "%w for %q: %w", ErrValue, c.Key, err)
		}
		if err := checkDepth(c.Key, s.sep, level); err != nil {
			return prepared{}, err
		}
	case wire.RecordRemove:
	case wire.RecordBatch:
		return prepared{}, errs.Errorf(errs.InvalidArgument, "%w: %s is not a change: apply it with ApplyBatch", ErrType, c.Type)
	default:
		return prepared{}, errs.Errorf(errs.InvalidArgument, "%w: %d", ErrType, uint8(c.Type))
	}
	return pc, nil
}

// result returns the entry the change leaves at its top-level key, whose
// entry is old (nil: absent); nil when it leaves the key absent. Without
// build it only checks, and makes no entry.
func (pc *prepared) result(old *entry, build bool) (*entry, error) {
	c := &pc.c
	switch {
	case pc.nested:
		var cur any
		switch {
		case old != nil:
			cur = old.value()
		case c.Type == wire.RecordRemove:
			return nil, nil
		default:
			cur = pc.e.missing(pc.rest)
		}
		nv, changed, err := pc.e.apply(cur, pc.rest)
		switch {
		case err != nil:
			return nil, err
		case !changed:
			// A REMOVE of a missing path: the value stays, and the key
			// still takes the change's version.
			return old, nil
		case !build:
			return nil, nil
		}
		return newDecodedEntry(nv), nil
	case c.Type == wire.RecordRemove:
		return nil, nil
	case c.Type == wire.RecordAdd && old != nil:
		return nil, errs.Errorf(errs.FailedPrecondition, "%w: %q", ErrExists, c.Key)
	case !build:
		return nil, nil
	}
	return newRawEntry(c.Value), nil
}

// store sets top, whose hash is h and whose cell in pt is cl (nil for a
// new key), to e at version. The caller holds pt.write.
func (s *Store) store(pt *partition, top string, h uint64, cl *cell, e *entry, version uint64) {
	if cl != nil {
		pt.mu.Lock()
		cl.e, cl.ver = e, version
		pt.ver++
		pt.mu.Unlock()
		return
	}
	cl = newCell(top, e, version)
	pt.mu.Lock()
	pt.t.add(cl, h)
	pt.ver++
	pt.mu.Unlock()
	s.n.Add(1)
}

// VersionDetail is the type of the errs.Detail a version mismatch
// (ErrVersion) carries: the key's current version, a msgpack uint.
const VersionDetail = "fero.version"

// versionError reports a condition on top that wanted version want where
// the key is at have; why, if not empty, says more.
func versionError(top string, want, have uint64, why string) error {
	if why != "" {
		why = " (" + why + ")"
	}
	return errs.Errorf(errs.FailedPrecondition, "%w: %q is at version %d%s, not %d", ErrVersion, top, have, why, want).
		WithDetail(errs.Detail{Type: VersionDetail, Value: wire.AppendUint(nil, have)})
}

// VersionOf returns the current version a version mismatch reports (its
// VersionDetail), on this node or after the error crossed the wire.
func VersionOf(err error) (uint64, bool) {
	for _, d := range errs.DetailsOf(err) {
		if d.Type != VersionDetail {
			continue
		}
		c := wire.NewCursor(d.Value)
		if v := c.Uint("version"); c.End() == nil {
			return v, true
		}
	}
	return 0, false
}

func (s *Store) checkPartition(p int, top, key string) error {
	if p < 0 || p >= len(s.parts) {
		return errs.Errorf(errs.InvalidArgument, "%w: partition %d of %d", ErrPartition, p, len(s.parts))
	}
	if q := s.part(top); q != p {
		return errs.Errorf(errs.InvalidArgument, "%w: %q is in partition %d, not %d", ErrPartition, key, q, p)
	}
	return nil
}

// checkDepth refuses a value of the given level that would nest deeper
// than maxLevel once placed at key.
func checkDepth(key, sep string, level int) error {
	if _, rest, nested := strings.Cut(key, sep); nested {
		level += strings.Count(rest, sep) + 1
	}
	if level > maxLevel {
		return errs.Errorf(errs.InvalidArgument, "%w: %q: value would nest %d levels deep, more than %d",
			ErrPath, key, level, maxLevel)
	}
	return nil
}

// Warm loads, changing nothing, the memory that changes to keys[i] in
// partitions parts[i] will touch first: each top-level key's slot and
// cell. It returns a value computed from what it loaded; keep it (a sum
// will do), so the loads cannot be optimized away.
//
// A caller about to apply a batch of changes warms them first. Applying
// them one by one waits out each cache miss in turn, since each load needs
// the one before (the slot says where the cell is); Warm makes the first
// loads of every key, then the second, so the misses of many keys overlap.
//
// Warm reads without locking, so only a goroutine that makes changes to
// the store, or is ordered with every one that does, may call it.
func (s *Store) Warm(parts []int, keys []string) uint64 {
	const chunk = 32
	var sink uint64
	var slots [chunk]*tslot
	var cells [chunk]*cell
	for len(keys) > 0 && len(parts) > 0 {
		n := min(len(keys), len(parts), chunk)
		for i := range n {
			slots[i] = nil
			if p := parts[i]; p >= 0 && p < len(s.parts) {
				if t := &s.parts[p].t; len(t.slots) > 0 {
					top, _, _ := strings.Cut(keys[i], s.sep)
					slots[i] = &t.slots[keyHash(top)&uint64(len(t.slots)-1)]
				}
			}
		}
		for i := range n {
			cells[i] = nil
			if slots[i] != nil {
				cells[i] = slots[i].c
			}
		}
		for i := range n {
			if cells[i] != nil {
				sink += uint64(len(cells[i].key))
			}
		}
		parts, keys = parts[n:], keys[n:]
	}
	return sink
}
