package doc

import (
	"bytes"
	"slices"
	"strings"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// Change is one change record as the store applies it: what an owner
// commits (with its partition, epoch and offset, see wire.AppendRecord)
// and every copy applies in order.
type Change struct {
	Type wire.RecordType
	// Key is the path the change applies at.
	Key string
	// Value is the msgpack encoding of the value; empty, and ignored, for
	// a REMOVE.
	Value []byte
	// Cond makes the change conditional: it applies only if its top-level
	// key is at version IfVersion (0: the key is absent), and fails with
	// ErrVersion otherwise. A compare-and-set reads the version with
	// Store.GetVersioned.
	Cond      bool
	IfVersion uint64
}

// Builder makes the change records of the original's cache helpers. Its
// methods refuse every InvalidArgument that does not depend on the
// partition; whether a change fits the state (FailedPrecondition) only
// Store.Check or Store.Apply can tell.
type Builder struct {
	// Sep separates path segments; zero means ring.DefaultSeparator.
	Sep byte
}

func (b Builder) sep() string {
	if b.Sep == 0 {
		return string(rune(ring.DefaultSeparator))
	}
	return string(b.Sep)
}

// Update sets the value at path, creating missing maps on the way.
func (b Builder) Update(path string, v any) (Change, error) {
	return b.change(wire.RecordUpdate, path, v)
}

// Add inserts v at path: before the element at an array index (or after
// the last one for the segment "-"), or as a map key that must not exist.
func (b Builder) Add(path string, v any) (Change, error) {
	return b.change(wire.RecordAdd, path, v)
}

// Push appends v to the array at path, creating the array if path is
// missing: an ADD at path + separator + "-".
func (b Builder) Push(path string, v any) (Change, error) {
	return b.Add(path+b.sep()+pushSegment, v)
}

// Remove deletes the value at path; a missing path is a no-op.
func (Builder) Remove(path string) Change {
	return Change{Type: wire.RecordRemove, Key: path}
}

// Patch returns an UPDATE for each key and value in values, at path +
// separator + key, in key order. An empty path patches top-level keys.
// A key may not contain the separator: it would address a deeper path.
func (b Builder) Patch(path string, values map[string]any) ([]Change, error) {
	sep := b.sep()
	keys := make([]string, 0, len(values))
	for k := range values {
		if strings.Contains(k, sep) {
			return nil, errs.Errorf(errs.InvalidArgument, "%w: patch key %q contains the separator", ErrPath, k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	cs := make([]Change, 0, len(keys))
	for _, k := range keys {
		key := k
		if path != "" {
			key = path + sep + k
		}
		c, err := b.Update(key, values[k])
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// change encodes v in canonical form, so the record's bytes, like the
// state, do not depend on map iteration order.
func (b Builder) change(t wire.RecordType, path string, v any) (Change, error) {
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(v); err != nil {
		return Change{}, errs.Errorf(errs.InvalidArgument, "%w for %q: %w", ErrValue, path, err)
	}
	val, level, err := decodeValue(buf.Bytes())
	if err != nil {
		return Change{}, errs.Errorf(errs.InvalidArgument, "%w for %q: %w", ErrValue, path, err)
	}
	if err := checkDepth(path, b.sep(), level); err != nil {
		return Change{}, err
	}
	return Change{Type: t, Key: path, Value: appendValue(nil, val)}, nil
}
