package fleet

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test ends with every NATS server, connection and goroutine of its
// own stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
