package fero

import (
	"os"
	"testing"

	"github.com/fero-go/fero/internal/testkit"
)

// TestMain checks that Close released every goroutine the tests'
// resources started.
func TestMain(m *testing.M) { os.Exit(testkit.RunWithoutLeaks(m)) }
