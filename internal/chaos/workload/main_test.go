package workload

import (
	"os"
	"testing"

	"github.com/fero-go/fero/internal/testkit"
)

// TestMain checks that Run released every goroutine it started.
func TestMain(m *testing.M) { os.Exit(testkit.RunWithoutLeaks(m)) }
