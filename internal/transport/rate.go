package transport

import (
	"net/netip"
	"time"

	"golang.org/x/time/rate"
)

// maxRateKeys bounds the source addresses newConnRates tells apart; past
// it, addresses it has no bucket for share one.
const maxRateKeys = 4096

// newConnRates is a token bucket per source address (WithNewConnRate).
// Only a Server's accept loop uses it, so it takes no lock.
type newConnRates struct {
	every  rate.Limit
	burst  int
	by     map[netip.Addr]*rate.Limiter
	swept  time.Time
	shared netip.Addr // the key of the overflow bucket: the zero Addr
}

func newNewConnRates(perSecond float64, burst int) *newConnRates {
	return &newConnRates{every: rate.Limit(perSecond), burst: burst, by: make(map[netip.Addr]*rate.Limiter)}
}

// allow takes a token from ip's bucket at now, and reports whether there
// was one.
func (r *newConnRates) allow(ip netip.Addr, now time.Time) bool {
	l, ok := r.by[ip]
	if !ok {
		if len(r.by) >= maxRateKeys {
			r.sweep(now)
		}
		if len(r.by) >= maxRateKeys {
			ip = r.shared
			l, ok = r.by[ip]
		}
		if !ok {
			l = rate.NewLimiter(r.every, r.burst)
			r.by[ip] = l
		}
	}
	return l.AllowN(now, 1)
}

// sweep forgets the addresses whose bucket is full again (quiet for a
// while: their next connection finds a new, full one), at most once a
// second, so that a flood of new addresses does not sweep per accept.
func (r *newConnRates) sweep(now time.Time) {
	if now.Sub(r.swept) < time.Second {
		return
	}
	r.swept = now
	for ip, l := range r.by {
		if l.TokensAt(now) >= float64(r.burst) {
			delete(r.by, ip)
		}
	}
}
