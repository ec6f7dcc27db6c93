package wire

import (
	"bytes"
	"io"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func benchRecord(b *testing.B) []byte {
	val, err := msgpack.Marshal(map[string]any{"name": "ada lovelace", "email": "ada@example.com", "logins": 42, "tags": []string{"a", "b"}})
	if err != nil {
		b.Fatal(err)
	}
	return AppendRecord(nil, RecordHeader{Type: RecordUpdate, Partition: 17, Epoch: 3, Offset: 123456}, "users/ada", val)
}

// BenchmarkRecordRoute reads what routing, acking and storing need
// (partition, offset, key) and leaves the value untouched.
func BenchmarkRecordRoute(b *testing.B) {
	rec := benchRecord(b)
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	var r Record
	var sum uint64
	for b.Loop() {
		if _, err := ParseRecord(rec, &r); err != nil {
			b.Fatal(err)
		}
		sum += uint64(r.Partition) + r.Offset + uint64(len(r.Key))
	}
	_ = sum
}

// BenchmarkRecordRouteAndDecode is the same plus decoding the value: the
// cost that BenchmarkRecordRoute avoids.
func BenchmarkRecordRouteAndDecode(b *testing.B) {
	rec := benchRecord(b)
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	var r Record
	for b.Loop() {
		if _, err := ParseRecord(rec, &r); err != nil {
			b.Fatal(err)
		}
		if _, err := r.Value(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLibraryRecordHeader reads the same header with msgpack.Decoder,
// for comparison with our allocation-free reader.
func BenchmarkLibraryRecordHeader(b *testing.B) {
	rec := benchRecord(b)
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	br := bytes.NewReader(rec)
	dec := msgpack.NewDecoder(br)
	for b.Loop() {
		br.Reset(rec)
		dec.Reset(br)
		if _, err := dec.DecodeArrayLen(); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			if _, err := dec.DecodeUint64(); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := dec.DecodeBytes(); err != nil {
			b.Fatal(err)
		}
		if _, err := dec.DecodeBytes(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendFrame100(b *testing.B) {
	payload := make([]byte, 100)
	buf := make([]byte, 0, 4096)
	b.SetBytes(100)
	b.ReportAllocs()
	id := uint64(0)
	for b.Loop() {
		if len(buf) > 3900 {
			buf = buf[:0]
		}
		id++
		buf = AppendFrame(buf, KindCall, id, 1, payload)
	}
}

type loopReader struct {
	data []byte
	off  int
}

func (l *loopReader) Read(p []byte) (int, error) {
	if l.off == len(l.data) {
		l.off = 0
	}
	n := copy(p, l.data[l.off:])
	l.off += n
	return n, nil
}

// BenchmarkReaderNext100 splits a stream of 100-byte-payload frames.
func BenchmarkReaderNext100(b *testing.B) {
	var stream []byte
	payload := make([]byte, 100)
	for i := range 1000 {
		stream = AppendFrame(stream, KindCall, uint64(i+1000), 1, payload)
	}
	var r io.Reader = &loopReader{data: stream}
	fr := NewReader(r, 0)
	b.SetBytes(100)
	b.ReportAllocs()
	var f Frame
	for b.Loop() {
		if err := fr.Next(&f); err != nil {
			b.Fatal(err)
		}
	}
}
