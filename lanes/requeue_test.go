package lanes

import (
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// A job the lane hands to a runner that died before the job could be
// written to it never reached a runner: it goes back to the head of the
// queue and runs on the replacement, instead of failing runner_lost.
func TestJobBouncedOffADeadRunnerIsRequeued(t *testing.T) {
	lc := defaultLane(1, 1, NetworkHost, 0)
	lc.Spares = 0
	m, bus := startTestLane(t, lc)
	waitServing(t, m, 1)
	victim := laneRunners(m)[0]

	exited := make(chanSink, 16)
	defer bus.Subscribe([]string{"runner.exited"}, exited)()
	jobEvents := eventlogtest.NewRecorder()
	defer bus.Subscribe([]string{"job.*"}, jobEvents)()

	// Between choosing the runner and handing it the job, the runner is
	// SIGKILLed and its actor has noticed (runner.exited is its last word).
	var once sync.Once
	hookErr := make(chan string, 1)
	hook := func(pid int) {
		once.Do(func() {
			if pid != victim.Pid {
				hookErr <- "the job went to an unexpected runner"
				return
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				hookErr <- err.Error()
				return
			}
			deadline := time.After(30 * time.Second)
			for {
				select {
				case r := <-exited:
					if e := r.Event.(RunnerExited); e.Pid == pid {
						return
					}
				case <-deadline:
					hookErr <- "no runner.exited after SIGKILL"
					return
				}
			}
		})
	}
	testHookDispatch.Store(&hook)
	defer testHookDispatch.Store(nil)

	id, rec := runJob(t, m, api.JobSpec{Lane: "bench", Argv: []string{"true"}})
	select {
	case e := <-hookErr:
		t.Fatal(e)
	default:
	}
	if rec.State != api.StateSucceeded || rec.RunnerPid == victim.Pid || rec.RunnerPid == 0 {
		t.Fatalf("job ended %s (%s) on pid %d; want succeeded on the replacement of %d", rec.State, rec.Error, rec.RunnerPid, victim.Pid)
	}

	// Waiters hear of the end just before job.finished is emitted: wait
	// for it, then the events of this job are complete.
	finished := func() bool {
		for _, r := range jobEvents.Records() {
			if e, ok := r.Event.(JobFinished); ok && e.JobID == id {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(30 * time.Second); !finished(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no job.finished")
		}
	}
	var kinds []string
	for _, r := range jobEvents.Records() {
		var of string
		switch e := r.Event.(type) {
		case JobQueued:
			of = e.JobID
		case JobDispatched:
			of = e.JobID
		case JobRequeued:
			of = e.JobID
			if e.RunnerID != victim.ID || e.Reason != api.ErrRunnerLost || e.Lane != "bench" {
				t.Errorf("job.requeued = %+v, want runner %s, reason %s", e, victim.ID, api.ErrRunnerLost)
			}
		case JobFinished:
			of = e.JobID
		case JobOrphaned:
			of = e.JobID
		}
		if of == id {
			kinds = append(kinds, r.Kind)
		}
	}
	want := []string{"job.queued", "job.dispatched", "job.requeued", "job.dispatched", "job.finished"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("events for %s: %v, want %v", id, kinds, want)
	}
}
