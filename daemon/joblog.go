package daemon

import (
	"context"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/state"
)

// jobLog is lanes.JobLog on the state store: state.Jobs, its writes queued
// with Store.Enqueue so that no actor waits for a commit.
type jobLog struct{ st *state.Store }

var _ lanes.JobLog = jobLog{}

// enqueue queues w; done hears of a write that could not be queued too.
func (l jobLog) enqueue(w state.Write, done func(error)) {
	if err := l.st.Enqueue(w, done); err != nil && done != nil {
		done(err)
	}
}

func (l jobLog) RecordSubmitted(rec api.JobRecord, spec api.JobSpec, done func(error)) {
	l.enqueue(state.JobSubmitted(rec, spec), done)
}

func (l jobLog) RecordDispatched(id, runnerID string, runnerPid int, at time.Time, done func(error)) {
	l.enqueue(state.JobDispatched(id, runnerID, runnerPid, at), done)
}

func (l jobLog) RecordRunning(id string, done func(error)) { l.enqueue(state.JobRunning(id), done) }

func (l jobLog) RecordRequeued(id string, done func(error)) { l.enqueue(state.JobRequeued(id), done) }

func (l jobLog) RecordFinished(rec api.JobRecord, done func(error)) {
	l.enqueue(state.JobFinished(rec), done)
}

func (l jobLog) RecordOutput(id string, off int64, data []byte, total int64, done func(error)) {
	l.enqueue(state.JobOutputStreamed(id, off, data, total), done)
}

// FinishAll commits the records in as few transactions as the writer
// batches (one Do): recovering 10,000 jobs is not 10,000 commits. Each
// takes the output its job streamed into the store (state.JobLost).
func (l jobLog) FinishAll(ctx context.Context, recs []api.JobRecord) error {
	ws := make([]state.Write, len(recs))
	for i, r := range recs {
		ws[i] = state.JobLost(r)
	}
	return l.st.Do(ctx, ws...)
}

func (l jobLog) Get(id string) (api.JobRecord, bool, error) { return l.st.Jobs().Get(id) }

func (l jobLog) List(q lanes.JobQuery) (lanes.JobPage, error) {
	p, err := l.st.Jobs().List(state.Query{State: q.State, Lane: q.Lane, Since: q.Since, Limit: q.Limit,
		Cursor: q.Cursor, Newest: q.Newest, NotPrefix: q.NotPrefix})
	return lanes.JobPage{Jobs: p.Jobs, After: p.After, Next: p.Next}, err
}

func (l jobLog) Unfinished() ([]lanes.UnfinishedJob, error) {
	us, err := l.st.Jobs().Unfinished()
	if err != nil {
		return nil, err
	}
	out := make([]lanes.UnfinishedJob, len(us))
	for i, u := range us {
		out[i] = lanes.UnfinishedJob{Record: u.Record, Spec: u.Spec}
	}
	return out, nil
}
