// Package chat is Loopr's chat: a conversation with an agent on the
// executor pool [loops] chat_executor names. chat.send runs the message as
// an executor task in the conversation's executor session (the session
// carries the history, and the store keeps every message of it:
// session.get shows the conversation), answers {message_id} at once, and
// streams the reply to subscribers as chat.chunk, chat.tool_call and
// chat.tool_result events, the last chunk done. chat.cancel stops the
// reply being streamed; chat.clear starts a new conversation.
//
// There is one conversation per daemon, as Loopr's (its TUI has one chat):
// every client sees the same, and one reply streams at a time. The chat
// holds no actor: its state is a small struct under a mutex, touched by
// the methods and by the task events it follows, none of which blocks.
package chat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// ConfigKey is the config key that names the chat's pool.
const ConfigKey = "[loops] chat_executor"

// maxEarly bounds the task events kept while a message's task id is not
// known yet (task.execute has not answered).
const maxEarly = 256

// Options configures the chat.
type Options struct {
	// Executor is the pool the chat runs on ([loops] chat_executor); ""
	// leaves the chat off.
	Executor string
	// Cwd is where the agent works when chat.send gives no cwd; default
	// the daemon's user's home directory.
	Cwd string
	// Session is the conversation a previous daemon left (its executor
	// session), "" for a new one.
	Session string
	// SaveSession, if set, is told the conversation's session whenever it
	// changes ("" after chat.clear), to be there after a restart. It must
	// not block; it is called under the chat's lock.
	SaveSession func(id string)
	Tasks       Tasks
	Events      TaskEvents
	Bus         *eventlog.Bus
	Logger      zerolog.Logger
}

// Manager is the chat domain.
type Manager struct {
	opts   Options
	bus    *eventlog.Bus
	prefix string
	seq    atomic.Uint64
	stop   func()

	mu      sync.Mutex
	session string // the conversation's executor session; "" until its first task
	conv    uint64 // bumped by chat.clear
	cur     *reply // the reply being streamed, if any
	closed  bool
}

// reply is one message's reply: its task and what was streamed of it.
type reply struct {
	messageID string
	taskID    string // "" until task.execute answers
	conv      uint64
	cancel    bool        // chat.cancel asked: nothing more is streamed
	early     []TaskEvent // events that came before the task id
	tools     api.ToolNames

	chunks, bytes, calls, results, denied int
}

// Start makes the chat and starts following task events.
func Start(opts Options) (*Manager, error) {
	if opts.Tasks == nil || opts.Events == nil || opts.Bus == nil {
		return nil, errors.New("chat: Tasks, Events and Bus are required")
	}
	if opts.Cwd == "" {
		if h, err := os.UserHomeDir(); err == nil && filepath.IsAbs(h) {
			opts.Cwd = h
		} else {
			opts.Cwd = "/"
		}
	}
	if opts.SaveSession == nil {
		opts.SaveSession = func(string) {}
	}
	m := &Manager{opts: opts, bus: opts.Bus, prefix: "msg-" + api.RandomHex(3) + "-", session: opts.Session}
	m.stop = opts.Events.Follow(m.taskEvent)
	return m, nil
}

// Close stops following task events. A reply still streaming is not
// stopped (its task is the executors'), only no longer streamed.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.stop()
}

// Ready reports whether the chat can answer: its pool is configured and
// has an executor up (status's llm_ready).
func (m *Manager) Ready() bool {
	return m.opts.Executor != "" && m.opts.Tasks.Ready(m.opts.Executor)
}

// Register registers chat.send, chat.cancel, chat.clear and chat.get.
func (m *Manager) Register(mux api.Mux) {
	mux.Handle("chat.get", m.getMethod)
	mux.Handle("chat.send", m.sendMethod)
	mux.Handle("chat.cancel", m.cancelMethod)
	mux.Handle("chat.clear", m.clearMethod)
}

type (
	sendParams struct {
		Message string `json:"message"`
		Cwd     string `json:"cwd,omitempty"` // orchestrd's: where the agent works
	}
	// SendResult is chat.send's answer: message_id (Loopr's), then
	// orchestrd's.
	SendResult struct {
		MessageID string `json:"message_id"`
		TaskID    string `json:"task_id"`
		SessionID string `json:"session_id"`
	}
	// CancelResult is chat.cancel's answer: cancelled is false when no
	// reply was streaming.
	CancelResult struct {
		Cancelled bool   `json:"cancelled"`
		MessageID string `json:"message_id,omitempty"`
	}
	// GetResult is chat.get's answer: the conversation's pool, its
	// executor session ("" until its first message; session.get reads
	// it), whether the pool can answer, and the reply being streamed.
	GetResult struct {
		Executor  string     `json:"executor"`
		SessionID string     `json:"session_id,omitempty"`
		Ready     bool       `json:"ready"`
		Streaming *Streaming `json:"streaming,omitempty"`
	}
	// Streaming is the message whose reply streams (task_id "" until
	// its task is queued).
	Streaming struct {
		MessageID string `json:"message_id"`
		TaskID    string `json:"task_id,omitempty"`
	}
	// ClearResult is chat.clear's answer.
	ClearResult struct {
		Cleared bool `json:"cleared"`
	}
)

// off is the error of a chat without a pool.
func off(method string) error {
	return api.Errorf(api.CodeInvalidState, "%s: the chat is off: no executor pool for it; set %s to an [executors.NAME] pool in the config file",
		method, ConfigKey)
}

// on decodes a method's params, which are none, and says whether the
// chat is on; if not, the call has failed saying so.
func (m *Manager) on(call api.Call, method string) bool {
	if err := call.Decode(&api.NoParams{}); err != nil {
		call.Fail(err)
		return false
	}
	if m.opts.Executor == "" {
		call.Fail(off(method))
		return false
	}
	return true
}

func (m *Manager) sendMethod(call api.Call) {
	var p sendParams
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	if strings.TrimSpace(p.Message) == "" {
		call.Fail(api.Errorf(api.CodeInvalidParams, "invalid params for chat.send: message is empty"))
		return
	}
	if p.Cwd != "" && !filepath.IsAbs(p.Cwd) {
		call.Fail(api.Errorf(api.CodeInvalidParams, "invalid params for chat.send: cwd must be an absolute path, got %q", p.Cwd))
		return
	}
	if m.opts.Executor == "" {
		call.Fail(off("chat.send"))
		return
	}
	cwd := p.Cwd
	if cwd == "" {
		cwd = m.opts.Cwd
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		call.Fail(api.Errorf(api.CodeShuttingDown, "chat.send: the daemon is stopping"))
		return
	}
	if r := m.cur; r != nil {
		m.mu.Unlock()
		call.Fail(api.Errorf(api.CodeInvalidState, "chat.send: the reply to %s is still streaming: wait for its last chunk, or chat.cancel it", r.messageID))
		return
	}
	r := &reply{messageID: m.prefix + fmt.Sprint(m.seq.Add(1)), conv: m.conv}
	m.cur = r
	session := m.session
	m.mu.Unlock()
	m.opts.Tasks.Execute(api.TaskSpec{Executor: m.opts.Executor, Prompt: p.Message, Cwd: cwd, SessionID: session},
		func(taskID, sessionID string, err error) {
			if err != nil {
				m.mu.Lock()
				if m.cur == r {
					m.cur = nil
				}
				m.mu.Unlock()
				call.Fail(err)
				return
			}
			m.started(r, taskID, sessionID, session == "", len(p.Message))
			call.Respond(SendResult{MessageID: r.messageID, TaskID: taskID, SessionID: sessionID})
		})
}

// started: task.execute accepted the message as taskID. The events that
// came meanwhile are played now; a cancel that came meanwhile stops it.
func (m *Manager) started(r *reply, taskID, sessionID string, newSession bool, size int) {
	m.mu.Lock()
	r.taskID = taskID
	if r.conv == m.conv && m.session == "" {
		m.session = sessionID
		m.opts.SaveSession(sessionID)
	}
	m.bus.Emit(ChatSent{MessageID: r.messageID, TaskID: taskID, SessionID: sessionID, Executor: m.opts.Executor,
		Bytes: size, NewSession: newSession})
	early := r.early
	r.early = nil
	for _, ev := range early {
		if ev.TaskID == taskID && m.cur == r {
			m.apply(r, ev)
		}
	}
	stop := r.cancel && m.cur == r
	m.mu.Unlock()
	if stop {
		m.stopTask(r)
	}
}

// taskEvent is the task events' sink: it never blocks (a mutex held only
// for the bus's non-blocking emits).
func (m *Manager) taskEvent(ev TaskEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.cur
	if r == nil {
		return
	}
	if r.taskID == "" {
		if len(r.early) < maxEarly {
			r.early = append(r.early, ev)
		}
		return
	}
	if ev.TaskID == r.taskID {
		m.apply(r, ev)
	}
}

// apply streams one event of r's task. Under m.mu.
func (m *Manager) apply(r *reply, ev TaskEvent) {
	if ev.Finished {
		m.cur = nil
		code := ""
		if ev.Error != nil {
			code = eventlog.Ident(ev.Error.Code) // an executor's own code: its words
		}
		m.bus.Emit(ChatChunk{Done: true, MessageID: r.messageID, State: ev.State, Error: ev.Error})
		m.bus.Emit(ChatReplied{MessageID: r.messageID, TaskID: r.taskID, State: ev.State, ErrorCode: code,
			Chunks: r.chunks, Bytes: r.bytes, ToolCalls: r.calls, ToolResults: r.results, Denied: r.denied, Cancelled: r.cancel})
		return
	}
	if r.cancel {
		return
	}
	for _, it := range parseMessage(ev.EventType, ev.EventData, &r.tools) {
		switch it.kind {
		case itemText:
			r.chunks++
			r.bytes += len(it.text)
			m.bus.Emit(ChatChunk{Text: it.text, MessageID: r.messageID})
		case itemToolCall:
			r.calls++
			m.bus.Emit(ChatToolCall{Tool: it.tool, Input: it.input, MessageID: r.messageID})
		case itemToolResult:
			if it.denied {
				r.denied++
			} else {
				r.results++
			}
			m.bus.Emit(ChatToolResult{Tool: it.tool, Output: it.output, IsError: it.isError, Denied: it.denied, MessageID: r.messageID})
		}
	}
}

// stopTask stops r's task (its end comes as task.finished: the last
// chunk).
func (m *Manager) stopTask(r *reply) {
	m.opts.Tasks.Stop(r.taskID, func(err error) {
		if err != nil {
			m.opts.Logger.Debug().Err(err).Str("task_id", r.taskID).Msg("chat: stopping the reply's task")
		}
	})
}

// cancelReply marks the reply being streamed cancelled and stops its task
// (once its id is known). Nil when none was streaming.
func (m *Manager) cancelReply() *reply {
	m.mu.Lock()
	r := m.cur
	if r == nil || r.cancel {
		m.mu.Unlock()
		return nil
	}
	r.cancel = true
	known := r.taskID != ""
	m.bus.Emit(ChatCancelled{MessageID: r.messageID, TaskID: r.taskID})
	m.mu.Unlock()
	if known {
		m.stopTask(r)
	}
	return r
}

func (m *Manager) cancelMethod(call api.Call) {
	if !m.on(call, "chat.cancel") {
		return
	}
	r := m.cancelReply()
	if r == nil {
		call.Respond(CancelResult{})
		return
	}
	call.Respond(CancelResult{Cancelled: true, MessageID: r.messageID})
}

// getMethod says where the conversation is: a front-end reads it with
// session.get (the chat keeps no text of its own).
func (m *Manager) getMethod(call api.Call) {
	if !m.on(call, "chat.get") {
		return
	}
	ready := m.Ready()
	m.mu.Lock()
	res := GetResult{Executor: m.opts.Executor, SessionID: m.session, Ready: ready}
	if r := m.cur; r != nil && !r.cancel {
		res.Streaming = &Streaming{MessageID: r.messageID, TaskID: r.taskID}
	}
	m.mu.Unlock()
	call.Respond(res)
}

// clearMethod starts a new conversation: the next message opens a new
// executor session; a reply still streaming is cancelled.
func (m *Manager) clearMethod(call api.Call) {
	if !m.on(call, "chat.clear") {
		return
	}
	m.cancelReply()
	m.mu.Lock()
	old := m.session
	m.session = ""
	m.conv++
	m.opts.SaveSession("")
	m.bus.Emit(ChatCleared{SessionID: old})
	m.mu.Unlock()
	call.Respond(ClearResult{Cleared: true})
}
