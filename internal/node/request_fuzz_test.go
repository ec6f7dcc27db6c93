package node

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// replyCaller is a transport.Caller whose every call is answered with
// reply.
type replyCaller struct {
	transport.Caller // the other methods: unused, nil
	reply            []byte
}

func (c replyCaller) Call(context.Context, uint32, []byte, ...transport.CallOption) ([]byte, error) {
	return c.reply, nil
}

// decodePayload is what a handler that decodes its payload does with it
// (fero's Request.Decode): the payload is a stranger's bytes.
func decodePayload(_ context.Context, req *Request) ([]byte, error) {
	if len(req.Payload) == 0 {
		return nil, nil
	}
	var v any
	if err := wire.DecodeValue(req.Payload, &v); err != nil {
		return nil, errs.Errorf(errs.InvalidArgument, "bad payload: %v", err)
	}
	return nil, nil
}

// FuzzRequestDecode takes arbitrary bytes as a protocol.OpRequest payload, as the
// user payload inside a well-formed one, and as the answer to a request.
// Decoding them must never panic: a request is refused with
// InvalidArgument or reaches the handler, whose decode of the payload
// fails or succeeds as the bounded decoder's does; what decodes encodes
// back to the same request; an answer is the handler's reply, a retry or
// an error. The requests go to a real node, over a connection, whose
// handler decodes the payload.
func FuzzRequestDecode(f *testing.F) {
	n := startFuzzNode(f, func(c *Config) { c.Handler = decodePayload })
	client := &reusableConn{addr: n.Addr()}
	f.Cleanup(client.drop)

	value, err := msgpack.Marshal(map[string]any{"name": "x", "tags": []any{1, "two", nil}})
	require.NoError(f, err)
	f.Add((&protocol.Request{Verb: "FUZZ", Key: "k", Payload: value}).Append(nil))
	f.Add((&protocol.Request{Verb: protocol.VerbUpdate, Key: "k", Payload: value, Hops: 1}).Append(nil))
	f.Add((&protocol.Request{Verb: "FUZZ", Key: "k", Payload: nested(1 << 20)}).Append(nil))
	f.Add((&protocol.Request{Verb: "FUZZ", Key: "k", Payload: value, Meta: protocol.Meta{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}).Append(nil))
	f.Add(nested(1 << 20))
	f.Add(append([]byte{protocol.ReplyOK}, value...))
	f.Add([]byte{protocol.ReplyRetry})
	f.Add(protocol.AppendReply(nil, protocol.Meta{"x-quota-left", "41"}, value))
	f.Add([]byte("\xde\xad\xbe\xef garbage"))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, b []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), fuzzExecTimeout)
		defer cancel()

		// As a request: what decodes encodes back to itself.
		var wr protocol.Request
		decoded := wr.Decode(b) == nil
		if decoded {
			var again protocol.Request
			require.NoError(t, again.Decode(wr.Append(nil)))
			require.Equal(t, wr.Verb, again.Verb)
			require.Equal(t, wr.Key, again.Key)
			require.True(t, bytes.Equal(wr.Payload, again.Payload))
			require.Equal(t, wr.Hops, again.Hops)
			require.Equal(t, wr.Wait, again.Wait)
			require.Equal(t, wr.Meta, again.Meta)
			require.Equal(t, wr.Trace, again.Trace)
			require.Equal(t, wr.Timeout, again.Timeout)
		}

		// As an answer to a request.
		reply, retry, err := protocol.CallOnce(ctx, replyCaller{reply: b}, nil)
		switch {
		case len(b) == 0:
			require.Equal(t, errs.Internal, errs.CodeOf(err), "an empty answer: %v", err)
		case b[0] == protocol.ReplyOK:
			require.NoError(t, err)
			require.Equal(t, b[1:], reply)
		case b[0] == protocol.ReplyOKMeta:
			// Headers, then the reply: a reply that ends the answer, or
			// an error for headers that do not read.
			require.False(t, retry)
			if err == nil {
				require.True(t, len(reply) < len(b))
				require.True(t, bytes.Equal(b[len(b)-len(reply):], reply))
			} else {
				require.Equal(t, errs.Internal, errs.CodeOf(err), "%v", err)
			}
		default:
			require.True(t, retry, "an answer of status %d", b[0])
		}
		// protocol.CallNode retries a retry until its context ends: one that
		// has ended stops it at the first pause.
		done, stop := context.WithCancel(ctx)
		stop()
		reply2, err2 := protocol.CallNode(done, replyCaller{reply: b}, "FUZZ", "k", nil)
		if retry {
			require.ErrorIs(t, err2, context.Canceled)
		} else {
			require.Equal(t, reply, reply2)
			require.Equal(t, errs.CodeOf(err), errs.CodeOf(err2))
		}

		// To a node, as the request and as the payload of one. The
		// node owns every partition, so the handler answers.
		c := client.get(ctx, t)
		payloadOK := func(p []byte) bool {
			var v any
			return len(p) == 0 || wire.DecodeValue(p, &v) == nil
		}
		reply, err = c.Call(ctx, protocol.OpRequest, b)
		switch {
		case !decoded:
			require.Equal(t, errs.InvalidArgument, errs.CodeOf(err), "a malformed request: %v", err)
			require.ErrorContains(t, err, "bad request")
		case payloadOK(wr.Payload):
			require.NoError(t, err)
			require.Equal(t, protocol.OKReply, reply)
		default:
			require.Equal(t, errs.InvalidArgument, errs.CodeOf(err), "a bad payload: %v", err)
			require.ErrorContains(t, err, "bad payload")
		}
		reply, err = protocol.CallNode(ctx, c, "FUZZ", "k", b)
		if payloadOK(b) {
			require.NoError(t, err)
			require.Empty(t, reply)
		} else {
			require.Equal(t, errs.InvalidArgument, errs.CodeOf(err), "a bad payload: %v", err)
		}
	})
}
