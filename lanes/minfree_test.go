package lanes

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

func TestMemHold(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		name            string
		minFree, avail  uint64
		readOK, wasHeld bool
		want            bool
	}{
		{"no setting", 0, 0, true, false, false},
		{"no setting, was held", 0, 0, true, true, false},
		{"below", 2 * gib, gib, true, false, true},
		{"still below", 2 * gib, gib, true, true, true},
		{"at it", 2 * gib, 2 * gib, true, true, false},
		{"above", 2 * gib, 3 * gib, true, false, false},
		{"back above", 2 * gib, 3 * gib, true, true, false},
		{"unreadable keeps held", 2 * gib, 0, false, true, true},
		{"unreadable keeps taking", 2 * gib, 0, false, false, false},
	} {
		if got := memHold(c.minFree, c.avail, c.readOK, c.wasHeld); got != c.want {
			t.Errorf("%s: memHold = %v, want %v", c.name, got, c.want)
		}
	}
}

// A lane below its min_free_memory holds a submitted job queued and gives
// the fleet no free slot; once the node's memory is back above it, the
// lane resumes (lane.resumed) and the job runs.
func TestMinFreeMemoryHoldsThenResumes(t *testing.T) {
	lc := defaultLane(1, 1, NetworkHost, 0)
	lc.MinFreeMemory = 1 << 60 // above what the machine has: paused from the start
	m, bus := startTestLane(t, lc)
	paused, resumed, ready := make(chanSink, 4), make(chanSink, 4), make(chanSink, 8)
	defer bus.Subscribe([]string{"lane.paused"}, paused)()
	defer bus.Subscribe([]string{"lane.resumed"}, resumed)()
	defer bus.Subscribe([]string{"runner.ready"}, ready)()
	var avail atomic.Uint64 // 0: below the setting
	read := func() (uint64, error) { return avail.Load(), nil }
	m.sh.memAvail.Store(&read)
	deadline := time.After(30 * time.Second)
	for !m.lanes["bench"].memHeld.Load() || len(laneRunners(m)) == 0 || laneRunners(m)[0].State != "ready" {
		select {
		case <-paused:
		case <-ready:
		case <-deadline:
			t.Fatalf("lane not paused with a ready runner: held %v, runners %+v", m.lanes["bench"].memHeld.Load(), laneRunners(m))
		case <-time.After(50 * time.Millisecond):
		}
	}
	id, err := m.Submit(api.JobSpec{Lane: "bench", Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := m.Get(id); rec.State != api.StateQueued || m.FreeSlots("bench") != 0 {
		t.Fatalf("held: job %+v, free slots %d", rec, m.FreeSlots("bench"))
	}
	done := make(chan api.JobRecord, 1)
	if _, err := m.Wait(id, func(r api.JobRecord) { done <- r }); err != nil {
		t.Fatal(err)
	}
	avail.Store(1 << 61)
	select {
	case r := <-resumed:
		if e := r.Event.(LaneResumed); e.AvailableBytes != 1<<61 || e.MinFreeMemory != 1<<60 {
			t.Fatalf("lane.resumed = %+v", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no lane.resumed")
	}
	select {
	case rec := <-done:
		if rec.State != api.StateSucceeded {
			t.Fatalf("job after resume: %+v", rec)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the held job did not run after the lane resumed")
	}
}
