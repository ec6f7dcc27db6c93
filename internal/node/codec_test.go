package node

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/wire"
)

func sampleMessages() []partition.Message {
	ep := partition.Epoch{Term: 7, Owner: "s2"}
	pos := partition.Position{Epoch: ep, Offset: 1 << 33}
	entries := []partition.Entry{
		{Epoch: ep, Offset: 41, Type: wire.RecordUpdate, Key: "users.ada", Value: []byte{0x81, 0xa1, 'n', 0x01}},
		{Epoch: ep, Offset: 42, Type: wire.RecordRemove, Key: "users.bob"},
	}
	return []partition.Message{
		&partition.Commit{Partition: 17, Entries: entries},
		&partition.CommitAck{Partition: 17, Position: pos},
		&partition.EpochStart{Partition: 3, Epoch: ep, Start: 40, PrevEpoch: partition.Epoch{Term: 6, Owner: "s1"}, Last: 42},
		&partition.Fenced{Partition: 3, Epoch: ep},
		&partition.PosRequest{Partition: 270, Epoch: ep},
		&partition.PosReply{Partition: 270, Epoch: ep, Position: pos, Oldest: 9},
		&partition.Fetch{Partition: 1, ID: 5, From: 10, Max: 512, Base: 3, BaseEpoch: ep, Runs: []partition.Run{{Epoch: ep, First: 4}}},
		&partition.FetchReply{Partition: 1, ID: 5, Position: pos, Start: 2, Entries: entries},
		&partition.SnapshotReply{Partition: 1, ID: 6, Position: pos, Start: 2, OffsetEpoch: ep, TruncateTo: 8, State: []byte{0x80}},
		&partition.SnapshotReply{Partition: 2, ID: 7, Position: pos, Start: 2, OffsetEpoch: ep, TruncateTo: 8, State: []byte{0x81, 0xa1, 'k', 0x01},
			Runs: []partition.Run{{Epoch: partition.Epoch{Term: 6, Owner: "s1"}, First: 1}, {Epoch: ep, First: 30}}, Snap: 99, Chunk: 3, More: true},
		&partition.Forward{Partition: 9, ID: 77, Hops: 1, Type: wire.RecordAdd, Key: "k", Value: []byte{0x01}, Wait: partition.WaitMajority, K: 2},
		&partition.Forward{Partition: 9, ID: 78, Hops: 1, Type: wire.RecordUpdate, Key: "k", Value: []byte{0x01}, Wait: partition.WaitAck, Deadline: 5, Trace: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		&partition.ForwardReply{Partition: 9, ID: 77, Code: 14, Msg: "no quorum", Owner: "s3"},
		&partition.Heartbeat{},
	}
}

func TestMessagesRoundTrip(t *testing.T) {
	for _, m := range sampleMessages() {
		b, err := partition.AppendMessage(nil, m)
		require.NoError(t, err)
		got, err := partition.DecodeMessage(b)
		require.NoError(t, err, "%T", m)
		assert.Equal(t, m, got)
		// The message keeps nothing of b, which a reader reuses: its keys
		// and values are copies.
		for i := range b {
			b[i] = 0xc1 // never used in msgpack
		}
		assert.Equal(t, m, got, "%T after its bytes were overwritten", m)
	}
}

// TestSnapshotReplySharesItsState: decoded from a receive buffer the
// transport keeps, a snapshot reply's state is that buffer's bytes, not a
// copy (a reply carries megabytes; the copy showed in a join's profile).
func TestSnapshotReplySharesItsState(t *testing.T) {
	state := make([]byte, 1<<20)
	for i := range state {
		state[i] = byte(i)
	}
	b, err := partition.AppendMessage(nil, &partition.SnapshotReply{Partition: 4, ID: 1, State: state})
	require.NoError(t, err)
	var dec partition.Decoder
	m, err := dec.DecodeShared(b)
	require.NoError(t, err)
	got := m.(*partition.SnapshotReply).State
	require.True(t, bytes.Equal(state, got), "the state decodes as it was")
	b[len(b)-len(state)-3] ^= 0xff // the state's second byte (four bytes of fields follow the state)
	assert.False(t, bytes.Equal(state, got), "the state is a copy")
}

func TestBadMessagesRefused(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":         nil,
		"unknown kind":  {200, 0x80},
		"truncated":     {byte(partition.KindCommit), 0x82, 0xa1, 'p'},
		"hostile array": {byte(partition.KindCommit), 0x81, 0xa1, 'e', 0xdd, 0xff, 0xff, 0xff, 0xff},
		// [p, term, owner, first, [entries…]] declaring 12 entries in 13 bytes.
		"entries the bytes cannot hold":             append([]byte{byte(partition.KindCommit), 0x95, 1, 1, 0xa1, 's', 1, 0x9c}, make([]byte, 13)...),
		"fetch reply entries the bytes cannot hold": append([]byte{byte(partition.KindFetchReply), 0x97, 1, 1, 1, 0xa1, 's', 1, 0, 0x9c}, make([]byte, 20)...),
		// [p, id, term, owner, offset, start, term, owner, truncate, state, [runs…]] declaring 15 runs in 16 bytes.
		"snapshot reply runs the bytes cannot hold": append([]byte{byte(partition.KindSnapshotReply), 0x9e, 1, 1, 1, 0xa1, 's', 1, 0, 1, 0xa1, 's', 0, 0xc4, 0, 0x9f}, make([]byte, 16)...),
	} {
		_, err := partition.DecodeMessage(b)
		assert.ErrorIsf(t, err, wire.ErrMalformed, "%s", name)
	}
}

func TestCommitEncodingStatesItsEpochOnce(t *testing.T) {
	ep := partition.Epoch{Term: 3, Owner: "s1"}
	mixed := &partition.Commit{Partition: 1, Entries: []partition.Entry{
		{Epoch: ep, Offset: 5, Type: wire.RecordRemove, Key: "a"},
		{Epoch: partition.Epoch{Term: 4, Owner: "s1"}, Offset: 6, Type: wire.RecordRemove, Key: "b"},
	}}
	_, err := partition.AppendMessage(nil, mixed)
	assert.Error(t, err, "a commit mixing epochs has no encoding")
	skip := &partition.Commit{Partition: 1, Entries: []partition.Entry{
		{Epoch: ep, Offset: 5, Type: wire.RecordRemove, Key: "a"},
		{Epoch: ep, Offset: 7, Type: wire.RecordRemove, Key: "b"},
	}}
	_, err = partition.AppendMessage(nil, skip)
	assert.Error(t, err, "nor one skipping offsets")
	_, err = partition.AppendMessage(nil, &partition.Commit{Partition: 1})
	assert.Error(t, err, "nor an empty one")
}

func FuzzDecodeMessage(f *testing.F) {
	for _, m := range sampleMessages() {
		b, err := partition.AppendMessage(nil, m)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := partition.DecodeMessage(b)
		if err != nil {
			return
		}
		// What decodes encodes again and decodes to the same message.
		again, err := partition.AppendMessage(nil, m)
		require.NoError(t, err)
		m2, err := partition.DecodeMessage(again)
		require.NoError(t, err)
		require.Equal(t, m, m2)
	})
}

func TestBatchRoundTrip(t *testing.T) {
	var w batchWriter
	msgs := sampleMessages()
	for _, m := range msgs {
		b, err := partition.AppendMessage(nil, m)
		require.NoError(t, err)
		w.add(nil, b)
	}
	batch := w.take()
	assert.True(t, mustDeliver(batch), "a batch with a Forward must be delivered")
	c, got, err := decodeBatch(new(partition.Decoder), batch, partition.ClusterID{})
	require.NoError(t, err)
	assert.Equal(t, msgs, got)
	assert.True(t, c.IsZero())

	// A batch names its sender's cluster.
	named := partition.ClusterID{Founder: "n1", Inc: 1_700_000_000_000_000_000}
	hdr := appendCluster(nil, named)
	for _, m := range msgs {
		b, err := partition.AppendMessage(nil, m)
		require.NoError(t, err)
		w.add(hdr, b)
	}
	batch = w.take()
	assert.True(t, mustDeliver(batch))
	c, got, err = decodeBatch(new(partition.Decoder), batch, partition.ClusterID{})
	require.NoError(t, err)
	assert.Equal(t, msgs, got)
	assert.Equal(t, named, c)
	c2, _, err := decodeBatch(new(partition.Decoder), batch, c)
	require.NoError(t, err)
	assert.Equal(t, named, c2)

	b, err := partition.AppendMessage(nil, &partition.CommitAck{Partition: 1})
	require.NoError(t, err)
	w.add(nil, b)
	assert.False(t, mustDeliver(w.take()), "commit traffic may be dropped and fetched again")

	for name, bad := range map[string][]byte{
		"empty":         nil,
		"short":         {0, 9, byte(partition.KindCommitAck)},
		"bad length":    {0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"no founder":    {flagCluster, 0},
		"long founder":  {flagCluster, 0xff, 0x7f},
		"short founder": {flagCluster, 5, 'a'},
		"no inc":        {flagCluster, 1, 'a'},
	} {
		_, _, err := decodeBatch(new(partition.Decoder), bad, partition.ClusterID{})
		assert.ErrorIs(t, err, wire.ErrMalformed, name)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	var w batchWriter
	for _, m := range sampleMessages() {
		b, err := partition.AppendMessage(nil, m)
		require.NoError(f, err)
		w.add(nil, b)
	}
	f.Add(w.take())
	for _, m := range sampleMessages() {
		b, err := partition.AppendMessage(nil, m)
		require.NoError(f, err)
		w.add(appendCluster(nil, partition.ClusterID{Founder: "n1", Inc: 42}), b)
	}
	f.Add(w.take())
	// One decoder across inputs, reset after each, as a node's decoders
	// are between batches (freeDecoders): what it decodes must be what a
	// fresh one does, whatever it decoded before.
	var reused partition.Decoder
	f.Fuzz(func(t *testing.T, b []byte) {
		_, fresh, err := decodeBatch(new(partition.Decoder), b, partition.ClusterID{}) // must not panic or allocate without bound
		_, got, err2 := decodeBatch(&reused, b, partition.ClusterID{})
		keep := decoderKeep
		if len(b)%2 == 1 {
			keep = smallKeep
		}
		defer reused.Reset(keep)
		require.Equal(t, err == nil, err2 == nil, "fresh: %v, reused: %v", err, err2)
		if err == nil && (len(fresh) > 0 || len(got) > 0) { // a batch of no message: nil or empty
			require.Equal(t, fresh, got)
		}
	})
}
