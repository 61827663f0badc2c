package lanes

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test in this package ends with no goroutine of its own left; the
// runner processes it starts are checked in startTestLane.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's dead-letter throttle timer ends by itself a second
		// after it starts.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
