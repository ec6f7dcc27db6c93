package ferogen

import (
	"cmp"
	"fmt"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Error is one problem with a declaration (or one note about a stub),
// at a position in a file: it prints as "file:line:col: message", the
// form editors and the go tool use.
type Error struct {
	Pos token.Position
	Msg string
}

func (e *Error) Error() string {
	if p := e.Pos.String(); p != "-" {
		return p + ": " + e.Msg
	}
	return e.Msg
}

// ErrorList is every problem found in one package, in file and line
// order. It is an error with one line per problem.
type ErrorList []*Error

func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Relative returns the list with file names made relative to base where
// that is shorter, as the go command prints them for the directory it
// runs in.
func (l ErrorList) Relative(base string) ErrorList {
	out := make(ErrorList, len(l))
	for i, e := range l {
		r := *e
		if rel, err := filepath.Rel(base, e.Pos.Filename); err == nil && filepath.IsAbs(e.Pos.Filename) && len(rel) < len(e.Pos.Filename) {
			r.Pos.Filename = rel
		}
		out[i] = &r
	}
	return out
}

// sorted sorts the list by position and drops repeats (a request type
// shared by two methods is reported once).
func (l ErrorList) sorted() ErrorList {
	slices.SortStableFunc(l, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(a.Pos.Filename, b.Pos.Filename),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Column, b.Pos.Column),
		)
	})
	return slices.CompactFunc(l, func(a, b *Error) bool { return *a == *b })
}

// errs collects a package's errors.
type errs struct {
	fset *token.FileSet
	list ErrorList
}

func (e *errs) add(pos token.Pos, format string, args ...any) {
	e.list = append(e.list, &Error{Pos: e.fset.Position(pos), Msg: fmt.Sprintf(format, args...)})
}

// err returns the sorted list, or nil when it is empty.
func (e *errs) err() error {
	if len(e.list) == 0 {
		return nil
	}
	return e.list.sorted()
}

// parsePos reads the "file:line:col" (or "file:line", or "file") that
// go/packages gives an error's position.
func parsePos(s string) token.Position {
	var p token.Position
	rest := s
	nums := []*int{&p.Column, &p.Line}
	// The numbers are at the end; a file name may hold ':' itself.
	for i := 0; i < 2; i++ {
		j := strings.LastIndexByte(rest, ':')
		if j < 0 {
			break
		}
		n, err := strconv.Atoi(rest[j+1:])
		if err != nil {
			break
		}
		*nums[i] = n
		rest = rest[:j]
	}
	if p.Line == 0 && p.Column != 0 { // only one number: it was the line
		p.Line, p.Column = p.Column, 0
	}
	if rest != "-" {
		p.Filename = rest
	}
	return p
}
