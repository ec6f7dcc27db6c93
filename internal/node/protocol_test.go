package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// TestNegotiate: two ranges speak the highest version both know, and
// ranges that do not meet are refused with both named.
func TestNegotiate(t *testing.T) {
	for _, c := range []struct {
		theirs protoRange
		want   uint32 // 0: refused
	}{
		{rangeOf(hello{ID: "old"}), 1}, // a hello without a version: protocol 1
		{protoRange{1, 1}, 1},
		{protoRange{1, 2}, 2},
		{protoRange{2, 7}, 2},
		{protoRange{3, 4}, 0},
		{protoRange{0, 0}, 0},
		{protoRange{2, 1}, 0}, // an empty range
	} {
		v, err := negotiate(protoRange{1, 2}, c.theirs, "peer")
		if c.want == 0 {
			require.Error(t, err, "%v", c.theirs)
			assert.Equal(t, errs.FailedPrecondition, errs.CodeOf(err))
			assert.Contains(t, err.Error(), "peer speaks protocol "+c.theirs.String()+" and this node 1-2")
			continue
		}
		require.NoError(t, err, "%v", c.theirs)
		assert.Equal(t, c.want, v, "%v", c.theirs)
	}
	// A build that speaks protocol 1 alone says nothing in its hello, as
	// the builds before versions did, so it reads to both as protocol 1.
	var h hello
	protoRange{1, 1}.announce(&h)
	assert.Zero(t, h.Proto)
	ours.announce(&h)
	assert.Equal(t, protoRange{MinProtocol, ProtocolVersion}, rangeOf(h))
}

// TestHelloProtocols: nodes of different builds connect when their
// ranges meet, with the cluster secret and without, and note the version
// they speak; a node whose range does not meet is refused both ways,
// with the versions named.
func TestHelloProtocols(t *testing.T) {
	for _, secret := range [][]byte{nil, []byte("a cluster secret of enough bytes!")} {
		var secrets [][]byte
		if secret != nil {
			secrets = [][]byte{secret}
		}
		ctx := ctxT(t)
		// A build of protocol 1 (before versions) and this one.
		old, cur := newTestNode(t, "old", secrets...), newTestNode(t, "cur", secrets...)
		old.pool.proto = protoRange{1, 1}
		_, err := old.pool.get(ctx, "cur", cur.addr())
		require.NoError(t, err, "an old build dials this one (secret %v)", secret != nil)
		assert.Equal(t, uint32(1), old.pool.protocolOf("cur"))
		assert.Eventually(t, func() bool { return cur.pool.protocolOf("old") == 1 }, 10*time.Second, time.Millisecond)

		old2, cur2 := newTestNode(t, "old2", secrets...), newTestNode(t, "cur2", secrets...)
		old2.pool.proto = protoRange{1, 1}
		_, err = cur2.pool.get(ctx, "old2", old2.addr())
		require.NoError(t, err, "this build dials an old one (secret %v)", secret != nil)
		assert.Equal(t, uint32(1), cur2.pool.protocolOf("old2"))

		// Two of this build speak its newest.
		peer := newTestNode(t, "peer", secrets...)
		_, err = cur.pool.get(ctx, "peer", peer.addr())
		require.NoError(t, err)
		assert.Equal(t, uint32(ProtocolVersion), cur.pool.protocolOf("peer"))

		// A future build that no longer speaks ours: refused by whichever
		// side reads the other's hello first, with both ranges named.
		future := newTestNode(t, "future", secrets...)
		future.pool.proto = protoRange{ProtocolVersion + 1, ProtocolVersion + 2}
		_, err = cur.pool.get(ctx, "future", future.addr())
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no version in common")
		_, err = future.pool.get(ctx, "cur", cur.addr())
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no version in common")
		assert.Zero(t, cur.pool.protocolOf("future"))
	}
}

// TestHelloAnswersWithItsRange: a node answers a hello without a version
// (an old build's) with its own range, and refuses one outside it.
func TestHelloAnswersWithItsRange(t *testing.T) {
	n := newTestNode(t, "n")
	ctx := ctxT(t)
	c, err := transport.DialConn(ctx, n.addr())
	require.NoError(t, err)
	defer c.Close()
	b, err := msgpack.Marshal(hello{ID: "old"})
	require.NoError(t, err)
	reply, err := c.Call(ctx, protocol.OpHello, b)
	require.NoError(t, err)
	var h hello
	require.NoError(t, wire.DecodeValue(reply, &h))
	assert.Equal(t, protoRange{MinProtocol, ProtocolVersion}, rangeOf(h))

	c2, err := transport.DialConn(ctx, n.addr())
	require.NoError(t, err)
	defer c2.Close()
	b, err = msgpack.Marshal(hello{ID: "far", Proto: 99, MinProto: 90})
	require.NoError(t, err)
	_, err = c2.Call(ctx, protocol.OpHello, b)
	require.Error(t, err)
	assert.Equal(t, errs.FailedPrecondition, errs.CodeOf(err))
	assert.Contains(t, err.Error(), "far speaks protocol 90-99")
}

// TestReportWithoutDigest: a report asked without the digest (the
// dashboard's poll, a backup's first call) leaves it out; one asked
// plainly still has it.
func TestReportWithoutDigest(t *testing.T) {
	nw := memnet.New(46)
	a := startNode(t, nw, "a", false)
	require.Eventually(t, func() bool { return settled([]*Node{a}, 1) }, 20*time.Second, 10*time.Millisecond)
	ctx := ctxT(t)
	require.NoError(t, write(ctx, a, doc.Change{Type: wire.RecordUpdate, Key: "k", Value: wire.AppendUint(nil, 1)}, partition.WaitAck))
	full, err := a.Report(ctx)
	require.NoError(t, err)
	assert.NotZero(t, full.Digest)
	assert.Equal(t, a.Store().Digest(), full.Digest)
	light, err := a.ReportFor(ctx, protocol.StatusRequest{NoDigest: true})
	require.NoError(t, err)
	assert.Zero(t, light.Digest)
	assert.Equal(t, full.Keys, light.Keys)
}
