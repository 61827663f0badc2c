package lanes

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

type chanSink chan *eventlog.Record

func (c chanSink) Deliver(r *eventlog.Record) {
	select {
	case c <- r:
	default:
	}
}

// runJob submits spec and waits (up to 30 s) for the job's record.
func runJob(t *testing.T, m *Manager, spec api.JobSpec) (string, api.JobRecord) {
	t.Helper()
	id, werr := m.Submit(spec)
	if werr != nil {
		t.Fatal(werr)
	}
	done := make(chan api.JobRecord, 1)
	if _, werr := m.Wait(id, func(r api.JobRecord) { done <- r }); werr != nil {
		t.Fatal(werr)
	}
	select {
	case r := <-done:
		return id, r
	case <-time.After(30 * time.Second):
		t.Fatalf("job %s did not finish", id)
	}
	return id, api.JobRecord{}
}

// laneRunners returns lane bench's runners.
func laneRunners(m *Manager) []api.RunnerStatus {
	for _, l := range m.Lanes() {
		if l.Name == "bench" {
			return l.Runners
		}
	}
	return nil
}

func waitRunners(t *testing.T, m *Manager, what string, ok func([]api.RunnerStatus) bool) []api.RunnerStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rs := laneRunners(m)
		if ok(rs) {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: runners %+v", what, rs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// roles returns the ready serving runner and the ready spare, if any.
func roles(rs []api.RunnerStatus) (serving, spare *api.RunnerStatus) {
	for i := range rs {
		r := &rs[i]
		switch {
		case r.State == "ready" && r.Spare:
			spare = r
		case r.State == "ready":
			serving = r
		}
	}
	return serving, spare
}

func TestSpareTakesOverALostRunner(t *testing.T) {
	lc := defaultLane(1, 1, NetworkHost, 0)
	lc.Spares = 1
	m, bus := startTestLane(t, lc)
	rs := waitRunners(t, m, "one serving runner and one spare", func(rs []api.RunnerStatus) bool {
		s, sp := roles(rs)
		return len(rs) == 2 && s != nil && sp != nil
	})
	serving, spare := roles(rs)
	if st := m.Lanes()[0]; st.Spares != 1 {
		t.Fatalf("lane status spares = %d, want 1", st.Spares)
	}

	// Jobs go to the serving runner only.
	runTrue := func() api.JobRecord {
		t.Helper()
		_, r := runJob(t, m, api.JobSpec{Lane: "bench", Argv: []string{"true"}})
		return r
	}
	if r := runTrue(); r.State != api.StateSucceeded || r.RunnerPid != serving.Pid {
		t.Fatalf("job ran %s on pid %d, want succeeded on the serving runner %d", r.State, r.RunnerPid, serving.Pid)
	}

	events := make(chanSink, 16)
	unsub := bus.Subscribe([]string{"runner.promoted"}, events)
	defer unsub()
	if err := syscall.Kill(serving.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case rec := <-events:
		p, ok := rec.Event.(RunnerPromoted)
		if !ok || p.RunnerID != spare.ID || p.Pid != spare.Pid || p.Replaces != serving.ID || p.Lane != "bench" {
			t.Fatalf("promoted %+v, want spare %s (pid %d) replacing %s", rec.Event, spare.ID, spare.Pid, serving.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no runner.promoted after the serving runner was killed")
	}
	if r := runTrue(); r.State != api.StateSucceeded || r.RunnerPid != spare.Pid {
		t.Fatalf("job ran %s on pid %d, want succeeded on the promoted spare %d", r.State, r.RunnerPid, spare.Pid)
	}
	// The lost runner's slot restarts and becomes the new spare.
	waitRunners(t, m, "a new spare behind the promoted runner", func(rs []api.RunnerStatus) bool {
		s, sp := roles(rs)
		return s != nil && sp != nil && s.Pid == spare.Pid && sp.Pid != serving.Pid
	})
}

func TestSparesConfig(t *testing.T) {
	x := DefaultFor("x")
	if x.Spares != 1 || x.effectiveSpares() != 1 {
		t.Fatalf("default spares: %+v", x)
	}
	x.Runners = 0
	if x.effectiveSpares() != 0 {
		t.Fatal("a lane without spawned runners must start no spares")
	}
	for _, bad := range []int{-1, 17} {
		x := DefaultFor("x")
		x.Spares = bad
		errs := ValidateLanes("lanes", map[string]LaneConfig{"x": x})
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "lanes.x.spares") {
			t.Fatalf("spares = %d: %v", bad, errs)
		}
	}
}
