package deps

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDownstreamAddsOTLPExporter (issue 43): a module that requires fero
// and adds the OpenTelemetry OTLP exporter over gRPC tidies and builds.
// Before go.mod pinned a genproto from after its split (deps.go), its
// `go mod tidy` failed: "ambiguous import: found package
// google.golang.org/genproto/googleapis/api/annotations in multiple
// modules". Needs the Go module proxy (or a module cache holding the
// exporter); skipped under -short.
func TestDownstreamAddsOTLPExporter(t *testing.T) {
	if testing.Short() {
		t.Skip("tidies a module that fetches the OTLP exporter; run without -short (make test-long)")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	write("go.mod", "module example.com/svc\n\ngo 1.25\n\nrequire github.com/fero-go/fero v0.0.0\n\nreplace github.com/fero-go/fero => "+root+"\n")
	write("main.go", `package main

import (
	"context"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"

	"github.com/fero-go/fero/pkg/fero"
)

func main() {
	_, _ = otlptracegrpc.New(context.Background())
	_ = fero.Majority
}
`)
	for _, args := range [][]string{{"mod", "tidy"}, {"build", "./..."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	}
}
