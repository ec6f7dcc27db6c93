package deps

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/fero-go/fero"

// TestOnlyWhatRunsANodeImportsTheServer (issue 44): the server
// (internal/node) is imported only by pkg/fero, which runs nodes; a
// process that only talks to a cluster (the dashboard's reports, backup,
// fero-hostile, pkg/fero's Dial and Remote) imports internal/protocol,
// and the protocol never imports the server.
func TestOnlyWhatRunsANodeImportsTheServer(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err)
	var importers []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if slices.Contains(f[1:], module+"/internal/node") {
			importers = append(importers, strings.TrimPrefix(f[0], module+"/"))
		}
		if f[0] == module+"/internal/protocol" {
			for _, imp := range f[1:] {
				require.False(t, strings.HasPrefix(imp, module+"/internal/node"), "internal/protocol imports %s", imp)
			}
		}
	}
	require.Equal(t, []string{"pkg/fero"}, importers, "the packages that import internal/node")

	// Within pkg/fero, the files of the thin client do not.
	for _, name := range []string{"remote.go", "stream.go", "backup.go", "wait.go", "errors.go", "retry.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "pkg", "fero", name), nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			require.NotEqual(t, module+"/internal/node", path, "pkg/fero/%s imports the server", name)
		}
	}
}
