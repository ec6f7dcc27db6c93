package node

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/wire"
)

// OpEngine carries one partition engine message, one-way: the engines
// answer each other with messages of their own, never with transport
// replies.
const OpEngine uint32 = 3

// An engine message on the wire is one byte of partition.MsgKind followed
// by the message's msgpack encoding.

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
