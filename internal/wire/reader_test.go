package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// setBlock fixes a reader's block size, so a test can force block changes
// at small sizes.
func setBlock(r *Reader, n int) { r.block, r.maxBlock = n, n }

// stallingReader hands out data, then blocks, as a peer that stopped
// sending, until release is closed.
type stallingReader struct {
	data    []byte
	stalled chan struct{} // closed once a read finds no data left
	release chan struct{}
}

func (s *stallingReader) Read(p []byte) (int, error) {
	if len(s.data) > 0 {
		n := copy(p, s.data)
		s.data = s.data[n:]
		return n, nil
	}
	close(s.stalled)
	<-s.release
	return 0, io.ErrClosedPipe
}

// readUntilStalled starts Next on a reader of data and returns once the
// reader waits for more, with a function that ends the wait and returns
// Next's error.
func readUntilStalled(t *testing.T, data []byte) (*Reader, func() error) {
	t.Helper()
	s := &stallingReader{data: data, stalled: make(chan struct{}), release: make(chan struct{})}
	r := NewReader(s, 0)
	done := make(chan error, 1)
	go func() {
		var f Frame
		done <- r.Next(&f)
	}()
	select {
	case <-s.stalled:
	case err := <-done:
		t.Fatalf("Next returned %v before the stream stalled", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the reader never read the stream")
	}
	return r, func() error {
		close(s.release)
		return <-done
	}
}

// TestReaderHoldsWhatArrivedNotWhatWasDeclared: a peer that declares a
// 16 MiB frame and sends ten bytes of it pinned a 16 MiB buffer, for as
// long as it kept the connection open (issue 17: 40 such connections took
// a node from 42 MB to 682 MB). The buffer now follows what arrived.
func TestReaderHoldsWhatArrivedNotWhatWasDeclared(t *testing.T) {
	data := binary.BigEndian.AppendUint32(nil, DefaultMaxFrame)
	data = append(data, bytes.Repeat([]byte{0xc4}, 10)...)
	r, stop := readUntilStalled(t, data)
	// The reader is blocked in Read: its buffer is still.
	held := cap(r.buf)
	assert.Error(t, stop())
	assert.LessOrEqual(t, held, MinBlockSize, "a reader waiting for 16 MiB it was promised holds %d bytes", held)
}

// chunkReader hands out a stream a few bytes at a time and calls each
// before every read.
type chunkReader struct {
	data  []byte
	n     int
	given int
	each  func(given int)
}

func (c *chunkReader) Read(p []byte) (int, error) {
	c.each(c.given)
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[n:]
	c.given += n
	return n, nil
}

// TestReaderGrowsWithWhatArrives reads a 3 MiB frame that arrives a
// little at a time: the buffer never exceeds twice what has arrived (or a
// block), and the frames come out whole.
func TestReaderGrowsWithWhatArrives(t *testing.T) {
	frames := []Frame{
		{Kind: KindCall, ID: 1, Op: 1, Payload: bytes.Repeat([]byte("big"), 1<<20)},
		{Kind: KindReply, ID: 1, Payload: []byte("small")},
	}
	stream, want := encodeStream(frames)
	var r *Reader
	worst := 0
	cr := &chunkReader{data: stream, n: 7000, each: func(given int) {
		if c := cap(r.buf); c > max(DefaultBlockSize, 2*given) {
			worst = max(worst, c)
		}
	}}
	r = NewReader(cr, 0)
	got, err := readAll(r)
	require.NoError(t, err)
	sameFrames(t, want, got)
	assert.Zero(t, worst, "the buffer outgrew twice the bytes received")
}

// TestReaderStartsSmall: an idle stream costs a small block; a busy one
// grows its block to DefaultBlockSize.
func TestReaderStartsSmall(t *testing.T) {
	one := AppendFrame(nil, KindCall, 1, 1, []byte("hello"))
	r, stop := readUntilStalled(t, nil)
	idle := cap(r.buf)
	assert.Error(t, stop())
	assert.LessOrEqual(t, idle, MinBlockSize, "an idle reader's block")

	var stream []byte
	for i := range 2000 {
		stream = AppendFrame(stream, KindCall, uint64(i), 1, make([]byte, 100))
	}
	r = NewReader(bytes.NewReader(append(one, stream...)), 0)
	for {
		var f Frame
		err := r.Next(&f)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	assert.Equal(t, DefaultBlockSize, r.block, "reads that fill the block grow it")
	assert.Equal(t, DefaultBlockSize, cap(r.buf))
}

// TestBlockIDs: a refilled block keeps its id; a new block, started
// because the old one is pinned, gets a new one.
func TestBlockIDs(t *testing.T) {
	stream, _ := testStream(t)
	r := NewReader(bytes.NewReader(bytes.Repeat(stream, 20)), 0)
	setBlock(r, 512)
	var f Frame
	require.NoError(t, r.Next(&f))
	first, size := r.Block()
	assert.Equal(t, 512, size)
	for range 5 * len(smallFrames()) {
		require.NoError(t, r.Next(&f))
	}
	id, _ := r.Block()
	assert.Equal(t, first, id, "unpinned: the same block refilled")
	r.Pin()
	for range 5 * len(smallFrames()) {
		require.NoError(t, r.Next(&f))
	}
	id, _ = r.Block()
	assert.NotEqual(t, first, id, "pinned: a new block")
}

// scriptedConn is a stream the test feeds chunk by chunk. It records the
// read deadlines set on it; a nil chunk fails a read as a net.Conn does
// once its deadline has passed.
type scriptedConn struct {
	chunks    chan []byte
	deadlines []time.Time
}

func newScriptedConn() *scriptedConn { return &scriptedConn{chunks: make(chan []byte, 16)} }

func (s *scriptedConn) Read(p []byte) (int, error) {
	select {
	case b := <-s.chunks:
		if b == nil {
			return 0, fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)
		}
		return copy(p, b), nil // chunks are smaller than a block
	default:
		panic("the test fed too little: this read would block for good")
	}
}

func (s *scriptedConn) SetReadDeadline(t time.Time) error {
	s.deadlines = append(s.deadlines, t)
	return nil
}

func (s *scriptedConn) feed(chunks ...[]byte) {
	for _, c := range chunks {
		s.chunks <- c
	}
}

// set reports which recorded deadlines set a time (true) or cleared it.
func (s *scriptedConn) set() []bool {
	out := make([]bool, len(s.deadlines))
	for i, d := range s.deadlines {
		out[i] = !d.IsZero()
	}
	return out
}

// TestFrameTimeoutArmsOnlyForPartialFrames walks the reader through whole
// frames, split frames and a stall, and checks each deadline it sets.
func TestFrameTimeoutArmsOnlyForPartialFrames(t *testing.T) {
	a := AppendFrame(nil, KindSend, 0, 1, []byte("a"))
	b := AppendFrame(nil, KindCall, 2, 1, bytes.Repeat([]byte("b"), 100))
	sc := newScriptedConn()
	r := NewReader(sc, 0)
	require.NoError(t, r.SetFrameTimeout(time.Minute, time.Time{}, sc.SetReadDeadline))
	next := func() error {
		var f Frame
		return r.Next(&f)
	}

	sc.feed(a, a)
	require.NoError(t, next())
	require.NoError(t, next())
	assert.Empty(t, sc.deadlines, "frames that arrive whole set no deadline")

	before := time.Now()
	sc.feed(b[:3], b[3:10], b[10:])
	require.NoError(t, next())
	require.Equal(t, []bool{true}, sc.set(), "one deadline for a frame in three pieces")
	assert.WithinRange(t, sc.deadlines[0], before.Add(time.Minute), time.Now().Add(time.Minute))

	sc.feed(a)
	require.NoError(t, next())
	assert.Equal(t, []bool{true, false}, sc.set(), "cleared before waiting with nothing buffered")

	// A read that ends one frame and starts the next: the next gets a
	// deadline of its own.
	sc.feed(b[:5], append(append([]byte{}, b[5:]...), a[:2]...), a[2:])
	require.NoError(t, next())
	require.NoError(t, next())
	assert.Equal(t, []bool{true, false, true, true}, sc.set())

	sc.feed(a[:2], nil)
	err := next()
	assert.ErrorIs(t, err, ErrFrameTimeout)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	assert.ErrorContains(t, err, "2 of at least 4 bytes of a frame arrived in 1m0s")

	// Without a timeout the reader never touches the deadline.
	sc = newScriptedConn()
	r = NewReader(sc, 0)
	require.NoError(t, r.SetFrameTimeout(0, time.Time{}, sc.SetReadDeadline))
	sc.feed(b[:3], b[3:], a)
	require.NoError(t, next())
	require.NoError(t, next())
	assert.Empty(t, sc.deadlines)
}

// TestFirstFrameDeadline: the first frame's deadline holds whether or not
// any of it arrives, and is cleared once the first frame is in.
func TestFirstFrameDeadline(t *testing.T) {
	a := AppendFrame(nil, KindSend, 0, 1, []byte("a"))
	by := time.Now().Add(time.Second)
	var f Frame

	sc := newScriptedConn()
	r := NewReader(sc, 0)
	require.NoError(t, r.SetFrameTimeout(time.Minute, by, sc.SetReadDeadline))
	sc.feed(nil)
	err := r.Next(&f)
	assert.ErrorIs(t, err, ErrFrameTimeout)
	assert.ErrorContains(t, err, "the first frame was not in by its deadline (0 of at least 4 bytes arrived)")
	assert.Equal(t, []time.Time{by}, sc.deadlines)

	sc = newScriptedConn()
	r = NewReader(sc, 0)
	require.NoError(t, r.SetFrameTimeout(time.Minute, by, sc.SetReadDeadline))
	sc.feed(a[:2], a[2:])
	require.NoError(t, r.Next(&f))
	assert.Equal(t, []time.Time{by}, sc.deadlines, "a split first frame keeps the first deadline")
	sc.feed(a)
	require.NoError(t, r.Next(&f))
	assert.Equal(t, []bool{true, false}, sc.set(), "cleared once the first frame is in")
}

// chunkedReader hands out its data at most n bytes a read, as a socket
// receiving a large frame does.
type chunkedReader struct {
	data []byte
	n    int
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[k:]
	return k, nil
}

// TestSetExact: a large frame read in 64 KiB pieces takes one block of
// its size with SetExact, and a block that doubles as its bytes arrive
// (one new block per doubling) without.
func TestSetExact(t *testing.T) {
	payload := bytes.Repeat([]byte{7}, 3<<20)
	stream := AppendFrame(AppendFrame(nil, KindCall, 1, 9, []byte("small")), KindCall, 2, 9, payload)
	for _, exact := range []bool{false, true} {
		r := NewReader(&chunkedReader{data: stream, n: 64 << 10}, 0)
		if exact {
			r.SetExact(DefaultMaxFrame)
		}
		var f Frame
		require.NoError(t, r.Next(&f))
		first, _ := r.Block()
		require.NoError(t, r.Next(&f))
		require.True(t, bytes.Equal(payload, f.Payload))
		last, size := r.Block()
		if exact {
			assert.Equal(t, first+1, last, "one new block")
			assert.Equal(t, len(stream)-len(AppendFrame(nil, KindCall, 1, 9, []byte("small"))), size, "of the frame's size")
		} else {
			assert.Greater(t, last, first+4, "a block per doubling")
		}
		t.Logf("exact %v: %d new blocks, the last of %d bytes", exact, last-first, size)
	}
}

// TestReaderPoisonsReusedBytes: in a test binary, a payload the reader no
// longer keeps valid reads poisonByte once its block is read into again
// (where no later frame lies over it yet), and a pinned one keeps its
// bytes.
func TestReaderPoisonsReusedBytes(t *testing.T) {
	require.True(t, poisonReused, "test binaries poison reused blocks")
	frame := func(i int) []byte { return AppendFrame(nil, KindSend, 0, 1, bytes.Repeat([]byte{byte(i)}, 40)) }
	var six []byte
	for i := range 6 {
		six = append(six, frame(i)...)
	}
	require.Less(t, len(six), 512)

	conn := newScriptedConn()
	r := NewReader(conn, 0)
	setBlock(r, 512)
	conn.feed(six, frame(6))
	var f Frame
	var stale []byte
	for i := range 6 {
		require.NoError(t, r.Next(&f))
		if i == 4 {
			stale = f.Payload
		}
	}
	require.Equal(t, bytes.Repeat([]byte{4}, 40), stale)
	require.NoError(t, r.Next(&f)) // the block, drained, is read into from its start
	assert.Equal(t, bytes.Repeat([]byte{6}, 40), f.Payload)
	assert.Equal(t, bytes.Repeat([]byte{poisonByte}, 40), stale, "a payload of the block read into again")

	conn.feed(six, frame(6))
	for i := range 6 {
		require.NoError(t, r.Next(&f))
		if i == 4 {
			r.Pin()
			stale = f.Payload
		}
	}
	require.NoError(t, r.Next(&f))
	assert.Equal(t, bytes.Repeat([]byte{4}, 40), stale, "a pinned payload")
}
