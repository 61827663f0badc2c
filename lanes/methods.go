package lanes

import (
	"sync"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Register registers the lane methods with mux: job.submit, job.get,
// job.list, job.cancel, job.wait, job.stream, job.stdin and lane.list.
func (m *Manager) Register(mux api.Mux) {
	mux.Handle("job.submit", m.submitMethod)
	mux.Handle("job.get", m.getMethod)
	mux.Handle("job.list", m.listMethod)
	mux.Handle("job.cancel", m.cancelMethod)
	mux.Handle("job.wait", m.waitMethod)
	mux.Handle("job.stream", m.streamMethod)
	mux.Handle("job.stdin", m.stdinMethod)
	mux.Handle("lane.list", m.laneListMethod)
}

// Param and result shapes of the lane methods.
type (
	idParams struct {
		ID    string `json:"id"`
		JobID string `json:"job_id"` // the same, named as job.submit answers
	}
	cancelParams struct {
		ID    string `json:"id"`
		JobID string `json:"job_id"`
		// Force: SIGKILL a running job at once, without its kill grace.
		Force bool `json:"force,omitempty"`
	}
	waitParams struct {
		ID        string `json:"id"`
		JobID     string `json:"job_id"`
		TimeoutMs uint64 `json:"timeout_ms,omitempty"`
		// Output (default true): false answers the record without its
		// output, for a client that only waits for the end (it may be
		// a megabyte kept, several as JSON).
		Output *bool `json:"output,omitempty"`
	}
	jobIDResult struct {
		JobID string `json:"job_id"`
	}
	jobRecordResult struct {
		Job api.JobRecord `json:"job"`
	}
	jobsResult struct {
		Jobs []api.JobRecord `json:"jobs"`
		// NextCursor continues a paged list; absent on its last page.
		NextCursor string `json:"next_cursor,omitempty"`
	}
	cancelResult struct {
		WasRunning bool `json:"was_running"`
	}
	lanesResult struct {
		Lanes []api.LaneStatus `json:"lanes"`
	}
)

// AppendJSON writes the result in place in the response line
// (wire.JSONAppender): a record's output is copied once.
func (r jobRecordResult) AppendJSON(dst []byte) []byte {
	return append(r.Job.AppendJSON(append(dst, `{"job":`...)), '}')
}

// JSONSize is about how long AppendJSON's JSON is (wire.JSONSizer).
func (r jobRecordResult) JSONSize() int { return 1024 + len(r.Job.Output) + len(r.Job.Output)/8 }

func (m *Manager) submitMethod(call api.Call) {
	var spec api.JobSpec
	if err := call.Decode(&spec); err != nil {
		call.Fail(err)
		return
	}
	// Answered once the job is recorded (SubmitThen never blocks here).
	m.SubmitThen(spec, func(id string, err error) {
		if err != nil {
			call.Fail(err)
			return
		}
		call.Respond(jobIDResult{JobID: id})
	})
}

func (m *Manager) getMethod(call api.Call) {
	var p idParams
	if err := decodeID(call, &p.ID, &p.JobID, &p); err != nil {
		call.Fail(err)
		return
	}
	rec, ok, err := m.lookup(p.ID)
	if err != nil {
		call.Fail(api.Errorf(api.CodeInternal, "reading job %s: %v", p.ID, err))
		return
	}
	if !ok {
		call.Fail(api.Errorf(api.CodeNotFound, "job %s not found", p.ID))
		return
	}
	call.Respond(jobRecordResult{Job: rec})
}

func (m *Manager) listMethod(call api.Call) {
	var f api.Filter
	if err := call.Decode(&f); err != nil {
		call.Fail(err)
		return
	}
	q, err := listQuery(f, time.Now())
	if err != nil {
		call.Fail(err)
		return
	}
	jobs, next, err := m.ListPage(q)
	if err != nil {
		call.Fail(err)
		return
	}
	if jobs == nil {
		jobs = []api.JobRecord{}
	}
	call.Respond(jobsResult{Jobs: jobs, NextCursor: next})
}

// listQuery checks job.list's params, naming the one that is bad.
func listQuery(f api.Filter, now time.Time) (JobQuery, error) {
	bad := func(format string, args ...any) error {
		return api.Errorf(api.CodeInvalidParams, "invalid params for job.list: "+format, args...)
	}
	q := JobQuery{State: f.State, Lane: f.Lane, Limit: f.Limit, Cursor: f.Cursor, Newest: f.Limit > 0}
	if f.State != "" && !api.ValidState(f.State) {
		return q, bad("unknown state %q (want queued, dispatched, running, succeeded, failed, timeout, cancelled or error)", f.State)
	}
	if f.Limit < 0 || f.Limit > api.MaxListLimit {
		return q, bad("limit must be between 1 and %d (or absent for every job), got %d", api.MaxListLimit, f.Limit)
	}
	if f.Cursor != "" {
		if f.Limit == 0 {
			return q, bad("cursor continues a paged list: give it with the limit of the page before")
		}
		if _, err := parseListCursor(f.Cursor); err != nil {
			return q, err
		}
	}
	if f.Since != "" {
		if t, err := time.Parse(time.RFC3339Nano, f.Since); err == nil {
			q.Since = t
		} else if d, derr := time.ParseDuration(f.Since); derr == nil && d >= 0 {
			q.Since = now.Add(-d)
		} else {
			return q, bad("since must be an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (1h, 30m), got %q", f.Since)
		}
	}
	return q, nil
}

func (m *Manager) cancelMethod(call api.Call) {
	var p cancelParams
	if err := decodeID(call, &p.ID, &p.JobID, &p); err != nil {
		call.Fail(err)
		return
	}
	m.CancelWith(p.ID, p.Force, func(wasRunning bool, err error) {
		if err != nil {
			call.Fail(err)
			return
		}
		call.Respond(cancelResult{WasRunning: wasRunning})
	})
}

func (m *Manager) laneListMethod(call api.Call) {
	if err := call.Decode(&api.NoParams{}); err != nil {
		call.Fail(err)
		return
	}
	ls := m.Lanes()
	if ls == nil {
		ls = []api.LaneStatus{}
	}
	call.Respond(lanesResult{Lanes: ls})
}

// decodeID decodes params naming a job by "id" or "job_id" (the name
// job.submit answers with); the id ends up in *id.
func decodeID(call api.Call, id, jobID *string, v any) error {
	if err := call.Decode(v); err != nil {
		return err
	}
	if *jobID != "" {
		if *id != "" && *id != *jobID {
			return api.Errorf(api.CodeInvalidParams, "invalid params for %s: id %q and job_id %q differ; give one", call.Method(), *id, *jobID)
		}
		*id = *jobID
	}
	if *id == "" {
		return api.Errorf(api.CodeInvalidParams, "invalid params for %s: id is required (job_id is taken too)", call.Method())
	}
	return nil
}

// job.wait answers when the job ends: at once if it has, else from the
// goroutine that ends it, or when timeout_ms passes, whichever comes first.
// A client that goes away first cancels it.
func (m *Manager) waitMethod(call api.Call) {
	var p waitParams
	if err := decodeID(call, &p.ID, &p.JobID, &p); err != nil {
		call.Fail(err)
		return
	}
	w := &pendingWait{m: m, call: call, id: p.ID, timeoutMs: p.TimeoutMs, noOutput: p.Output != nil && !*p.Output}
	stop, err := m.Wait(p.ID, w.finished) // may call w.finished at once
	if err != nil {
		call.Fail(err)
		return
	}
	w.mu.Lock()
	if w.over {
		w.mu.Unlock()
		return
	}
	w.stopWait, w.registered = stop, true
	if p.TimeoutMs > 0 {
		w.timer = time.AfterFunc(time.Duration(p.TimeoutMs)*time.Millisecond, w.timedOut)
	}
	w.mu.Unlock()
	call.OnClose(w.cancel)
}

// pendingWait is one job.wait in progress.
type pendingWait struct {
	m         *Manager
	call      api.Call
	id        string
	timeoutMs uint64
	noOutput  bool // answer without the output (waitParams.Output)

	mu         sync.Mutex
	over       bool   // answered or cancelled
	stopWait   func() // the store's cancel
	registered bool   // the wait is the store's: finished comes from whoever publishes the end
	timer      *time.Timer
}

// cancel stops what is pending: the store's wait and the timer.
func (w *pendingWait) cancel() {
	w.mu.Lock()
	w.over = true
	stop, t := w.stopWait, w.timer
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
	if t != nil {
		t.Stop()
	}
}

// finished answers with the job's terminal record: at once for a job
// that had ended, else off the goroutine that publishes the end (the
// state store's, which publishes every job's and whose job's readers wait
// for it): the answer may encode a megabyte of output.
func (w *pendingWait) finished(rec api.JobRecord) {
	w.mu.Lock()
	w.over = true
	t, later := w.timer, w.registered
	w.mu.Unlock()
	if t != nil {
		t.Stop()
	}
	if later {
		go w.call.Respond(jobRecordResult{Job: w.shown(rec)})
		return
	}
	w.call.Respond(jobRecordResult{Job: w.shown(rec)})
}

// shown is rec as the wait answers it: without its output when asked so.
func (w *pendingWait) shown(rec api.JobRecord) api.JobRecord {
	if w.noOutput {
		rec.Output = ""
	}
	return rec
}

// timedOut answers CodeInvalidState with the job as data, unless the job
// has ended just now.
func (w *pendingWait) timedOut() {
	w.cancel()
	rec, found := w.m.Get(w.id)
	if found && rec.State.Terminal() {
		w.call.Respond(jobRecordResult{Job: w.shown(rec)})
		return
	}
	state := string(rec.State)
	if !found {
		state = "unknown"
	}
	e := api.Errorf(api.CodeInvalidState, "job %s is still %s after %d ms", w.id, state, w.timeoutMs)
	if found {
		e.Data = jobRecordResult{Job: rec}
	}
	w.call.Fail(e)
}
