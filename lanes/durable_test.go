package lanes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// gateLog is a JobLog that holds the commit of the writes the test
// chooses until it releases them, and fails every write once failing is
// set: the test decides when the store "commits".
type gateLog struct {
	mu      sync.Mutex
	hold    map[string]bool // kind -> hold its commits
	held    chan heldWrite
	failing error
	kinds   []string
}

type heldWrite struct {
	kind, id string
	commit   func()
}

func newGateLog() *gateLog { return &gateLog{hold: map[string]bool{}, held: make(chan heldWrite, 64)} }

func (g *gateLog) write(kind, id string, done func(error)) {
	g.mu.Lock()
	g.kinds = append(g.kinds, kind)
	fail, hold := g.failing, g.hold[kind]
	g.mu.Unlock()
	if done == nil {
		done = func(error) {}
	}
	switch {
	case fail != nil:
		done(fail)
	case hold:
		g.held <- heldWrite{kind: kind, id: id, commit: func() { done(nil) }}
	default:
		done(nil)
	}
}

func (g *gateLog) RecordSubmitted(rec api.JobRecord, _ api.JobSpec, done func(error)) {
	g.write("submitted", rec.ID, done)
}
func (g *gateLog) RecordDispatched(id, _ string, _ int, _ time.Time, done func(error)) {
	g.write("dispatched", id, done)
}
func (g *gateLog) RecordRunning(id string, done func(error))  { g.write("running", id, done) }
func (g *gateLog) RecordRequeued(id string, done func(error)) { g.write("requeued", id, done) }
func (g *gateLog) RecordFinished(rec api.JobRecord, done func(error)) {
	g.write("finished", rec.ID, done)
}
func (g *gateLog) RecordOutput(id string, _ int64, _ []byte, _ int64, done func(error)) {
	g.write("output", id, done)
}
func (g *gateLog) FinishAll(context.Context, []api.JobRecord) error { return nil }
func (g *gateLog) Get(string) (api.JobRecord, bool, error)          { return api.JobRecord{}, false, nil }
func (g *gateLog) List(JobQuery) (JobPage, error)                   { return JobPage{}, nil }
func (g *gateLog) Unfinished() ([]UnfinishedJob, error)             { return nil, nil }

func (g *gateLog) next(t *testing.T, kind string) heldWrite {
	t.Helper()
	select {
	case w := <-g.held:
		if w.kind != kind {
			t.Fatalf("held write %s, want %s", w.kind, kind)
		}
		return w
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s write", kind)
	}
	return heldWrite{}
}

// startGatedLane starts lane "bench" (one host runner, one slot, no
// spare) with jobs recorded in jl.
func startGatedLane(t *testing.T, jl JobLog) (*Manager, *eventlog.Bus) {
	t.Helper()
	lc := defaultLane(1, 1, NetworkHost, 0)
	lc.Spares = 0
	m, bus := startTestLanesWith(t, map[string]LaneConfig{"bench": lc}, func(o *Options) {
		o.FinishedJobs, o.FinishedOutputBytes, o.Jobs = 100, 1<<20, jl
	})
	waitServing(t, m, 1)
	return m, bus
}

// A job reaches its runner only once its dispatch is committed, and its
// end reaches waiters and subscribers only once its terminal record is.
func TestDispatchAndEndWaitForTheirCommits(t *testing.T) {
	g := newGateLog()
	g.hold["dispatched"], g.hold["finished"] = true, true
	m, bus := startGatedLane(t, g)
	finished := make(chanSink, 16)
	defer bus.Subscribe([]string{"job.finished"}, finished)()
	dir := t.TempDir()
	mark := filepath.Join(dir, "ran")

	id, err := m.Submit(api.JobSpec{Lane: "bench", Argv: []string{"touch", mark}})
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan api.JobRecord, 1)
	if _, err := m.Wait(id, func(r api.JobRecord) { ended <- r }); err != nil {
		t.Fatal(err)
	}
	d := g.next(t, "dispatched")
	// The lane chose the runner; the dispatch is not committed: the runner
	// has not been given the job, so it has not run.
	if rec, _ := m.Get(id); rec.State != api.StateDispatched {
		t.Fatalf("job is %s, want dispatched", rec.State)
	}
	if _, err := os.Stat(mark); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the job ran before its dispatch was committed (%v)", err)
	}
	d.commit()

	f := g.next(t, "finished")
	// It ran; its end is not committed: nobody has heard of it.
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("the job did not run: %v", err)
	}
	select {
	case r := <-ended:
		t.Fatalf("job.wait answered %s before the terminal record was committed", r.State)
	case r := <-finished:
		t.Fatalf("job.finished emitted before the terminal record was committed: %v", r.Event)
	default:
	}
	if rec, _ := m.Get(id); rec.State.Terminal() {
		t.Fatalf("job.get says %s before the terminal record was committed", rec.State)
	}
	f.commit()
	select {
	case r := <-ended:
		if r.State != api.StateSucceeded {
			t.Fatalf("job ended %s (%s)", r.State, r.Error)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no answer after the commit")
	}
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("no job.finished after the commit")
	}
	g.mu.Lock()
	kinds := g.kinds
	g.mu.Unlock()
	// A job that ends within runningRecordDelay of its start is not
	// recorded running (a slow machine may take longer).
	if !equalStrings(kinds, []string{"submitted", "dispatched", "finished"}) &&
		!equalStrings(kinds, []string{"submitted", "dispatched", "running", "finished"}) {
		t.Fatalf("writes %v, want submitted, dispatched, (running,) finished", kinds)
	}
}

// A job that runs longer than runningRecordDelay is recorded running while
// it runs, before its end.
func TestLongJobIsRecordedRunning(t *testing.T) {
	g := newGateLog()
	g.hold["running"] = true
	m, _ := startGatedLane(t, g)
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	// It runs until the test has seen its running record.
	id, err := m.Submit(api.JobSpec{Lane: "bench", Argv: []string{"sh", "-c", `while [ ! -e "$0" ]; do sleep 0.01; done`, gate}})
	if err != nil {
		t.Fatal(err)
	}
	w := g.next(t, "running")
	if w.id != id {
		t.Fatalf("running write for %s, want %s", w.id, id)
	}
	if rec, _ := m.Get(id); rec.State != api.StateRunning {
		t.Fatalf("job is %s while its running record commits, want running", rec.State)
	}
	w.commit()
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := waitEnd(t, m, id); r.State != api.StateSucceeded {
		t.Fatalf("job ended %s (%s)", r.State, r.Error)
	}
	g.mu.Lock()
	kinds := g.kinds
	g.mu.Unlock()
	if want := []string{"submitted", "dispatched", "running", "finished"}; !equalStrings(kinds, want) {
		t.Fatalf("writes %v, want %v", kinds, want)
	}
}

// A cancel that comes while the dispatch is being committed: the job is
// never handed to the runner and ends cancelled.
func TestCancelWhileDispatchCommits(t *testing.T) {
	g := newGateLog()
	g.hold["dispatched"] = true
	m, _ := startGatedLane(t, g)
	mark := filepath.Join(t.TempDir(), "ran")
	id, err := m.Submit(api.JobSpec{Lane: "bench", Argv: []string{"touch", mark}})
	if err != nil {
		t.Fatal(err)
	}
	d := g.next(t, "dispatched")
	replied := make(chan error, 1)
	m.Cancel(id, func(_ bool, err error) { replied <- err })
	if err := <-replied; err != nil {
		t.Fatal(err)
	}
	d.commit()
	if r := waitEnd(t, m, id); r.State != api.StateCancelled {
		t.Fatalf("job ended %s (%s), want cancelled", r.State, r.Error)
	}
	if _, err := os.Stat(mark); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a job cancelled before it was handed over ran (%v)", err)
	}
	// The slot is free again: the next job runs.
	g.mu.Lock()
	g.hold["dispatched"] = false
	g.mu.Unlock()
	if _, r := runJob(t, m, api.JobSpec{Lane: "bench", Argv: []string{"true"}}); r.State != api.StateSucceeded {
		t.Fatalf("next job ended %s (%s)", r.State, r.Error)
	}
}

// A submission whose record cannot be written is refused with
// store_unavailable and state.write_failed, and nothing is queued.
func TestSubmitRefusedWhenTheStoreFails(t *testing.T) {
	g := newGateLog()
	m, bus := startGatedLane(t, g)
	failed := make(chanSink, 4)
	defer bus.Subscribe([]string{"state.write_failed"}, failed)()
	g.mu.Lock()
	g.failing = errors.New("disk full")
	g.mu.Unlock()
	id, err := m.Submit(api.JobSpec{Lane: "bench", Argv: []string{"true"}})
	var ae *api.Error
	if id != "" || !errors.As(err, &ae) || ae.Code != api.CodeStoreUnavailable {
		t.Fatalf("submit: id %q, err %v; want code %d", id, err, api.CodeStoreUnavailable)
	}
	select {
	case r := <-failed:
		if e := r.Event.(StateWriteFailed); e.Error != "disk full" {
			t.Fatalf("state.write_failed = %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no state.write_failed")
	}
	if l := m.Lanes()[0]; l.Queued != 0 || len(m.List(api.Filter{})) != 0 {
		t.Fatalf("after a refused submission: %d queued, %d listed", l.Queued, len(m.List(api.Filter{})))
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// waitEnd waits for job id's terminal record, through Manager.Wait.
func waitEnd(t *testing.T, m *Manager, id string) api.JobRecord {
	t.Helper()
	ended := make(chan api.JobRecord, 1)
	if _, err := m.Wait(id, func(r api.JobRecord) { ended <- r }); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ended:
		return r
	case <-time.After(30 * time.Second):
		t.Fatalf("job %s did not end", id)
	}
	return api.JobRecord{}
}

// job.submit is answered once the submission is committed; meanwhile the
// lane already chose a runner, and the dispatch is written after the
// submission (so it cannot commit first) and shares its commit in the
// real store; the job reaches the runner only once its dispatch commits.
func TestSubmissionAndDispatchOverlap(t *testing.T) {
	g := newGateLog()
	g.hold["submitted"], g.hold["dispatched"] = true, true
	m, _ := startGatedLane(t, g)
	mark := filepath.Join(t.TempDir(), "ran")
	type res struct {
		id  string
		err error
	}
	answered := make(chan res, 1)
	m.SubmitThen(api.JobSpec{Lane: "bench", Argv: []string{"touch", mark}}, func(id string, err error) { answered <- res{id, err} })
	s := g.next(t, "submitted")
	d := g.next(t, "dispatched") // written while the submission is not committed
	if s.id != d.id {
		t.Fatalf("submitted %s, dispatched %s", s.id, d.id)
	}
	select {
	case r := <-answered:
		t.Fatalf("job.submit answered %+v before the submission was committed", r)
	default:
	}
	s.commit()
	r := <-answered
	if r.err != nil || r.id != s.id {
		t.Fatalf("job.submit = %+v, want %s", r, s.id)
	}
	if _, err := os.Stat(mark); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the job ran before its dispatch was committed (%v)", err)
	}
	d.commit()
	if rec := waitEnd(t, m, r.id); rec.State != api.StateSucceeded {
		t.Fatalf("job ended %s (%s)", rec.State, rec.Error)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("the job did not run: %v", err)
	}
}
