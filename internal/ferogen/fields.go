// A request's fields: those tagged `fero:"…"`, the key field among them,
// and the check that every field encodes.

package ferogen

import (
	"fmt"
	"go/ast"
	"go/types"
	"reflect"
	"slices"
	"strings"
)

// field is a field of a request, or of a struct it embeds: path holds
// the fields from the request's own down to it, and tags their tags.
type field struct {
	path []*types.Var
	tags []reflect.StructTag
}

func (f field) v() *types.Var { return f.path[len(f.path)-1] }

// name is the field's path after its struct's name, as in LoginRequest.User
// or WriteRequest.Ref.ID.
func (f field) name() string {
	names := make([]string, len(f.path))
	for i, v := range f.path {
		names[i] = v.Name()
	}
	return strings.Join(names, ".")
}

// taggedFields returns, by depth, the fields of st tagged `fero:"…"`,
// st's own first, then those of the structs it embeds (by value or
// pointer), as far down as they go.
func taggedFields(st *types.Struct) [][]field {
	var out [][]field
	type level struct {
		st *types.Struct
		at field
	}
	seen := map[types.Type]bool{}
	for cur := []level{{st: st}}; len(cur) > 0; {
		var tagged []field
		var next []level
		for _, l := range cur {
			for i := range l.st.NumFields() {
				f := field{path: append(slices.Clip(l.at.path), l.st.Field(i)), tags: append(slices.Clip(l.at.tags), reflect.StructTag(l.st.Tag(i)))}
				if _, has := f.tags[len(f.tags)-1].Lookup("fero"); has {
					tagged = append(tagged, f)
				}
				if !f.v().Embedded() {
					continue
				}
				t := types.Unalias(f.v().Type())
				if p, ok := t.(*types.Pointer); ok {
					t = types.Unalias(p.Elem())
				}
				// A struct embedded twice is searched once: the second is
				// as deep or deeper, and Go's selectors say which wins.
				if est, ok := t.Underlying().(*types.Struct); ok && !seen[t] {
					seen[t] = true
					next = append(next, level{st: est, at: f})
				}
			}
		}
		out = append(out, tagged)
		cur = next
	}
	return out
}

// key finds the request's key field: a field tagged `fero:"key"`, in the
// request or promoted from a struct it embeds; exported, encoded, a
// string. As Go's selectors pick the shallowest of fields with one name,
// the shallowest tagged fields count, and must be exactly one.
func (r *reader) key(res *Resource, m *Method, id *ast.Ident) bool {
	var keys []field
	ok := true
	for _, tagged := range taggedFields(m.Req.Underlying().(*types.Struct)) {
		var here []field
		for _, f := range tagged {
			if v := f.tags[len(f.tags)-1].Get("fero"); v != "key" {
				r.add(r.atPath(f.path, id), "unknown fero tag %q on %s.%s: the only one is `fero:\"key\"`", v, r.typeString(m.Req), f.name())
				ok = false
				continue
			}
			here = append(here, f)
		}
		if keys == nil {
			keys = here
		}
	}
	if len(keys) == 0 {
		if ok {
			r.add(r.at(m.Req.Obj().Pos(), id), "missing key field: %s (the request of %s.%s) has no field tagged `fero:\"key\"`; tag the string field that routes the request", r.typeString(m.Req), res.Iface, m.Name)
		}
		return false
	}
	for _, k := range keys[1:] {
		r.add(r.at(k.path[0].Pos(), id), "%s has two key fields, %s and %s: tag one `fero:\"key\"`", r.typeString(m.Req), keys[0].name(), k.name())
		ok = false
	}
	if len(keys) > 1 {
		return false
	}
	key := keys[0]
	v := key.v()
	name := r.typeString(m.Req) + "." + key.name()
	switch tag, _, _ := strings.Cut(key.tags[len(key.tags)-1].Get("msgpack"), ","); {
	case !v.Exported():
		r.add(r.atPath(key.path, id), "key field %s must be exported: msgpack encodes only exported fields", name)
		ok = false
	case tag == "-":
		r.add(r.atPath(key.path, id), "key field %s is tagged `msgpack:\"-\"`: the handler needs it in the payload", name)
		ok = false
	}
	if b, isBasic := v.Type().Underlying().(*types.Basic); !isBasic || b.Kind() != types.String {
		r.add(r.atPath(key.path, id), "unsupported type: key field %s is %s; a key is a string or a named string type", name, r.typeString(v.Type()))
		ok = false
	}
	// A promoted key: the generated code reads it as req.<name>, and
	// checks each pointer on the way for nil, each as req.<embedded>.
	for i, e := range key.path[:len(key.path)-1] {
		if tag, _, _ := strings.Cut(key.tags[i].Get("msgpack"), ","); tag == "-" {
			r.add(r.atPath(key.path[:i+1], id), "key field %s is in the embedded %s, which is tagged `msgpack:\"-\"`: the handler needs it in the payload", name, e.Name())
			ok = false
		}
		if _, isPtr := types.Unalias(e.Type()).(*types.Pointer); !isPtr {
			continue
		}
		if !e.Exported() {
			r.add(r.atPath(key.path[:i+1], id), "key field %s is promoted through the embedded *%s, which is unexported: the generated code must check it for nil; export it, or embed it by value", name, e.Name())
			ok = false
		} else if why := r.selects(m.Req, e); why != "" {
			r.add(r.at(key.path[0].Pos(), id), "key field %s is promoted through the embedded *%s, which the generated code must check for nil as %s.%s: %s", name, e.Name(), r.typeString(m.Req), e.Name(), why)
			ok = false
		}
		m.KeyVia = append(m.KeyVia, e.Name())
	}
	if len(key.path) > 1 {
		if why := r.selects(m.Req, v); why != "" {
			r.add(r.at(key.path[0].Pos(), id), "key field %s is not promoted to %s: %s", name, r.typeString(m.Req), why)
			ok = false
		}
	}
	m.Key = v.Name()
	m.KeyString = types.Identical(v.Type(), types.Typ[types.String])
	return ok
}

// selects returns "" when t.<f's name> selects f, or else why not.
func (r *reader) selects(t *types.Named, f *types.Var) string {
	obj, index, _ := types.LookupFieldOrMethod(t, false, f.Pkg(), f.Name())
	switch {
	case obj == f:
		return ""
	case obj == nil && index != nil:
		return fmt.Sprintf("%s.%s is ambiguous: two structs it embeds have a field %s at the same depth", r.typeString(t), f.Name(), f.Name())
	default:
		return fmt.Sprintf("%s.%s is another field or method, which hides it", r.typeString(t), f.Name())
	}
}

// encodable reports each field of t that holds, anywhere in its encoded
// fields, what msgpack cannot encode (a channel, a function, a complex
// number, an unsafe.Pointer) or decode into (an interface with methods:
// msgpack cannot tell which type to make; error is the exception, carried
// as its message), unless a type on the way encodes itself. The report is
// at the field of t, with the path from there.
func (r *reader) encodable(t *types.Named, id *ast.Ident) bool {
	var seen map[types.Type]bool // the types on the way, per field of t
	// bad returns what is wrong with t, found at path, and the path to it.
	var bad func(t types.Type, path string) (string, string)
	fields := func(st *types.Struct, path string) (string, string) {
		for i := range st.NumFields() {
			f := st.Field(i)
			if name, _, _ := strings.Cut(reflect.StructTag(st.Tag(i)).Get("msgpack"), ","); name == "-" || !f.Exported() && !f.Embedded() {
				continue
			}
			if at, why := bad(f.Type(), path+"."+f.Name()); why != "" {
				return at, why
			}
		}
		return "", ""
	}
	bad = func(t types.Type, path string) (string, string) {
		t = types.Unalias(t)
		if seen[t] {
			return "", ""
		}
		seen[t] = true
		if encodesItself(t) {
			return "", ""
		}
		switch u := t.Underlying().(type) {
		case *types.Chan, *types.Signature:
			return path, fmt.Sprintf("%s, which msgpack cannot encode", r.typeString(t))
		case *types.Basic:
			switch u.Kind() {
			case types.Complex64, types.Complex128, types.UnsafePointer:
				return path, fmt.Sprintf("%s, which msgpack cannot encode", r.typeString(t))
			}
		case *types.Interface:
			if !u.Empty() && !isError(t) {
				return path, fmt.Sprintf("%s, an interface with methods, which msgpack cannot decode into: use a concrete type, or any", r.typeString(t))
			}
		case *types.Pointer:
			return bad(u.Elem(), path)
		case *types.Slice:
			return bad(u.Elem(), path+"[i]")
		case *types.Array:
			return bad(u.Elem(), path+"[i]")
		case *types.Map:
			if at, why := bad(u.Key(), path+"'s key"); why != "" {
				return at, why
			}
			return bad(u.Elem(), path+"[k]")
		case *types.Struct:
			return fields(u, path)
		}
		return "", ""
	}
	st := t.Underlying().(*types.Struct)
	ok := true
	for i := range st.NumFields() {
		f := st.Field(i)
		if name, _, _ := strings.Cut(reflect.StructTag(st.Tag(i)).Get("msgpack"), ","); name == "-" || !f.Exported() && !f.Embedded() {
			continue
		}
		seen = map[types.Type]bool{t: true}
		if at, why := bad(f.Type(), r.typeString(t)+"."+f.Name()); why != "" {
			r.add(r.at(f.Pos(), id), "unsupported type: %s is %s", at, why)
			ok = false
		}
	}
	return ok
}

// encodesItself reports whether msgpack encodes t (or *t) with the type's
// own method rather than by its kind.
func encodesItself(t types.Type) bool {
	ms := types.NewMethodSet(types.NewPointer(t))
	for _, m := range []string{"EncodeMsgpack", "MarshalMsgpack", "MarshalBinary", "MarshalText"} {
		if ms.Lookup(nil, m) != nil {
			return true
		}
	}
	return false
}
