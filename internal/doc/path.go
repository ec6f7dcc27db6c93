package doc

import (
	"maps"
	"strings"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// pushSegment as the last segment of an ADD on an array means "after the
// last element", as in JSON Pointer.
const pushSegment = "-"

// index parses an array segment: decimal digits with no sign and no
// leading zero, so each element has exactly one spelling (a path is also a
// key that replicas compare as a string).
func index(seg string) (int, bool) {
	if seg == "" || len(seg) > 9 || (seg[0] == '0' && len(seg) > 1) {
		return 0, false // 9 digits are far beyond any array a value can hold
	}
	n := 0
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// child returns the element seg names in v, if v is a container holding it.
func child(v any, seg string) (any, bool) {
	switch n := v.(type) {
	case map[string]any:
		c, ok := n[seg]
		return c, ok
	case []any:
		if i, ok := index(seg); ok && i < len(n) {
			return n[i], true
		}
	}
	return nil, false
}

// edit is one change below a top-level key.
type edit struct {
	typ wire.RecordType
	key string // the whole key, for messages
	sep string
	val any
}

// at returns the key up to and including the segment that starts rest.
func (e *edit) at(rest string) string {
	if i := strings.Index(rest, e.sep); i >= 0 {
		rest = rest[i:]
	} else {
		rest = ""
	}
	return e.key[:len(e.key)-len(rest)]
}

// apply returns node with the change made at path, without modifying node:
// only the containers along the path are copied, so values a reader holds
// never change under it. changed is false when the change is a no-op
// (a REMOVE of a missing path), and then node is returned as it was.
func (e *edit) apply(node any, path string) (_ any, changed bool, _ error) {
	seg, rest, more := strings.Cut(path, e.sep)
	if !more && e.typ == wire.RecordAdd && seg == pushSegment {
		return e.push(node)
	}
	switch n := node.(type) {
	case map[string]any:
		c, ok := n[seg]
		if more {
			if !ok {
				if e.typ == wire.RecordRemove {
					return node, false, nil
				}
				c = e.missing(rest)
			}
			nc, changed, err := e.apply(c, rest)
			if err != nil || !changed {
				return node, false, err
			}
			m := maps.Clone(n)
			m[seg] = nc
			return m, true, nil
		}
		switch e.typ {
		case wire.RecordRemove:
			if !ok {
				return node, false, nil
			}
			m := maps.Clone(n)
			delete(m, seg)
			return m, true, nil
		case wire.RecordAdd:
			if ok {
				return node, false, errs.Errorf(errs.FailedPrecondition, "%w: %q", ErrExists, e.key)
			}
		}
		m := maps.Clone(n)
		m[seg] = e.val
		return m, true, nil

	case []any:
		i, ok := index(seg)
		if more {
			if !ok || i >= len(n) {
				return e.badIndex(node, path, len(n))
			}
			nc, changed, err := e.apply(n[i], rest)
			if err != nil || !changed {
				return node, false, err
			}
			a := append([]any(nil), n...)
			a[i] = nc
			return a, true, nil
		}
		switch e.typ {
		case wire.RecordRemove:
			if !ok || i >= len(n) {
				return node, false, nil
			}
			a := make([]any, 0, len(n)-1)
			return append(append(a, n[:i]...), n[i+1:]...), true, nil
		case wire.RecordAdd:
			if !ok || i > len(n) {
				return e.badIndex(node, path, len(n))
			}
			a := make([]any, 0, len(n)+1)
			a = append(append(a, n[:i]...), e.val)
			return append(a, n[i:]...), true, nil
		}
		if !ok || i >= len(n) {
			return e.badIndex(node, path, len(n))
		}
		a := append([]any(nil), n...)
		a[i] = e.val
		return a, true, nil
	}
	if e.typ == wire.RecordRemove {
		return node, false, nil
	}
	return node, false, errs.Errorf(errs.FailedPrecondition, "%w: %q: %q is a %s",
		ErrNotContainer, e.key, e.parent(path), kind(node))
}

// missing returns the container to create for a missing value that path
// continues into: an array for a push, else a map.
func (e *edit) missing(path string) any {
	if e.typ == wire.RecordAdd && path == pushSegment {
		return []any{}
	}
	return map[string]any{}
}

// push appends to the array node.
func (e *edit) push(node any) (any, bool, error) {
	a, ok := node.([]any)
	if !ok {
		return node, false, errs.Errorf(errs.FailedPrecondition, "%w: %q: %q is a %s",
			ErrNotArray, e.key, strings.TrimSuffix(e.key, e.sep+pushSegment), kind(node))
	}
	return append(append(make([]any, 0, len(a)+1), a...), e.val), true, nil
}

func (e *edit) badIndex(node any, path string, n int) (any, bool, error) {
	if e.typ == wire.RecordRemove {
		return node, false, nil
	}
	return node, false, errs.Errorf(errs.FailedPrecondition, "%w: %q: array of %d elements", ErrIndex, e.at(path), n)
}

// parent returns the key of the value that path's first segment is in.
func (e *edit) parent(path string) string {
	return strings.TrimSuffix(e.key[:len(e.key)-len(path)], e.sep)
}

// kind names a value's type for messages.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case bool:
		return "bool"
	case int64, uint64, float64:
		return "number"
	case string:
		return "string"
	case []byte:
		return "binary"
	case Ext:
		return "extension"
	case map[string]any:
		return "map"
	}
	return "array"
}
