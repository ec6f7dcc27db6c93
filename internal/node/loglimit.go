package node

import (
	"sync"
	"time"
)

// logLimit lets through one log line per key (a remote host, say) per
// interval, so that whoever can reach a port cannot flood the log by
// repeating a bad request. It forgets every key once it holds maxKeys.
type logLimit struct {
	every time.Duration

	mu   sync.Mutex
	last map[string]time.Time
}

const logLimitKeys = 4096

// Allow reports whether a line for key may be logged at now.
func (l *logLimit) Allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.last[key]; ok && now.Sub(t) < l.every {
		return false
	}
	if l.last == nil || len(l.last) >= logLimitKeys {
		l.last = make(map[string]time.Time)
	}
	l.last[key] = now
	return true
}
