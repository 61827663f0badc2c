package chat

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/apitest"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// fakeTasks is the executors as the chat sees them: Execute answers when
// the test says (answer), Stop is recorded.
type fakeTasks struct {
	mu      sync.Mutex
	specs   []api.TaskSpec
	replies []func(taskID, sessionID string, err error)
	stopped []string
	ready   bool
}

func (f *fakeTasks) Execute(spec api.TaskSpec, reply func(taskID, sessionID string, err error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.specs = append(f.specs, spec)
	f.replies = append(f.replies, reply)
}

func (f *fakeTasks) Stop(id string, reply func(error)) {
	f.mu.Lock()
	f.stopped = append(f.stopped, id)
	f.mu.Unlock()
	reply(nil)
}

func (f *fakeTasks) Ready(pool string) bool { return f.ready && pool == "chat" }

// answer answers the n-th Execute.
func (f *fakeTasks) answer(n int, taskID, sessionID string, err error) {
	f.mu.Lock()
	r := f.replies[n]
	f.mu.Unlock()
	r(taskID, sessionID, err)
}

func (f *fakeTasks) spec(n int) api.TaskSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.specs[n]
}

// fakeEvents is the bus as the chat sees it: the test emits.
type fakeEvents struct {
	mu sync.Mutex
	f  func(TaskEvent)
}

func (e *fakeEvents) Follow(f func(TaskEvent)) func() {
	e.mu.Lock()
	e.f = f
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		e.f = nil
		e.mu.Unlock()
	}
}

func (e *fakeEvents) emit(ev TaskEvent) {
	e.mu.Lock()
	f := e.f
	e.mu.Unlock()
	if f != nil {
		f(ev)
	}
}

func (e *fakeEvents) msg(task, typ, data string) {
	e.emit(TaskEvent{TaskID: task, EventType: typ, EventData: json.RawMessage(data)})
}

type fixture struct {
	m     *Manager
	mux   apitest.Mux
	tasks *fakeTasks
	evs   *fakeEvents
	sink  *eventlogtest.Recorder
}

func newFixture(t *testing.T, pool string) *fixture {
	t.Helper()
	bus, err := eventlog.Open(eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close() })
	f := &fixture{mux: apitest.Mux{}, tasks: &fakeTasks{ready: true}, evs: &fakeEvents{}, sink: eventlogtest.NewRecorder()}
	bus.Subscribe([]string{"chat.*"}, f.sink)
	f.m, err = Start(Options{Executor: pool, Cwd: "/work", Tasks: f.tasks, Events: f.evs, Bus: bus, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.m.Close)
	f.m.Register(f.mux)
	return f
}

// kinds are the kinds of recs, with each chunk's text.
func kinds(recs []*eventlog.Record) []string {
	var out []string
	for _, r := range recs {
		s := r.Kind
		switch e := r.Event.(type) {
		case ChatChunk:
			s += ":" + e.Text
			if e.Done {
				s += ":done:" + string(e.State)
			}
		case ChatToolCall:
			s += ":" + e.Tool + ":" + string(e.Input)
		case ChatToolResult:
			s += ":" + e.Tool + ":" + e.Output
			if e.Denied {
				s += ":denied"
			}
			if e.IsError {
				s += ":error"
			}
		case ChatReplied:
			if e.Denied > 0 {
				s += fmt.Sprintf(":denied=%d", e.Denied)
			}
		}
		out = append(out, s)
	}
	return out
}

// A built-in agent's messages: a tool use refused and one that failed
// reach the client as such (never as a result of a tool that ran), and
// the reply's record counts the denials.
func TestChatReplyDenials(t *testing.T) {
	f := newFixture(t, "chat")
	c := f.mux.Start(t, "chat.send", map[string]any{"message": "clean up"})
	f.tasks.answer(0, "t-1", "s-1", nil)
	if _, err := c.Wait(t, time.Second); err != nil {
		t.Fatal(err)
	}
	f.evs.msg("t-1", "thinking", `{"text":"hmm"}`)
	f.evs.msg("t-1", "text", `{"text":"Clea"}`)
	f.evs.msg("t-1", "text", `{"text":"ning."}`)
	f.evs.msg("t-1", "tool_call", `{"id":"u1","name":"Bash","input":{"command":"rm -rf build"}}`)
	f.evs.msg("t-1", "permission_denied", `{"id":"u1","name":"Bash","input":{"command":"rm -rf build"},"reason":"not the build dir"}`)
	f.evs.msg("t-1", "tool_call", `{"id":"u2","name":"Write","input":{"file_path":"/x"}}`)
	f.evs.msg("t-1", "tool_result", `{"id":"u2","output":"needs approval","is_error":true}`)
	f.evs.msg("t-1", "result", `{"text":"Cleaning.","denied":1}`)
	f.evs.emit(TaskEvent{TaskID: "t-1", Finished: true, State: api.TaskCompleted})
	got := kinds(f.sink.Take())
	want := []string{"chat.sent", "chat.chunk:Clea", "chat.chunk:ning.", `chat.tool_call:Bash:{"command":"rm -rf build"}`,
		"chat.tool_result:Bash:not the build dir:denied:error", `chat.tool_call:Write:{"file_path":"/x"}`,
		"chat.tool_result:Write:needs approval:error", "chat.chunk::done:completed", "chat.replied:denied=1"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events\n%q\nwant\n%q", got, want)
	}
}

func TestChatSendStreamsTheReply(t *testing.T) {
	f := newFixture(t, "chat")
	c := f.mux.Start(t, "chat.send", map[string]any{"message": "hello"})
	if c.Answered() {
		t.Fatal("chat.send answered before its task was accepted")
	}
	if s := f.tasks.spec(0); s.Executor != "chat" || s.Prompt != "hello" || s.Cwd != "/work" || s.SessionID != "" {
		t.Fatalf("first task %+v", s)
	}
	// A message that comes before task.execute answers is not lost.
	f.evs.msg("t-1", "content_block_delta", `{"delta":{"text":"Hel"}}`)
	f.evs.msg("t-other", "content_block_delta", `{"delta":{"text":"not ours"}}`)
	f.tasks.answer(0, "t-1", "s-1", nil)
	res, err := c.Wait(t, time.Second)
	var sr SendResult
	if err != nil || json.Unmarshal(res, &sr) != nil || !strings.HasPrefix(sr.MessageID, "msg-") || sr.TaskID != "t-1" || sr.SessionID != "s-1" {
		t.Fatalf("chat.send answered %s %v", res, err)
	}
	// A second message while the reply streams is refused.
	if _, err := f.mux.Start(t, "chat.send", map[string]any{"message": "again"}).Wait(t, time.Second); err == nil || err.Code != api.CodeInvalidState {
		t.Fatalf("a second chat.send while streaming: %v", err)
	}
	f.evs.msg("t-1", "content_block_delta", `{"delta":{"text":"lo"}}`)
	f.evs.msg("t-1", "assistant", `{"message":{"content":[{"type":"text","text":" there"},{"type":"tool_use","id":"tu1","name":"Bash","input":{"command":"ls"}}]}}`)
	f.evs.msg("t-1", "user", `{"message":{"content":[{"type":"tool_result","tool_use_id":"tu1","content":[{"type":"text","text":"a.go"}]}]}}`)
	f.evs.msg("t-1", "progress", `{"percent":50}`)
	f.evs.msg("t-2", "content_block_delta", `{"delta":{"text":"not ours"}}`)
	f.evs.emit(TaskEvent{TaskID: "t-1", Finished: true, State: api.TaskCompleted})
	f.evs.msg("t-1", "content_block_delta", `{"delta":{"text":"after the end"}}`)
	got := kinds(f.sink.Take())
	want := []string{"chat.sent", "chat.chunk:Hel", "chat.chunk:lo", "chat.chunk: there", `chat.tool_call:Bash:{"command":"ls"}`,
		"chat.tool_result:Bash:a.go", "chat.chunk::done:completed", "chat.replied"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events\n%q\nwant\n%q", got, want)
	}
	// The next message goes on in the same session.
	c = f.mux.Start(t, "chat.send", map[string]any{"message": "more", "cwd": "/tmp"})
	if s := f.tasks.spec(1); s.SessionID != "s-1" || s.Cwd != "/tmp" {
		t.Fatalf("second task %+v, want session s-1 in /tmp", s)
	}
	f.tasks.answer(1, "t-3", "s-1", nil)
	c.Wait(t, time.Second)
	// chat.clear: the reply is cancelled, the next message starts a new
	// session.
	res, err = f.mux.Start(t, "chat.clear", nil).Wait(t, time.Second)
	if err != nil || string(res) != `{"cleared":true}` {
		t.Fatalf("chat.clear: %s %v", res, err)
	}
	if f.tasks.stopped[0] != "t-3" {
		t.Fatalf("stopped %v", f.tasks.stopped)
	}
	f.evs.msg("t-3", "text", `{"text":"cancelled: not streamed"}`)
	f.evs.emit(TaskEvent{TaskID: "t-3", Finished: true, State: api.TaskCancelled, Error: &api.TaskError{Code: "stopped"}})
	got = kinds(f.sink.Take())
	want = []string{"chat.sent", "chat.cancelled", "chat.cleared", "chat.chunk::done:cancelled", "chat.replied"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events\n%q\nwant\n%q", got, want)
	}
	f.mux.Start(t, "chat.send", map[string]any{"message": "new"})
	if s := f.tasks.spec(2); s.SessionID != "" {
		t.Fatalf("after chat.clear the task is in session %q", s.SessionID)
	}
	// A refused task: its error, and the chat is free again.
	f.tasks.answer(2, "", "", api.Errorf(api.CodeQueueFull, "full"))
	f.mux.Start(t, "chat.send", map[string]any{"message": "new"})
	f.tasks.answer(3, "t-4", "s-2", nil)
}

func TestChatCancel(t *testing.T) {
	f := newFixture(t, "chat")
	// Nothing streaming: cancelled false.
	res, err := f.mux.Start(t, "chat.cancel", nil).Wait(t, time.Second)
	if err != nil || string(res) != `{"cancelled":false}` {
		t.Fatalf("chat.cancel with nothing streaming: %s %v", res, err)
	}
	// Cancelled before task.execute answered: stopped once it does.
	c := f.mux.Start(t, "chat.send", map[string]any{"message": "hi"})
	res, err = f.mux.Start(t, "chat.cancel", nil).Wait(t, time.Second)
	if err != nil || !strings.Contains(string(res), `"cancelled":true`) {
		t.Fatalf("chat.cancel: %s %v", res, err)
	}
	f.tasks.answer(0, "t-1", "s-1", nil)
	c.Wait(t, time.Second)
	if len(f.tasks.stopped) != 1 || f.tasks.stopped[0] != "t-1" {
		t.Fatalf("stopped %v", f.tasks.stopped)
	}
	f.evs.msg("t-1", "text", `{"text":"x"}`)
	f.evs.emit(TaskEvent{TaskID: "t-1", Finished: true, State: api.TaskCancelled})
	got := kinds(f.sink.Take())
	want := []string{"chat.cancelled", "chat.sent", "chat.chunk::done:cancelled", "chat.replied"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events\n%q\nwant\n%q", got, want)
	}
}

func TestChatOff(t *testing.T) {
	f := newFixture(t, "")
	if f.m.Ready() {
		t.Fatal("a chat without a pool is ready")
	}
	for _, m := range []string{"chat.send", "chat.cancel", "chat.clear", "chat.get"} {
		var p any
		if m == "chat.send" {
			p = map[string]any{"message": "hi"}
		}
		_, err := f.mux.Start(t, m, p).Wait(t, time.Second)
		if err == nil || err.Code != api.CodeInvalidState || !strings.Contains(err.Message, "[loops] chat_executor") {
			t.Fatalf("%s without a pool: %v", m, err)
		}
	}
	g := newFixture(t, "chat")
	if !g.m.Ready() {
		t.Fatal("a chat with a ready pool is not ready")
	}
	for _, p := range []map[string]any{{}, {"message": "  "}, {"message": "x", "cwd": "rel"}, {"message": "x", "bogus": 1}} {
		if _, err := g.mux.Start(t, "chat.send", p).Wait(t, time.Second); err == nil || err.Code != api.CodeInvalidParams {
			t.Fatalf("chat.send %v: %v", p, err)
		}
	}
}

// chat.get says where the conversation is: no session before its first
// message, then its session, the reply streaming while it does; a new
// conversation after chat.clear.
func TestChatGet(t *testing.T) {
	f := newFixture(t, "chat")
	get := func() string {
		t.Helper()
		res, err := f.mux.Start(t, "chat.get", nil).Wait(t, time.Second)
		if err != nil {
			t.Fatalf("chat.get: %v", err)
		}
		return string(res)
	}
	if got := get(); got != `{"executor":"chat","ready":true}` {
		t.Fatalf("chat.get before a message: %s", got)
	}
	c := f.mux.Start(t, "chat.send", map[string]any{"message": "hi"})
	if got := get(); !strings.HasPrefix(got, `{"executor":"chat","ready":true,"streaming":{"message_id":"msg-`) || strings.Contains(got, "task_id") {
		t.Fatalf("chat.get before the task is queued: %s", got)
	}
	f.tasks.answer(0, "t-1", "s-1", nil)
	c.Wait(t, time.Second)
	if got := get(); !strings.Contains(got, `"session_id":"s-1"`) || !strings.Contains(got, `"task_id":"t-1"`) {
		t.Fatalf("chat.get while the reply streams: %s", got)
	}
	f.evs.emit(TaskEvent{TaskID: "t-1", Finished: true, State: api.TaskCompleted})
	if got := get(); got != `{"executor":"chat","session_id":"s-1","ready":true}` {
		t.Fatalf("chat.get after the reply: %s", got)
	}
	if _, err := f.mux.Start(t, "chat.get", map[string]any{"x": 1}).Wait(t, time.Second); err == nil || err.Code != api.CodeInvalidParams {
		t.Fatalf("chat.get with params: %v", err)
	}
	f.mux.Start(t, "chat.clear", nil).Wait(t, time.Second)
	if got := get(); got != `{"executor":"chat","ready":true}` {
		t.Fatalf("chat.get after chat.clear: %s", got)
	}
}

func TestKinds(t *testing.T) {
	eventlogtest.CheckKinds(t,
		ChatChunk{Text: "hi", MessageID: "msg-1", Done: true, State: api.TaskFailed, Error: &api.TaskError{Code: "x", Message: "y"}},
		ChatToolCall{Tool: "Bash", Input: json.RawMessage(`{"command":"ls"}`), MessageID: "msg-1"},
		ChatToolResult{Tool: "Bash", Output: "a.go", MessageID: "msg-1"},
		ChatSent{MessageID: "msg-1", TaskID: "t-1", SessionID: "s-1", Executor: "chat", Bytes: 5, NewSession: true},
		ChatReplied{MessageID: "msg-1", TaskID: "t-1", State: api.TaskCompleted, Chunks: 3, Bytes: 10, ToolCalls: 1, ToolResults: 1},
		ChatCancelled{MessageID: "msg-1", TaskID: "t-1"},
		ChatCleared{SessionID: "s-1"},
	)
}

// An executor's error code reaches the log only as an identifier, or its
// size and hash; the client's last chunk has it whole.
func TestChatRepliedHostileCode(t *testing.T) {
	f := newFixture(t, "chat")
	f.mux.Start(t, "chat.send", map[string]any{"message": "hi"})
	f.tasks.answer(0, "t-1", "s-1", nil)
	code := "evil\x1b[2J\nsecret=hunter2"
	f.evs.emit(TaskEvent{TaskID: "t-1", Finished: true, State: api.TaskFailed, Error: &api.TaskError{Code: code, Message: "m"}})
	var replied *ChatReplied
	var last *ChatChunk
	for _, r := range f.sink.Take() {
		switch e := r.Event.(type) {
		case ChatReplied:
			replied = &e
		case ChatChunk:
			last = &e
		}
	}
	if replied == nil || strings.Contains(replied.ErrorCode, "hunter2") || !strings.Contains(replied.ErrorCode, "sha256") {
		t.Fatalf("chat.replied %+v", replied)
	}
	if last == nil || !last.Done || last.Error == nil || last.Error.Code != code {
		t.Fatalf("last chunk %+v", last)
	}
}

// The conversation is saved when it changes and restored at start.
func TestChatSessionSaved(t *testing.T) {
	bus, err := eventlog.Open(eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	var saved []string
	tasks, evs := &fakeTasks{ready: true}, &fakeEvents{}
	m, err := Start(Options{Executor: "chat", Cwd: "/", Session: "s-old", SaveSession: func(id string) { saved = append(saved, id) },
		Tasks: tasks, Events: evs, Bus: bus, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	mux := apitest.Mux{}
	m.Register(mux)
	mux.Start(t, "chat.send", map[string]any{"message": "hi"})
	if s := tasks.spec(0); s.SessionID != "s-old" {
		t.Fatalf("the restored conversation is not continued: %+v", s)
	}
	tasks.answer(0, "t-1", "s-old", nil)
	evs.emit(TaskEvent{TaskID: "t-1", Finished: true, State: api.TaskCompleted})
	mux.Start(t, "chat.clear", nil)
	mux.Start(t, "chat.send", map[string]any{"message": "again"})
	tasks.answer(1, "t-2", "s-new", nil)
	if strings.Join(saved, ",") != ",s-new" {
		t.Fatalf("saved %q, want the clear then the new session", saved)
	}
}
