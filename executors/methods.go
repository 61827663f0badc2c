package executors

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Register registers the executor methods with mux: task.execute,
// task.get, task.wait, task.list, task.stop, session.get, executor.list,
// and terminal.open, read, write, resize, close, wait and list.
func (m *Manager) Register(mux api.Mux) {
	mux.Handle("task.execute", m.executeMethod)
	mux.Handle("task.get", m.getMethod)
	mux.Handle("task.wait", m.waitMethod)
	mux.Handle("task.list", m.listMethod)
	mux.Handle("task.stop", m.stopMethod)
	mux.Handle("session.get", m.sessionMethod)
	mux.Handle("executor.list", m.executorListMethod)
	mux.Handle("terminal.open", m.terminalOpenMethod)
	mux.Handle("terminal.read", m.terminalReadMethod)
	mux.Handle("terminal.write", m.terminalWriteMethod)
	mux.Handle("terminal.resize", m.terminalResizeMethod)
	mux.Handle("terminal.close", m.terminalCloseMethod)
	mux.Handle("terminal.wait", m.terminalWaitMethod)
	mux.Handle("terminal.list", m.terminalListMethod)
}

// maxPrompt bounds a prompt (it goes to the store and to the executor on
// one line).
const maxPrompt = 1 << 20

func (m *Manager) executeMethod(call api.Call) {
	var spec api.TaskSpec
	if err := call.Decode(&spec); err != nil {
		call.Fail(err)
		return
	}
	m.Execute(spec, func(taskID, sessionID string, err error) {
		if err != nil {
			call.Fail(err)
			return
		}
		call.Respond(map[string]any{"task_id": taskID, "session_id": sessionID})
	})
}

// Execute queues a task as task.execute does: reply gets its id and
// session once it is committed, or the error (an *api.Error) that refused
// it. reply runs once, on any goroutine, and must not block. Another
// domain's way in (loops, chat): the same checks as the method.
func (m *Manager) Execute(spec api.TaskSpec, reply func(taskID, sessionID string, err error)) {
	call := &replyCall{method: "task.execute", fail: func(err error) { reply("", "", err) }}
	bad := func(format string, args ...any) {
		call.Fail(api.Errorf(api.CodeInvalidParams, "task.execute: "+format, args...))
	}
	switch {
	case strings.TrimSpace(spec.Prompt) == "":
		bad("prompt is empty")
		return
	case len(spec.Prompt) > maxPrompt:
		bad("prompt is %d bytes, over the limit of %d", len(spec.Prompt), maxPrompt)
		return
	case spec.Cwd == "" || !filepath.IsAbs(spec.Cwd):
		bad("cwd must be an absolute path, got %q", spec.Cwd)
		return
	case spec.TimeoutMs < 0:
		bad("timeout_ms must not be negative")
		return
	}
	switch spec.PermissionMode {
	case "":
		spec.PermissionMode = api.ModeDefault
	case api.ModeDefault, api.ModeAcceptEdits, api.ModeBypass, api.ModePlan:
	default:
		bad("permission_mode must be default, acceptEdits, bypassPermissions or plan, got %q", spec.PermissionMode)
		return
	}
	h, ok := m.livePool(call, spec.Executor, "task not accepted")
	if !ok {
		return
	}
	if int(h.queued.Load()) >= h.cfg.QueueLimit {
		call.Fail(api.Errorf(api.CodeQueueFull, "executor pool %s has %s queued (queue_limit): task not accepted", h.name, api.Count(h.cfg.QueueLimit, "task")))
		return
	}
	resume := ""
	if spec.SessionID != "" {
		s, ok, err := m.log.Session(context.Background(), spec.SessionID)
		if err != nil {
			call.Fail(api.Errorf(api.CodeStoreUnavailable, "reading session %s: %v", spec.SessionID, err))
			return
		}
		if !ok {
			call.Fail(api.Errorf(api.CodeNotFound, "no session %s", spec.SessionID))
			return
		}
		if s.Executor != h.name {
			bad("session %s belongs to executor pool %s, not %s", s.ID, s.Executor, h.name)
			return
		}
		resume = s.SDKSessionID
	} else {
		spec.SessionID = "s-" + api.RandomHex(8)
	}
	if spec.TimeoutMs == 0 {
		spec.TimeoutMs = h.cfg.TaskTimeout.Milliseconds()
	}
	tools := spec.Tools
	if tools == nil {
		tools = []string{}
	}
	rec := api.TaskRecord{ID: m.newTaskID(), SessionID: spec.SessionID, Executor: h.name, State: api.TaskQueued,
		Prompt: spec.Prompt, Cwd: spec.Cwd, Tools: tools, PermissionMode: spec.PermissionMode,
		TimeoutMs: spec.TimeoutMs, Loop: spec.Loop, Confine: spec.Confine, CreatedAt: time.Now().UTC()}
	m.update(rec)
	err := m.log.TaskCreated(rec, func(err error) {
		if err != nil {
			m.forget(rec.ID)
			m.mu.Lock()
			delete(m.live, rec.ID)
			m.mu.Unlock()
			call.Fail(api.Errorf(api.CodeStoreUnavailable, "the state store could not record the task: %v", err))
			return
		}
		m.bus.Emit(TaskQueued{TaskID: rec.ID, SessionID: rec.SessionID, Executor: h.name})
		m.sys.Send(h.ref, queueTask{rec: rec, resume: resume})
		reply(rec.ID, rec.SessionID, nil)
	})
	if err != nil {
		m.mu.Lock()
		delete(m.live, rec.ID)
		m.mu.Unlock()
		call.Fail(api.Errorf(api.CodeStoreUnavailable, "the state store cannot take the task: %v", err))
	}
}

// livePool resolves a call's pool (see pool), failing the call when there
// is none or when the daemon is stopping (refused says what is not done).
func (m *Manager) livePool(call api.Call, name, refused string) (*poolHandle, bool) {
	h, err := m.pool(name)
	if err != nil {
		call.Fail(err)
		return nil, false
	}
	m.mu.Lock()
	stopping := m.stopping
	m.mu.Unlock()
	if stopping {
		call.Fail(api.Errorf(api.CodeShuttingDown, "the daemon is stopping: %s", refused))
		return nil, false
	}
	return h, true
}

type idParams struct {
	ID string `json:"id"`
}

// task returns a task: the live one, else the store's.
func (m *Manager) task(id string) (api.TaskRecord, error) {
	m.mu.Lock()
	rec, ok := m.live[id]
	m.mu.Unlock()
	if ok {
		return rec, nil
	}
	rec, ok, err := m.log.Task(context.Background(), id)
	if err != nil {
		return rec, api.Errorf(api.CodeStoreUnavailable, "reading task %s: %v", id, err)
	}
	if !ok {
		return rec, api.Errorf(api.CodeNotFound, "no task %s", id)
	}
	return rec, nil
}

func (m *Manager) getMethod(call api.Call) {
	var p idParams
	if !api.DecodeID(call, &p, &p.ID) {
		return
	}
	rec, err := m.task(p.ID)
	if err != nil {
		call.Fail(err)
		return
	}
	call.Respond(map[string]any{"task": rec})
}

// wait calls f once with the task's record when it ends (at once if it
// has).
func (m *Manager) wait(id string, f func(api.TaskRecord)) {
	m.mu.Lock()
	rec, ok := m.live[id]
	switch {
	case ok && m.endedLocked(rec):
		m.mu.Unlock()
		f(rec)
		return
	case ok:
		m.waiters[id] = append(m.waiters[id], f)
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	// Not in memory: it ended and its record was committed (forget) since
	// the caller looked.
	if rec, ok, err := m.log.Task(context.Background(), id); err == nil && ok && rec.State.Terminal() {
		f(rec)
		return
	}
	m.mu.Lock()
	m.waiters[id] = append(m.waiters[id], f)
	m.mu.Unlock()
}

func (m *Manager) waitMethod(call api.Call) {
	var p struct {
		ID        string `json:"id"`
		TimeoutMs int64  `json:"timeout_ms"`
	}
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	if p.ID == "" || p.TimeoutMs < 0 {
		call.Fail(api.Errorf(api.CodeInvalidParams, "task.wait: give an id and a timeout_ms >= 0"))
		return
	}
	rec, err := m.task(p.ID)
	if err != nil {
		call.Fail(err)
		return
	}
	if m.ended(rec) {
		call.Respond(map[string]any{"task": rec})
		return
	}
	// The timer is set before the waiter is registered: the waiter may
	// run at once, on another goroutine.
	var timer *time.Timer
	if p.TimeoutMs > 0 {
		timer = time.AfterFunc(time.Duration(p.TimeoutMs)*time.Millisecond, func() {
			rec, err := m.task(p.ID)
			if err != nil {
				call.Fail(err)
				return
			}
			call.Respond(map[string]any{"task": rec, "timed_out": !rec.State.Terminal()})
		})
	}
	m.wait(p.ID, func(rec api.TaskRecord) {
		if timer != nil {
			timer.Stop()
		}
		call.Respond(map[string]any{"task": rec})
	})
	// A client gone: the answer goes nowhere (Respond after OnClose is a
	// no-op); the waiter is dropped when the task ends.
	call.OnClose(func() {
		if timer != nil {
			timer.Stop()
		}
	})
}

func (m *Manager) listMethod(call api.Call) {
	var p struct {
		SessionID string `json:"session_id"`
		Executor  string `json:"executor"`
		State     string `json:"state"`
		Limit     int    `json:"limit"`
	}
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	if p.Limit < 0 {
		call.Fail(api.Errorf(api.CodeInvalidParams, "task.list: limit must not be negative"))
		return
	}
	switch api.TaskState(p.State) {
	case "", api.TaskQueued, api.TaskRunning, api.TaskCompleted, api.TaskFailed, api.TaskCancelled, api.TaskTimeout:
	default:
		call.Fail(api.Errorf(api.CodeInvalidParams, "task.list: unknown state %q", p.State))
		return
	}
	f := TaskFilter{SessionID: p.SessionID, Executor: p.Executor, State: api.TaskState(p.State)}
	if p.Limit > 0 {
		f.Limit = p.Limit + 1
	}
	tasks, err := m.log.Tasks(context.Background(), f)
	if err != nil {
		call.Fail(api.Errorf(api.CodeStoreUnavailable, "listing tasks: %v", err))
		return
	}
	// What memory knows is newer than the store's (a task's end is
	// committed after it is announced).
	m.mu.Lock()
	for i, t := range tasks {
		if rec, ok := m.live[t.ID]; ok {
			tasks[i] = rec
		}
	}
	m.mu.Unlock()
	res := map[string]any{}
	if p.Limit > 0 && len(tasks) > p.Limit {
		tasks = tasks[:p.Limit]
		res["truncated"] = true
	}
	res["tasks"] = tasks
	call.Respond(res)
}

func (m *Manager) stopMethod(call api.Call) {
	var p struct {
		ID    string `json:"id"`
		Force bool   `json:"force"`
	}
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	m.stop(call, p.ID, p.Force)
}

// Stop stops a queued or running task as task.stop does (force: no grace);
// reply gets its record, or why not (already ended: CodeInvalidState). It
// runs once, on any goroutine, and must not block.
func (m *Manager) Stop(id string, force bool, reply func(api.TaskRecord, error)) {
	m.stop(&replyCall{method: "task.stop", respond: func(v any) {
		var rec api.TaskRecord
		if r, ok := v.(map[string]any); ok {
			rec, _ = r["task"].(api.TaskRecord)
		}
		reply(rec, nil)
	}, fail: func(err error) { reply(api.TaskRecord{}, err) }}, id, force)
}

// Pool is a pool as executor.list shows it, false when no pool has that
// name: for another domain to tell whether a pool has an executor up
// (the chat's llm_ready).
func (m *Manager) Pool(name string) (api.PoolStatus, bool) {
	h, ok := m.pools[name]
	if !ok {
		return api.PoolStatus{}, false
	}
	return h.status(), true
}

// Task is a task's record: the live one, else the store's (CodeNotFound:
// no such task).
func (m *Manager) Task(id string) (api.TaskRecord, error) { return m.task(id) }

// Wait calls f once with the task's record when it ends (at once if it
// has; from the store for a task of an earlier daemon). f runs on any
// goroutine and must not block.
func (m *Manager) Wait(id string, f func(api.TaskRecord)) error {
	rec, err := m.task(id)
	if err != nil {
		return err
	}
	if m.ended(rec) {
		f(rec)
		return nil
	}
	m.wait(id, f)
	return nil
}

func (m *Manager) stop(call api.Call, id string, force bool) {
	p := struct {
		ID    string
		Force bool
	}{id, force}
	rec, err := m.task(p.ID)
	if err != nil {
		call.Fail(err)
		return
	}
	if rec.State.Terminal() {
		call.Fail(api.Errorf(api.CodeInvalidState, "task %s is %s already", rec.ID, rec.State))
		return
	}
	h := m.pools[rec.Executor]
	if h == nil {
		call.Fail(api.Errorf(api.CodeNotFound, "task %s's executor pool %s is gone", rec.ID, rec.Executor))
		return
	}
	m.sys.Send(h.ref, stopTask{id: rec.ID, force: p.Force, call: call})
}

func (m *Manager) sessionMethod(call api.Call) {
	var p struct {
		ID    string `json:"id"`
		Limit int    `json:"limit"`
	}
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	if p.ID == "" || p.Limit < 0 {
		call.Fail(api.Errorf(api.CodeInvalidParams, "session.get: give an id and a limit >= 0"))
		return
	}
	ctx := context.Background()
	s, ok, err := m.log.Session(ctx, p.ID)
	if err != nil {
		call.Fail(api.Errorf(api.CodeStoreUnavailable, "reading session %s: %v", p.ID, err))
		return
	}
	if !ok {
		call.Fail(api.Errorf(api.CodeNotFound, "no session %s", p.ID))
		return
	}
	if s.TokenUsage, err = m.log.SessionUsage(ctx, p.ID); err != nil {
		call.Fail(api.Errorf(api.CodeStoreUnavailable, "summing session %s's tokens: %v", p.ID, err))
		return
	}
	ms, err := m.log.SessionMessages(ctx, p.ID, p.Limit)
	if err != nil {
		call.Fail(api.Errorf(api.CodeStoreUnavailable, "reading session %s's messages: %v", p.ID, err))
		return
	}
	call.Respond(map[string]any{"session": s, "messages": ms})
}

func (m *Manager) executorListMethod(call api.Call) {
	if err := call.Decode(&struct{}{}); err != nil {
		call.Fail(err)
		return
	}
	pools := make([]api.PoolStatus, 0, len(m.pools))
	for _, name := range m.PoolNames() {
		pools = append(pools, m.pools[name].status())
	}
	call.Respond(map[string]any{"pools": pools})
}

// replyCall is an api.Call made in the daemon, for the Go API: its answer
// goes to functions.
type replyCall struct {
	method  string
	respond func(any)
	fail    func(error)
	done    atomic.Bool
}

func (c *replyCall) Method() string   { return c.method }
func (c *replyCall) Decode(any) error { return nil }
func (c *replyCall) OnClose(func())   {}

func (c *replyCall) Respond(v any) {
	if c.done.CompareAndSwap(false, true) && c.respond != nil {
		c.respond(v)
	}
}

func (c *replyCall) Fail(err error) {
	if c.done.CompareAndSwap(false, true) && c.fail != nil {
		c.fail(err)
	}
}

// DeniedTools reads the names of the tools refused in an ended task: its
// permission_denied messages' names, each once, in order, as
// eventlog.Ident shows a name an agent chose (at most 50). It reads the
// store: call it off an actor.
func (m *Manager) DeniedTools(taskID, sessionID string) ([]string, error) {
	ms, err := m.log.SessionMessages(context.Background(), sessionID, 0)
	if err != nil {
		return nil, fmt.Errorf("reading task %s's messages: %w", taskID, err)
	}
	var out []string
	for _, msg := range ms {
		if msg.TaskID != taskID || msg.EventType != api.MsgPermissionDenied {
			continue
		}
		var d struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(msg.EventData, &d) != nil || d.Name == "" {
			continue
		}
		name := eventlog.Ident(d.Name)
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
		if len(out) == 50 {
			break
		}
	}
	return out, nil
}
