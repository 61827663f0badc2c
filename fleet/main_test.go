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
// the tests run in parallel, two per core (eight per core starved their
// clusters when the whole suite ran beside them).
func TestMain(m *testing.M) {
	testio.Parallel(2 * runtime.GOMAXPROCS(0))
	goleak.VerifyTestMain(m)
}
