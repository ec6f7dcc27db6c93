package fero

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCompileOptionKinds (issue 44): the compiler refuses an option
// given where it would do nothing. A module beside this one (a replace
// directive, this module's go.sum, offline: GOPROXY=off) builds a
// package that gives each kind where it belongs, and fails to build one
// that gives a server's option to Dial, a Dial-only option to Open, or
// a NodeOption as an Option, with a type error naming each option.
func TestCompileOptionKinds(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name, body string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	write("go.mod", "module example.com/kinds\n\ngo 1.26.0\n\nrequire github.com/fero-go/fero v0.0.0\n\nreplace github.com/fero-go/fero => "+root+"\n")
	write("go.sum", string(sum))
	write("ok/ok.go", `package ok

import (
	"context"
	"time"

	"github.com/fero-go/fero/pkg/fero"
)

func Use(ctx context.Context, token []byte) {
	_, _ = fero.Dial(ctx, "127.0.0.1:1", fero.WithToken(token))
	shared := []fero.Option{fero.WithToken(token), fero.WithConnectTimeout(time.Second)}
	dial := []fero.DialOption{fero.WithRetry(time.Millisecond, time.Second, 3)}
	node := []fero.NodeOption{fero.Client(), fero.WithAttach("127.0.0.1:1")}
	for _, o := range shared {
		dial, node = append(dial, o), append(node, o)
	}
	_, _ = fero.Dial(ctx, "127.0.0.1:1", dial...)
	_, _ = fero.Open(ctx, "r", node...)
	_, _ = fero.Open(ctx, "r", fero.WithDataDir("x"), fero.WithOptions(shared...), fero.Options(node...))
	_, _ = fero.Dial(ctx, "127.0.0.1:1", fero.WithOptions(shared...), fero.DialOptions(dial...))
}
`)
	write("bad/bad.go", `package bad

import (
	"context"
	"time"

	"github.com/fero-go/fero/pkg/fero"
)

func Use(ctx context.Context) {
	_, _ = fero.Dial(ctx, "127.0.0.1:1", fero.WithDataDir("x"))
	_, _ = fero.Dial(ctx, "127.0.0.1:1", fero.WithHandler(nil))
	_, _ = fero.Open(ctx, "r", fero.WithRetry(time.Millisecond, time.Second, 3))
}

var _ fero.Option = fero.Client()
`)
	// Built as this test was (with -race or not), its dependencies come
	// from the build cache: a second or two.
	args := []string{"build"}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	t.Logf("go %s ./ok ./bad", strings.Join(args, " "))
	build := func(pkg string) (string, error) {
		cmd := exec.Command(goBin, append(args, "./"+pkg)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := build("ok")
	if err != nil && strings.Contains(out, "GOPROXY=off") {
		t.Skipf("the module cache lacks a dependency, and the test stays offline:\n%s", out)
	}
	require.NoError(t, err, "each option where it belongs:\n%s", out)

	out, err = build("bad")
	require.Error(t, err, "a node's option to Dial, Dial's to Open")
	for _, want := range []string{
		`fero\.WithDataDir\("x"\) \(value of interface type fero\.NodeOption\) as fero\.DialOption value in argument to fero\.Dial`,
		`fero\.WithHandler\(nil\) \(value of interface type fero\.NodeOption\) as fero\.DialOption value in argument to fero\.Dial`,
		`fero\.WithRetry\(.*\) \(value of interface type fero\.DialOption\) as fero\.NodeOption value in argument to fero\.Open`,
		`fero\.Client\(\) \(value of interface type fero\.NodeOption\) as fero\.Option value`,
	} {
		require.Regexp(t, regexp.MustCompile(`bad/bad\.go:\d+:\d+: .*`+want), out)
	}
}
