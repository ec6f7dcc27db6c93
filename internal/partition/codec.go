package partition

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/wire"
)

// Entries and forwarded writes are the engine messages sent once per write,
// so they have hand-written msgpack encodings: arrays, not maps keyed by
// field name, and no reflection. Everything else uses the struct tags.
//
//	Entry    [term, owner, offset, type, key, value]
//	Forward       [partition, id, hops, type, key, value, wait, k]
//	ForwardReply  [partition, id, term, owner, offset, code, msg, owner hint]

var (
	_ msgpack.CustomEncoder = Entry{}
	_ msgpack.CustomDecoder = (*Entry)(nil)
	_ msgpack.CustomEncoder = (*Forward)(nil)
	_ msgpack.CustomDecoder = (*Forward)(nil)
	_ msgpack.CustomEncoder = (*ForwardReply)(nil)
	_ msgpack.CustomDecoder = (*ForwardReply)(nil)
)

// EncodeMsgpack implements msgpack.CustomEncoder.
func (e Entry) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeArrayLen(6); err != nil {
		return err
	}
	if err := enc.EncodeUint(e.Epoch.Term); err != nil {
		return err
	}
	if err := enc.EncodeString(e.Epoch.Owner); err != nil {
		return err
	}
	if err := enc.EncodeUint(e.Offset); err != nil {
		return err
	}
	if err := enc.EncodeUint(uint64(e.Type)); err != nil {
		return err
	}
	if err := enc.EncodeString(e.Key); err != nil {
		return err
	}
	return enc.EncodeBytes(e.Value)
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (e *Entry) DecodeMsgpack(dec *msgpack.Decoder) error {
	if err := arrayOf(dec, 6, "entry"); err != nil {
		return err
	}
	var err error
	var t uint8
	if e.Epoch.Term, err = dec.DecodeUint64(); err != nil {
		return err
	}
	if e.Epoch.Owner, err = dec.DecodeString(); err != nil {
		return err
	}
	if e.Offset, err = dec.DecodeUint64(); err != nil {
		return err
	}
	if t, err = dec.DecodeUint8(); err != nil {
		return err
	}
	e.Type = wire.RecordType(t)
	if e.Key, err = dec.DecodeString(); err != nil {
		return err
	}
	e.Value, err = dec.DecodeBytes()
	return err
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *Forward) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeArrayLen(8); err != nil {
		return err
	}
	if err := encodeUints(enc, uint64(m.Partition), m.ID, uint64(m.Hops), uint64(m.Type)); err != nil {
		return err
	}
	if err := enc.EncodeString(m.Key); err != nil {
		return err
	}
	if err := enc.EncodeBytes(m.Value); err != nil {
		return err
	}
	if err := enc.EncodeUint(uint64(m.Wait)); err != nil {
		return err
	}
	return enc.EncodeUint(uint64(m.K))
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *Forward) DecodeMsgpack(dec *msgpack.Decoder) error {
	if err := arrayOf(dec, 8, "forward"); err != nil {
		return err
	}
	var err error
	var t, w uint8
	if m.Partition, err = dec.DecodeUint32(); err != nil {
		return err
	}
	if m.ID, err = dec.DecodeUint64(); err != nil {
		return err
	}
	if m.Hops, err = dec.DecodeUint8(); err != nil {
		return err
	}
	if t, err = dec.DecodeUint8(); err != nil {
		return err
	}
	m.Type = wire.RecordType(t)
	if m.Key, err = dec.DecodeString(); err != nil {
		return err
	}
	if m.Value, err = dec.DecodeBytes(); err != nil {
		return err
	}
	if w, err = dec.DecodeUint8(); err != nil {
		return err
	}
	m.Wait = Wait(w)
	m.K, err = dec.DecodeUint8()
	return err
}

func arrayOf(dec *msgpack.Decoder, n int, what string) error {
	l, err := dec.DecodeArrayLen()
	if err != nil {
		return err
	}
	if l != n {
		return fmt.Errorf("%s: array of %d fields, want %d", what, l, n)
	}
	return nil
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *ForwardReply) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeArrayLen(8); err != nil {
		return err
	}
	if err := encodeUints(enc, uint64(m.Partition), m.ID, m.Position.Epoch.Term); err != nil {
		return err
	}
	if err := enc.EncodeString(m.Position.Epoch.Owner); err != nil {
		return err
	}
	if err := encodeUints(enc, m.Position.Offset, uint64(m.Code)); err != nil {
		return err
	}
	if err := enc.EncodeString(m.Msg); err != nil {
		return err
	}
	return enc.EncodeString(m.Owner)
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *ForwardReply) DecodeMsgpack(dec *msgpack.Decoder) error {
	if err := arrayOf(dec, 8, "forward reply"); err != nil {
		return err
	}
	var err error
	if m.Partition, err = dec.DecodeUint32(); err != nil {
		return err
	}
	if m.ID, err = dec.DecodeUint64(); err != nil {
		return err
	}
	if m.Position.Epoch.Term, err = dec.DecodeUint64(); err != nil {
		return err
	}
	if m.Position.Epoch.Owner, err = dec.DecodeString(); err != nil {
		return err
	}
	if m.Position.Offset, err = dec.DecodeUint64(); err != nil {
		return err
	}
	if m.Code, err = dec.DecodeUint32(); err != nil {
		return err
	}
	if m.Msg, err = dec.DecodeString(); err != nil {
		return err
	}
	m.Owner, err = dec.DecodeString()
	return err
}

func encodeUints(enc *msgpack.Encoder, us ...uint64) error {
	for _, u := range us {
		if err := enc.EncodeUint(u); err != nil {
			return err
		}
	}
	return nil
}
