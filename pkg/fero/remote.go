package fero

import (
	"context"
	"iter"
	"slices"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// Remote is a connection from outside the cluster to one node of a
// resource, at its data-plane address: for tools such as the fero CLI, and
// for processes that should not join the cluster. It does not keep a copy
// of the resource: every read asks the owner, through the node, which
// forwards what it does not own (at most two hops). A service that reads
// often should open the resource as a [Client] instead.
//
// Its methods are safe for concurrent use; the connection is redialed when
// it breaks.
type Remote struct {
	peer   *transport.Peer
	tracer trace.Tracer // WithTracerProvider; nil: no spans
	// writer names its writes and calls for exactly-once (nil with
	// WithoutRetry): one that fails indefinite is made again.
	writer *protocol.Writer
	call   CallFunc   // Call through its interceptors, composed at Dial
	stream StreamFunc // Stream through its interceptors
}

// Dial connects to the node at addr (its data-plane address, which
// [Resource.Addr] and `fero serve` print). It takes [DialOption]s: the
// [Option]s a node takes too (the transport's: TLS, connect timeout,
// frame size, dialer; tracing; the call and stream interceptors,
// [WithCallRetry], [WithCallTimeout], [WithoutRetry]; and a credential)
// and [WithRetry], its redial backoff. A node's own options (a
// [NodeOption], such as [WithDataDir]) do not compile here. The
// credential is proved on every connection: [WithToken], or
// [WithClusterSecret]'s first secret (which also lets it forget servers).
// A node with credentials refuses a connection that proves none.
func Dial(ctx context.Context, addr string, opts ...DialOption) (*Remote, error) {
	cfg := newDialConfig(opts)
	if err := checkSecrets(cfg.secrets); err != nil {
		return nil, err
	}
	if len(cfg.token) > 0 && len(cfg.token) < MinSecretSize {
		return nil, errs.Errorf(errs.InvalidArgument, "client token is %d bytes; want at least %d", len(cfg.token), MinSecretSize)
	}
	topts := cfg.transport
	switch {
	case len(cfg.token) > 0:
		key := protocol.TokenKey(cfg.token)
		topts = append(slices.Clone(topts), transport.WithOnDial(func(ctx context.Context, c *transport.Conn) error {
			return protocol.Authenticate(ctx, c, protocol.CredToken, key)
		}))
	case len(cfg.secrets) > 0:
		key := protocol.SecretKey(cfg.secrets[0])
		topts = append(slices.Clone(topts), transport.WithOnDial(func(ctx context.Context, c *transport.Conn) error {
			return protocol.Authenticate(ctx, c, protocol.CredSecret, key)
		}))
	}
	p, err := transport.Dial(ctx, addr, topts...)
	if err != nil {
		return nil, err
	}
	c := &Remote{peer: p, tracer: cfg.tracer}
	if !cfg.noRetry {
		c.writer = protocol.NewWriter("remote")
	}
	c.call = chainCalls(c.callDirect, callChain(cfg))
	c.stream = chainStreams(c.streamDirect, cfg.streamInterceptors)
	return c, nil
}

// clientSpan is the start options of a Remote's spans, made once.
var clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// span starts the span of one call or write when the Remote traces.
func (c *Remote) span(ctx context.Context, name, verb string) (context.Context, trace.Span) {
	ctx, span := c.tracer.Start(ctx, name, clientSpan...)
	if span.IsRecording() {
		if name != "fero.get" {
			span.SetName(name + " " + verb)
		}
		span.SetAttributes(attribute.String("fero.verb", verb), attribute.String("fero.addr", c.peer.Addr()))
	}
	return ctx, span
}

// callNode sends one request, as a span when the Remote traces.
func (c *Remote) callNode(ctx context.Context, name, verb, key string, payload []byte, o protocol.CallOpts) ([]byte, error) {
	if c.tracer == nil {
		return protocol.CallNodeWith(ctx, c.peer, verb, key, payload, o)
	}
	ctx, span := c.span(ctx, name, verb)
	out, err := protocol.CallNodeWith(ctx, c.peer, verb, key, payload, o)
	if err != nil {
		span.SetAttributes(attribute.String("fero.code", errs.CodeOf(err).String()))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return out, err
}

// Addr returns the address the remote dials.
func (c *Remote) Addr() string { return c.peer.Addr() }

// Call sends a request to the owner of key, through the node, and decodes
// the reply into reply (a pointer; nil discards it). See [Resource.Call].
func (c *Remote) Call(ctx context.Context, verb, key string, payload, reply any) error {
	return c.call(ctx, verb, key, payload, reply)
}

// callDirect is Call without its interceptors.
func (c *Remote) callDirect(ctx context.Context, verb, key string, payload, reply any) error {
	b, err := encodePayload(payload)
	if err != nil {
		return err
	}
	var o protocol.CallOpts
	if verb != VerbGet && verb != VerbVersion {
		o.Writer = c.writer // its sequence taken as it is sent
	}
	out, err := c.callNode(ctx, "fero.call", verb, key, b, o)
	if err != nil || reply == nil || len(out) == 0 {
		return err
	}
	if err := wire.DecodeValue(out, reply); err != nil {
		return errs.Errorf(errs.Internal, "fero: decode the reply to %s %q: %w", verb, key, err)
	}
	return nil
}

// CallAsync sends a request like [Remote.Call] but does not wait, so a
// caller can keep many in flight on the one connection: done is called
// exactly once with the reply's msgpack encoding (valid only until done
// returns) or the error. It returns an error, and never calls done, if the
// request could not be sent. done runs on the connection's goroutine: it
// must return promptly and must not block on this Remote. The call
// interceptors ([WithCallInterceptors]) and tracing, which wrap a whole
// blocking call, do not apply; the caller's deadline and headers do, as
// for [Resource.CallAsync]. The request keeps nothing of payload once
// CallAsync returns: a [msgpack.RawMessage] buffer may be reused for the
// next call.
func (c *Remote) CallAsync(ctx context.Context, verb, key string, payload any, done func(reply msgpack.RawMessage, err error)) error {
	b, to, err := asyncArgs(payload, done)
	if err != nil {
		return err
	}
	return protocol.CallNodeAsyncTo(ctx, c.peer, verb, key, b, protocol.WaitSpec{}, to)
}

// Get decodes the owner's value at key into v; ok is false when there is
// none.
func (c *Remote) Get(ctx context.Context, key string, v any) (ok bool, err error) {
	out, err := c.callNode(ctx, "fero.get", VerbGet, key, nil, protocol.CallOpts{})
	if err != nil || len(out) == 0 {
		return false, err
	}
	if err := wire.DecodeValue(out, v); err != nil {
		return true, errs.Errorf(errs.Internal, "fero: decode %q: %w", key, err)
	}
	return true, nil
}

// Update sets the value at key; it returns once the write reached the
// wait level given ([Ack], the owner's commit, unless one is given).
func (c *Remote) Update(ctx context.Context, key string, value any, wait ...Wait) error {
	return c.write(ctx, VerbUpdate, key, value, wait)
}

// Add sets the value at key only if there is none.
func (c *Remote) Add(ctx context.Context, key string, value any, wait ...Wait) error {
	return c.write(ctx, VerbAdd, key, value, wait)
}

// Remove deletes the value at key.
func (c *Remote) Remove(ctx context.Context, key string, wait ...Wait) error {
	return c.write(ctx, VerbRemove, key, nil, wait)
}

// write sends a built-in write that waits, on the owner, for the last of
// wait (the owner's commit when none is given).
func (c *Remote) write(ctx context.Context, verb, key string, value any, wait []Wait) error {
	return c.writeIf(ctx, verb, key, value, wait, protocol.IfVersion{})
}

// writeIf is write, as a compare-and-set when cond is set.
func (c *Remote) writeIf(ctx context.Context, verb, key string, value any, wait []Wait, cond protocol.IfVersion) error {
	var spec protocol.WaitSpec
	if len(wait) > 0 {
		w := wait[len(wait)-1]
		if err := w.validate(); err != nil {
			return err
		}
		spec = w.spec()
	}
	b, err := encodePayload(value)
	if err != nil {
		return err
	}
	_, err = c.callNode(ctx, "fero.write", verb, key, b, protocol.CallOpts{Wait: spec, If: cond, Writer: c.writer})
	return err
}

// GetVersion decodes the owner's value at key into v, as [Remote.Get],
// and returns its version, read together (a read through the owner, so
// the version names a write that no later owner loses).
func (c *Remote) GetVersion(ctx context.Context, key string, v any) (ok bool, ver Version, err error) {
	out, err := c.callNode(ctx, "fero.get", VerbVersion, key, nil, protocol.CallOpts{})
	if err != nil {
		return false, 0, err
	}
	var pair struct {
		_msgpack struct{} `msgpack:",as_array"`
		Version  uint64
		Value    msgpack.RawMessage
	}
	if err := wire.DecodeValue(out, &pair); err != nil {
		return false, 0, errs.Errorf(errs.Internal, "fero: decode the version of %q: %w", key, err)
	}
	if len(pair.Value) == 0 || pair.Value[0] == 0xc0 { // nil: no value
		return false, Version(pair.Version), nil
	}
	if err := wire.DecodeValue(pair.Value, v); err != nil {
		return true, Version(pair.Version), errs.Errorf(errs.Internal, "fero: decode %q: %w", key, err)
	}
	return true, Version(pair.Version), nil
}

// UpdateIf sets the value at key only if key is at version ver; see
// [Resource.UpdateIf].
func (c *Remote) UpdateIf(ctx context.Context, key string, ver Version, value any, wait ...Wait) error {
	return c.writeIf(ctx, VerbUpdate, key, value, wait, protocol.IfVersion{Set: true, Version: uint64(ver)})
}

// RemoveIf deletes the value at key only if key is at version ver; see
// [Resource.UpdateIf].
func (c *Remote) RemoveIf(ctx context.Context, key string, ver Version, wait ...Wait) error {
	return c.writeIf(ctx, VerbRemove, key, nil, wait, protocol.IfVersion{Set: true, Version: uint64(ver)})
}

// Status returns the node's view of its cluster.
func (c *Remote) Status(ctx context.Context) (*NodeStatus, error) {
	return c.status(ctx, nil)
}

// StatusWithPartitions is Status with every partition's detail (role,
// epochs, keys, digest) in NodeStatus.Parts: where two nodes' digests
// differ, it shows which partitions do.
func (c *Remote) StatusWithPartitions(ctx context.Context) (*NodeStatus, error) {
	req, err := msgpack.Marshal(protocol.StatusRequest{Partitions: true})
	if err != nil {
		return nil, err
	}
	return c.status(ctx, req)
}

// statusNoDigest is Status without the resource's digest (0), which
// costs the node a hash of every partition written since it was last
// asked: what a backup's first call needs.
func (c *Remote) statusNoDigest(ctx context.Context) (*NodeStatus, error) {
	req, err := msgpack.Marshal(protocol.StatusRequest{NoDigest: true})
	if err != nil {
		return nil, err
	}
	return c.status(ctx, req)
}

func (c *Remote) status(ctx context.Context, req []byte) (*NodeStatus, error) {
	b, err := c.peer.Call(ctx, protocol.OpStatus, req)
	if err != nil {
		return nil, err
	}
	var st NodeStatus
	if err := wire.DecodeValue(b, &st); err != nil {
		return nil, errs.Errorf(errs.Internal, "fero: decode status: %w", err)
	}
	return &st, nil
}

// Forget removes servers gone for good from the cluster's configuration,
// through the node this Remote talks to (see [Resource.Forget]).
func (c *Remote) Forget(ctx context.Context, ids ...string) error {
	if len(ids) == 0 || slices.ContainsFunc(ids, func(id string) bool { return id == "" || strings.Contains(id, "\n") }) {
		return errs.New(errs.InvalidArgument, "fero: forget: give one or more server IDs, none empty or with a newline")
	}
	_, err := c.peer.Call(ctx, protocol.OpForget, []byte(strings.Join(ids, "\n")))
	return err
}

// Tail yields the changes the node applies to its copy, from now on, until
// ctx ends, the loop breaks, or the stream fails (the error is yielded
// last). The node holds up to 4,096 changes for a slow reader and then
// drops them; missed says how many it dropped so far.
func (c *Remote) Tail(ctx context.Context) iter.Seq2[TailChange, error] {
	return func(yield func(TailChange, error) bool) {
		s, err := c.peer.Stream(ctx, protocol.OpTail, nil)
		if err != nil {
			yield(TailChange{}, err)
			return
		}
		defer s.Close()
		for {
			b, err := s.Recv()
			if err != nil {
				if ctx.Err() == nil {
					yield(TailChange{}, err)
				}
				return
			}
			var rec protocol.TailRecord
			if err := wire.DecodeValue(b, &rec); err != nil {
				yield(TailChange{}, errs.Errorf(errs.Internal, "fero: decode change: %w", err))
				return
			}
			ch := TailChange{Change: Change{
				Kind: ChangeKind(rec.Kind), Type: ChangeType(rec.Type), Key: rec.Key,
				Value: append(msgpack.RawMessage(nil), rec.Value...), Partition: rec.Partition, Term: rec.Term, Offset: rec.Offset,
			}, Missed: rec.Missed}
			if !yield(ch, nil) {
				return
			}
		}
	}
}

// TailChange is a change from [Remote.Tail].
type TailChange struct {
	Change
	// Missed counts the changes the node dropped from this tail so far.
	Missed uint64
}

// Close closes the connection.
func (c *Remote) Close() error { return c.peer.Close() }
