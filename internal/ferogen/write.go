package ferogen

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Result says what Write did.
type Result struct {
	// Wrote lists the files written: the generated file when it changed,
	// the stub when it was absent.
	Wrote []string
	// Notes are about an existing stub: the methods its types lack, which
	// answer CodeUnimplemented through the embedded Unimplemented type.
	Notes ErrorList
}

// Write writes the generated file, if its content changed, and the stub,
// if its file is absent; an existing stub is never touched, only read for
// the methods it lacks.
func (o *Output) Write() (*Result, error) {
	res := &Result{}
	old, err := os.ReadFile(o.Generated.Path)
	if err != nil || !bytes.Equal(old, o.Generated.Content) {
		if err := os.MkdirAll(filepath.Dir(o.Generated.Path), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(o.Generated.Path, o.Generated.Content, 0o644); err != nil {
			return nil, err
		}
		res.Wrote = append(res.Wrote, o.Generated.Path)
	}
	if o.Stub == nil {
		return res, nil
	}
	if err := os.MkdirAll(filepath.Dir(o.Stub.Path), 0o755); err != nil {
		return nil, err
	}
	// O_EXCL: created only if absent, even against a concurrent run.
	f, err := os.OpenFile(o.Stub.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	switch {
	case errors.Is(err, fs.ErrExist):
		res.Notes, err = o.CheckStub()
		return res, err
	case err != nil:
		return nil, err
	}
	_, err = f.Write(o.Stub.Content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	res.Wrote = append(res.Wrote, o.Stub.Path)
	return res, nil
}

// CheckStub reads the stub's package (the Go files of its directory, with
// go/parser: a stub that does not compile yet is still read) and notes,
// at each stub type, the methods of its resource it does not declare.
func (o *Output) CheckStub() (ErrorList, error) {
	if o.Stub == nil {
		return nil, nil
	}
	fset := token.NewFileSet()
	files, err := parseDir(fset, filepath.Dir(o.Stub.Path), 0)
	if err != nil {
		return nil, err
	}
	declared := map[string]token.Pos{}
	methods := map[string][]string{} // type name to its methods
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						declared[ts.Name.Name] = ts.Name.Pos()
					}
				}
			case *ast.FuncDecl:
				if d.Recv != nil && len(d.Recv.List) == 1 {
					if recv := receiverName(d.Recv.List[0].Type); recv != "" {
						methods[recv] = append(methods[recv], d.Name.Name)
					}
				}
			}
		}
	}
	var notes ErrorList
	for _, st := range o.stubTypes {
		pos, ok := declared[st.name]
		if !ok {
			notes = append(notes, &Error{Pos: token.Position{Filename: o.Stub.Path},
				Msg: fmt.Sprintf("the stub's package no longer declares %s, which implemented %s: not checked", st.name, st.res.Iface)})
			continue
		}
		for _, m := range st.res.Methods {
			if !slices.Contains(methods[st.name], m.Name) {
				notes = append(notes, &Error{Pos: fset.Position(pos),
					Msg: fmt.Sprintf("%s lacks %s (verb %s of %s): it answers CodeUnimplemented until you add it", st.name, m.Name, m.Verb, st.res.Iface)})
			}
		}
	}
	return notes.sorted(), nil
}

// receiverName is T of a receiver T, *T or *T[P].
func receiverName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	switch x := e.(type) {
	case *ast.IndexExpr:
		e = x.X
	case *ast.IndexListExpr:
		e = x.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// parseDir parses a directory's non-test Go files, as far as they parse.
func parseDir(fset *token.FileSet, dir string, mode parser.Mode) ([]*ast.File, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		// A file being edited may not parse: what does parse is read.
		if f, _ := parser.ParseFile(fset, filepath.Join(dir, name), nil, mode|parser.SkipObjectResolution); f != nil {
			files = append(files, f)
		}
	}
	return files, nil
}

// dirPackageName is the package of the Go files already in dir, or a name
// made of dir's name.
func dirPackageName(dir string) string {
	files, err := parseDir(token.NewFileSet(), dir, parser.PackageClauseOnly)
	if err == nil && len(files) > 0 {
		return files[0].Name.Name
	}
	return packageName(filepath.Base(dir))
}
