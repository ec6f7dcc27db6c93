package check

import (
	"os"
	"testing"

	"github.com/fero-go/fero/internal/testkit"
)

// TestMain checks that the searches released every goroutine they started.
func TestMain(m *testing.M) { os.Exit(testkit.RunWithoutLeaks(m)) }
