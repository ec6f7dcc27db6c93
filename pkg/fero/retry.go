package fero

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fero-go/fero/internal/errs"
)

// RetryPolicy says which failed calls a Resource or Remote makes again
// (WithCallRetry). Only a definite failure is retried: one that says for
// certain the handler did not run or its work did not take effect (see
// Definite): a call whose connection broke after it left (CodeAborted),
// that timed out (CodeDeadlineExceeded), was canceled, or failed
// otherwise is never sent again by the policy.
type RetryPolicy struct {
	// Attempts bounds the tries, the first included (0: 3).
	Attempts int
	// Backoff is the longest wait before the first retry (0: 10ms); it
	// doubles with each retry up to MaxBackoff (0: 1s). Each wait is
	// drawn at random from zero to the bound ("full jitter"), so that
	// callers refused together do not come back together.
	Backoff, MaxBackoff time.Duration
	// Codes are the definite failures to retry (nil: CodeUnavailable, which
	// says not now: no owner yet, no quorum, an owner syncing; and
	// CodeResourceExhausted, a node over its bounds). A code that is not
	// definite is ignored.
	Codes []Code
}

// WithCallRetry makes every Call of the Resource or Remote being opened
// (and of the typed clients over it) try again, as p says, after a
// definite failure, waiting with backoff and jitter, until it succeeds,
// fails otherwise, runs out of attempts or its context ends. Each attempt
// goes through the interceptors of WithCallInterceptors.
func WithCallRetry(p RetryPolicy) Option {
	return option(func(c *config) { c.retry = &p })
}

// WithCallTimeout bounds every Call of the Resource or Remote being opened
// by d, unless its context has an earlier deadline; the deadline reaches
// the owner's handler (docs/ferogen.md, Deadlines and headers).
func WithCallTimeout(d time.Duration) Option {
	return option(func(c *config) { c.callTimeout = d })
}

// callChain returns the call interceptors of cfg, fero's own first: the
// timeout, then the retries, then the caller's.
func callChain(cfg *config) []CallInterceptor {
	var is []CallInterceptor
	if d := cfg.callTimeout; d > 0 {
		is = append(is, func(next CallFunc) CallFunc {
			return func(ctx context.Context, verb, key string, payload, reply any) error {
				ctx, cancel := context.WithTimeout(ctx, d)
				defer cancel()
				return next(ctx, verb, key, payload, reply)
			}
		})
	}
	if p := cfg.retry; p != nil {
		is = append(is, retrying(*p))
	}
	return append(is, cfg.callInterceptors...)
}

// retrying is the interceptor of a retry policy.
func retrying(p RetryPolicy) CallInterceptor {
	if p.Attempts <= 0 {
		p.Attempts = 3
	}
	if p.Backoff <= 0 {
		p.Backoff = 10 * time.Millisecond
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = time.Second
	}
	if p.Codes == nil {
		p.Codes = []Code{CodeUnavailable, CodeResourceExhausted}
	}
	return func(next CallFunc) CallFunc {
		return func(ctx context.Context, verb, key string, payload, reply any) error {
			bound := p.Backoff
			for attempt := 1; ; attempt++ {
				err := next(ctx, verb, key, payload, reply)
				if err == nil || attempt >= p.Attempts || !errs.Definite(err) || !slices.Contains(p.Codes, CodeOf(err)) {
					return err
				}
				t := time.NewTimer(rand.N(bound) + 1)
				select {
				case <-ctx.Done():
					t.Stop()
					return err // the last answer says more than the context's end
				case <-t.C:
				}
				bound = min(2*bound, p.MaxBackoff)
			}
		}
	}
}
