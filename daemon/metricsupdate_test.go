package daemon

import (
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

// metrics.update: the first change is sent at once; changes within the
// interval are one update when it is over, with the counts of then; after
// Close nothing more.
func TestMetricsUpdater(t *testing.T) {
	defer goleak.VerifyNone(t)
	bus, err := eventlog.Open(eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	got := make(updateSink, 16)
	bus.Subscribe([]string{"metrics.update"}, got)
	running := 1
	u := newMetricsUpdater(bus, func() MetricsUpdate {
		return MetricsUpdate{RunningLoops: running, Loops: map[string]int{"running": running}}
	})
	u.every = time.Hour // the due update is fired by hand below
	u.Changed()
	if m := <-got; m.RunningLoops != 1 || m.Loops["running"] != 1 {
		t.Fatalf("first update %+v", m)
	}
	for running = 2; running < 12; running++ {
		u.Changed()
	}
	if n := len(got); n != 0 {
		t.Fatalf("%d updates sent within the interval, want none before it is over", n)
	}
	u.mu.Lock()
	armed := u.timer != nil
	u.mu.Unlock()
	if !armed {
		t.Fatal("changes within the interval armed no update")
	}
	u.timer.Stop()
	u.fire() // the interval is over
	if m := <-got; m.RunningLoops != 12 {
		t.Fatalf("due update %+v, want the counts of when it is sent (12)", m)
	}
	u.every = 0
	u.Close()
	u.Changed()
	if n := len(got); n != 0 {
		t.Fatalf("%d updates after Close", n)
	}
	// Without a limit each change is sent, the map never null.
	v := newMetricsUpdater(bus, func() MetricsUpdate { return MetricsUpdate{} })
	v.every = 0
	v.Changed()
	if m := <-got; m.Loops == nil {
		t.Fatal("loops is null")
	}
	v.Close()
}
