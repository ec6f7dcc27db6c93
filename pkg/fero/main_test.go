package fero

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain checks that Close released every goroutine the tests' resources
// started. memberlist's Shutdown does not wait for a probe already in
// flight, which ends within its probe timeout, so the check retries for a
// while before failing.
func TestMain(m *testing.M) {
	code := m.Run()
	deadline := time.Now().Add(20 * time.Second)
	for err := goleak.Find(); code == 0 && err != nil; err = goleak.Find() {
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	os.Exit(code)
}
