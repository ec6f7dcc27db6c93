// Load: loading declaration packages (go/packages), and what it reads
// from them (Package, Resource, Method). The reader of their declarations
// is in reader.go, of a request's fields in fields.go; VerbOf in verb.go.

package ferogen

import (
	"context"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"

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
