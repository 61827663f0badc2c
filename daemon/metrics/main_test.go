package metrics_test

import (
	"os"
	"testing"

	"github.com/orchestrd/orchestrd/internal/daemontest"
)

// TestMain is the package's: internal/daemontest's for the daemons of
// daemon_test.go, and goleak's check of the whole package's goroutines.
func TestMain(m *testing.M) { os.Exit(daemontest.Main(m)) }
