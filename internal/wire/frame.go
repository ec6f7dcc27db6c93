package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/fero-go/fero/internal/errs"
	"io"
	"math"
	"os"
	"testing"
	"time"
)

// Kind says what a frame is.
type Kind uint8

// Frame kinds. A caller chooses the mode of a call by the kind of its first
// frame; the callee answers KindCall with one KindReply or KindError, and
// KindStream with any number of KindChunk frames ended by KindReply or
// KindError. KindSend is never answered. A caller that reads a stream at
// its own pace grants the callee room for more chunks with KindCredit
// frames (flow control: see transport.Conn.StreamWindow).
const (
	KindSend   Kind = 1 // one-way message
	KindCall   Kind = 2 // request expecting one reply
	KindStream Kind = 3 // request expecting a stream of replies
	KindReply  Kind = 4 // final reply to call id
	KindChunk  Kind = 5 // one reply of a stream; more follow
	KindError  Kind = 6 // final error reply to call id
	KindCancel Kind = 7 // the caller gave up on call id
	KindCredit Kind = 8 // the caller of stream id has room for more chunks
	kindMax         = KindCredit
)

func (k Kind) String() string {
	switch k {
	case KindSend:
		return "send"
	case KindCall:
		return "call"
	case KindStream:
		return "stream"
	case KindReply:
		return "reply"
	case KindChunk:
		return "chunk"
	case KindError:
		return "error"
	case KindCancel:
		return "cancel"
	case KindCredit:
		return "credit"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// IsRequest reports whether frames of this kind start a call.
func (k Kind) IsRequest() bool { return k >= KindSend && k <= KindStream }

// Frame is one decoded frame. Payload aliases the bytes it was parsed from.
type Frame struct {
	Kind    Kind
	ID      uint64
	Op      uint32
	Payload []byte
}

// LengthSize is the size of the length prefix.
const LengthSize = 4

// DefaultMaxFrame is the default limit on a frame's body length.
const DefaultMaxFrame = 16 << 20

// FrameSize returns the encoded size of a frame, length prefix included,
// with a payload of n bytes.
func FrameSize(id uint64, op uint32, n int) int {
	return LengthSize + 2 + uintSize(id) + uintSize(uint64(op)) + binHeaderSize(n) + n
}

// AppendFrame appends the encoding of one frame to b.
func AppendFrame(b []byte, kind Kind, id uint64, op uint32, payload []byte) []byte {
	b = AppendFrameHeader(b, kind, id, op, len(payload))
	return append(b, payload...)
}

// AppendFrameHeader appends everything of a frame but its n payload bytes,
// which the caller appends next. It lets a payload be encoded straight into
// the output buffer.
func AppendFrameHeader(b []byte, kind Kind, id uint64, op uint32, n int) []byte {
	body := FrameSize(id, op, n) - LengthSize
	b = binary.BigEndian.AppendUint32(b, uint32(body))
	b = append(b, codeFixArrayLow|4, byte(kind))
	b = appendUint(b, id)
	b = appendUint(b, uint64(op))
	return appendBinHeader(b, n)
}

// ParseBody decodes a frame body (the bytes after the length prefix).
// f.Payload aliases body.
func ParseBody(body []byte, f *Frame) error {
	if parseBodyFast(body, f) {
		return nil
	}
	return parseBodySlow(body, f)
}

// parseBodyFast reads the shapes AppendFrame writes (unsigned ints, bin
// payload) with one bounds check per field. Anything else, valid or not,
// goes to parseBodySlow, which also produces the errors.
func parseBodyFast(body []byte, f *Frame) bool {
	if len(body) < 5 || body[0] != codeFixArrayLow|4 || body[1] == 0 || body[1] > byte(kindMax) {
		return false
	}
	off := 2
	id, ok := fastUint(body, &off)
	if !ok {
		return false
	}
	op, ok := fastUint(body, &off)
	if !ok || op > math.MaxUint32 || off >= len(body) {
		return false
	}
	var n int
	switch body[off] {
	case codeBin8:
		if off+2 > len(body) {
			return false
		}
		n, off = int(body[off+1]), off+2
	case codeBin16:
		if off+3 > len(body) {
			return false
		}
		n, off = int(binary.BigEndian.Uint16(body[off+1:])), off+3
	case codeBin32:
		if off+5 > len(body) {
			return false
		}
		n, off = int(binary.BigEndian.Uint32(body[off+1:])), off+5
	default:
		return false
	}
	if n != len(body)-off {
		return false
	}
	*f = Frame{Kind: Kind(body[1]), ID: id, Op: uint32(op), Payload: body[off:len(body):len(body)]}
	return true
}

func fastUint(b []byte, off *int) (uint64, bool) {
	i := *off
	if i >= len(b) {
		return 0, false
	}
	c := b[i]
	switch {
	case c <= codePosFixMax:
		*off = i + 1
		return uint64(c), true
	case c == codeUint8 && i+2 <= len(b):
		*off = i + 2
		return uint64(b[i+1]), true
	case c == codeUint16 && i+3 <= len(b):
		*off = i + 3
		return uint64(binary.BigEndian.Uint16(b[i+1:])), true
	case c == codeUint32 && i+5 <= len(b):
		*off = i + 5
		return uint64(binary.BigEndian.Uint32(b[i+1:])), true
	case c == codeUint64 && i+9 <= len(b):
		*off = i + 9
		return binary.BigEndian.Uint64(b[i+1:]), true
	}
	return 0, false
}

func parseBodySlow(body []byte, f *Frame) error {
	d := decoder{b: body}
	if n := d.arrayLen(); d.err == nil && n != 4 {
		return fmt.Errorf("%w: frame has %d fields, want 4", ErrMalformed, n)
	}
	kind := d.uint("kind")
	id := d.uint("id")
	op := d.uint("op")
	payload := d.bytes("payload")
	if d.err != nil {
		return d.err
	}
	if kind == 0 || kind > uint64(kindMax) {
		return fmt.Errorf("%w: unknown frame kind %d", ErrMalformed, kind)
	}
	if op > math.MaxUint32 {
		return fmt.Errorf("%w: op %d out of range", ErrMalformed, op)
	}
	if d.off != len(body) {
		return fmt.Errorf("%w: %d trailing bytes after frame", ErrMalformed, len(body)-d.off)
	}
	*f = Frame{Kind: Kind(kind), ID: id, Op: uint32(op), Payload: payload}
	return nil
}

// Reader splits a byte stream into frames.
//
// A frame's Payload aliases the block it was read into. By default a
// payload is valid only until the next call to Next: when a block is used
// up, the reader refills the same block. Call Pin after Next to keep the
// current block's payloads valid for good; the reader then starts a new
// block and leaves the old one to the garbage collector once no payload
// refers to it. Keep a copy of a pinned payload you retain for long, or a
// small payload will hold its whole block.
//
// The stream may be hostile, so the reader's memory follows the bytes that
// have arrived, never the length a frame declares: a frame larger than the
// block is read into a buffer that at most doubles what is buffered at each
// step, so a peer that declares 16 MiB and sends ten bytes costs a block,
// not 16 MiB. A Reader starts with a small block (MinBlockSize) and doubles
// it, up to DefaultBlockSize, each time a read fills it, so an idle stream
// costs little and a busy one reads in large blocks. SetFrameTimeout bounds
// how long a half-sent frame can hold its buffer.
type Reader struct {
	r        io.Reader
	max      int
	block    int    // size of the next block started; grows to maxBlock
	maxBlock int    // DefaultBlockSize but in tests
	buf      []byte // len(buf) is the block's capacity in use
	start    int    // first unparsed byte
	end      int    // end of bytes read
	pinned   bool   // a payload in buf must stay valid
	blockID  uint64 // counts the blocks started (see Block)
	frames   uint64 // frames Next has returned

	// Read deadlines; see SetFrameTimeout.
	timeout     time.Duration
	setDeadline func(time.Time) error
	armed       bool   // a deadline is set on the stream
	armedFor    uint64 // the value of frames when it was set: the frame it bounds
	first       bool   // the deadline set is the first frame's, from SetFrameTimeout
	// exact: a frame of up to this many bytes gets a block of its
	// declared size at once (SetExact); 0 for none.
	exact int
	// alloc, when set, gives the blocks the reader starts (SetAlloc).
	alloc func(size int) []byte
}

// SetAlloc makes the Reader ask alloc for each new block of size bytes
// it starts; alloc returns a slice of len size, or nil for the Reader to
// make one. It lets a caller that keeps payloads (Pin) and later lets go
// of them hand their blocks back for reuse. alloc runs on the goroutine
// that calls Next.
func (r *Reader) SetAlloc(alloc func(size int) []byte) { r.alloc = alloc }

// BlockBytes returns the block that the last frame returned by Next was
// read into (see Block): what a caller that recycles blocks (SetAlloc)
// hands back once no payload in it is in use.
func (r *Reader) BlockBytes() []byte { return r.buf }

// SetExact makes the Reader read a frame of up to n bytes into a block of
// the size its length prefix declares, allocated when the frame starts to
// arrive, instead of a block that doubles as its bytes arrive (which for a
// frame of megabytes allocates twice its size and copies it once more).
// It trusts the sender's lengths: a sender that declares n bytes and sends
// few holds n bytes of memory until the frame timeout. So it is for
// streams whose sender has proved who it is (a cluster peer), never for
// the first frames of an accepted connection. n <= 0 turns it off.
func (r *Reader) SetExact(n int) { r.exact = max(n, 0) }

// SetLimits changes the largest frame body the Reader accepts (maxFrame,
// DefaultMaxFrame if <= 0) and the largest block it grows to while reads
// fill its blocks (maxBlock, DefaultBlockSize if <= 0), from the next frame
// on. A connection that has proved nothing reads with small limits, which
// it lifts once it has (transport's pre-auth budget).
func (r *Reader) SetLimits(maxFrame, maxBlock int) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	if maxBlock <= 0 {
		maxBlock = DefaultBlockSize
	}
	r.max, r.maxBlock = maxFrame, maxBlock
	r.block = min(r.block, maxBlock)
}

// Pin keeps every payload returned so far valid after later calls to Next.
func (r *Reader) Pin() { r.pinned = true }

// Block identifies the block that the last frame returned by Next was read
// into, and returns its size. A block's id is never reused by a Reader. It
// lets a caller that keeps payloads (Pin) account for the memory they hold:
// a payload keeps its whole block.
func (r *Reader) Block() (id uint64, size int) { return r.blockID, len(r.buf) }

// DefaultBlockSize is the largest read block of a Reader: the block it
// grows to while reads fill its blocks.
const DefaultBlockSize = 64 << 10

// MinBlockSize is the first read block of a Reader.
const MinBlockSize = 4 << 10

// maxKeptBlock bounds the block a Reader keeps for reuse after a frame
// larger than its block size made it grow.
const maxKeptBlock = 512 << 10

// NewReader returns a Reader that refuses frames whose body exceeds
// maxFrame bytes (DefaultMaxFrame if maxFrame <= 0).
func NewReader(r io.Reader, maxFrame int) *Reader {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	return &Reader{r: r, max: maxFrame, block: MinBlockSize, maxBlock: DefaultBlockSize}
}

// SetFrameTimeout bounds how long a frame may take to arrive: once part of
// a frame has arrived, the rest must arrive within d, or Next fails with
// ErrFrameTimeout. setDeadline is the stream's SetReadDeadline; the stream
// must fail a Read that passes it with an error that wraps
// os.ErrDeadlineExceeded, as a net.Conn does.
//
// The reader sets a deadline only when it is about to wait for the rest of
// a frame, and clears it only when it is about to wait with nothing
// buffered, so frames that arrive whole cost no deadline calls at all. A
// deadline is set once per frame: more bytes of the same frame do not
// extend it.
//
// A non-zero firstBy is a deadline for the first frame, whether any of it
// has arrived or not: a stream that says nothing fails too. d <= 0 turns
// the per-frame bound off. Call it before the first Next.
func (r *Reader) SetFrameTimeout(d time.Duration, firstBy time.Time, setDeadline func(time.Time) error) error {
	r.timeout, r.setDeadline = d, setDeadline
	if firstBy.IsZero() {
		return nil
	}
	r.armed, r.armedFor, r.first = true, 0, true
	return setDeadline(firstBy)
}

// Next reads the next frame into f. At a clean end of stream it returns
// io.EOF; a stream that ends inside a frame gives io.ErrUnexpectedEOF.
func (r *Reader) Next(f *Frame) error {
	if err := r.fill(LengthSize); err != nil {
		return err
	}
	n := int(binary.BigEndian.Uint32(r.buf[r.start:]))
	if n > r.max {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, r.max)
	}
	if err := r.fill(LengthSize + n); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	body := r.buf[r.start+LengthSize : r.start+LengthSize+n : r.start+LengthSize+n]
	r.start += LengthSize + n
	r.frames++
	return ParseBody(body, f)
}

// Buffered reports whether a complete frame is already buffered, so that
// Next will not block.
func (r *Reader) Buffered() bool {
	avail := r.end - r.start
	if avail < LengthSize {
		return false
	}
	return avail-LengthSize >= int(binary.BigEndian.Uint32(r.buf[r.start:]))
}

// fill makes at least n unparsed bytes available. The check is all that
// runs while frames are buffered, so it stays small enough to inline.
func (r *Reader) fill(n int) error {
	if r.end-r.start >= n {
		return nil
	}
	return r.read(n)
}

// read reads until n unparsed bytes are buffered.
func (r *Reader) read(n int) error {
	if r.end == r.start && !r.pinned {
		// Nothing buffered and nothing in use: read from the block's
		// start, which gives the read the whole block.
		poison(r.buf[:r.end])
		r.start, r.end = 0, 0
	}
	for r.end-r.start < n {
		// Move the unparsed bytes when the frame cannot fit where it
		// starts: now, while they are few, or once the block is full.
		if len(r.buf)-r.start < n && (r.start > 0 || r.end == len(r.buf)) {
			r.grow(n)
		}
		if r.setDeadline != nil {
			if err := r.arm(); err != nil {
				return err
			}
		}
		room := len(r.buf) - r.end
		m, err := r.r.Read(r.buf[r.end:])
		r.end += m
		if m == room && room >= len(r.buf)/2 && r.block < r.maxBlock {
			// The read took all the room there was: more is probably
			// waiting, and a larger block would take it in fewer reads.
			r.block = min(2*r.block, r.maxBlock)
		}
		if err != nil {
			if r.end-r.start >= n {
				return nil
			}
			if r.armed && errors.Is(err, os.ErrDeadlineExceeded) {
				return r.timedOut(n, err)
			}
			if err == io.EOF && r.end-r.start > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// poisonReused fills the bytes of earlier frames with poisonByte when the
// Reader reads into their block again, in test binaries: a payload used
// after it stopped being valid (a call used after its answer, a one-way
// request after its handler returned, without Pin) then reads bytes no
// msgpack value starts with, at once, rather than whatever later frames
// happen to bring. A built-in write that waits for nothing kept its
// call's bytes past the answer, and only a pipelined burst showed it
// (internal/node, TestNoWaitCallsKeepTheirValues).
var poisonReused = testing.Testing()

// poisonByte is a byte msgpack never uses.
const poisonByte = 0xc1

func poison(b []byte) {
	if poisonReused {
		for i := range b {
			b[i] = poisonByte
		}
	}
}

// grow makes room for more of a frame of n bytes (length prefix included),
// of which r.end-r.start have arrived. The new buffer is at most twice what
// has arrived (or a block), never the n the frame declares, so memory
// follows the bytes received; a large frame that keeps arriving doubles it
// read by read. With SetExact, a frame within its bound gets its n bytes.
func (r *Reader) grow(n int) {
	size := max(r.block, min(n, 2*(r.end-r.start)))
	if n <= r.exact {
		size = max(size, n)
	}
	if !r.pinned && size <= len(r.buf) && len(r.buf) <= maxKeptBlock {
		// Nothing cut from this block is in use: refill it. A block
		// grown for a large frame is kept (up to maxKeptBlock), so a
		// stream of large frames does not allocate one each.
		old := r.end
		poison(r.buf[:r.start])
		r.end = copy(r.buf, r.buf[r.start:r.end])
		poison(r.buf[r.end:old])
	} else {
		// Start a new block; a pinned one stays with its payloads.
		var nb []byte
		if r.alloc != nil {
			nb = r.alloc(size)
		}
		if len(nb) != size {
			nb = make([]byte, size)
		}
		r.end = copy(nb, r.buf[r.start:r.end])
		r.buf = nb
		r.blockID++
	}
	r.start, r.pinned = 0, false
}

// arm sets or clears the stream's read deadline before a read that may
// block (see SetFrameTimeout).
func (r *Reader) arm() error {
	if r.first {
		if r.frames == 0 {
			return nil // the first frame's deadline stands until it is in
		}
		r.first = false
	}
	if r.end > r.start && r.timeout > 0 {
		if r.armed && r.armedFor == r.frames {
			return nil // this frame's deadline, set at its first byte
		}
		r.armed, r.armedFor = true, r.frames
		return r.setDeadline(time.Now().Add(r.timeout))
	}
	if r.armed {
		r.armed = false
		return r.setDeadline(time.Time{})
	}
	return nil
}

func (r *Reader) timedOut(n int, err error) error {
	got := r.end - r.start
	want := "at least 4"
	if got >= LengthSize {
		want = fmt.Sprint(n)
	}
	if r.first {
		return fmt.Errorf("%w: the first frame was not in by its deadline (%d of %s bytes arrived): %w", ErrFrameTimeout, got, want, err)
	}
	return fmt.Errorf("%w: %d of %s bytes of a frame arrived in %v: %w", ErrFrameTimeout, got, want, r.timeout, err)
}

// AppendErrorPayload appends the payload of a KindError frame:
// [code, message], or [code, message, [[type, value], ...]] with details.
func AppendErrorPayload(b []byte, code uint32, msg string, details []errs.Detail) []byte {
	if len(details) == 0 {
		b = appendArrayHeader(b, 2)
	} else {
		b = appendArrayHeader(b, 3)
	}
	b = appendUint(b, uint64(code))
	b = appendStr(b, msg)
	if len(details) > 0 {
		b = appendArrayHeader(b, len(details))
		for _, d := range details {
			b = appendArrayHeader(b, 2)
			b = appendStr(b, d.Type)
			b = AppendBin(b, d.Value)
		}
	}
	return b
}

// ParseErrorPayload decodes the payload of a KindError frame. The
// details' values alias p.
func ParseErrorPayload(p []byte) (code uint32, msg string, details []errs.Detail, err error) {
	d := decoder{b: p}
	n := d.arrayLen()
	if d.err == nil && n != 2 && n != 3 {
		return 0, "", nil, fmt.Errorf("%w: error payload has %d fields, want 2 or 3", ErrMalformed, n)
	}
	c := d.uint("code")
	m := d.bytes("message")
	if n == 3 && d.err == nil {
		k := d.arrayLen()
		if d.err == nil && k > errs.MaxDetails {
			d.fail("%d error details, at most %d", k, errs.MaxDetails)
		}
		for i := 0; i < k && d.err == nil; i++ {
			if pair := d.arrayLen(); d.err == nil && pair != 2 {
				d.fail("error detail of %d fields, want 2", pair)
				break
			}
			t, v := d.bytes("detail type"), d.bytes("detail value")
			if d.err == nil && (len(t) == 0 || len(t) > errs.MaxDetailType) {
				d.fail("error detail type of %d bytes, want 1 to %d", len(t), errs.MaxDetailType)
			}
			details = append(details, errs.Detail{Type: string(t), Value: v})
		}
	}
	if d.err != nil {
		return 0, "", nil, d.err
	}
	if c > math.MaxUint32 {
		return 0, "", nil, fmt.Errorf("%w: error code %d out of range", ErrMalformed, c)
	}
	return uint32(c), string(m), details, nil
}
