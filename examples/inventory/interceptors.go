package main

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fero-go/fero/pkg/fero"
)

// The interceptors. The servers mount two, around every request they
// answer as owner (calls and streams, the service's verbs and fero's
// built-in ones): LogRequests outermost, so that it logs the requests
// Authenticate refuses too. A client mounts bearer's pair, which adds its
// token to every call and stream it makes.

// authorization is the request header that carries the caller's token,
// as "Bearer <token>".
const authorization = "authorization"

// principalKey is the context key of the principal Authenticate admitted.
type principalKey struct{}

// principalOf returns the principal the request being answered
// authenticated as, "" if it went through no Authenticate.
func principalOf(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// Authenticate admits requests whose authorization header is "Bearer
// <token>" with a token of tokens, which maps each token to the principal
// it stands for, and gives the handler a context that carries that
// principal (the service stamps its changes with it). It refuses any
// other request with CodeUnauthenticated before the handler runs; a
// stream so refused ends with that error before its first item.
//
// It guards requests: what callers send with Call and Stream. A member
// node's own writes (Update, Add on a Resource) travel as engine
// messages and carry no headers; the cluster secret is what keeps
// strangers from being members.
func Authenticate(tokens map[string]string) fero.Interceptor {
	return func(next fero.Handler) fero.Handler {
		return func(ctx context.Context, req *fero.Request) (any, error) {
			token, ok := strings.CutPrefix(req.Header(authorization), "Bearer ")
			if !ok || token == "" {
				return nil, fero.Errorf(fero.CodeUnauthenticated, "%s %q: no bearer token", req.Verb, req.Key)
			}
			principal := ""
			for t, p := range tokens {
				// Every token compared in full: the time taken does not
				// say how much of one matched.
				if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
					principal = p
				}
			}
			if principal == "" {
				return nil, fero.Errorf(fero.CodeUnauthenticated, "%s %q: unknown bearer token", req.Verb, req.Key)
			}
			return next(context.WithValue(ctx, principalKey{}, principal), req)
		}
	}
}

// LogRequests logs each request this node answers, once it is answered,
// to log: its verb, key, the node, how long it took and its code; for a
// stream, also how many items the handler sent, counted around its Send.
func LogRequests(log *slog.Logger) fero.Interceptor {
	return func(next fero.Handler) fero.Handler {
		return func(ctx context.Context, req *fero.Request) (any, error) {
			start := time.Now()
			var items atomic.Int64 // a handler may send from goroutines of its own
			if req.Streaming() {
				req.WrapSend(func(send fero.SendFunc) fero.SendFunc {
					return func(item any) error {
						err := send(item)
						if err == nil {
							items.Add(1)
						}
						return err
					}
				})
			}
			reply, err := next(ctx, req)
			attrs := []slog.Attr{
				slog.String("verb", req.Verb),
				slog.String("key", req.Key),
				slog.String("node", req.Resource().ID()),
				slog.Duration("took", time.Since(start)),
				slog.String("code", fero.CodeOf(err).String()),
			}
			if req.Streaming() {
				attrs = append(attrs, slog.Int64("items", items.Load()))
			}
			log.LogAttrs(ctx, slog.LevelInfo, "request", attrs...)
			return reply, err
		}
	}
}

// bearer returns the option that makes a node (or a fero.Dial Remote)
// send token with every call and every stream it opens, and so with
// every method of a typed client over it.
func bearer(token string) fero.Option {
	value := "Bearer " + token
	call := func(next fero.CallFunc) fero.CallFunc {
		return func(ctx context.Context, verb, key string, payload, reply any) error {
			return next(fero.WithHeader(ctx, authorization, value), verb, key, payload, reply)
		}
	}
	stream := func(next fero.StreamFunc) fero.StreamFunc {
		return func(ctx context.Context, verb, key string, payload any) (*fero.Stream, error) {
			return next(fero.WithHeader(ctx, authorization, value), verb, key, payload)
		}
	}
	return fero.WithOptions(fero.WithCallInterceptors(call), fero.WithStreamInterceptors(stream))
}
