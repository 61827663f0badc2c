package testio

import (
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Hammer calls f from its goroutines until stopped, and none calls it
// once stop has returned; a goroutine whose f says false ends there.
func TestHammer(t *testing.T) {
	defer goleak.VerifyNone(t) // stop returned: every goroutine has ended
	var n atomic.Int64
	stop := Hammer(3, func() bool { n.Add(1); return true })
	waitUntil(t, "100 calls", func() bool { return n.Load() >= 100 })
	stop()
	after := n.Load()
	time.Sleep(10 * time.Millisecond) // a goroutine still calling f would show here
	if n.Load() != after {
		t.Fatalf("f called after stop returned: %d, then %d", after, n.Load())
	}
	stop() // a second stop is harmless

	var once atomic.Int64
	stop = Hammer(2, func() bool { once.Add(1); return false })
	waitUntil(t, "each goroutine's one call", func() bool { return once.Load() == 2 })
	stop()
	if once.Load() != 2 {
		t.Fatalf("%d calls of an f that says false, want one a goroutine", once.Load())
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
