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
	"unicode/utf8"

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
	// imports maps the import path of the package, and of every package it
	// depends on, to the paths it imports, sorted: where the generated
	// package may go without an import cycle.
	imports map[string][]string
}

// Resource is one interface marked //fero:resource.
type Resource struct {
	// Name is the resource's name, which fero.Open takes.
	Name string
	// Iface is the interface's name; Type the interface.
	Iface string
	Type  *types.Named
	// VerbPrefix (the directive's verbprefix=) starts every verb derived
	// from a method's name; a //fero:verb verb is used as written.
	VerbPrefix string
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
	// Item is the struct a streaming method sends (its third parameter
	// is func(*Item) error); nil for a unary method.
	Item *types.Named
	// Key is the name of Req's field tagged `fero:"key"`, declared in Req
	// or promoted from a struct Req embeds; KeyString says its type is
	// string itself rather than a named string type.
	Key       string
	KeyString bool
	// KeyVia are the embedded pointers the key is promoted through,
	// outermost first, each a field name that selects it on Req: generated
	// code checks them for nil before it reads the key.
	KeyVia []string
	// Concurrent (the directive //fero:concurrent): the verb only reads,
	// and runs without its key's turn (fero.Concurrent). Never set for a
	// streaming method, which takes no turn anyway.
	Concurrent bool
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
	// The import graph, from the go command alone: loading every
	// dependency's syntax and types with the packages' would be slow.
	graph, err := packages.Load(&packages.Config{Context: ctx, Mode: packages.NeedName | packages.NeedImports | packages.NeedDeps, Dir: patterns[0]}, patterns...)
	if err != nil {
		return nil, fmt.Errorf("ferogen: load %s: %w", strings.Join(dirs, " "), err)
	}
	imports := map[string][]string{}
	packages.Visit(graph, nil, func(p *packages.Package) {
		for _, q := range p.Imports {
			imports[p.PkgPath] = append(imports[p.PkgPath], q.PkgPath)
		}
		slices.Sort(imports[p.PkgPath])
	})
	byDir := make(map[string]*packages.Package, len(pkgs))
	for _, p := range pkgs {
		byDir[p.Dir] = p
	}
	for i, p := range out {
		if p.Err != nil {
			continue
		}
		if lp := byDir[p.Dir]; lp != nil {
			out[i] = read(fset, cfg.Dir, lp)
			out[i].imports = imports
		} else {
			p.Err = ErrorList{{Pos: token.Position{Filename: p.Dir}, Msg: "the go command found no package here"}}
		}
	}
	return out, nil
}

// read reads a loaded package's declarations; dir is where the go
// command ran, which the file names of its errors may be relative to.
func read(fset *token.FileSet, dir string, p *packages.Package) *Package {
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
				pos := parsePos(e.Pos)
				if pos.Filename != "" && !filepath.IsAbs(pos.Filename) {
					pos.Filename = filepath.Join(dir, pos.Filename)
				}
				l = append(l, &Error{Pos: pos, Msg: e.Msg})
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
	resourceDirective   = "//fero:resource"
	verbDirective       = "//fero:verb"
	concurrentDirective = "//fero:concurrent"
)

// spacedRE matches a directive written with space after the slashes
// ("// fero:resource"), which Go would take for prose. "// fero: …", with
// a space after the colon, is prose.
var spacedRE = regexp.MustCompile(`^//[ \t]+fero:[^ \t]+`)

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
				if c, args := r.directive(doc, resourceDirective); c != nil {
					name, prefix, prefixOK := r.resourceArgs(c, args)
					r.resource(ts, c, name, prefix, prefixOK)
				}
			}
		}
	}
	// Every directive left over is misplaced, unknown or misspelled.
	for _, f := range r.pkg.Syntax {
		for _, g := range f.Comments {
			for _, c := range g.List {
				if m := spacedRE.FindString(c.Text); m != "" {
					r.add(c.Pos(), "misspelled directive %q: a directive has no space after the slashes: //%s", m, strings.TrimLeft(m, "/ \t"))
					continue
				}
				if !strings.HasPrefix(c.Text, "//fero:") || r.used[c] {
					continue
				}
				switch name, _, _ := strings.Cut(c.Text, " "); name {
				case resourceDirective:
					r.add(c.Pos(), "misplaced %s: it belongs in the doc comment of an interface type", resourceDirective)
				case verbDirective, concurrentDirective:
					r.add(c.Pos(), "misplaced %s: it belongs in the doc comment of a method of a %s interface", name, resourceDirective)
				default:
					r.add(c.Pos(), "unknown directive %s (ferogen knows %s, %s and %s)", name, resourceDirective, verbDirective, concurrentDirective)
				}
			}
		}
	}
}

// directive finds the directive in doc and returns it with the words of
// its argument. A second directive of the kind is an error.
func (r *reader) directive(doc *ast.CommentGroup, name string) (*ast.Comment, []arg) {
	if doc == nil {
		return nil, nil
	}
	var found *ast.Comment
	for _, c := range doc.List {
		if d, _, _ := strings.Cut(c.Text, " "); d != name {
			continue
		}
		r.used[c] = true
		if found != nil {
			r.add(c.Pos(), "second %s (the first is at %s)", name, r.where(found.Pos()))
			continue
		}
		found = c
	}
	if found == nil {
		return nil, nil
	}
	return found, args(found)[1:]
}

// arg is a word of a directive, and where it starts: an error about an
// option points at the option.
type arg struct {
	text string
	pos  token.Pos
}

// args splits a directive into its words, the directive's name first.
func args(c *ast.Comment) []arg {
	var out []arg
	off := 0
	for _, w := range strings.Fields(c.Text) {
		i := off + strings.Index(c.Text[off:], w)
		out = append(out, arg{text: w, pos: c.Pos() + token.Pos(i)})
		off = i + len(w)
	}
	return out
}

// verbPrefixOption is the option of the resource directive that gives
// its verb prefix.
const verbPrefixOption = "verbprefix="

// resourceArgs reads the words of a resource directive: the resource's
// name, then options, key=value. prefixOK is false when the verb prefix
// is bad: the verbs it would start are then unknown.
func (r *reader) resourceArgs(c *ast.Comment, args []arg) (name, prefix string, prefixOK bool) {
	const form = "(the form is " + resourceDirective + " <name> [" + verbPrefixOption + "PREFIX_])"
	prefixOK = true
	switch {
	case len(args) == 0:
		r.add(c.Pos(), "%s takes the resource's name: %q %s", resourceDirective, c.Text, form)
		return "", "", true
	case strings.HasPrefix(args[0].text, verbPrefixOption):
		r.add(args[0].pos, "missing resource name before %s %s", args[0].text, form)
	default:
		name, args = args[0].text, args[1:]
	}
	var seen *arg
	for _, a := range args {
		key, value, isOption := strings.Cut(a.text, "=")
		switch {
		case !isOption:
			r.add(a.pos, "%s takes one name, then options key=value: %q is neither %s", resourceDirective, a.text, form)
			continue
		case key+"=" != verbPrefixOption:
			r.add(a.pos, "unknown option %s= of %s: the only one is %s", key, resourceDirective, verbPrefixOption)
			continue
		case seen != nil:
			r.add(a.pos, "second %s (the first is at %s)", verbPrefixOption, r.where(seen.pos))
			continue
		}
		seen = &a
		if why := badVerbPrefix(value); why != "" {
			r.add(a.pos, "bad verb prefix %q: %s", value, why)
			prefixOK = false
			continue
		}
		prefix = value
	}
	return name, prefix, prefixOK
}

// A verb prefix is ASCII upper case, as the verbs it starts are: on the
// wire, STOCK_GET and Stock_GET would be two verbs.
var verbPrefixRE = regexp.MustCompile(`^[A-Z0-9_]+$`)

const verbPrefixChars = "a verb prefix is ASCII upper-case letters, digits and _"

// badVerbPrefix returns why p is not a verb prefix, or "".
func badVerbPrefix(p string) string {
	switch {
	case p == "":
		return "give one, as in " + verbPrefixOption + "STOCK_, or leave the option out"
	case verbPrefixRE.MatchString(p):
		return ""
	case verbPrefixRE.MatchString(strings.ToUpper(p)):
		return verbPrefixChars + "; write " + verbPrefixOption + strings.ToUpper(p)
	default:
		return verbPrefixChars
	}
}

// resource reads one interface marked as a resource, with the name and
// verb prefix its directive c gives (see resourceArgs).
func (r *reader) resource(ts *ast.TypeSpec, c *ast.Comment, name, prefix string, prefixOK bool) {
	obj := r.pkg.TypesInfo.Defs[ts.Name].(*types.TypeName)
	if ts.Assign.IsValid() {
		// An alias has no declaration of its own for the verbs' directives
		// and positions: the interface it names has, and is marked instead.
		if n, ok := types.Unalias(obj.Type()).(*types.Named); ok && types.IsInterface(n) {
			r.add(ts.Name.Pos(), "%s marks %s, an alias of %s: mark the declaration of %s itself",
				resourceDirective, ts.Name.Name, r.typeString(n), r.typeString(n))
		} else if types.IsInterface(obj.Type()) {
			r.add(ts.Name.Pos(), "%s marks %s, a type alias: declare the resource as a defined interface type, type %s interface {…}, without =",
				resourceDirective, ts.Name.Name, ts.Name.Name)
		} else {
			r.add(ts.Name.Pos(), "%s marks %s, which is not an interface", resourceDirective, ts.Name.Name)
		}
		return
	}
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
	res := &Resource{Name: name, Iface: ts.Name.Name, Type: obj.Type().(*types.Named), VerbPrefix: prefix}
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
		if c != nil && len(verb) != 1 {
			r.add(c.Pos(), "%s takes one word, the name: %q", verbDirective, c.Text)
		}
		cc, ccArgs := r.directive(f.Doc, concurrentDirective)
		if cc != nil && len(ccArgs) != 0 {
			r.add(ccArgs[0].pos, "%s takes no argument: %q", concurrentDirective, cc.Text)
		}
		if m == nil {
			continue
		}
		switch {
		case cc == nil:
		case m.Item != nil:
			// Refused rather than ignored: it would say something about
			// the verb that the directive does not do.
			r.add(cc.Pos(), "%s on %s.%s, a streaming verb: a stream never takes its key's turn, so it runs concurrently already; remove the directive", concurrentDirective, res.Iface, m.Name)
		default:
			m.Concurrent = true
		}
		vpos := name.Pos()
		switch {
		case c != nil && len(verb) != 1:
			continue // reported above
		case c != nil:
			m.Verb, vpos = verb[0].text, c.Pos()
		case !prefixOK:
			continue // the prefix, reported, would start the verb
		default:
			m.Verb = prefix + m.Verb
		}
		switch {
		case !validVerb(m.Verb) && c == nil:
			r.add(vpos, "the verb of %s.%s would be %s, which is not ASCII: %s; name it with %s", res.Iface, m.Name, m.Verb, verbChars, verbDirective)
			continue
		case !validVerb(m.Verb):
			r.add(vpos, "bad verb %s of %s.%s: %s", m.Verb, res.Iface, m.Name, verbChars)
			continue
		case builtin[m.Verb]:
			r.add(vpos, "verb %s of %s.%s is one of fero's built-in verbs (ADD, UPDATE, REMOVE, GET): %s", m.Verb, res.Iface, m.Name, builtinFix(res, m, c != nil))
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

// builtinFix says how to keep a method's verb off the built-in one it is.
// A verb derived from the method's name can take a verb prefix, or a
// directive's verb; the suggestions are made of the interface's name, by
// the rule of VerbOf.
func builtinFix(res *Resource, m *Method, directive bool) string {
	switch {
	case directive:
		return "name it otherwise with " + verbDirective
	case res.VerbPrefix != "":
		return fmt.Sprintf("change the verb prefix %s, or name this verb with %s", res.VerbPrefix, verbDirective)
	}
	prefix := VerbOf(res.Iface) + "_"
	if badVerbPrefix(prefix) != "" {
		prefix = "PREFIX_" // the interface's name is not ASCII
	}
	name := res.Name
	if name == "" {
		name = "<name>"
	}
	return fmt.Sprintf("keep the method name and give the resource a verb prefix (%s %s %s%s), or name this verb with %s %s%s",
		resourceDirective, name, verbPrefixOption, prefix, verbDirective, prefix, m.Verb)
}

// builtin are fero's own verbs, which a typed method must not take over:
// the built-in GET, say, is what every reader of the resource expects.
// (Spelled out rather than taken from pkg/fero, which the generator does
// not link; a test checks they agree.)
var builtin = map[string]bool{"ADD": true, "UPDATE": true, "REMOVE": true, "GET": true}

// A verb is ASCII only: it is compared byte for byte on the wire, where
// Unicode's several encodings of one letter would be different verbs, and
// the upper case of a non-ASCII letter depends on the Unicode tables of the
// Go release that ran ferogen.
var verbRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]+$`)

const verbChars = "a verb is ASCII letters, digits and _ . : / -"

func validVerb(v string) bool { return verbRE.MatchString(v) }

const wantSignature = "func(context.Context, *Request) (*Reply, error), func(context.Context, *Request) error, or, streaming, func(context.Context, *Request, func(*Item) error) error"

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
	if params.Len() != 2 && params.Len() != 3 {
		return wrong(fmt.Sprintf("it takes %s, not 2 (or 3 for a stream)", count(params.Len(), "parameter")))
	}
	if !isContext(params.At(0).Type()) {
		return wrong(fmt.Sprintf("its first parameter is %s, not context.Context", r.typeString(params.At(0).Type())))
	}
	m := &Method{Name: id.Name, Verb: VerbOf(id.Name), Pos: r.fset.Position(id.Pos())}
	var why string
	if m.Req, why = structPointer(params.At(1).Type()); m.Req == nil {
		return wrong(fmt.Sprintf("its request is %s, %s", r.typeString(params.At(1).Type()), why))
	}
	if params.Len() == 3 {
		// A streaming verb: send delivers each item.
		if m.Item, why = sendFunc(params.At(2).Type()); m.Item == nil {
			return wrong(fmt.Sprintf("its third parameter is %s, %s", r.typeString(params.At(2).Type()), why))
		}
		if results.Len() != 1 || !isError(results.At(0).Type()) {
			return wrong("a streaming method returns only an error")
		}
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
	if m.Item != nil {
		ok = r.encodable(m.Item, id) && ok
	}
	if !ok {
		return nil
	}
	return m
}

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

// at is pos when it is in the declaration package's files (a field or type
// declared there), else the method's position (none, with id nil): an
// error about a type from another package points at its use.
func (r *reader) at(pos token.Pos, id *ast.Ident) token.Pos {
	if pos.IsValid() {
		file := r.fset.Position(pos).Filename
		if slices.Contains(r.pkg.GoFiles, file) {
			return pos
		}
	}
	if id == nil {
		return token.NoPos
	}
	return id.Pos()
}

// atPath is the position of the deepest field of path declared in the
// declaration package, else the method's.
func (r *reader) atPath(path []*types.Var, id *ast.Ident) token.Pos {
	for i := len(path) - 1; i >= 0; i-- {
		if pos := r.at(path[i].Pos(), nil); pos.IsValid() {
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

// sendFunc returns the item struct of a streaming method's send
// parameter, func(*Item) error.
func sendFunc(t types.Type) (*types.Named, string) {
	sig, ok := types.Unalias(t).(*types.Signature)
	if !ok || sig.Variadic() || sig.Params().Len() != 1 || sig.Results().Len() != 1 || !isError(sig.Results().At(0).Type()) {
		return nil, "not func(*Item) error"
	}
	n, why := structPointer(sig.Params().At(0).Type())
	if n == nil {
		return nil, "whose item is " + why
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
// name in upper case, words separated by '_'. Verbs go on the wire, so
// this rule, and its lists of words, never change; docs/ferogen.md states
// it, and TestVerbOf holds examples.
//
// An underscore is kept, and ends a word. Otherwise a word starts at an
// upper-case letter after a lower-case one (GetUser: GET_USER), and at the
// last capital of a run of them followed by lower case (HTTPProxy:
// HTTP_PROXY), except for a lone s after the run, which is its plural
// (GetURLs: GET_URLS, IDsByName: IDS_BY_NAME). A run that is wholly
// initialisms of the list, taken longest first from the left, is split
// into them (MyHTTPAPI: MY_HTTP_API). A mixed-case word of the list is
// one word where a word starts (OAuth2Token: OAUTH2_TOKEN). Digits end
// the word they follow (V2Login: V2_LOGIN). A name not in ASCII makes a
// verb that is not, which the reader refuses.
func VerbOf(method string) string {
	parts := strings.Split(method, "_")
	for i, p := range parts {
		parts[i] = strings.ToUpper(strings.Join(words(p), "_"))
	}
	return strings.Join(parts, "_")
}

// initialisms are golint's list of common initialisms, as of its last
// release; mixedCase the words, written in mixed case, that are one word
// all the same. Both are frozen: see VerbOf.
var (
	initialisms = []string{"ACL", "API", "ASCII", "CPU", "CSS", "DNS", "EOF", "GUID", "HTML", "HTTP", "HTTPS",
		"ID", "IP", "JSON", "LHS", "QPS", "RAM", "RHS", "RPC", "SLA", "SMTP", "SQL", "SSH", "TCP", "TLS", "TTL",
		"UDP", "UI", "UID", "UUID", "URI", "URL", "UTF8", "VM", "XML", "XMPP", "XSRF", "XSS"}
	mixedCase = []string{"OAuth", "IPv4", "IPv6"}
)

// words splits a name without underscores into its words (see VerbOf).
// Letters other than ASCII count as lower case.
func words(s string) []string {
	var out []string
	var digits string // leading digits, for the word after them
	for i := 0; i < len(s); {
		var w []string // the word, or the words of a run of capitals
		switch j := i + upperRun(s[i:]); {
		case isDigit(s[i]):
			j = i + digitRun(s[i:])
			digits, i = s[i:j], j
			continue
		case mixedAt(s[i:]) != "":
			w = []string{mixedAt(s[i:])}
		case j > i+1 && j < len(s) && s[j] == 's' && (j+1 == len(s) || !isLower(s[j+1])):
			w = splitRun(s[i:j]) // the run's plural
			w[len(w)-1] += "s"
		case j > i+1 && j < len(s) && isLower(s[j]):
			w = splitRun(s[i : j-1]) // the last capital starts the next word
		case j > i+1 || j == len(s) || !isLower(s[j]):
			w = splitRun(s[i:j])
		default: // a capital or none, then lower case
			j = max(j, i+1)
			for j < len(s) && isLower(s[j]) {
				j++
			}
			w = []string{s[i:j]}
		}
		for _, x := range w {
			i += len(x)
		}
		n := digitRun(s[i:])
		w[0] = digits + w[0]
		w[len(w)-1] += s[i : i+n]
		digits, i = "", i+n
		out = append(out, w...)
	}
	if digits != "" {
		out = append(out, digits)
	}
	return out
}

// splitRun splits a run of capitals into the initialisms it is made of,
// taking the longest at each step, or returns it whole if that fails.
func splitRun(run string) []string {
	var out []string
	for rest := run; rest != ""; {
		longest := ""
		for _, in := range initialisms {
			if len(in) > len(longest) && strings.HasPrefix(rest, in) {
				longest = in
			}
		}
		if longest == "" {
			return []string{run}
		}
		out = append(out, longest)
		rest = rest[len(longest):]
	}
	return out
}

// mixedAt returns the word of mixedCase s starts with, if no lower-case
// letter follows it.
func mixedAt(s string) string {
	for _, w := range mixedCase {
		if strings.HasPrefix(s, w) && (len(s) == len(w) || !isLower(s[len(w)])) {
			return w
		}
	}
	return ""
}

func upperRun(s string) int {
	n := 0
	for n < len(s) && 'A' <= s[n] && s[n] <= 'Z' {
		n++
	}
	return n
}

func digitRun(s string) int {
	n := 0
	for n < len(s) && isDigit(s[n]) {
		n++
	}
	return n
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isLower reports a lower-case ASCII letter, or a byte of a letter
// beyond ASCII.
func isLower(c byte) bool { return 'a' <= c && c <= 'z' || c >= utf8.RuneSelf }
