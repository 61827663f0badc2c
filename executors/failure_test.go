package executors

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// memLog is the executors' Log in memory; TaskStarted panics for a task
// whose prompt says so (a bug in the task's actor, as far as it knows).
type memLog struct {
	mu       sync.Mutex
	msgs     []api.SessionMessage
	finished map[string]api.TaskRecord // as a store keeps them: task.wait on a task already forgotten in memory
}

func (l *memLog) TaskCreated(t api.TaskRecord, done func(error)) error { done(nil); return nil }
func (l *memLog) TaskStarted(t api.TaskRecord, done func(error)) error {
	if strings.Contains(t.Prompt, "panic in the task actor") {
		panic("memLog: TaskStarted asked to panic")
	}
	done(nil)
	return nil
}
func (l *memLog) TaskFinished(t api.TaskRecord, done func(error)) error {
	l.mu.Lock()
	if l.finished == nil {
		l.finished = map[string]api.TaskRecord{}
	}
	l.finished[t.ID] = t
	l.mu.Unlock()
	done(nil)
	return nil
}
func (l *memLog) Messages(ms []api.SessionMessage, done func(error)) error {
	l.mu.Lock()
	l.msgs = append(l.msgs, ms...)
	l.mu.Unlock()
	done(nil)
	return nil
}
func (l *memLog) Task(_ context.Context, id string) (api.TaskRecord, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.finished[id]
	return t, ok, nil
}
func (l *memLog) Tasks(context.Context, TaskFilter) ([]api.TaskRecord, error) { return nil, nil }
func (l *memLog) Session(context.Context, string) (api.SessionRecord, bool, error) {
	return api.SessionRecord{}, false, nil
}
func (l *memLog) SessionUsage(context.Context, string) (*api.TokenUsage, error) { return nil, nil }

func (l *memLog) SessionMessages(context.Context, string, int) ([]api.SessionMessage, error) {
	return nil, nil
}
func (l *memLog) Unfinished(context.Context) ([]api.TaskRecord, error) { return nil, nil }

// panicky is a Permissions whose Ask panics: a bug in the executor's
// actor, as far as it knows.
type panicky struct{}

func (panicky) Ask(PermissionRequest, func(PermissionAnswer)) (string, func(string), error) {
	panic("panicky: Ask")
}

// fakeCall is an api.Call whose answer lands on a channel.
type fakeCall struct {
	method string
	params any
	out    chan json.RawMessage
	errs   chan error
}

func newCall(method string, params any) *fakeCall {
	return &fakeCall{method: method, params: params, out: make(chan json.RawMessage, 1), errs: make(chan error, 1)}
}
func (c *fakeCall) Method() string { return c.method }
func (c *fakeCall) Decode(v any) error {
	b, _ := json.Marshal(c.params)
	return json.Unmarshal(b, v)
}
func (c *fakeCall) Respond(r any) {
	b, _ := json.Marshal(r)
	c.out <- b
}
func (c *fakeCall) Fail(err error)   { c.errs <- err }
func (c *fakeCall) OnClose(f func()) {}

func (c *fakeCall) wait(t *testing.T, v any) {
	t.Helper()
	select {
	case b := <-c.out:
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	case err := <-c.errs:
		t.Fatalf("%s: %v", c.method, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer within 30s", c.method)
	}
}

// startTestPool starts a Manager with one pool "p" of the test executor,
// recording in log, its actors and bus of its own: the manager, its
// methods and its home. The manager is shut down when the test ends
// (before, first, the cleanups registered after this).
func startTestPool(t *testing.T, log Log) (*Manager, mux, string) {
	t.Helper()
	te := filepath.Join(t.TempDir(), "testexecutor")
	if err := daemonrun.Build("..", "./internal/testexecutor", te); err != nil {
		t.Fatal(err)
	}
	bus, err := eventlog.Open(eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close() })
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	t.Cleanup(sys.Shutdown)
	cfg := DefaultPool()
	cfg.Command = []string{te}
	home := t.TempDir()
	m, err := Start(Options{Pools: map[string]PoolConfig{"p": cfg}, Home: home, Bus: bus, System: sys,
		Logger: zerolog.Nop(), Log: log, Permissions: panicky{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	methods := mux{}
	m.Register(methods)
	return m, methods, home
}

// mux is an api.Mux that keeps the handlers.
type mux map[string]api.Handler

func (m mux) Handle(method string, h api.Handler) { m[method] = h }

func (m mux) do(t *testing.T, method string, params, result any) {
	t.Helper()
	c := newCall(method, params)
	m[method](c)
	c.wait(t, result)
}

// A panic in an executor's actor or in a task's actor costs that task and
// that process, each said in task.finished, and nothing else: the pool
// starts a new executor and runs the next task.
func TestActorFailures(t *testing.T) {
	_, methods, home := startTestPool(t, &memLog{})

	run := func(prompt string) api.TaskRecord {
		t.Helper()
		var r struct {
			TaskID string `json:"task_id"`
		}
		methods.do(t, "task.execute", map[string]any{"prompt": prompt, "cwd": home}, &r)
		var w struct {
			Task api.TaskRecord `json:"task"`
		}
		methods.do(t, "task.wait", map[string]any{"id": r.TaskID, "timeout_ms": 30000}, &w)
		return w.Task
	}
	pids := func() []int {
		var r struct {
			Pools []api.PoolStatus `json:"pools"`
		}
		methods.do(t, "executor.list", nil, &r)
		var out []int
		for _, e := range r.Pools[0].Executors {
			out = append(out, e.Pid)
		}
		return out
	}

	if rec := run("hello"); rec.State != api.TaskCompleted {
		t.Fatalf("a first task: %+v", rec)
	}

	for _, c := range []struct {
		actor  string // the actor that panics, as the failure names it
		prompt string
		code   string
	}{
		// The executor's actor panics (in request_permission).
		{"executor's actor", `{"steps":[{"op":"permission","tool":"Bash","input":{"command":"ls"}}]}`, api.TaskErrExecutorLost},
		// The task's actor panics (recording that it started).
		{"actor", "panic in the task actor", api.TaskErrActorFailed},
	} {
		before := pids()
		rec := run(c.prompt)
		if rec.State != api.TaskFailed || rec.Error == nil || rec.Error.Code != c.code {
			t.Fatalf("the task whose %s failed: %+v %+v", c.actor, rec, rec.Error)
		}
		for _, pid := range before {
			waitDead(t, pid)
		}
		if rec := run("after the task whose " + c.actor + " failed"); rec.State != api.TaskCompleted {
			t.Fatalf("the next task after the %s failed: %+v %+v", c.actor, rec, rec.Error)
		}
	}
}

func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(b), ") Z ") || syscall.Kill(pid, 0) != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The next task of a session resumes the agent session its last task
// ended in as soon as task.finished is heard (a chat sends the next
// message then): the session is known before the event goes out, not
// after, when that task may already be queued without it.
func TestNextTaskResumesOnTaskFinished(t *testing.T) {
	m, methods, home := startTestPool(t, &memLog{})
	heard := make(chan string, 1)
	unsubscribe := m.bus.Subscribe([]string{"task.finished"}, eventlog.SinkFunc(func(r *eventlog.Record) {
		switch e := r.Event.(type) {
		case TaskFinished:
			heard <- m.resumeOf(e.SessionID, "")
		case *TaskFinished:
			heard <- m.resumeOf(e.SessionID, "")
		}
	}))
	defer unsubscribe()
	var r struct {
		TaskID    string `json:"task_id"`
		SessionID string `json:"session_id"`
	}
	methods.do(t, "task.execute", map[string]any{"prompt": `{"steps":[{"op":"sdk","text":"agent-session-1"}]}`, "cwd": home}, &r)
	select {
	case got := <-heard:
		if got != "agent-session-1" {
			t.Fatalf("when task.finished was heard, the session's next task would resume %q, not agent-session-1", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no task.finished within 30s")
	}
}
