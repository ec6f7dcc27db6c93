package node

import (
	"encoding/binary"
	"fmt"
	"sync"

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

// take returns the batch built so far and starts a new one in the same
// buffer: the batch is valid until the next add.
func (w *batchWriter) take() []byte {
	b := w.buf
	if len(b) > 0 && w.critical {
		b[0] |= flagMustDeliver
	}
	w.buf, w.critical = b[:0], false
	if cap(b) > 2*maxBatchBytes {
		w.buf = nil // one huge message: do not keep its buffer
	}
	return b
}

// decoders keeps partition.Decoders between batches: the chunks one batch
// left partly used serve the next, so a batch of one message allocates a
// share of a chunk, not a whole chunk of each kind it holds. A decoder
// only ever hands out fresh slots, so what earlier batches returned stays
// valid.
var decoders = sync.Pool{New: func() any { return new(partition.Decoder) }}

// decodeBatch reads every message of an OpEngine payload. The messages'
// keys and values alias b, which must not change afterwards
// (partition.Decoder.DecodeShared).
func decodeBatch(b []byte) ([]partition.Message, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty engine batch", wire.ErrMalformed)
	}
	b = b[1:]
	// Frame the messages first: the count sizes the result, and a batch
	// with a bad length fails before anything is decoded.
	count := 0
	for rest := b; len(rest) > 0; count++ {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return nil, fmt.Errorf("%w: engine batch length", wire.ErrMalformed)
		}
		rest = rest[k+int(n):]
	}
	out := make([]partition.Message, 0, count)
	dec := decoders.Get().(*partition.Decoder)
	defer decoders.Put(dec)
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		m, err := dec.DecodeShared(b[k : k+int(n)])
		if err != nil {
			return nil, err
		}
		out = append(out, m)
		b = b[k+int(n):]
	}
	return out, nil
}
