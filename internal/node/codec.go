package node

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/wire"
)

// An engine message on the wire is one byte of partition.MsgKind followed
// by the message's msgpack encoding. A protocol.OpEngine payload is a batch: one
// flags byte (flagMustDeliver: the batch holds a message that must not be
// dropped, see spill.go; flagCluster: the sender's cluster follows), the
// sender's cluster if flagged (its founder as a uvarint length and bytes,
// then its incarnation as a uvarint), then each message as a uvarint
// length and its bytes. The driver sends each peer one batch per round of
// engine output.
const (
	flagMustDeliver byte = 1
	flagCluster     byte = 2
)

// maxFounderBytes bounds a cluster's founder ID on the wire (node IDs are
// far shorter).
const maxFounderBytes = 1 << 10

// appendCluster encodes a batch's cluster header (nothing for none).
func appendCluster(b []byte, c partition.ClusterID) []byte {
	if c.IsZero() {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(c.Founder)))
	b = append(b, c.Founder...)
	return binary.AppendUvarint(b, c.Inc)
}

// maxBatchBytes bounds one batch (one message larger than it goes alone);
// a round's messages for one peer beyond it go in further batches. With
// the inbox's bound on batches it bounds what a node holds unread.
const maxBatchBytes = 256 << 10

// batchWriter builds one peer's batches.
type batchWriter struct {
	buf      []byte
	critical bool
}

// add appends one encoded message; hdr is the sender's cluster
// (appendCluster), written when the message starts a batch.
func (w *batchWriter) add(hdr, msg []byte) {
	if len(w.buf) == 0 {
		if len(hdr) > 0 {
			w.buf = append(append(w.buf, flagCluster), hdr...)
		} else {
			w.buf = append(w.buf, 0)
		}
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

// freeDecoders keeps partition.Decoders between batches. Each batch has
// one of its own until the round that stepped it has been acted on (see
// Node.release); Reset then makes its messages' memory serve a later
// batch, so a steady stream of batches allocates nothing for messages. It
// is a bounded free list rather than a sync.Pool, which the garbage
// collector empties: under load it runs every few dozen milliseconds.
type freeDecoders struct {
	c    chan *partition.Decoder
	kept atomic.Int64 // the slots the decoders in c keep (Decoder.Kept)
}

// maxFreeDecoders bounds the decoders a node keeps free: as many as the
// batches a busy round steps (maxBatch).
// Together they keep the memory of up to keptSlots messages and entries
// (about 100 bytes each); past that, a decoder keeps one small chunk of
// each kind. Each keeps up to decoderKeep of each kind.
const (
	maxFreeDecoders = 256
	keptSlots       = 1 << 16
	decoderKeep     = 2048
	smallKeep       = 32
)

func newFreeDecoders() *freeDecoders {
	return &freeDecoders{c: make(chan *partition.Decoder, maxFreeDecoders)}
}

func (f *freeDecoders) get() *partition.Decoder {
	select {
	case d := <-f.c:
		f.kept.Add(-int64(d.Kept()))
		return d
	default:
		return new(partition.Decoder)
	}
}

// put resets d and keeps it, unless enough are kept.
func (f *freeDecoders) put(d *partition.Decoder) {
	d.Reset(decoderKeep)
	if f.kept.Load()+int64(d.Kept()) > keptSlots {
		d.Reset(smallKeep)
	}
	k := int64(d.Kept())
	f.kept.Add(k)
	select {
	case f.c <- d:
	default:
		f.kept.Add(-k)
	}
}

// decodeBatch reads every message of a protocol.OpEngine payload, and the
// sender's cluster, with dec. The messages' keys and values alias b,
// which must not change afterwards (partition.Decoder.DecodeShared), and
// the messages are valid until dec.Reset. last is the cluster the sender's
// previous batch named: when this one names the same, its founder string
// is reused rather than allocated.
func decodeBatch(dec *partition.Decoder, b []byte, last partition.ClusterID) (partition.ClusterID, []partition.Message, error) {
	var c partition.ClusterID
	if len(b) == 0 {
		return c, nil, fmt.Errorf("%w: empty engine batch", wire.ErrMalformed)
	}
	flags := b[0]
	b = b[1:]
	if flags&flagCluster != 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n == 0 || n > maxFounderBytes || n > uint64(len(b)-k) {
			return c, nil, fmt.Errorf("%w: engine batch cluster", wire.ErrMalformed)
		}
		founder := b[k : k+int(n)]
		b = b[k+int(n):]
		inc, k := binary.Uvarint(b)
		if k <= 0 {
			return c, nil, fmt.Errorf("%w: engine batch cluster", wire.ErrMalformed)
		}
		b = b[k:]
		if string(founder) == last.Founder { // no allocation
			c = partition.ClusterID{Founder: last.Founder, Inc: inc}
		} else {
			c = partition.ClusterID{Founder: string(founder), Inc: inc}
		}
	}
	// Frame the messages first: the count sizes the result, and a batch
	// with a bad length fails before anything is decoded.
	count := 0
	for rest := b; len(rest) > 0; count++ {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return c, nil, fmt.Errorf("%w: engine batch length", wire.ErrMalformed)
		}
		rest = rest[k+int(n):]
	}
	out := dec.Messages(count)
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		m, err := dec.DecodeShared(b[k : k+int(n)])
		if err != nil {
			return c, nil, err
		}
		out = append(out, m)
		b = b[k+int(n):]
	}
	return c, out, nil
}
