package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

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
// renames it over name and fsyncs the directory. A file of directMin bytes
// or more is written with O_DIRECT where the file system takes it.
func writeFileAtomic(dir, name string, parts ...[]byte) (err error) {
	path := filepath.Join(dir, name)
	tmp := path + tmpSuffix
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	var f *os.File
	if size >= directMin {
		f, err = writeDirect(tmp, size, parts)
	}
	if f == nil && err == nil {
		f, err = writeBuffered(tmp, parts)
	}
	if err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("storage: sync %s: %w", tmp, err)
	}
	if err = f.Close(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("storage: close %s: %w", tmp, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("storage: rename %s: %w", tmp, err)
	}
	return syncDir(dir)
}

// writeBuffered creates tmp and writes parts to it through the page cache.
func writeBuffered(tmp string, parts [][]byte) (*os.File, error) {
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", tmp, err)
	}
	for _, p := range parts {
		if _, err := f.Write(p); err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
			return nil, fmt.Errorf("storage: write %s: %w", tmp, err)
		}
	}
	return f, nil
}

// directMin is the least file writeFileAtomic writes with O_DIRECT. A
// server catching up writes a snapshot file per partition, megabytes each,
// that nothing reads until it restarts; through the page cache, the
// kernel's copy into newly allocated cache pages was most of a joining
// server's CPU on this project's VMs.
const directMin = 1 << 20

// directAlign is the alignment O_DIRECT asks of buffers, file offsets and
// lengths: 4 KiB covers the logical block size of the disks in use (512
// bytes or 4 KiB).
const directAlign = 4096

// directBufs holds aligned buffers for writeDirect, one per writer at a
// time (snapshots of several partitions are written side by side).
var directBufs sync.Pool

// writeDirect creates tmp with O_DIRECT and writes parts to it from an
// aligned buffer, padded to the alignment and then truncated to size. It
// returns nil, nil where the file system refuses O_DIRECT (tmpfs, for
// one), and the caller writes through the page cache instead.
func writeDirect(tmp string, size int, parts [][]byte) (*os.File, error) {
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_DIRECT, 0o644)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			return nil, nil
		}
		return nil, fmt.Errorf("storage: create %s: %w", tmp, err)
	}
	padded := (size + directAlign - 1) / directAlign * directAlign
	bp, _ := directBufs.Get().(*[]byte)
	if bp == nil || cap(*bp) < padded {
		b := alignedBuffer(padded)
		bp = &b
	}
	buf := (*bp)[:padded]
	n := 0
	for _, p := range parts {
		n += copy(buf[n:], p)
	}
	clear(buf[n:])
	_, err = f.Write(buf)
	if cap(*bp) <= maxKeptDirect {
		directBufs.Put(bp)
	}
	if err == nil && padded != size {
		err = f.Truncate(int64(size))
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		if errors.Is(err, unix.EINVAL) {
			return nil, nil // refused after all: write it through the cache
		}
		return nil, fmt.Errorf("storage: write %s: %w", tmp, err)
	}
	return f, nil
}

// maxKeptDirect bounds the aligned buffers kept for reuse.
const maxKeptDirect = 64 << 20

// alignedBuffer returns a buffer of n bytes whose first byte is aligned to
// directAlign.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+directAlign)
	off := directAlign - int(uintptrOf(b)%directAlign)
	if off == directAlign {
		off = 0
	}
	return b[off : off+n : off+n]
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

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
