package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runFerogen runs the command and returns its exit code and output.
func runFerogen(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code = run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHelp(t *testing.T) {
	code, out, _ := runFerogen(t, "--help")
	assert.Equal(t, 0, code)
	for _, s := range []string{"//fero:resource users", "//fero:verb SIGNOUT", "//fero:resource users verbprefix=USERS_", "`msgpack:\"email\" fero:\"key\"`",
		"Register<Iface>(impl) fero.NodeOption", "--out", "--stub", "file:line:col"} {
		assert.Contains(t, out, s)
	}
}

func TestUsage(t *testing.T) {
	code, _, errOut := runFerogen(t, "--nope")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "unknown flag: --nope")
	code, _, errOut = runFerogen(t, "a", "b")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "one directory at most")
}

// TestBadDeclaration: one file:line:col line per problem, exit status 1,
// and nothing written.
func TestBadDeclaration(t *testing.T) {
	dir := filepath.Join("..", "..", "internal", "ferogen", "testdata", "bad", "unsupported")
	code, out, errOut := runFerogen(t, dir)
	assert.Equal(t, exitFailure, code)
	assert.Empty(t, out)
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	assert.Len(t, lines, 8, errOut)
	for _, l := range lines {
		assert.Regexp(t, `^\S+/decl\.go:\d+:\d+: \S`, l)
	}
	assert.Contains(t, errOut, "decl.go:15:2: unsupported type: key field IntKey.ID is int")
	assert.NoDirExists(t, filepath.Join(dir, "unsupportedfero"))
	assert.NoDirExists(t, filepath.Join(dir, "unsupportedimpl"))
}

// TestGenerate runs ferogen on a module of its own, as go generate does:
// the first run writes the generated package and the stub, the second
// changes nothing, and after the declaration gains a verb the generated
// file follows while the stub stays as it was and ferogen names the
// method it lacks.
func TestGenerate(t *testing.T) {
	mod := t.TempDir()
	write(t, filepath.Join(mod, "go.mod"), "module example.com/shop\n\ngo 1.26\n")
	decl := `package users

import "context"

//fero:resource users
type Users interface {
	Login(ctx context.Context, req *LoginRequest) (*LoginReply, error)
}

type LoginRequest struct {
	Email string ` + "`msgpack:\"email\" fero:\"key\"`" + `
}

type LoginReply struct {
	Token string ` + "`msgpack:\"token\"`" + `
}
`
	dir := filepath.Join(mod, "users")
	write(t, filepath.Join(dir, "users.go"), decl)
	gen := filepath.Join(dir, "usersfero", "users.fero.go")
	stub := filepath.Join(dir, "usersimpl", "users_impl.go")

	code, _, errOut := runFerogen(t, dir)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, errOut, "wrote the stub")
	first := read(t, gen)
	assert.Regexp(t, regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.\n`), first)
	assert.Contains(t, first, `"example.com/shop/users"`)
	stubText := read(t, stub)
	assert.Contains(t, stubText, "usersfero.UnimplementedUsers")

	code, _, errOut = runFerogen(t, dir)
	require.Equal(t, 0, code, errOut)
	assert.Empty(t, errOut)
	assert.Equal(t, first, read(t, gen), "byte for byte the same")

	write(t, filepath.Join(dir, "users.go"), strings.Replace(decl,
		"\tLogin(", "\tRefresh(ctx context.Context, req *LoginRequest) (*LoginReply, error)\n\tLogin(", 1))
	code, _, errOut = runFerogen(t, "--stub", "usersimpl/users_impl.go", dir)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, read(t, gen), "UsersRefreshVerb")
	assert.Equal(t, stubText, read(t, stub), "the stub is never rewritten")
	assert.Regexp(t, `users_impl\.go:\d+:\d+: UsersService lacks Refresh \(verb REFRESH of Users\)`, errOut)

	// --stub "" writes none.
	require.NoError(t, os.RemoveAll(filepath.Dir(stub)))
	code, _, errOut = runFerogen(t, "--stub", "", "--out", "gen", dir)
	require.Equal(t, 0, code, errOut)
	assert.NoFileExists(t, stub)
	assert.FileExists(t, filepath.Join(dir, "gen", "users.fero.go"))
}

func write(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// TestErrorPaths: file names in errors are relative to the current
// directory when that is where the user ran ferogen, as go vet prints
// them, and absolute when go generate runs it: go generate runs it in the
// package's directory, not the user's.
func TestErrorPaths(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	const pkg = "internal/ferogen/testdata/bad/unsupported"
	const line = "decl.go:15:2: unsupported type: key field IntKey.ID is int"

	t.Run("ferogen", func(t *testing.T) {
		t.Chdir(root)
		code, _, errOut := runFerogen(t, "./"+pkg)
		assert.Equal(t, exitFailure, code)
		assert.Contains(t, "\n"+errOut, "\n"+pkg+"/"+line)
	})
	t.Run("go generate", func(t *testing.T) {
		t.Chdir(filepath.Join(root, pkg))
		t.Setenv("GOFILE", "decl.go")
		t.Setenv("GOPACKAGE", "unsupported")
		code, _, errOut := runFerogen(t)
		assert.Equal(t, exitFailure, code)
		assert.Contains(t, "\n"+errOut, "\n"+filepath.Join(root, pkg, line))
	})
}
