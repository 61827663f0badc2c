package daemon

import (
	"context"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/executors"
	"github.com/orchestrd/orchestrd/state"
)

// executorLog is the executors' durable record in the state store.
type executorLog struct{ st *state.Store }

var _ executors.Log = executorLog{}

func (l executorLog) TaskCreated(t api.TaskRecord, done func(error)) error {
	return l.st.Enqueue(state.TaskCreated(t), done)
}

func (l executorLog) TaskStarted(t api.TaskRecord, done func(error)) error {
	return l.st.Enqueue(state.TaskStarted(t), done)
}

func (l executorLog) TaskFinished(t api.TaskRecord, done func(error)) error {
	return l.st.Enqueue(state.TaskFinished(t), done)
}

func (l executorLog) Messages(ms []api.SessionMessage, done func(error)) error {
	return l.st.Enqueue(state.MessagesReported(ms), done)
}

func (l executorLog) Task(_ context.Context, id string) (api.TaskRecord, bool, error) {
	return l.st.Tasks().Get(id)
}

func (l executorLog) Tasks(_ context.Context, f executors.TaskFilter) ([]api.TaskRecord, error) {
	return l.st.Tasks().List(state.TaskQuery{SessionID: f.SessionID, Executor: f.Executor, State: f.State, Limit: f.Limit})
}

func (l executorLog) Session(_ context.Context, id string) (api.SessionRecord, bool, error) {
	return l.st.Tasks().Session(id)
}

func (l executorLog) SessionUsage(_ context.Context, id string) (*api.TokenUsage, error) {
	return l.st.Tasks().SessionUsage(id)
}

func (l executorLog) SessionMessages(_ context.Context, id string, limit int) ([]api.SessionMessage, error) {
	return l.st.Tasks().Messages(id, limit)
}

func (l executorLog) Unfinished(_ context.Context) ([]api.TaskRecord, error) {
	return l.st.Tasks().Unfinished()
}
