package fleet

import (
	"runtime"
	"testing"

	"github.com/orchestrd/orchestrd/internal/testio"
	"go.uber.org/goleak"
)

// Every test ends with every NATS server, connection and goroutine of its
// own stopped. A test's cluster spends most of its seconds waiting on
// JetStream's elections (timers of seconds that no option shortens), so
// the tests run in parallel, one per core: eight per core starved their
// clusters when the whole suite ran beside them, and two per core still
// did when CI ran the suite with its as-user pass, orchbench and two busy
// loops on two cores (a three-node cluster not ready in its 2 minutes:
// TestForgeryLane, TestStreamedStdin, TestOutputThroughElections). CI
// there is CPU-bound, so fewer at once costs the package little time.
func TestMain(m *testing.M) {
	testio.Parallel(runtime.GOMAXPROCS(0))
	goleak.VerifyTestMain(m)
}
