package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// chatConfig is a daemon whose chat runs on the test executor (one warm
// instance).
func chatConfig(t *testing.T) string {
	return execConfig(t, "instances = 1\n") + "\n[loops]\nchat_executor = \"scripted\"\nvalidation_lane = \"net\"\n"
}

// chatPiece is one piece of a streamed reply, as a Loopr client reads it.
type chatPiece struct {
	Event     string          `json:"-"`
	Text      string          `json:"text"`
	Done      bool            `json:"done"`
	MessageID string          `json:"message_id"`
	State     api.TaskState   `json:"state"`
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input"`
	Output    string          `json:"output"`
}

func (p chatPiece) String() string {
	switch p.Event {
	case "chat.chunk":
		if p.Done {
			return "done:" + string(p.State)
		}
		return "text:" + p.Text
	case "chat.tool_call":
		return "call:" + p.Tool + ":" + string(p.Input)
	}
	return "result:" + p.Tool + ":" + p.Output
}

// piece reads the next piece of message msgID's reply (the chat's
// lifecycle events, chat.sent and the like, are skipped).
func (c *looprClient) piece(msgID string) chatPiece {
	c.t.Helper()
	for {
		e := c.event(30 * time.Second)
		switch e.Event {
		case "chat.chunk", "chat.tool_call", "chat.tool_result":
		default:
			continue
		}
		var p chatPiece
		if err := json.Unmarshal(e.Data, &p); err != nil {
			c.t.Fatalf("%s data %s: %v", e.Event, e.Data, err)
		}
		p.Event = e.Event
		if p.MessageID != msgID {
			c.t.Fatalf("%s of message %s while %s streams", e.Event, p.MessageID, msgID)
		}
		return p
	}
}

// reply reads the pieces of message msgID's reply up to its last chunk.
func (c *looprClient) reply(msgID string) []string {
	c.t.Helper()
	var out []string
	for {
		p := c.piece(msgID)
		out = append(out, p.String())
		if p.Done {
			return out
		}
	}
}

type chatSent struct {
	MessageID string `json:"message_id"`
	TaskID    string `json:"task_id"`
	SessionID string `json:"session_id"`
}

func (c *looprClient) chatSend(message string) chatSent {
	c.t.Helper()
	r := c.request("chat.send", map[string]any{"message": message})
	var s chatSent
	if r.Error != nil || json.Unmarshal(r.Result, &s) != nil || s.MessageID == "" {
		c.t.Fatalf("chat.send answered %s %+v", r.Result, r.Error)
	}
	return s
}

// Loopr's chat through the real daemon and the test executor: a reply's
// text, tool calls and results streamed in order and kept in the session;
// the conversation goes on in one session; chat.cancel stops a reply;
// chat.clear starts a new session.
func TestChatLoopr(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	d := startDaemon(t, chatConfig(t))
	c := dialLoopr(t, d.sock())
	if r := c.request("initialize", map[string]any{"version": "0.1.1"}); r.Error != nil {
		t.Fatalf("initialize: %+v", r.Error)
	}
	eventually(t, 20*time.Second, "status says the LLM is ready", func() bool {
		var st struct {
			LLMReady bool `json:"llm_ready"`
		}
		r := c.request("status", nil)
		return r.Error == nil && json.Unmarshal(r.Result, &st) == nil && st.LLMReady
	})
	if r := c.request("subscribe", nil); r.Error != nil {
		t.Fatalf("subscribe: %+v", r.Error)
	}

	first := c.chatSend(script(`{"op":"message","text":"Hello, "}`, `{"op":"message","text":"world.\n"}`,
		`{"op":"message","type":"tool_use","data":{"id":"tu1","name":"Read","input":{"path":"a.go"}}}`,
		`{"op":"message","type":"tool_result","data":{"tool_use_id":"tu1","content":"package a"}}`,
		`{"op":"message","text":"Done."}`))
	got := c.reply(first.MessageID)
	want := []string{"text:Hello, ", "text:world.\n", `call:Read:{"path":"a.go"}`, "result:Read:package a", "text:Done.", "done:completed"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("reply\n%q\nwant\n%q", got, want)
	}
	// The whole reply is kept: the session's messages (an executor task's).
	r := c.request("session.get", map[string]any{"id": first.SessionID})
	var sess struct {
		Messages []api.SessionMessage `json:"messages"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &sess) != nil || len(sess.Messages) != 5 {
		t.Fatalf("session.get: %s %+v", r.Result, r.Error)
	}
	var text strings.Builder
	for _, m := range sess.Messages {
		var d struct {
			Delta struct {
				Text string `json:"text"`
			} `json:"delta"`
		}
		if m.EventType == "content_block_delta" && json.Unmarshal(m.EventData, &d) == nil {
			text.WriteString(d.Delta.Text)
		}
	}
	if text.String() != "Hello, world.\nDone." {
		t.Fatalf("the session keeps %q", text.String())
	}

	// The conversation goes on in the same executor session.
	second := c.chatSend("and again")
	if second.SessionID != first.SessionID || second.TaskID == first.TaskID {
		t.Fatalf("second message %+v, first %+v: want the same session, another task", second, first)
	}
	if got := c.reply(second.MessageID); strings.Join(got, "|") != "text:and again|done:completed" {
		t.Fatalf("second reply %q", got)
	}

	// chat.cancel stops a reply that hangs; a message meanwhile is refused.
	third := c.chatSend(script(`{"op":"message","text":"partial"}`, `{"op":"hang"}`))
	if p := c.piece(third.MessageID); p.String() != "text:partial" {
		t.Fatalf("first piece of the hanging reply: %s", p)
	}
	if r := c.request("chat.send", map[string]any{"message": "too soon"}); r.Error == nil || r.Error.Code != api.CodeInvalidState {
		t.Fatalf("chat.send while a reply streams: %s %+v", r.Result, r.Error)
	}
	r = c.request("chat.cancel", map[string]any{})
	if r.Error != nil || !strings.Contains(string(r.Result), `"cancelled":true`) {
		t.Fatalf("chat.cancel: %s %+v", r.Result, r.Error)
	}
	if got := c.reply(third.MessageID); strings.Join(got, "|") != "done:cancelled" {
		t.Fatalf("cancelled reply %q", got)
	}

	// chat.clear: a new conversation, a new session.
	if r := c.request("chat.clear", map[string]any{}); r.Error != nil || string(r.Result) != `{"cleared":true}` {
		t.Fatalf("chat.clear: %s %+v", r.Result, r.Error)
	}
	fourth := c.chatSend("fresh")
	if fourth.SessionID == first.SessionID {
		t.Fatalf("after chat.clear the message is in session %s still", fourth.SessionID)
	}
	if got := c.reply(fourth.MessageID); strings.Join(got, "|") != "text:fresh|done:completed" {
		t.Fatalf("reply after clear %q", got)
	}
	// The log has the chat's lifecycle, sizes only.
	ev := d.waitEvent("chat.replied", func(m map[string]any) bool { return m["message_id"] == fourth.MessageID })
	if ev["state"] != "completed" || ev["bytes"] != float64(len("fresh")) {
		t.Fatalf("chat.replied %v", ev)
	}
	for _, e := range d.events() {
		if k, _ := e["kind"].(string); strings.HasPrefix(k, "chat.") {
			b, _ := json.Marshal(e)
			if strings.Contains(string(b), "Hello") || strings.Contains(string(b), "partial") || k == "chat.chunk" {
				t.Fatalf("the log has a chat text: %s", b)
			}
		}
	}
}

// orchestrd chat: lines from stdin, replies streamed; Ctrl-C cancels the
// reply, Ctrl-C with none leaves (130); the end of stdin leaves (0) once
// the last reply is over.
func TestChatCLI(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	d := startDaemon(t, chatConfig(t))

	// End of stdin: the reply is streamed whole first.
	out, errOut, code := runCLIWith(t, "", strings.NewReader("hello there\n"), "chat", "--home", d.home)
	if code != 0 || out != "hello there\n" {
		t.Fatalf("chat: code %d stdout %q stderr %q", code, out, errOut)
	}

	// Another client's reply streaming: the line is refused, chat goes on
	// (and leaves at the end of stdin).
	lc := dialLoopr(t, d.sock())
	lc.request("subscribe", nil)
	other := lc.chatSend(script(`{"op":"message","text":"other"}`, `{"op":"hang"}`))
	if p := lc.piece(other.MessageID); p.String() != "text:other" {
		t.Fatalf("other client's reply: %s", p)
	}
	_, errOut, code = runCLIWith(t, "", strings.NewReader("mine\n"), "chat", "--home", d.home)
	if code != 0 || !strings.Contains(errOut, "still streaming") {
		t.Fatalf("chat while another reply streams: exit %d, stderr %q", code, errOut)
	}
	lc.request("chat.cancel", nil)
	lc.reply(other.MessageID)

	cmd := exec.Command(binary, "chat", "--home", d.home, "--new")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var o, e testio.SyncBuffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	}()
	write := func(line string) {
		t.Helper()
		if _, err := stdin.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	waitOut := func(buf *testio.SyncBuffer, want string) {
		t.Helper()
		eventuallyOr(t, 30*time.Second, "chat prints "+want, func() bool { return strings.Contains(buf.String(), want) },
			func() string { return "stdout " + o.String() + "\nstderr " + e.String() })
	}
	write(script(`{"op":"message","text":"first answer\n"}`,
		`{"op":"message","type":"tool_use","data":{"name":"Bash","input":{"command":"ls"}}}`))
	waitOut(&o, "first answer\n")
	waitOut(&o, "> Bash")
	write(script(`{"op":"message","text":"partial"}`, `{"op":"hang"}`))
	waitOut(&o, "partial")
	cmd.Process.Signal(syscall.SIGINT)
	waitOut(&e, "reply cancelled")
	write("still here")
	waitOut(&o, "still here\n")
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitCancelled {
			t.Fatalf("chat left with %v, want exit %d\nstderr %s", err, exitCancelled, e.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("chat did not leave on Ctrl-C with no reply streaming\nstderr %s", e.String())
	}
	stdin.Close()
}

// The conversation outlives the daemon: after a restart the next message
// goes on in the same executor session, until chat.clear.
func TestChatRestart(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	home := shortTemp(t)
	cfg := chatConfig(t)
	d := startDaemonAt(t, home, cfg)
	c := dialLoopr(t, d.sock())
	c.request("subscribe", nil)
	first := c.chatSend("before")
	if got := c.reply(first.MessageID); strings.Join(got, "|") != "text:before|done:completed" {
		t.Fatalf("reply %q", got)
	}
	d.stop()
	d = startDaemonAt(t, home, cfg)
	c = dialLoopr(t, d.sock())
	c.request("subscribe", nil)
	second := c.chatSend("after")
	if second.SessionID != first.SessionID {
		t.Fatalf("after a restart the chat is in session %s, not %s", second.SessionID, first.SessionID)
	}
	c.reply(second.MessageID)
	var sess struct {
		Messages []api.SessionMessage `json:"messages"`
	}
	r := c.request("session.get", map[string]any{"id": first.SessionID})
	if r.Error != nil || json.Unmarshal(r.Result, &sess) != nil || len(sess.Messages) != 2 {
		t.Fatalf("the session holds %s %+v, want both messages' replies", r.Result, r.Error)
	}
}
