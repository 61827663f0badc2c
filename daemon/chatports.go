package daemon

import (
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/chat"
	"github.com/orchestrd/orchestrd/executors"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// chatTasks is the chat's Tasks port over the executors domain.
type chatTasks struct{ m *executors.Manager }

var _ chat.Tasks = chatTasks{}

func (p chatTasks) Execute(spec api.TaskSpec, reply func(taskID, sessionID string, err error)) {
	p.m.Execute(spec, reply)
}

func (p chatTasks) Stop(taskID string, reply func(error)) {
	p.m.Stop(taskID, false, func(_ api.TaskRecord, err error) { reply(err) })
}

// Ready reports whether pool can answer: an executor of it is up (idle
// or busy), or it keeps none warm (instances = 0: one starts for a task).
func (p chatTasks) Ready(pool string) bool {
	if pool == "" {
		return false
	}
	st, ok := p.m.Pool(pool)
	if !ok {
		return false
	}
	if st.Instances == 0 {
		return true
	}
	for _, e := range st.Executors {
		if e.State == "idle" || e.State == "busy" {
			return true
		}
	}
	return false
}

// chatEvents is the chat's TaskEvents port over the bus: task.message and
// task.finished, as the executors emit them (a task's messages are
// published before its end).
type chatEvents struct{ bus *eventlog.Bus }

var _ chat.TaskEvents = chatEvents{}

func (p chatEvents) Follow(f func(chat.TaskEvent)) func() {
	return p.bus.Subscribe([]string{"task.message", "task.finished"}, taskEventSink(f))
}

// taskEventSink turns the executors' events into the chat's; it never
// blocks (f does not).
type taskEventSink func(chat.TaskEvent)

func (s taskEventSink) Deliver(r *eventlog.Record) {
	switch e := r.Event.(type) {
	case *executors.TaskMessage: // EmitAll's
		s(chat.TaskEvent{TaskID: e.TaskID, Sequence: e.Sequence, EventType: e.EventType, EventData: e.EventData})
	case executors.TaskMessage:
		s(chat.TaskEvent{TaskID: e.TaskID, Sequence: e.Sequence, EventType: e.EventType, EventData: e.EventData})
	case executors.TaskFinished:
		s(chat.TaskEvent{TaskID: e.TaskID, Finished: true, State: e.State, Error: e.Error})
	case *executors.TaskFinished:
		s(chat.TaskEvent{TaskID: e.TaskID, Finished: true, State: e.State, Error: e.Error})
	}
}
