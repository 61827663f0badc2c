package loopsy

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test ends with no goroutine of its own left.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
