package protocol

import (
	"context"
	"strings"

	"github.com/fero-go/fero/internal/errs"
)

// A caller's request headers ride in its context (WithMeta) to the
// requests it makes: a node's Request and CallNodeWait put them in the
// request's metadata, and the owner's handler reads them from its
// request's Meta.

type metaKey struct{}

// WithMeta returns a copy of ctx whose requests carry the pair name,
// value besides those ctx already carries. The name is lower-cased.
func WithMeta(ctx context.Context, name, value string) context.Context {
	prev, _ := ctx.Value(metaKey{}).(Meta)
	m := make(Meta, len(prev), len(prev)+2)
	copy(m, prev)
	return context.WithValue(ctx, metaKey{}, append(m, strings.ToLower(name), value))
}

// MetaFrom returns the pairs ctx carries for its requests, nil for none.
func MetaFrom(ctx context.Context) Meta {
	m, _ := ctx.Value(metaKey{}).(Meta)
	return m
}

// CheckMeta checks a caller's pairs before they are sent: names of
// lower-case ASCII letters, digits, '-', '_' and '.', at most MaxMetaName
// bytes and not reserved (the W3C trace context's, and any starting
// "fero-"); values of at most MaxMetaValue bytes; at most MaxMetaPairs
// pairs, with room for the ones fero adds.
func CheckMeta(m Meta) error {
	if len(m) == 0 {
		return nil
	}
	if len(m)/2 > MaxMetaPairs-3 {
		return errs.Errorf(errs.InvalidArgument, "fero: %d request headers, at most %d", len(m)/2, MaxMetaPairs-3)
	}
	for i := 0; i+1 < len(m); i += 2 {
		name, value := m[i], m[i+1]
		switch {
		case name == "" || len(name) > MaxMetaName:
			return errs.Errorf(errs.InvalidArgument, "fero: request header name %q: want 1 to %d bytes", name, MaxMetaName)
		case strings.HasPrefix(name, "fero-") || name == TraceparentName || name == TracestateName:
			return errs.Errorf(errs.InvalidArgument, "fero: request header name %q is reserved", name)
		case len(value) > MaxMetaValue:
			return errs.Errorf(errs.InvalidArgument, "fero: request header %q: a value of %d bytes, at most %d", name, len(value), MaxMetaValue)
		}
		for _, c := range []byte(name) {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' && c != '.' {
				return errs.Errorf(errs.InvalidArgument, "fero: request header name %q: want lower-case ASCII letters, digits, '-', '_' and '.'", name)
			}
		}
	}
	return nil
}

// replyMetaKey is the context key of a caller's sink for reply headers.
type replyMetaKey struct{}

// WithReplyMeta returns a copy of ctx whose requests put the reply
// headers their handlers send in *sink (appended, name then value).
func WithReplyMeta(ctx context.Context, sink *Meta) context.Context {
	return context.WithValue(ctx, replyMetaKey{}, sink)
}

// handlerCtx is a local caller's context as its handler gets it: without
// the caller's request headers and reply-header sink, which belong to the
// call, not to the calls the handler makes (a remote handler's context
// has neither).
type handlerCtx struct{ context.Context }

func (c handlerCtx) Value(key any) any {
	switch key.(type) {
	case metaKey, replyMetaKey:
		return nil
	}
	return c.Context.Value(key)
}

// ReplyMetaSink returns the sink ctx carries for reply headers
// (WithReplyMeta), nil for none.
func ReplyMetaSink(ctx context.Context) *Meta {
	sink, _ := ctx.Value(replyMetaKey{}).(*Meta)
	return sink
}

// HandlerContext is a local caller's ctx as its handler gets it
// (handlerCtx).
func HandlerContext(ctx context.Context) context.Context { return handlerCtx{ctx} }
