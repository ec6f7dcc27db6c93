package fero

import "context"

// Caller sends a request with a verb and a key to the owner of the key's
// partition and decodes the reply into reply: *Resource (a server or
// client node) and *Remote are Callers, and so are the typed clients
// ferogen generates over them.
type Caller interface {
	Call(ctx context.Context, verb, key string, payload, reply any) error
}

// CallFunc is one call as a client-side interceptor sees it: Resource.Call
// and Remote.Call without their interceptors.
type CallFunc func(ctx context.Context, verb, key string, payload, reply any) error

// CallInterceptor wraps the calls a Resource or Remote makes (Call, and
// the typed clients over it): it may read or change the context (headers
// with WithHeader, a deadline), the verb, key and payload, and the
// error, and decides whether to call next at all. Interceptors given to
// WithCallInterceptors run in order, the first outermost.
type CallInterceptor func(next CallFunc) CallFunc

// Interceptor wraps the handler of the requests a server node answers
// (with WithHandler, or the built-in handling without one): it may read
// the request (its verb, key, headers), change the context, answer
// itself, or call next. Interceptors given to WithInterceptors run in
// order, the first outermost, on every request the node answers as owner.
type Interceptor func(next Handler) Handler

// WithCallInterceptors makes every Call of the Resource or Remote being
// opened (and of the typed clients over it) go through is, composed once
// when it opens: with none, a call pays nothing for them. Writes (Update,
// Add, Remove, Set) and Send do not go through them.
func WithCallInterceptors(is ...CallInterceptor) Option {
	return option(func(c *config) { c.callInterceptors = append(c.callInterceptors, is...) })
}

// WithInterceptors makes every request this server node answers as the
// key's owner go through is, around its handler (WithHandler's, or the
// built-in handling: then every request, the built-in writes included,
// takes the handler path, a goroutine each).
func WithInterceptors(is ...Interceptor) NodeOption {
	return nodeOption(func(c *config) { c.interceptors = append(c.interceptors, is...) })
}

// chainCalls composes is around call, the first outermost.
func chainCalls(call CallFunc, is []CallInterceptor) CallFunc {
	for i := len(is) - 1; i >= 0; i-- {
		call = is[i](call)
	}
	return call
}

// chainHandler composes is around h, the first outermost.
func chainHandler(h Handler, is []Interceptor) Handler {
	for i := len(is) - 1; i >= 0; i-- {
		h = is[i](h)
	}
	return h
}

// requestKey is the context key of the request a handler answers.
type requestKey struct{}

// RequestFromContext returns the request a handler is answering, from the
// context fero gives the handler (and every interceptor, and the methods
// of a ferogen implementation): req.Resource() is the resource to read
// and write, req.Header its headers. ok is false for a context that did
// not come from a handler.
func RequestFromContext(ctx context.Context) (req *Request, ok bool) {
	req, ok = ctx.Value(requestKey{}).(*Request)
	return req, ok
}
