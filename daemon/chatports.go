package daemon

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/chat"
	"github.com/orchestrd/orchestrd/executors"
	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// chatTasks is the chat's Tasks port over the executors domain, which
// starts after the chat (services.go): it is asked only on chat.send and
// by status, once the control socket serves.
type chatTasks struct{ r *root }

var _ chat.Tasks = chatTasks{}

func (p chatTasks) Execute(spec api.TaskSpec, reply func(taskID, sessionID string, err error)) {
	p.r.execMgr.Execute(spec, reply)
}

func (p chatTasks) Stop(taskID string, reply func(error)) {
	p.r.execMgr.Stop(taskID, false, func(_ api.TaskRecord, err error) { reply(err) })
}

// Ready reports whether pool can answer: an executor of it is up (idle
// or busy), or it keeps none warm (instances = 0: one starts for a task).
func (p chatTasks) Ready(pool string) bool {
	if pool == "" {
		return false
	}
	st, ok := p.r.execMgr.Pool(pool)
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

// chatSessionKey is the meta key of the chat's conversation: the executor
// session a restarted daemon's chat goes on in.
const chatSessionKey = "chat.session"

// chatSessions writes the chat's conversation to the store's meta table
// on a goroutine of its own: Save never blocks (the chat calls it under
// its lock, maybe on the store's writer goroutine, which must not call
// the store); only the latest value waits to be written.
type chatSessions struct {
	st     *state.Store
	log    zerolog.Logger
	latest chan string // capacity 1: the value not yet written
	quit   chan struct{}
	done   chan struct{}
}

// loadChatSession reads the conversation a previous daemon left: "" for
// none, or when it cannot be read, or its session is not pool's (the
// config names another pool now): a new conversation.
func loadChatSession(st *state.Store, pool string, log zerolog.Logger) string {
	id, _, err := st.Meta().Get(chatSessionKey)
	if err != nil {
		log.Warn().Err(err).Msg("reading the chat's conversation: starting a new one")
		return ""
	}
	if id == "" || pool == "" {
		return ""
	}
	s, ok, err := executorLog{st}.Session(context.Background(), id)
	if err != nil || !ok || s.Executor != pool {
		return ""
	}
	return id
}

func startChatSessions(st *state.Store, log zerolog.Logger) *chatSessions {
	s := &chatSessions{st: st, log: log, latest: make(chan string, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

// Save queues id to be written, replacing a value not yet written.
func (s *chatSessions) Save(id string) {
	for {
		select {
		case s.latest <- id:
			return
		default:
		}
		select {
		case <-s.latest:
		default:
		}
	}
}

func (s *chatSessions) run() {
	defer close(s.done)
	for {
		select {
		case id := <-s.latest:
			s.write(id)
		case <-s.quit:
			select {
			case id := <-s.latest:
				s.write(id)
			default:
			}
			return
		}
	}
}

func (s *chatSessions) write(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.st.Meta().Set(ctx, chatSessionKey, id); err != nil {
		s.log.Error().Err(err).Msg("recording the chat's conversation: a restarted daemon starts a new one")
	}
}

// Close writes what is left and stops the goroutine.
func (s *chatSessions) Close() {
	close(s.quit)
	<-s.done
}
