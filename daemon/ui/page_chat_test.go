package ui

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// The chat page: the conversation chat.get points at, each message the
// person sent (its task's prompt, escaped) then the agent's reply, a
// pending permission request of its tasks inline with its buttons; Send
// is chat.send (a message, an absolute cwd), Stop the reply chat.cancel
// while one streams, New conversation chat.clear; a chat that is off
// says how to turn it on.
func TestChatPage(t *testing.T) {
	h := newAPHarness(t)
	get := `{"executor":"claude","session_id":"s-9","ready":true,"streaming":{"message_id":"msg-1","task_id":"t-1"}}`
	h.caller.mux.Handle("chat.get", func(c api.Call) {
		if get == "" {
			c.Fail(api.Errorf(api.CodeInvalidState, "chat.get: the chat is off: no executor pool for it; set [loops] chat_executor"))
			return
		}
		c.Respond(jsonRaw(get))
	})
	for _, m := range []string{"chat.send", "chat.cancel", "chat.clear"} {
		h.caller.mux.Handle(m, func(c api.Call) { c.Respond(map[string]any{"ok": true}) })
	}
	perm := h.request(map[string]any{"tool_name": "Bash", "task_id": "t-1", "session_id": "s-9", "cwd": "/work/repo",
		"tool_input": map[string]any{"command": "make <all> && ls"}})

	_, page := h.get("/ui/chat", http.StatusOK)
	mustContain(t, page, `<li class="msg msg-prompt" id="turn-t-1">`, "fix the &lt;script&gt;alert(&#39;p&#39;)&lt;/script&gt; bug",
		"Hello, &lt;img src=x onerror=alert(2)&gt; world", `<pre class="cmd" tabindex="0"><code>go test ./...</code></pre>`,
		`id="appr-`+perm+`"`, `<code>make &lt;all&gt; &amp;&amp; ls</code>`, `name="decision" value="Allow"`, `name="decision" value="Deny"`,
		`value="`+h.csrf+`"`, `action="/ui/act/chat.send"`, "Stop the reply", `action="/ui/act/chat.clear"`, "Session <code>s-9</code>")
	mustNotContain(t, page, "<script>alert", "<img src=x", `\u0026`)
	if i, j := strings.Index(page, `id="turn-t-1"`), strings.Index(page, `id="appr-`+perm+`"`); i < 0 || j < i ||
		j > strings.Index(page, `id="turn-t-2"`) {
		t.Fatalf("the permission request is not in its message's reply (at %d, the message at %d)", j, i)
	}
	if kinds := attr(t, page, "data-kinds"); !strings.Contains(kinds, "chat.chunk") || !strings.Contains(kinds, "approval.requested") {
		t.Fatalf("the chat page streams %s", kinds)
	}

	if code, msg := h.act("chat.send", url.Values{"message": {"what is in main.go?"}, "cwd": {"/work/repo"}}); code != http.StatusOK {
		t.Fatalf("Send: %d %s", code, msg)
	}
	for _, bad := range []url.Values{{"message": {"  "}}, {"message": {"x"}, "cwd": {"rel/dir"}},
		{"message": {strings.Repeat("x", chatMessageMax+1)}}} {
		if code, msg := h.act("chat.send", bad); code != http.StatusBadRequest {
			t.Fatalf("Send %.60v: %d %s", bad, code, msg)
		}
	}
	if got := h.caller.callsOf("chat.send"); len(got) != 1 || got[0].Params != `{"cwd":"/work/repo","message":"what is in main.go?"}` {
		t.Fatalf("chat.send calls: %+v", got)
	}
	// A message at its bound, as the page's script posts it (URL-encoded,
	// the token in a header): every byte of "é" or "{" is %XX, three times
	// its size; it is sent, not refused as a body too large.
	for _, long := range []string{strings.Repeat("é", chatMessageMax/2), strings.Repeat("{", chatMessageMax)} {
		req, _ := http.NewRequest("POST", h.http.URL+"/ui/act/chat.send",
			strings.NewReader(url.Values{"message": {long}, "cwd": {"/" + strings.Repeat("é", 2047)}}.Encode()))
		req.Header = http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Accept": {"application/json"},
			"X-Csrf-Token": {h.csrf}}
		resp, err := h.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("Send of a %d-byte message: %s", len(long), resp.Status)
		}
	}
	if got := h.caller.callsOf("chat.send"); len(got) != 3 {
		t.Fatalf("%d chat.send calls, want 3", len(got))
	}
	h.act("chat.cancel", url.Values{})
	h.act("chat.clear", url.Values{})
	if len(h.caller.callsOf("chat.cancel")) != 1 || len(h.caller.callsOf("chat.clear")) != 1 {
		t.Fatal("Stop the reply and New conversation did not call chat.cancel and chat.clear")
	}

	get = `{"executor":"claude","ready":false}`
	_, page = h.get("/ui/chat", http.StatusOK)
	mustContain(t, page, "No messages yet", "no agent of the pool is up yet")
	mustNotContain(t, page, "Stop the reply", "New conversation")
	get = ""
	_, page = h.get("/ui/chat", http.StatusOK)
	mustContain(t, page, `<p id="chat-off">The chat is off`, "<code>chat_executor</code>")
	mustNotContain(t, page, `action="/ui/act/chat.send"`, `class="error"`)
}

func jsonRaw(s string) json.RawMessage { return json.RawMessage(s) }
