// Package backup writes and reads fero's backup files: a resource's
// partitions, each as its owner held it at one commit, in one file that
// carries its own checksum (`fero backup`, `fero restore`; docs/operations.md,
// Backup and restore).
//
// A file is the magic "FERO-BACKUP\n", a format version byte, then
// records, each a uvarint length and a msgpack body: a Header, one
// protocol.BackupPart per partition, and an End; then the SHA-256 of every
// byte before it. A reader checks the whole file, its checksum included,
// before a restore writes anything (Verify), so a damaged file is refused
// whole.
package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/protocol"
)

// Magic starts every backup file.
const Magic = "FERO-BACKUP\n"

// Version is the file format this package writes and reads.
const Version = 1

// maxRecord bounds one record's length as read: a partition larger than
// this cannot have been sent in one message anyway.
const maxRecord = 1 << 31

// Header is a backup's first record.
type Header struct {
	Resource   string    `msgpack:"resource"`
	Partitions int       `msgpack:"partitions"`
	Created    time.Time `msgpack:"created"`
	// Via is the node the backup was taken through.
	Via string `msgpack:"via"`
}

// End is a backup's last record: what the reader must have seen.
type End struct {
	Parts int   `msgpack:"parts"`
	Keys  int   `msgpack:"keys"`
	Bytes int64 `msgpack:"bytes"` // of the snapshots
}

// ErrDamaged: the file is not a whole backup of this format (cut short,
// changed, or not a backup at all).
var ErrDamaged = errors.New("backup: damaged")

// Writer writes a backup file.
type Writer struct {
	bw  *bufio.Writer
	sum hash.Hash
	out io.Writer // bw and sum
	end End
	buf []byte
}

// NewWriter starts a backup on w with its header.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	sum := sha256.New()
	bk := &Writer{bw: bw, sum: sum, out: io.MultiWriter(bw, sum)}
	if _, err := io.WriteString(bk.out, Magic); err != nil {
		return nil, err
	}
	if _, err := bk.out.Write([]byte{Version}); err != nil {
		return nil, err
	}
	return bk, bk.record(h)
}

// Part adds one partition.
func (w *Writer) Part(p *protocol.BackupPart) error {
	w.end.Parts++
	w.end.Keys += p.Keys
	w.end.Bytes += int64(len(p.Snapshot))
	return w.record(p)
}

// Close writes the end record and the checksum, and flushes; it does not
// close the underlying writer.
func (w *Writer) Close() (End, error) {
	if err := w.record(w.end); err != nil {
		return w.end, err
	}
	if _, err := w.bw.Write(w.sum.Sum(nil)); err != nil {
		return w.end, err
	}
	return w.end, w.bw.Flush()
}

func (w *Writer) record(v any) error {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return err
	}
	w.buf = binary.AppendUvarint(w.buf[:0], uint64(len(b)))
	if _, err := w.out.Write(w.buf); err != nil {
		return err
	}
	_, err = w.out.Write(b)
	return err
}

// Read reads a backup from r, handing its header to header and each
// partition, in file order, to part (either may be nil), and checks the
// checksum at the end: an error wrapping ErrDamaged if it does not match,
// which the callbacks have by then seen parts of. Restore therefore
// verifies a file (Read with nil callbacks) before it reads it again to
// write.
func Read(r io.Reader, header func(Header) error, part func(*protocol.BackupPart) error) (Header, End, error) {
	sum := sha256.New()
	br := bufio.NewReaderSize(r, 1<<20)
	tr := &teeReader{r: br, h: sum}
	var h Header
	var end End
	magic := make([]byte, len(Magic)+1)
	if _, err := io.ReadFull(tr, magic); err != nil || string(magic[:len(Magic)]) != Magic {
		return h, end, fmt.Errorf("%w: not a fero backup file (it does not start with %q)", ErrDamaged, Magic[:len(Magic)-1])
	}
	if v := magic[len(Magic)]; v != Version {
		return h, end, fmt.Errorf("backup: format version %d; this fero reads version %d: restore it with the fero that wrote it, or a newer one", v, Version)
	}
	var rec bytes.Buffer
	next := func(what string, v any) error {
		n, err := binary.ReadUvarint(tr)
		if err != nil {
			return fmt.Errorf("%w: cut short before the %s", ErrDamaged, what)
		}
		if n > maxRecord {
			return fmt.Errorf("%w: a record of %d bytes", ErrDamaged, n)
		}
		rec.Reset()
		if _, err := io.CopyN(&rec, tr, int64(n)); err != nil {
			return fmt.Errorf("%w: cut short in the %s", ErrDamaged, what)
		}
		if err := msgpack.Unmarshal(rec.Bytes(), v); err != nil {
			return fmt.Errorf("%w: the %s does not decode: %v", ErrDamaged, what, err)
		}
		return nil
	}
	if err := next("header", &h); err != nil {
		return h, end, err
	}
	if h.Partitions < 1 {
		return h, end, fmt.Errorf("%w: a header of %d partitions", ErrDamaged, h.Partitions)
	}
	if header != nil {
		if err := header(h); err != nil {
			return h, end, err
		}
	}
	seen := make([]bool, h.Partitions)
	var got End
	for range h.Partitions {
		var p protocol.BackupPart
		if err := next(fmt.Sprintf("partition record %d", got.Parts), &p); err != nil {
			return h, end, err
		}
		if p.Partition < 0 || p.Partition >= h.Partitions || seen[p.Partition] {
			return h, end, fmt.Errorf("%w: partition %d out of range or twice", ErrDamaged, p.Partition)
		}
		seen[p.Partition] = true
		got.Parts++
		got.Keys += p.Keys
		got.Bytes += int64(len(p.Snapshot))
		if part != nil {
			if err := part(&p); err != nil {
				return h, end, err
			}
		}
	}
	if err := next("end record", &end); err != nil {
		return h, end, err
	}
	want := sum.Sum(nil)
	have := make([]byte, len(want))
	if _, err := io.ReadFull(br, have); err != nil {
		return h, end, fmt.Errorf("%w: cut short before its checksum", ErrDamaged)
	}
	if !bytes.Equal(want, have) {
		return h, end, fmt.Errorf("%w: its SHA-256 does not match its contents", ErrDamaged)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return h, end, fmt.Errorf("%w: bytes after its checksum", ErrDamaged)
	}
	if end != got {
		return h, end, fmt.Errorf("%w: its end record says %+v, its records hold %+v", ErrDamaged, end, got)
	}
	return h, end, nil
}

// teeReader hashes what it reads; a byte reader for ReadUvarint.
type teeReader struct {
	r *bufio.Reader
	h hash.Hash
	b [1]byte
}

func (t *teeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.h.Write(p[:n])
	return n, err
}

func (t *teeReader) ReadByte() (byte, error) {
	c, err := t.r.ReadByte()
	if err == nil {
		t.b[0] = c
		t.h.Write(t.b[:])
	}
	return c, err
}
