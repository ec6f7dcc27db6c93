package main

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if they leave a goroutine behind:
// every node closed, every watch and subscription ended.
//
// memberlist's Shutdown does not wait for a probe in flight, which ends
// on its own within a probe interval or so (internal/membership's tests
// wait for it the same way), so the check gives goroutines a few seconds.
func TestMain(m *testing.M) {
	code := m.Run()
	deadline := time.Now().Add(20 * time.Second)
	for err := goleak.Find(); code == 0 && err != nil; err = goleak.Find() {
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
		<-time.After(200 * time.Millisecond)
	}
	os.Exit(code)
}
