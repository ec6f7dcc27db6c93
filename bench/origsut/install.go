package origsut

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/fero-go/fero/bench"
)

const (
	// Package and Version name the original on npm.
	Package = "fero"
	Version = "1.7.1"
	// InstallEnv, set to anything but empty, lets this package's tests
	// (and fero-bench's) install the original with npm when it is not in
	// the cache yet. Unset, they skip instead, so that `make test` never
	// depends on npm's registry. fero-bench itself always installs.
	InstallEnv = "FERO_BENCH_NPM"
	// installTimeout bounds one npm install.
	installTimeout = 5 * time.Minute
)

// ErrUnavailable is wrapped by every error that says the original cannot
// run on this machine: Node or npm missing, or the install failed
// (offline, say). Tests skip on it.
var ErrUnavailable = errors.New("origsut: the original fero " + Version + " is unavailable")

// scripts are the Node programs that the package writes next to the
// installed original, so that require('fero') finds it.
//
//go:embed node/server.js node/client.js
var scripts embed.FS

const (
	serverScript = "server.js"
	clientScript = "client.js"
)

// installation is a ready copy of the original: where it is and the node
// that runs it.
type installation struct {
	node string // the node executable
	dir  string // holds node_modules/fero and the scripts
}

// Dir is where the original is installed: fero-bench/npm/fero@1.7.1 under
// the user's cache directory (os.UserCacheDir: $XDG_CACHE_HOME or
// ~/.cache on Linux), outside any repository, so that every run after the
// first finds it there.
func Dir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%w: no cache directory to install it in: %w", ErrUnavailable, err)
	}
	return filepath.Join(cache, "fero-bench", "npm", Package+"@"+Version), nil
}

// Installed reports whether the original is in the cache already, so that
// preparing it needs no registry.
func Installed() bool {
	dir, err := Dir()
	return err == nil && installedIn(dir)
}

// installedIn reports whether dir holds the pinned version.
func installedIn(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", Package, "package.json"))
	if err != nil {
		return false
	}
	var pkg struct {
		Version string `json:"version"`
	}
	return json.Unmarshal(b, &pkg) == nil && pkg.Version == Version
}

// prepare finds node, installs the original into the cache unless it is
// there already, and writes the scripts beside it.
func prepare(ctx context.Context) (installation, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return installation{}, fmt.Errorf("%w: node not found (install Node.js with npm, e.g. apt-get install nodejs npm): %w", ErrUnavailable, err)
	}
	dir, err := Dir()
	if err != nil {
		return installation{}, err
	}
	if !installedIn(dir) {
		if err := install(ctx, dir); err != nil {
			return installation{}, err
		}
	}
	for _, name := range []string{serverScript, clientScript} {
		b, err := scripts.ReadFile("node/" + name)
		if err != nil {
			return installation{}, fmt.Errorf("origsut: embedded %s: %w", name, err)
		}
		if err := writeIfChanged(filepath.Join(dir, name), b); err != nil {
			return installation{}, err
		}
	}
	return installation{node: node, dir: dir}, nil
}

// install runs npm install fero@1.7.1 in a fresh directory beside dir and
// renames it to dir once complete, so that a process never sees half an
// install, and two installing at once both end with one good copy.
// Install scripts are not run: the original needs none.
func install(ctx context.Context, dir string) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("%w: not installed in %s, and npm not found to install it (install Node.js with npm, e.g. apt-get install nodejs npm): %w", ErrUnavailable, dir, err)
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	tmp, err := os.MkdirTemp(parent, filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	manifest := []byte(`{"name":"fero-bench-original","private":true,"description":"the original fero, for fero-bench (bench/origsut)"}` + "\n")
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), manifest, 0o644); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	ctx, cancel := context.WithTimeout(ctx, installTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--ignore-scripts",
		"--omit=dev", "--prefer-offline", "--fetch-retries=1", Package+"@"+Version)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
	out := bench.NewTail(tailSize)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: npm install %s@%s failed (offline? npm's registry unreachable?): %w; output:\n%s",
			ErrUnavailable, Package, Version, err, out)
	}
	if !installedIn(tmp) {
		return fmt.Errorf("%w: npm install %s@%s left no node_modules/%s at version %s; output:\n%s",
			ErrUnavailable, Package, Version, Package, Version, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if installedIn(dir) {
			return nil // another process installed it meanwhile
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// writeIfChanged writes b to path unless it holds b already, through a
// temporary file and a rename, so that a Node process starting meanwhile
// reads the old script or the new one, never part of one.
func writeIfChanged(path string, b []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("origsut: write %s: %w", path, err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("origsut: write %s: %w", path, err)
	}
	return nil
}
