// The reader of a loaded package's declarations: the directives, the
// resources (interfaces marked //fero:resource) and their methods, where
// problems are reported, and the type checks they share.

package ferogen

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

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
