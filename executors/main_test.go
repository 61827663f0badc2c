package executors_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/internal/daemontest"
)

// TestMain is internal/daemontest's, for the daemons of daemon_test.go,
// with goleak's check of the package's goroutines.
func TestMain(m *testing.M) {
	os.Exit(daemontest.Main(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1")))
}
