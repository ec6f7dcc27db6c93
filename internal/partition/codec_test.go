package partition

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/wire"
)

// testBatch encodes n forwards, n replies and one commit of n entries.
func testBatch(t testing.TB, n int) [][]byte {
	t.Helper()
	ep := Epoch{Term: 3, Owner: "a"}
	var out [][]byte
	c := &Commit{Partition: 7}
	for i := range n {
		k := fmt.Sprintf("k%d", i)
		f := &Forward{Partition: 7, ID: uint64(i + 1), Hops: 1, Type: wire.RecordUpdate, Key: k, Value: wire.AppendStr(nil, "v"), Epoch: ep, Deadline: 9}
		r := &ForwardReply{Partition: 7, ID: uint64(i + 1), Position: Position{Epoch: ep, Offset: uint64(i + 1)}}
		for _, m := range []Message{f, r} {
			b, err := AppendMessage(nil, m)
			require.NoError(t, err)
			out = append(out, b)
		}
		c.Entries = append(c.Entries, Entry{Epoch: ep, Offset: uint64(i + 1), Type: wire.RecordUpdate, Key: k, Value: wire.AppendStr(nil, "v")})
	}
	b, err := AppendMessage(nil, c)
	require.NoError(t, err)
	return append(out, b)
}

func decodeAll(t testing.TB, dec *Decoder, batch [][]byte) []Message {
	msgs := dec.Messages(len(batch))
	for _, b := range batch {
		m, err := dec.DecodeShared(b)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// A Decoder hands its messages' memory out again after Reset: a steady
// stream of batches decodes without allocating, and a message kept past
// Reset reads as zero (what the node's release relies on nobody doing).
func TestDecoderReset(t *testing.T) {
	batch := testBatch(t, 100)
	var dec Decoder
	first := decodeAll(t, &dec, batch)
	f, c := first[0].(*Forward), first[len(first)-1].(*Commit)
	require.Equal(t, "k0", f.Key)
	require.Len(t, c.Entries, 100)
	entries := c.Entries
	dec.Reset(4096)
	assert.Equal(t, Forward{}, *f, "a message kept past Reset is zeroed")
	assert.Equal(t, Commit{}, *c)
	assert.Equal(t, Entry{}, entries[0])
	assert.Nil(t, first[0], "the message list is cleared too")

	allocs := testing.AllocsPerRun(20, func() {
		decodeAll(t, &dec, batch)
		dec.Reset(4096)
	})
	assert.Zero(t, allocs, "decoding after Reset allocates")

	again := decodeAll(t, &dec, batch)
	require.Len(t, again, len(batch))
	assert.Equal(t, "k99", again[198].(*Forward).Key)
	assert.Equal(t, uint64(100), again[199].(*ForwardReply).Position.Offset)
	assert.Len(t, again[200].(*Commit).Entries, 100)
}

// Reset keeps the memory of at most keep slots of each kind.
func TestDecoderResetKeepsBounded(t *testing.T) {
	batch := testBatch(t, 3000)
	var dec Decoder
	decodeAll(t, &dec, batch)
	dec.Reset(1 << 20)
	assert.GreaterOrEqual(t, dec.Kept(), 3*3000, "forwards, replies and entries kept")
	decodeAll(t, &dec, batch)
	dec.Reset(32)
	assert.LessOrEqual(t, dec.Kept(), 5*32+32)
	// And it still decodes.
	again := decodeAll(t, &dec, batch)
	assert.Equal(t, "k2999", again[2*2999].(*Forward).Key)
}

// The engine reuses the messages it sent once the driver calls Advance
// (Ready): a steady stream of forwarded writes sends without allocating
// messages.
func TestEngineReusesMessagesAfterAdvance(t *testing.T) {
	n := newNetwork(t, 4, []string{"a", "b"})
	n.settle()
	e := n.nodes["b"].e
	p := -1
	for q := range 4 {
		if o, _ := e.Map().Owner(q); o.ID == "a" {
			p = q
			break
		}
	}
	require.GreaterOrEqual(t, p, 0)
	var sent *Forward
	tok := uint64(1 << 40)
	send := func() {
		tok++
		require.NoError(t, e.Propose(Request{Token: tok, Partition: p, Type: wire.RecordUpdate, Key: "k", Value: wire.AppendStr(nil, "v"), Wait: WaitNone}))
		rd := e.Ready()
		for _, env := range rd.Messages {
			if f, ok := env.Msg.(*Forward); ok {
				sent = f
			}
		}
		e.Advance()
	}
	send()
	require.NotNil(t, sent)
	assert.Equal(t, Forward{}, *sent, "a sent message kept past Advance is zeroed")
	for range 100 { // past the first chunks
		send()
	}
	before := sent
	send()
	assert.Same(t, before, sent, "the engine sent the next write from the same slot")
}
