package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The data directory's format version (docs/operations.md, "Upgrades"):
// the FORMAT file holds "fero-data N". A directory without one is format
// 1, as every directory written before the file existed is. A build opens
// the formats up to its own, upgrading an older directory in place (and
// writing its FORMAT) once it has read it; it refuses a newer one before
// touching anything, naming both formats, since it may misread what a
// newer build wrote.
const (
	// FormatVersion is the format this build writes.
	FormatVersion = 1
	formatFile    = "FORMAT"
	formatPrefix  = "fero-data "
)

// ErrNewerFormat is wrapped by the error of a store opened on a data
// directory a newer build wrote.
var ErrNewerFormat = errors.New("storage: data directory of a newer format")

// readFormat returns dir's format version: 1 if it has no FORMAT file.
func readFormat(dir string) (int, bool, error) {
	path := filepath.Join(dir, formatFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 1, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("storage: read %s: %w", path, err)
	}
	s, ok := strings.CutPrefix(strings.TrimSpace(string(b)), formatPrefix)
	v, err := strconv.Atoi(s)
	if !ok || err != nil || v < 1 {
		return 0, false, fmt.Errorf("storage: %s holds %q, not %q followed by a version: %w", path, b, formatPrefix, ErrCorrupt)
	}
	return v, true, nil
}

// checkFormat refuses dir if a newer build wrote it.
func checkFormat(dir string) (v int, written bool, err error) {
	if v, written, err = readFormat(dir); err != nil {
		return 0, false, err
	}
	if v > FormatVersion {
		return 0, false, fmt.Errorf("%s is in data format %d, written by a newer fero; this build reads formats 1 to %d: "+
			"run the newer build (a rollback past a format change is not supported), or move the directory away and "+
			"this server rebuilds its copy from its peers: %w", dir, v, FormatVersion, ErrNewerFormat)
	}
	return v, written, nil
}

// writeFormat records that dir is in this build's format, durably (a
// temporary file renamed over it, then the directory synced).
func writeFormat(dir string) error {
	path := filepath.Join(dir, formatFile)
	tmp := path + tmpSuffix
	if err := os.WriteFile(tmp, []byte(formatPrefix+strconv.Itoa(FormatVersion)+"\n"), 0o644); err != nil {
		return fmt.Errorf("storage: write %s: %w", tmp, err)
	}
	f, err := os.Open(tmp)
	if err == nil {
		err = errors.Join(f.Sync(), f.Close())
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("storage: write %s: %w", path, err)
	}
	return nil
}
