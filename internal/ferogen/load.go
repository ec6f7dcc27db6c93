package ferogen

import (
	"context"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"golang.org/x/tools/go/packages"
)

// Package is a declaration package: the Go package whose interfaces are
// marked as resources.
type Package struct {
	// Dir is the package's directory; Path its import path and Name its
	// name.
	Dir, Path, Name string
	// ModulePath and ModuleDir place the package in its module, to name
	// the packages ferogen generates.
	ModulePath, ModuleDir string
	// Resources are the package's resources, in source order.
	Resources []*Resource
	// Err is set, and Resources empty, when the package does not load or
	// its declarations are bad: an ErrorList.
	Err error
}

// Resource is one interface marked //fero:resource.
type Resource struct {
	// Name is the resource's name, which fero.Open takes.
	Name string
	// Iface is the interface's name; Type the interface.
	Iface string
	Type  *types.Named
	// File is the declaring file, relative to the module's directory;
	// Pos the interface's position.
	File    string
	Pos     token.Position
	Methods []*Method
}

// Method is one verb of a resource.
type Method struct {
	Name string
	Verb string
	Pos  token.Position
	// Req and Reply are the request and reply structs (Reply nil when the
	// method returns only an error).
	Req, Reply *types.Named
	// Key is the name of Req's field tagged `fero:"key"`; KeyString says
	// its type is string itself rather than a named string type.
	Key       string
	KeyString bool
}

// loadMode is what ferogen needs of a package: its syntax, for the
// directives, and its types, resolved.
const loadMode = packages.NeedName | packages.NeedFiles | packages.NeedSyntax |
	packages.NeedTypes | packages.NeedTypesInfo | packages.NeedModule

// Load loads the declaration packages in dirs, which must belong to one
// module, in one go/packages call, and reads their resources. It returns
// one Package per dir, in order; the error is for the load as a whole.
func Load(ctx context.Context, dirs ...string) ([]*Package, error) {
	if len(dirs) == 0 {
		return nil, nil
	}
	out := make([]*Package, len(dirs))
	var patterns []string
	for i, d := range dirs {
		dir, err := filepath.Abs(d)
		if err != nil {
			return nil, err
		}
		out[i] = &Package{Dir: dir}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			out[i].Err = ErrorList{{Pos: token.Position{Filename: dir}, Msg: "not a directory"}}
			continue
		}
		patterns = append(patterns, dir)
	}
	if len(patterns) == 0 {
		return out, nil
	}
	fset := token.NewFileSet()
	cfg := &packages.Config{Context: ctx, Mode: loadMode, Dir: patterns[0], Fset: fset}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, fmt.Errorf("ferogen: load %s: %w", strings.Join(dirs, " "), err)
	}
	byDir := make(map[string]*packages.Package, len(pkgs))
	for _, p := range pkgs {
		byDir[p.Dir] = p
	}
	for i, p := range out {
		if p.Err != nil {
			continue
		}
		if lp := byDir[p.Dir]; lp != nil {
			out[i] = read(fset, lp)
		} else {
			p.Err = ErrorList{{Pos: token.Position{Filename: p.Dir}, Msg: "the go command found no package here"}}
		}
	}
	return out, nil
}

// read reads a loaded package's declarations.
func read(fset *token.FileSet, p *packages.Package) *Package {
	pkg := &Package{Dir: p.Dir, Path: p.PkgPath, Name: p.Name}
	if len(p.Errors) > 0 {
		// A syntax or type error also fails the go command's build of the
		// package: report it once, as the type checker does.
		kind := packages.ListError
		for _, e := range p.Errors {
			kind = max(kind, e.Kind)
		}
		var l ErrorList
		for _, e := range p.Errors {
			if e.Kind == kind {
				l = append(l, &Error{Pos: parsePos(e.Pos), Msg: e.Msg})
			}
		}
		pkg.Err = l.sorted()
		return pkg
	}
	if p.Module == nil {
		pkg.Err = ErrorList{{Pos: token.Position{Filename: p.Dir}, Msg: "the package is not in a module"}}
		return pkg
	}
	if p.Name == "main" {
		pkg.Err = ErrorList{{Pos: packagePos(fset, p), Msg: "declarations cannot be in package main, which the generated package could not import: move them to a package of their own"}}
		return pkg
	}
	pkg.ModulePath, pkg.ModuleDir = p.Module.Path, p.Module.Dir
	r := &reader{errs: errs{fset: fset}, pkg: p, out: pkg, used: map[*ast.Comment]bool{}}
	r.read()
	if err := r.err(); err != nil {
		pkg.Resources, pkg.Err = nil, err
	} else if len(pkg.Resources) == 0 {
		pkg.Err = ErrorList{{Pos: packagePos(fset, p), Msg: "no interface in package " + p.Name + " is marked //fero:resource"}}
	}
	return pkg
}

// packagePos is where a problem with the package as a whole is reported:
// the package clause of its first file.
func packagePos(fset *token.FileSet, p *packages.Package) token.Position {
	if len(p.Syntax) == 0 {
		return token.Position{Filename: p.Dir}
	}
	return fset.Position(p.Syntax[0].Name.Pos())
}

// The directives. A directive is a line comment with no space after the
// slashes, as Go's own (//go:generate).
const (
	resourceDirective = "//fero:resource"
	verbDirective     = "//fero:verb"
)

type reader struct {
	errs
	pkg *packages.Package
	out *Package
	// used marks the directives a declaration took, so that the rest can
	// be reported as misplaced.
	used map[*ast.Comment]bool
	// resources seen, for duplicates: name to where.
	resources map[string]token.Pos
}

func (r *reader) read() {
	r.resources = map[string]token.Pos{}
	for _, f := range r.pkg.Syntax {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, s := range gd.Specs {
				ts := s.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && gd.Lparen == token.NoPos {
					doc = gd.Doc // type T interface{…}, not in a group
				}
				if c, name := r.directive(doc, resourceDirective); c != nil {
					r.resource(ts, c, name)
				}
			}
		}
	}
	// Every directive left over is misplaced or unknown.
	for _, f := range r.pkg.Syntax {
		for _, g := range f.Comments {
			for _, c := range g.List {
				if !strings.HasPrefix(c.Text, "//fero:") || r.used[c] {
					continue
				}
				switch name, _, _ := strings.Cut(c.Text, " "); name {
				case resourceDirective:
					r.add(c.Pos(), "misplaced %s: it belongs in the doc comment of an interface type", resourceDirective)
				case verbDirective:
					r.add(c.Pos(), "misplaced %s: it belongs in the doc comment of a method of a %s interface", verbDirective, resourceDirective)
				default:
					r.add(c.Pos(), "unknown directive %s (ferogen knows %s and %s)", name, resourceDirective, verbDirective)
				}
			}
		}
	}
}

// directive finds the directive in doc and returns it with its argument.
// The argument must be one word; a second directive of the kind is an
// error.
func (r *reader) directive(doc *ast.CommentGroup, name string) (*ast.Comment, string) {
	if doc == nil {
		return nil, ""
	}
	var found *ast.Comment
	var arg string
	for _, c := range doc.List {
		d, rest, _ := strings.Cut(c.Text, " ")
		if d != name {
			continue
		}
		r.used[c] = true
		if found != nil {
			r.add(c.Pos(), "second %s (the first is at %s)", name, r.where(found.Pos()))
			continue
		}
		found = c
		words := strings.Fields(rest)
		if len(words) != 1 {
			r.add(c.Pos(), "%s takes one word, the name: %q", name, c.Text)
			continue
		}
		arg = words[0]
	}
	return found, arg
}

// resource reads one interface marked as a resource.
func (r *reader) resource(ts *ast.TypeSpec, c *ast.Comment, name string) {
	it, ok := ts.Type.(*ast.InterfaceType)
	if !ok {
		r.add(ts.Name.Pos(), "%s marks %s, which is not an interface", resourceDirective, ts.Name.Name)
		return
	}
	// Problems with the interface itself are reported, and its methods
	// read all the same, for their own problems.
	if ts.TypeParams != nil {
		r.add(ts.Name.Pos(), "unsupported type: resource %s has type parameters", ts.Name.Name)
	}
	if !ts.Name.IsExported() {
		r.add(ts.Name.Pos(), "resource interface %s must be exported: the generated package refers to it", ts.Name.Name)
	}
	if prev, dup := r.resources[name]; dup && name != "" {
		r.add(c.Pos(), "duplicate resource %q (also declared at %s)", name, r.where(prev))
	}
	r.resources[name] = c.Pos()
	obj := r.pkg.TypesInfo.Defs[ts.Name].(*types.TypeName)
	res := &Resource{Name: name, Iface: ts.Name.Name, Type: obj.Type().(*types.Named)}
	pos := r.fset.Position(ts.Name.Pos())
	res.Pos = pos
	if rel, err := filepath.Rel(r.out.ModuleDir, pos.Filename); err == nil {
		res.File = filepath.ToSlash(rel)
	}
	verbs := map[string]token.Pos{}
	for _, f := range it.Methods.List {
		if len(f.Names) == 0 {
			r.add(f.Pos(), "resource %s embeds %s: declare each verb as a method of the interface itself", res.Iface, types.ExprString(f.Type))
			continue
		}
		name := f.Names[0]
		m := r.method(res, name, r.pkg.TypesInfo.Defs[name].(*types.Func))
		c, verb := r.directive(f.Doc, verbDirective)
		if m == nil {
			continue
		}
		if c != nil {
			if verb == "" {
				continue // directive already reported
			}
			m.Verb = verb
		}
		vpos := name.Pos()
		if c != nil {
			vpos = c.Pos()
		}
		switch {
		case !validVerb(m.Verb):
			r.add(vpos, "bad verb %s of %s.%s: a verb is letters, digits and _ . : / -", m.Verb, res.Iface, m.Name)
			continue
		case builtin[m.Verb]:
			r.add(vpos, "verb %s of %s.%s is one of fero's built-in verbs (ADD, UPDATE, REMOVE, GET): name it otherwise with %s", m.Verb, res.Iface, m.Name, verbDirective)
			continue
		}
		if prev, dup := verbs[m.Verb]; dup {
			r.add(vpos, "duplicate verb %s in resource %s (also at %s)", m.Verb, res.Iface, r.where(prev))
			continue
		}
		verbs[m.Verb] = vpos
		res.Methods = append(res.Methods, m)
	}
	if len(it.Methods.List) == 0 {
		r.add(ts.Name.Pos(), "resource %s declares no verb: add a method per verb", res.Iface)
	}
	r.out.Resources = append(r.out.Resources, res)
}

// builtin are fero's own verbs, which a typed method must not take over:
// the built-in GET, say, is what every reader of the resource expects.
// (Spelled out rather than taken from pkg/fero, which the generator does
// not link; a test checks they agree.)
var builtin = map[string]bool{"ADD": true, "UPDATE": true, "REMOVE": true, "GET": true}

var verbRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]+$`)

func validVerb(v string) bool { return verbRE.MatchString(v) }

const wantSignature = "func(context.Context, *Request) (*Reply, error) or func(context.Context, *Request) error"

// method checks one method's signature and request type.
func (r *reader) method(res *Resource, id *ast.Ident, fn *types.Func) *Method {
	wrong := func(why string) *Method {
		r.add(id.Pos(), "%s.%s has the wrong signature: %s; want %s", res.Iface, id.Name, why, wantSignature)
		return nil
	}
	if !id.IsExported() {
		r.add(id.Pos(), "method %s.%s must be exported: other packages implement the interface", res.Iface, id.Name)
		return nil
	}
	sig := fn.Type().(*types.Signature)
	params, results := sig.Params(), sig.Results()
	if sig.Variadic() {
		return wrong("it is variadic")
	}
	if params.Len() != 2 {
		return wrong(fmt.Sprintf("it takes %s, not 2", count(params.Len(), "parameter")))
	}
	if !isContext(params.At(0).Type()) {
		return wrong(fmt.Sprintf("its first parameter is %s, not context.Context", r.typeString(params.At(0).Type())))
	}
	m := &Method{Name: id.Name, Verb: VerbOf(id.Name), Pos: r.fset.Position(id.Pos())}
	var why string
	if m.Req, why = structPointer(params.At(1).Type()); m.Req == nil {
		return wrong(fmt.Sprintf("its request is %s, %s", r.typeString(params.At(1).Type()), why))
	}
	switch results.Len() {
	case 1:
		if !isError(results.At(0).Type()) {
			return wrong(fmt.Sprintf("its result is %s, not error", r.typeString(results.At(0).Type())))
		}
	case 2:
		if m.Reply, why = structPointer(results.At(0).Type()); m.Reply == nil {
			return wrong(fmt.Sprintf("its reply is %s, %s", r.typeString(results.At(0).Type()), why))
		}
		if !isError(results.At(1).Type()) {
			return wrong(fmt.Sprintf("its second result is %s, not error", r.typeString(results.At(1).Type())))
		}
	default:
		return wrong(fmt.Sprintf("it returns %s, not 1 or 2", count(results.Len(), "result")))
	}
	ok := r.key(res, m, id)
	ok = r.encodable(m.Req, id) && ok
	if m.Reply != nil {
		ok = r.encodable(m.Reply, id) && ok
	}
	if !ok {
		return nil
	}
	return m
}

// key finds the request's key field: exactly one, exported, encoded,
// a string.
func (r *reader) key(res *Resource, m *Method, id *ast.Ident) bool {
	st := m.Req.Underlying().(*types.Struct)
	var key *types.Var
	ok := true
	for i := range st.NumFields() {
		f, tag := st.Field(i), reflect.StructTag(st.Tag(i))
		v, has := tag.Lookup("fero")
		if !has {
			continue
		}
		if v != "key" {
			r.add(r.at(f.Pos(), id), "unknown fero tag %q on %s.%s: the only one is `fero:\"key\"`", v, r.typeString(m.Req), f.Name())
			ok = false
			continue
		}
		if key != nil {
			r.add(r.at(f.Pos(), id), "%s has two key fields, %s and %s: tag one `fero:\"key\"`", r.typeString(m.Req), key.Name(), f.Name())
			ok = false
			continue
		}
		key = f
		switch name, _, _ := strings.Cut(tag.Get("msgpack"), ","); {
		case !f.Exported():
			r.add(r.at(f.Pos(), id), "key field %s.%s must be exported: msgpack encodes only exported fields", r.typeString(m.Req), f.Name())
			ok = false
		case name == "-":
			r.add(r.at(f.Pos(), id), "key field %s.%s is tagged `msgpack:\"-\"`: the handler needs it in the payload", r.typeString(m.Req), f.Name())
			ok = false
		}
		if b, isBasic := f.Type().Underlying().(*types.Basic); !isBasic || b.Kind() != types.String {
			r.add(r.at(f.Pos(), id), "unsupported type: key field %s.%s is %s; a key is a string or a named string type", r.typeString(m.Req), f.Name(), r.typeString(f.Type()))
			ok = false
		}
	}
	if key == nil {
		if ok {
			r.add(r.at(m.Req.Obj().Pos(), id), "missing key field: %s (the request of %s.%s) has no field tagged `fero:\"key\"`; tag the string field that routes the request", r.typeString(m.Req), res.Iface, m.Name)
		}
		return false
	}
	m.Key = key.Name()
	m.KeyString = types.Identical(key.Type(), types.Typ[types.String])
	return ok
}

// encodable reports a field msgpack cannot encode (a channel, a function,
// a complex number, an unsafe.Pointer), anywhere in t's exported fields,
// unless a type on the way encodes itself.
func (r *reader) encodable(t *types.Named, id *ast.Ident) bool {
	seen := map[types.Type]bool{}
	var bad func(t types.Type) string
	bad = func(t types.Type) string {
		t = types.Unalias(t)
		if seen[t] {
			return ""
		}
		seen[t] = true
		if encodesItself(t) {
			return ""
		}
		switch u := t.Underlying().(type) {
		case *types.Chan, *types.Signature:
			return r.typeString(t)
		case *types.Basic:
			switch u.Kind() {
			case types.Complex64, types.Complex128, types.UnsafePointer:
				return r.typeString(t)
			}
		case *types.Pointer:
			return bad(u.Elem())
		case *types.Slice:
			return bad(u.Elem())
		case *types.Array:
			return bad(u.Elem())
		case *types.Map:
			if s := bad(u.Key()); s != "" {
				return s
			}
			return bad(u.Elem())
		case *types.Struct:
			for i := range u.NumFields() {
				f := u.Field(i)
				if name, _, _ := strings.Cut(reflect.StructTag(u.Tag(i)).Get("msgpack"), ","); name == "-" || !f.Exported() && !f.Embedded() {
					continue
				}
				if s := bad(f.Type()); s != "" {
					return s
				}
			}
		}
		return ""
	}
	st := t.Underlying().(*types.Struct)
	ok := true
	for i := range st.NumFields() {
		f := st.Field(i)
		if name, _, _ := strings.Cut(reflect.StructTag(st.Tag(i)).Get("msgpack"), ","); name == "-" || !f.Exported() && !f.Embedded() {
			continue
		}
		if s := bad(f.Type()); s != "" {
			r.add(r.at(f.Pos(), id), "unsupported type: %s.%s holds a %s, which msgpack cannot encode", r.typeString(t), f.Name(), s)
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

// at is pos when it is in the declaration package's files (a field or type
// declared there), else the method's position: an error about a type from
// another package points at its use.
func (r *reader) at(pos token.Pos, id *ast.Ident) token.Pos {
	if pos.IsValid() {
		file := r.fset.Position(pos).Filename
		if slices.Contains(r.pkg.GoFiles, file) {
			return pos
		}
	}
	return id.Pos()
}

// where names a position of the package in a message: the package's files
// share a directory, so the file's base name is enough.
func (r *reader) where(pos token.Pos) string {
	p := r.fset.Position(pos)
	p.Filename = filepath.Base(p.Filename)
	return p.String()
}

func (r *reader) typeString(t types.Type) string {
	return types.TypeString(t, types.RelativeTo(r.pkg.Types))
}

// structPointer returns the named struct t points to, or why it is not one.
func structPointer(t types.Type) (*types.Named, string) {
	p, ok := types.Unalias(t).(*types.Pointer)
	if !ok {
		return nil, "not a pointer to a named struct"
	}
	n, ok := types.Unalias(p.Elem()).(*types.Named)
	if !ok {
		return nil, "not a pointer to a named struct"
	}
	if _, ok := n.Underlying().(*types.Struct); !ok {
		return nil, "not a pointer to a struct"
	}
	if !n.Obj().Exported() {
		return nil, "which is unexported: the generated package refers to it"
	}
	return n, ""
}

// count is "1 thing" or "n things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func isContext(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "context" && n.Obj().Name() == "Context"
}

func isError(t types.Type) bool {
	return types.Identical(t, types.Universe.Lookup("error").Type())
}

// VerbOf is the verb of a method without a //fero:verb directive: its
// name in upper case, words separated by '_' (Login: LOGIN,
// ResetPassword: RESET_PASSWORD, GetURL: GET_URL, HTTPProxy: HTTP_PROXY).
func VerbOf(method string) string {
	rs := []rune(method)
	var b strings.Builder
	for i, c := range rs {
		if i > 0 && unicode.IsUpper(c) {
			prev := rs[i-1]
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			// A new word starts at an upper-case letter after a lower-case
			// one or a digit (resetPassword), or at the last capital of an
			// acronym followed by lower case (HTTPProxy).
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || unicode.IsUpper(prev) && nextLower {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToUpper(c))
	}
	return b.String()
}
