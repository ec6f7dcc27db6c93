package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// syncDir makes the directory entries of dir (files created, renamed or
// removed in it) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("storage: open directory: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("storage: sync directory %s: %w", dir, err)
	}
	return nil
}

// writeFileAtomic writes name in dir so that a crash leaves either the
// old file or the whole new one: it writes a temporary file, fsyncs it,
// renames it over name and fsyncs the directory.
func writeFileAtomic(dir, name string, parts ...[]byte) (err error) {
	path := filepath.Join(dir, name)
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("storage: create %s: %w", tmp, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	for _, p := range parts {
		if _, err = f.Write(p); err != nil {
			return fmt.Errorf("storage: write %s: %w", tmp, err)
		}
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("storage: sync %s: %w", tmp, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("storage: close %s: %w", tmp, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("storage: rename %s: %w", tmp, err)
	}
	return syncDir(dir)
}

const tmpSuffix = ".tmp"

// lockDir takes an exclusive lock on dir's LOCK file, held until the file
// is closed, so two stores never share a directory.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", dir, ErrLocked)
		}
		return nil, fmt.Errorf("storage: lock %s: %w", path, err)
	}
	return f, nil
}
