package fleet

import (
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// The shared watch's registry: an end reaches every waiter of its job and
// no other, never blocks on a waiter that has one already, and a removed
// waiter is told nothing; live is closed while a watch runs and renewed
// when it stops.
func TestJobWatchRegistry(t *testing.T) {
	t.Parallel()
	w := newJobWatch()
	a1, liveA, removeA1 := w.add("c-1-1")
	a2, _, removeA2 := w.add("c-1-1")
	b, _, removeB := w.add("c-1-2")
	if w.count() != 3 {
		t.Fatalf("count %d, want 3", w.count())
	}
	select {
	case <-w.want:
	default:
		t.Fatal("a waiter did not ask for the watch")
	}
	select {
	case <-liveA:
		t.Fatal("live before any watch")
	default:
	}
	w.setLive(true)
	select {
	case <-liveA:
	default:
		t.Fatal("not live once the watch runs")
	}
	end := jobEntry{Record: api.JobRecord{ID: "c-1-1", State: api.StateSucceeded}}
	w.deliver("c-1-1", end)
	w.deliver("c-1-1", end) // a second end does not block
	for i, ch := range []chan jobEntry{a1, a2} {
		select {
		case got := <-ch:
			if got.Record.ID != "c-1-1" {
				t.Fatalf("waiter %d got %+v", i, got)
			}
		default:
			t.Fatalf("waiter %d of c-1-1 got nothing", i)
		}
	}
	select {
	case got := <-b:
		t.Fatalf("the waiter of c-1-2 got %+v", got)
	default:
	}
	removeB()
	removeB() // twice: counted once
	w.deliver("c-1-2", jobEntry{Record: api.JobRecord{ID: "c-1-2", State: api.StateFailed}})
	select {
	case got := <-b:
		t.Fatalf("a removed waiter got %+v", got)
	default:
	}
	removeA1()
	removeA2()
	if w.count() != 0 || len(w.waiters) != 0 {
		t.Fatalf("after every remove: count %d, %d ids", w.count(), len(w.waiters))
	}
	w.setLive(false)
	_, liveNext, removeNext := w.add("c-1-3")
	defer removeNext()
	select {
	case <-liveNext:
		t.Fatal("live after the watch stopped")
	default:
	}
}
