package daemon

import (
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

type updateSink chan MetricsUpdate

func (s updateSink) Deliver(r *eventlog.Record) {
	if m, ok := r.Event.(MetricsUpdate); ok {
		select {
		case s <- m:
		default:
		}
	}
}

// fakeCounts are loop counts a test sets.
type fakeCounts struct {
	mu      sync.Mutex
	running int
}

func (f *fakeCounts) set(n int) { f.mu.Lock(); f.running = n; f.mu.Unlock() }
func (f *fakeCounts) get() MetricsUpdate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return MetricsUpdate{RunningLoops: f.running, Loops: map[string]int{"running": f.running}}
}

// armed reports whether a read is due, and stops its timer: the test
// fires it by hand.
func (u *metricsUpdater) takeTimer() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.timer == nil {
		return false
	}
	u.timer.Stop()
	return true
}

func expectUpdate(t *testing.T, got updateSink, running int) {
	t.Helper()
	select {
	case m := <-got:
		if m.RunningLoops != running || m.Loops["running"] != running {
			t.Fatalf("update %+v, want %d running", m, running)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no update with %d running", running)
	}
}

// metrics.update: a change is read on the updater's timer (never on the
// caller's goroutine) and sent; changes before the next read are one
// update with the counts of then; counts that did not change are not sent
// but read once more (the count may lag its event); after Close nothing.
func TestMetricsUpdater(t *testing.T) {
	defer goleak.VerifyNone(t)
	bus, err := eventlog.Open(eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	got := make(updateSink, 16)
	bus.Subscribe([]string{"metrics.update"}, got)
	counts := &fakeCounts{running: 1}
	u := newMetricsUpdater(bus, counts.get)
	u.every, u.settle = time.Hour, time.Hour // every read is fired by hand
	u.Changed()
	if !u.takeTimer() {
		t.Fatal("a change armed no read")
	}
	if len(got) != 0 {
		t.Fatal("an update sent on the caller's goroutine")
	}
	u.fire()
	expectUpdate(t, got, 1)
	// Many changes: one read, the counts of then.
	for i := 2; i < 12; i++ {
		counts.set(i)
		u.Changed()
	}
	if !u.takeTimer() {
		t.Fatal("changes armed no read")
	}
	u.fire()
	expectUpdate(t, got, 11)
	// A change whose count lags: nothing sent, read once more.
	u.Changed()
	u.takeTimer()
	u.fire()
	if len(got) != 0 {
		t.Fatal("unchanged counts were sent")
	}
	if !u.takeTimer() {
		t.Fatal("unchanged counts are not read again")
	}
	counts.set(3) // the recount lands
	u.fire()
	expectUpdate(t, got, 3)
	// Read twice unchanged: no more reads.
	u.Changed()
	u.takeTimer()
	u.fire()
	u.takeTimer()
	u.fire()
	if u.takeTimer() || len(got) != 0 {
		t.Fatal("unchanged counts read a third time, or sent")
	}
	u.Close()
	u.Changed()
	if u.takeTimer() {
		t.Fatal("a change after Close armed a read")
	}
	// With the real timers: a change is sent without anyone firing it.
	v := newMetricsUpdater(bus, counts.get)
	counts.set(7)
	v.Changed()
	expectUpdate(t, got, 7)
	v.Close()
}
