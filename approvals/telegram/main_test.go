package telegram

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test ends with no goroutine of its own left.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's dead-letter throttle timer ends by itself a second
		// after it starts.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
