package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"github.com/fero-go/fero/internal/errs"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

var update = flag.Bool("update", false, "rewrite the golden byte vectors in testdata/")

func TestCodesMatchMsgpack(t *testing.T) {
	pairs := []struct {
		ours, theirs byte
	}{
		{codePosFixMax, msgpcode.PosFixedNumHigh}, {codeFixArrayLow, msgpcode.FixedArrayLow},
		{codeFixArrayMax, msgpcode.FixedArrayHigh}, {codeFixStrLow, msgpcode.FixedStrLow},
		{codeFixStrMax, msgpcode.FixedStrHigh}, {codeNil, msgpcode.Nil},
		{codeBin8, msgpcode.Bin8}, {codeBin16, msgpcode.Bin16}, {codeBin32, msgpcode.Bin32},
		{codeUint8, msgpcode.Uint8}, {codeUint16, msgpcode.Uint16}, {codeUint32, msgpcode.Uint32},
		{codeUint64, msgpcode.Uint64}, {codeInt8, msgpcode.Int8}, {codeInt16, msgpcode.Int16},
		{codeInt32, msgpcode.Int32}, {codeInt64, msgpcode.Int64}, {codeStr8, msgpcode.Str8},
		{codeStr16, msgpcode.Str16}, {codeStr32, msgpcode.Str32}, {codeArray16, msgpcode.Array16},
		{codeArray32, msgpcode.Array32},
	}
	for _, p := range pairs {
		assert.Equalf(t, p.theirs, p.ours, "code 0x%02x", p.ours)
	}
}

type golden struct {
	name  string
	bytes []byte
}

// sortedMsgpack encodes v with map keys sorted, so golden bytes do not
// depend on Go's random map iteration order.
func sortedMsgpack(v any) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func goldenVectors() []golden {
	val := sortedMsgpack(map[string]any{"name": "ada", "n": 1})
	return []golden{
		{"frame_send", AppendFrame(nil, KindSend, 0, 7, []byte("hi"))},
		{"frame_call_big_ids", AppendFrame(nil, KindCall, 1<<40, 70000, []byte{0xff})},
		{"frame_reply_empty", AppendFrame(nil, KindReply, 300, 0, nil)},
		{"frame_error", AppendFrame(nil, KindError, 5, 0, AppendErrorPayload(nil, 12, "unknown verb", nil))},
		{"frame_cancel", AppendFrame(nil, KindCancel, 9, 0, nil)},
		{"frame_credit", AppendFrame(nil, KindCredit, 9, 0, []byte{0x92, 0x40, 0xcd, 0x10, 0x00})},
		{"record_update", AppendRecord(nil, RecordHeader{Type: RecordUpdate, Partition: 17, Epoch: 3, Offset: 1000}, "user:1", val)},
		{"record_remove", AppendRecord(nil, RecordHeader{Type: RecordRemove, Partition: 270, Epoch: 1 << 33, Offset: 0}, "k", nil)},
	}
}

// TestGolden pins the byte format: a change to it must update testdata/.
func TestGolden(t *testing.T) {
	for _, g := range goldenVectors() {
		path := filepath.Join("testdata", g.name+".hex")
		if *update {
			require.NoError(t, os.WriteFile(path, []byte(hex.EncodeToString(g.bytes)+"\n"), 0o644))
			continue
		}
		want, err := os.ReadFile(path)
		require.NoError(t, err, "run go test -run Golden -update to create it")
		assert.Equalf(t, strings.TrimSpace(string(want)), hex.EncodeToString(g.bytes), "%s changed", g.name)
	}
}

// TestFramesAreMsgpack checks that the msgpack library reads what we write.
func TestFramesAreMsgpack(t *testing.T) {
	b := AppendFrame(nil, KindCall, 1<<40, 70000, []byte("payload"))
	var got []any
	require.NoError(t, msgpack.Unmarshal(b[LengthSize:], &got))
	require.Len(t, got, 4)
	assert.EqualValues(t, KindCall, got[0])
	assert.EqualValues(t, uint64(1<<40), got[1])
	assert.EqualValues(t, 70000, got[2])
	assert.Equal(t, []byte("payload"), got[3])

	val, err := msgpack.Marshal([]int{1, 2, 3})
	require.NoError(t, err)
	r := AppendRecord(nil, RecordHeader{Type: RecordAdd, Partition: 2, Epoch: 9, Offset: 1 << 20}, "key", val)
	var rec []any
	require.NoError(t, msgpack.Unmarshal(r, &rec))
	assert.Equal(t, []any{int8(1), int8(2), int8(9), uint32(1 << 20), "key", val}, rec)
}

// TestParseAcceptsLibraryEncoding parses bodies the msgpack library wrote,
// including integer encodings we never write ourselves.
func TestParseAcceptsLibraryEncoding(t *testing.T) {
	body, err := msgpack.Marshal([]any{int64(2), int32(77), uint64(5), []byte("x")})
	require.NoError(t, err)
	var f Frame
	require.NoError(t, ParseBody(body, &f))
	assert.Equal(t, Frame{Kind: KindCall, ID: 77, Op: 5, Payload: []byte("x")}, f)

	neg, err := msgpack.Marshal([]any{int64(2), int64(-1), 5, []byte("x")})
	require.NoError(t, err)
	assert.ErrorIs(t, ParseBody(neg, &f), ErrMalformed)
}

func TestFrameSizeMatchesEncoding(t *testing.T) {
	for _, id := range []uint64{0, 127, 128, 255, 256, 65535, 65536, 1 << 32, 1<<64 - 1} {
		for _, n := range []int{0, 1, 255, 256, 65535, 65536} {
			b := AppendFrame(nil, KindCall, id, uint32(id), make([]byte, n))
			require.Equal(t, FrameSize(id, uint32(id), n), len(b), "id %d n %d", id, n)
			var f Frame
			require.NoError(t, ParseBody(b[LengthSize:], &f))
			require.Equal(t, id, f.ID)
			require.Len(t, f.Payload, n)
		}
	}
}

func testStream(t testing.TB) ([]byte, []Frame) {
	return encodeStream(smallFrames())
}

func smallFrames() []Frame {
	return []Frame{
		{Kind: KindSend, Op: 1, Payload: []byte("one")},
		{Kind: KindCall, ID: 1, Op: 2, Payload: bytes.Repeat([]byte("x"), 300)},
		{Kind: KindReply, ID: 1, Payload: []byte{}},
		{Kind: KindStream, ID: 2, Op: 3, Payload: []byte("y")},
		{Kind: KindCancel, ID: 2},
	}
}

func encodeStream(frames []Frame) ([]byte, []Frame) {
	var b []byte
	for _, f := range frames {
		b = AppendFrame(b, f.Kind, f.ID, f.Op, f.Payload)
	}
	return b, frames
}

// readAll keeps every frame, so it pins them.
func readAll(r *Reader) ([]Frame, error) {
	var out []Frame
	for {
		var f Frame
		if err := r.Next(&f); err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		r.Pin()
		out = append(out, f)
	}
}

func sameFrames(t *testing.T, want, got []Frame) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		assert.Equal(t, want[i].Kind, got[i].Kind)
		assert.Equal(t, want[i].ID, got[i].ID)
		assert.Equal(t, want[i].Op, got[i].Op)
		assert.True(t, bytes.Equal(want[i].Payload, got[i].Payload), "frame %d payload", i)
	}
}

// TestReaderSplitAtEveryByte feeds the stream in two writes split at every
// byte boundary, and one byte at a time.
func TestReaderSplitAtEveryByte(t *testing.T) {
	stream, want := testStream(t)
	for cut := 0; cut <= len(stream); cut++ {
		r := NewReader(io.MultiReader(bytes.NewReader(stream[:cut]), bytes.NewReader(stream[cut:])), 0)
		setBlock(r, 512) // force block changes mid-frame too
		got, err := readAll(r)
		require.NoError(t, err, "cut %d", cut)
		sameFrames(t, want, got)
	}
	got, err := readAll(NewReader(iotest.OneByteReader(bytes.NewReader(stream)), 0))
	require.NoError(t, err)
	sameFrames(t, want, got)
}

// TestReaderSplitLargeFrame splits a stream holding a bin32 payload larger
// than a block at every byte of each frame's first and last 16 bytes.
func TestReaderSplitLargeFrame(t *testing.T) {
	frames := append(smallFrames(), Frame{Kind: KindChunk, ID: 3, Payload: bytes.Repeat([]byte("z"), 70000)}, Frame{Kind: KindReply, ID: 3})
	stream, want := encodeStream(frames)
	var cuts []int
	off := 0
	for _, f := range want {
		n := FrameSize(f.ID, f.Op, len(f.Payload))
		for i := 0; i < 16 && i < n; i++ {
			cuts = append(cuts, off+i, off+n-1-i)
		}
		off += n
	}
	for _, cut := range cuts {
		r := NewReader(io.MultiReader(bytes.NewReader(stream[:cut]), bytes.NewReader(stream[cut:])), 0)
		setBlock(r, 512)
		got, err := readAll(r)
		require.NoError(t, err, "cut %d", cut)
		sameFrames(t, want, got)
	}
}

// TestPinnedPayloadsSurviveLaterReads checks that a pinned payload stays
// intact after the reader has moved on.
func TestPinnedPayloadsSurviveLaterReads(t *testing.T) {
	stream, want := testStream(t)
	r := NewReader(bytes.NewReader(bytes.Repeat(stream, 20)), 0)
	setBlock(r, 1024)
	var got []Frame
	for {
		var f Frame
		err := r.Next(&f)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		r.Pin()
		got = append(got, f)
	}
	for i := 0; i < 20; i++ {
		sameFrames(t, want, got[i*len(want):(i+1)*len(want)])
	}
}

// TestUnpinnedBlocksAreReused: without Pin, a long stream is read through
// one block, and every frame is still intact when Next returns it.
func TestUnpinnedBlocksAreReused(t *testing.T) {
	stream, want := testStream(t)
	r := NewReader(bytes.NewReader(bytes.Repeat(stream, 50)), 0)
	setBlock(r, 1024)
	var first *byte
	for i := 0; i < 50*len(want); i++ {
		var f Frame
		require.NoError(t, r.Next(&f))
		w := want[i%len(want)]
		require.Equal(t, w.ID, f.ID)
		require.True(t, bytes.Equal(w.Payload, f.Payload), "frame %d", i)
		if i == 0 {
			first = &r.buf[0]
		}
	}
	assert.Same(t, first, &r.buf[0], "the same block throughout")
	var f Frame
	assert.Equal(t, io.EOF, r.Next(&f))
}

func TestReaderErrors(t *testing.T) {
	good := AppendFrame(nil, KindSend, 0, 1, []byte("abc"))
	t.Run("too large", func(t *testing.T) {
		r := NewReader(bytes.NewReader(AppendFrame(nil, KindSend, 0, 1, make([]byte, 100))), 64)
		var f Frame
		assert.ErrorIs(t, r.Next(&f), ErrFrameTooLarge)
	})
	t.Run("huge declared length allocates nothing", func(t *testing.T) {
		r := NewReader(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff}), 1<<20)
		var f Frame
		assert.ErrorIs(t, r.Next(&f), ErrFrameTooLarge)
	})
	for cut := 1; cut < len(good); cut++ {
		r := NewReader(bytes.NewReader(good[:cut]), 0)
		var f Frame
		assert.ErrorIs(t, r.Next(&f), io.ErrUnexpectedEOF, "truncated at %d", cut)
	}
	t.Run("clean EOF", func(t *testing.T) {
		var f Frame
		assert.Equal(t, io.EOF, NewReader(bytes.NewReader(nil), 0).Next(&f))
	})
	bad := map[string][]byte{
		"not an array":    {0, 0, 0, 1, 0x01},
		"three fields":    {0, 0, 0, 4, 0x93, 1, 1, 1},
		"unknown kind":    {0, 0, 0, 6, 0x94, 0x09, 0, 0, 0xc4, 0},
		"kind zero":       {0, 0, 0, 6, 0x94, 0x00, 0, 0, 0xc4, 0},
		"bin overruns":    {0, 0, 0, 6, 0x94, 0x01, 0, 0, 0xc4, 9},
		"trailing bytes":  {0, 0, 0, 7, 0x94, 0x01, 0, 0, 0xc4, 0, 0},
		"op out of range": append([]byte{0, 0, 0, 14, 0x94, 0x01, 0, 0xcf, 1, 0, 0, 0, 0, 0, 0, 0}, 0xc4, 0),
		"string kind":     {0, 0, 0, 6, 0x94, 0xa1, 'x', 0, 0, 0xc4},
	}
	for name, b := range bad {
		var f Frame
		err := NewReader(bytes.NewReader(b), 0).Next(&f)
		assert.Truef(t, errors.Is(err, ErrMalformed) || errors.Is(err, io.ErrUnexpectedEOF), "%s: %v", name, err)
	}
}

func TestErrorPayload(t *testing.T) {
	code, msg, details, err := ParseErrorPayload(AppendErrorPayload(nil, 405, "method not allowed", nil))
	require.NoError(t, err)
	assert.Equal(t, uint32(405), code)
	assert.Equal(t, "method not allowed", msg)
	assert.Nil(t, details)
	_, _, _, err = ParseErrorPayload([]byte{0x91, 1})
	assert.ErrorIs(t, err, ErrMalformed)

	// Details round-trip.
	want := []errs.Detail{{Type: "shop.OutOfStock", Value: []byte{0x81, 0xa3, 's', 'k', 'u', 0x01}}, {Type: "t", Value: nil}}
	code, msg, details, err = ParseErrorPayload(AppendErrorPayload(nil, 9, "out of stock", want))
	require.NoError(t, err)
	assert.Equal(t, uint32(9), code)
	assert.Equal(t, "out of stock", msg)
	assert.Equal(t, want, details)
	// Too many, or a type that is empty or too long, are malformed.
	for _, bad := range [][]errs.Detail{
		make([]errs.Detail, errs.MaxDetails+1),
		{{Type: "", Value: []byte{1}}},
		{{Type: strings.Repeat("t", errs.MaxDetailType+1)}},
	} {
		for i := range bad {
			if bad[i].Type == "" && len(bad) > 1 {
				bad[i].Type = "t"
			}
		}
		_, _, _, err = ParseErrorPayload(AppendErrorPayload(nil, 9, "x", bad))
		assert.ErrorIs(t, err, ErrMalformed)
	}
}

type user struct {
	Name  string `msgpack:"name"`
	Email string `msgpack:"email"`
}

func TestRecordRoundTrip(t *testing.T) {
	val, err := msgpack.Marshal(user{Name: "ada", Email: "ada@example.com"})
	require.NoError(t, err)
	h := RecordHeader{Type: RecordUpdate, Partition: 42, Epoch: 7, Offset: 123456}
	b := AppendRecord(nil, h, "users/ada", val)
	require.Equal(t, RecordSize(h, len("users/ada"), len(val)), len(b))
	b = AppendRecord(b, RecordHeader{Type: RecordRemove, Partition: 1, Epoch: 7, Offset: 1}, "gone", nil)

	var r Record
	n, err := ParseRecord(b, &r)
	require.NoError(t, err)
	assert.Equal(t, h, r.RecordHeader)
	assert.Equal(t, "users/ada", string(r.Key))
	assert.Equal(t, val, r.ValueBytes())
	v, err := r.Value()
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"name": "ada", "email": "ada@example.com"}, v)
	var u user
	require.NoError(t, r.DecodeValue(&u))
	assert.Equal(t, "ada", u.Name)

	var r2 Record
	m, err := ParseRecord(b[n:], &r2)
	require.NoError(t, err)
	assert.Equal(t, len(b), n+m)
	assert.Equal(t, RecordRemove, r2.Type)
	v2, err := r2.Value()
	assert.NoError(t, err)
	assert.Nil(t, v2)
}

// TestRecordValueDecodedOnce shows the value is decoded lazily and once: a
// record with a corrupt value parses fine, and only Value reports it.
func TestRecordValueDecodedOnce(t *testing.T) {
	b := AppendRecord(nil, RecordHeader{Type: RecordAdd, Partition: 1, Epoch: 1, Offset: 1}, "k", []byte{0xc1})
	var r Record
	_, err := ParseRecord(b, &r)
	require.NoError(t, err, "the header parses without looking at the value")
	_, err1 := r.Value()
	_, err2 := r.Value()
	require.Error(t, err1)
	assert.Same(t, err1, err2, "the second call returns the memoised result")

	good, _ := msgpack.Marshal(map[string]int{"a": 1})
	b = AppendRecord(nil, RecordHeader{Type: RecordAdd, Partition: 1, Epoch: 1, Offset: 1}, "k", good)
	_, err = ParseRecord(b, &r)
	require.NoError(t, err)
	v1, _ := r.Value()
	v1.(map[string]any)["mark"] = true
	v2, _ := r.Value()
	assert.Equal(t, true, v2.(map[string]any)["mark"], "same decoded value, not a second decode")
}

// TestRoutingAllocatesNothing pins the zero-allocation header path.
func TestRoutingAllocatesNothing(t *testing.T) {
	val := bytes.Repeat([]byte{0xa1, 'x'}, 50)
	b := AppendRecord(nil, RecordHeader{Type: RecordUpdate, Partition: 3, Epoch: 1, Offset: 99}, "user:1", val)
	var r Record
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := ParseRecord(b, &r); err != nil || r.Partition != 3 || len(r.Key) == 0 {
			t.Fatal("bad parse")
		}
	})
	assert.Zero(t, allocs)
	frame := AppendFrame(nil, KindSend, 0, 1, b)
	var f Frame
	allocs = testing.AllocsPerRun(1000, func() {
		if err := ParseBody(frame[LengthSize:], &f); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

func TestRecordErrors(t *testing.T) {
	var r Record
	for name, b := range map[string][]byte{
		"empty":          nil,
		"five fields":    {0x95, 1, 1, 1, 1, 0xa0},
		"bad type":       {0x96, 9, 1, 1, 1, 0xa0, 0xc4, 0},
		"key not string": {0x96, 1, 1, 1, 1, 0x01, 0xc4, 0},
		"value overruns": {0x96, 1, 1, 1, 1, 0xa0, 0xc4, 5, 1},
	} {
		_, err := ParseRecord(b, &r)
		assert.ErrorIsf(t, err, ErrMalformed, "%s", name)
	}
}

// TestFastAndSlowPathsAgree: every body the fast path accepts, the slow
// path accepts with the same result.
func TestFastAndSlowPathsAgree(t *testing.T) {
	for _, g := range goldenVectors() {
		if !strings.HasPrefix(g.name, "frame") {
			continue
		}
		var fast, slow Frame
		require.True(t, parseBodyFast(g.bytes[LengthSize:], &fast), g.name)
		require.NoError(t, parseBodySlow(g.bytes[LengthSize:], &slow), g.name)
		assert.Equal(t, slow, fast, g.name)
	}
}

func FuzzParseBody(f *testing.F) {
	for _, g := range goldenVectors() {
		if strings.HasPrefix(g.name, "frame") {
			f.Add(g.bytes[LengthSize:])
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fr, slow Frame
		if parseBodyFast(body, &fr) {
			require.NoError(t, parseBodySlow(body, &slow), "the fast path accepted what the slow path refuses")
			require.Equal(t, slow, fr)
		}
		if err := ParseBody(body, &fr); err != nil {
			return
		}
		// Whatever parses re-encodes to a body that parses the same.
		again := AppendFrame(nil, fr.Kind, fr.ID, fr.Op, fr.Payload)
		var fr2 Frame
		require.NoError(t, ParseBody(again[LengthSize:], &fr2))
		require.Equal(t, fr.Kind, fr2.Kind)
		require.Equal(t, fr.ID, fr2.ID)
		require.True(t, bytes.Equal(fr.Payload, fr2.Payload))
	})
}

// FuzzReader feeds arbitrary streams, split at an arbitrary byte, through a
// Reader with a small limit: it must end in an error or EOF, never panic or
// read past the limit.
func FuzzReader(f *testing.F) {
	stream, _ := testStream(f)
	f.Add(stream, uint16(3))
	f.Add([]byte{0, 0, 0, 2, 0x94}, uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		c := int(cut) % (len(data) + 1)
		r := NewReader(io.MultiReader(bytes.NewReader(data[:c]), bytes.NewReader(data[c:])), 4096)
		setBlock(r, 256)
		for i := 0; i <= len(data); i++ {
			var fr Frame
			if err := r.Next(&fr); err != nil {
				return
			}
			if len(fr.Payload) > 4096 {
				t.Fatalf("payload of %d bytes passed a 4096 limit", len(fr.Payload))
			}
		}
		t.Fatal("more frames than bytes")
	})
}

func FuzzParseRecord(f *testing.F) {
	for _, g := range goldenVectors() {
		if strings.HasPrefix(g.name, "record") {
			f.Add(g.bytes)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Record
		n, err := ParseRecord(b, &r)
		if err != nil {
			return
		}
		require.LessOrEqual(t, n, len(b))
		_, _ = r.Value() // may fail, must not panic
		again := AppendRecord(nil, r.RecordHeader, string(r.Key), r.ValueBytes())
		var r2 Record
		_, err = ParseRecord(again, &r2)
		require.NoError(t, err)
		require.Equal(t, r.RecordHeader, r2.RecordHeader)
	})
}

func TestRecordTypeString(t *testing.T) {
	for typ, want := range map[RecordType]string{
		RecordAdd: "ADD", RecordUpdate: "UPDATE", RecordRemove: "REMOVE", RecordBatch: "BATCH", 9: "RecordType(9)",
	} {
		require.Equal(t, want, typ.String())
	}
}
