// Package testkit holds what the tests of several packages share: a logger
// that writes to the test's log, and a goroutine-leak check for TestMain.
// Only tests import it.
package testkit

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"
)

// Logger returns a logger that writes records at level and above to t's
// log. Components may log once more after Close returns (memberlist does),
// so the logger goes quiet when the test ends.
func Logger(t testing.TB, level slog.Level) *slog.Logger {
	w := &writer{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// LevelFromEnv returns the level named by the environment variable name
// ("debug", "info", …), or def when it is unset or unknown.
func LevelFromEnv(name string, def slog.Level) slog.Level {
	var l slog.Level
	if l.UnmarshalText([]byte(os.Getenv(name))) != nil {
		return def
	}
	return l
}

type writer struct {
	t    testing.TB
	done atomic.Bool
}

func (w *writer) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// RunWithoutLeaks runs the tests and then checks that no goroutine
// outlived them, returning the exit code for os.Exit. memberlist's Shutdown
// does not wait for a probe already in flight, which ends within its probe
// timeout, so the check retries for up to 20 seconds before failing.
func RunWithoutLeaks(m *testing.M) int {
	code := m.Run()
	deadline := time.Now().Add(20 * time.Second)
	for err := goleak.Find(); code == 0 && err != nil; err = goleak.Find() {
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
		time.Sleep(50 * time.Millisecond)
	}
	return code
}

// ClusterTimers tunes memberlist for in-process clusters of fero nodes:
// failures are detected within a few seconds, but not so fast that a -race
// run on a loaded 2-core machine suspects live members.
func ClusterTimers(c *memberlist.Config) {
	c.ProbeInterval = 500 * time.Millisecond
	c.ProbeTimeout = 400 * time.Millisecond
	c.GossipInterval = 50 * time.Millisecond
	c.PushPullInterval = 2 * time.Second
	c.SuspicionMult = 4
	c.TCPTimeout = 2 * time.Second
}
