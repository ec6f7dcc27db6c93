package node

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/wire"
)

// OpEngine carries partition engine messages, one-way: the engines answer
// each other with messages of their own, never with transport replies.
const OpEngine uint32 = 3

// An engine message on the wire is one byte of partition.MsgKind followed
// by the message's msgpack encoding. An OpEngine payload is a batch: one
// flags byte (flagMustDeliver: the batch holds a message that must not be
// dropped, see spill.go), then each message as a uvarint length and its
// bytes. The driver sends each peer one batch per round of engine output.
const flagMustDeliver byte = 1

// maxBatchBytes bounds one batch (one message larger than it goes alone);
// a round's messages for one peer beyond it go in further batches. With
// the inbox's bound on batches it bounds what a node holds unread.
const maxBatchBytes = 256 << 10

// batchWriter builds one peer's batches.
type batchWriter struct {
	buf      []byte
	critical bool
}

// add appends one encoded message.
func (w *batchWriter) add(msg []byte) {
	if len(w.buf) == 0 {
		w.buf = append(w.buf, 0)
	}
	w.buf = binary.AppendUvarint(w.buf, uint64(len(msg)))
	w.buf = append(w.buf, msg...)
	if len(msg) > 0 {
		k := partition.MsgKind(msg[0])
		w.critical = w.critical || k == partition.KindForward || k == partition.KindForwardReply
	}
}

// take returns the batch built so far and starts a new one.
func (w *batchWriter) take() []byte {
	b := w.buf
	if len(b) > 0 && w.critical {
		b[0] |= flagMustDeliver
	}
	w.buf, w.critical = nil, false
	return b
}

// decodeBatch reads every message of an OpEngine payload.
func decodeBatch(b []byte) ([]partition.Message, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty engine batch", wire.ErrMalformed)
	}
	b = b[1:]
	var out []partition.Message
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: engine batch length", wire.ErrMalformed)
		}
		m, err := decodeMessage(b[k : k+int(n)])
		if err != nil {
			return nil, err
		}
		out = append(out, m)
		b = b[k+int(n):]
	}
	return out, nil
}

var encPool = sync.Pool{New: func() any {
	b := new(bytes.Buffer)
	e := msgpack.NewEncoder(b)
	e.UseCompactInts(true)
	return &msgEncoder{buf: b, enc: e}
}}

type msgEncoder struct {
	buf *bytes.Buffer
	enc *msgpack.Encoder
}

// appendMessage appends m's encoding to dst.
func appendMessage(dst []byte, m partition.Message) ([]byte, error) {
	me := encPool.Get().(*msgEncoder)
	defer encPool.Put(me)
	me.buf.Reset()
	me.buf.WriteByte(byte(m.Kind()))
	if err := me.enc.Encode(m); err != nil {
		return dst, fmt.Errorf("fero: node: encoding %T: %w", m, err)
	}
	return append(dst, me.buf.Bytes()...), nil
}

// decodeMessage reads one message. The body comes from the network, so it
// is validated before the decoder allocates anything for it.
func decodeMessage(b []byte) (partition.Message, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty engine message", wire.ErrMalformed)
	}
	m := partition.NewMessage(partition.MsgKind(b[0]))
	if m == nil {
		return nil, fmt.Errorf("%w: unknown engine message kind %d", wire.ErrMalformed, b[0])
	}
	if err := wire.DecodeValue(b[1:], m); err != nil {
		return nil, fmt.Errorf("%w: engine message kind %d: %v", wire.ErrMalformed, b[0], err)
	}
	return m, nil
}
