package transport

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test in the package must leave no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
