package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/apitest"
	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// The approvals inbox and the agents pages over a real approvals domain
// (approvals.Manager on its own actor system and bus, its methods as the
// daemon registers them) and the executors' methods answering realistic
// records; every method call the dashboard makes is recorded.

const apKey = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"

// apCaller is the method table: an apitest.Mux, called as
// control.Server.Invoke does, recording each call's method and params.
type apCaller struct {
	mux apitest.Mux

	mu    sync.Mutex
	calls []apCall
}

type apCall struct {
	Method string
	Params string
}

func (c *apCaller) Invoke(ctx context.Context, from api.Origin, method string, params any, _ func(string, []byte, func(bool))) (json.RawMessage, error) {
	var raw json.RawMessage
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return nil, err
		}
		raw = b
	}
	c.mu.Lock()
	c.calls = append(c.calls, apCall{method, string(raw)})
	c.mu.Unlock()
	h, ok := c.mux[method]
	if !ok {
		return nil, api.Errorf(api.CodeNotFound, "method not found: %s", method)
	}
	if apitest.Person(method) {
		if from.Admit == nil {
			return nil, api.Errorf(api.CodeUnauthorized, "%s: no Admit", method)
		}
		if err := from.Admit(); err != nil {
			return nil, err
		}
	}
	from.Admit = nil
	call := apitest.NewCall(method, raw)
	call.SetOrigin(from)
	h(call)
	select {
	case <-call.Done():
	case <-ctx.Done():
		call.Close()
		return nil, ctx.Err()
	}
	if e := call.Err(); e != nil {
		return nil, e
	}
	return call.Result(), nil
}

// calls is the recorded calls of method.
func (c *apCaller) callsOf(method string) []apCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []apCall
	for _, k := range c.calls {
		if k.Method == method {
			out = append(out, k)
		}
	}
	return out
}

type apHarness struct {
	t      *testing.T
	caller *apCaller
	m      *approvals.Manager
	bus    *eventlog.Bus
	http   *httptest.Server
	c      *http.Client
	csrf   string
}

func newAPHarness(t *testing.T) *apHarness {
	t.Helper()
	bus, err := eventlog.Open(eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop(), OnPanic: func(p actors.PanicInfo) {
		t.Errorf("actor %s/%s panicked: %v", p.Kind, p.ID, p.Value)
	}})
	m, err := approvals.Start(approvals.Options{Bus: bus, System: sys, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	h := &apHarness{t: t, caller: &apCaller{mux: apitest.Mux{}}, m: m, bus: bus}
	m.Register(h.caller.mux)
	registerFakeExecutors(h.caller.mux)
	s, err := New(Options{Config: DefaultConfig(), Caller: h.caller, Bus: bus, Key: apKey, Version: "test", Logger: zerolog.Nop(), Loopback: true})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", s)
	h.http = httptest.NewServer(mux)
	t.Cleanup(func() {
		h.http.CloseClientConnections()
		s.Close()
		h.http.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("approvals Shutdown: %v", err)
		}
		sys.Shutdown()
		bus.Close()
	})
	h.c = browser()
	resp, _ := h.do("POST", "/ui/login", url.Values{"key": {apKey}, "next": {"/ui/approvals"}}, false)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	_, page := h.get("/ui/approvals", http.StatusOK)
	h.csrf = attr(t, page, "data-csrf")
	return h
}

// cookie is the session cookie's value.
func (h *apHarness) cookie() string {
	u, _ := url.Parse(h.http.URL + "/ui/")
	for _, c := range h.c.Jar.Cookies(u) {
		if c.Name == sessionCookieName(h.t, h.http.URL) {
			return c.Value
		}
	}
	h.t.Fatal("no session cookie")
	return ""
}

// attr is the value of the first name="..." attribute on page.
func attr(t *testing.T, page, name string) string {
	t.Helper()
	i := strings.Index(page, name+`="`)
	if i < 0 {
		t.Fatalf("no %s on the page:\n%s", name, page)
	}
	v := page[i+len(name)+2:]
	return v[:strings.IndexByte(v, '"')]
}

func (h *apHarness) do(method, path string, form url.Values, fetch bool) (*http.Response, string) {
	h.t.Helper()
	var hdr map[string]string
	if fetch {
		hdr = map[string]string{"Accept": "application/json"}
	}
	return send(h.t, h.c, method, h.http.URL+path, form, hdr)
}

func (h *apHarness) get(path string, want int) (*http.Response, string) {
	h.t.Helper()
	resp, page := h.do("GET", path, nil, false)
	if resp.StatusCode != want {
		h.t.Fatalf("GET %s: %d, want %d:\n%s", path, resp.StatusCode, want, page)
	}
	return resp, page
}

// act posts a page's form as app.js does (fetch, JSON answer) and
// returns the status and the answer's error.
func (h *apHarness) act(name string, form url.Values) (int, string) {
	h.t.Helper()
	form.Set("csrf", h.csrf)
	resp, body := h.do("POST", "/ui/act/"+name, form, true)
	var res struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		h.t.Fatalf("POST %s: %d, not JSON: %s", name, resp.StatusCode, body)
	}
	if res.OK != (resp.StatusCode == http.StatusOK) {
		h.t.Fatalf("POST %s: %d with ok %v", name, resp.StatusCode, res.OK)
	}
	return resp.StatusCode, res.Error
}

// request asks an approval through approval.request, as a client of the
// control socket does, and returns its id.
func (h *apHarness) request(params map[string]any) string {
	h.t.Helper()
	params["kind"] = "tool"
	raw, err := h.caller.Invoke(context.Background(), api.Origin{By: api.ByControl}, "approval.request", params, nil)
	if err != nil {
		h.t.Fatalf("approval.request: %v", err)
	}
	var res struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || res.ID == "" {
		h.t.Fatalf("approval.request answered %s", raw)
	}
	return res.ID
}

func (h *apHarness) approval(id string) api.Approval {
	h.t.Helper()
	raw, err := h.caller.Invoke(context.Background(), api.Origin{By: api.ByControl}, "approval.get", map[string]any{"id": id}, nil)
	if err != nil {
		h.t.Fatalf("approval.get %s: %v", id, err)
	}
	var res struct {
		Approval api.Approval `json:"approval"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		h.t.Fatal(err)
	}
	return res.Approval
}

// waitState waits for approval id to be in state st (an answer is
// committed by the approval's actor, after the call is answered).
func (h *apHarness) waitState(id string, st api.ApprovalState) api.Approval {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := h.approval(id)
		if a.State == st {
			return a
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("approval %s is %s, want %s", id, a.State, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustContain(t *testing.T, page string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(page, w) {
			t.Errorf("the page has no %q", w)
		}
	}
	if t.Failed() {
		t.Fatalf("page:\n%s", page)
	}
}

func mustNotContain(t *testing.T, page string, nots ...string) {
	t.Helper()
	for _, n := range nots {
		if strings.Contains(page, n) {
			t.Errorf("the page has %q", n)
		}
	}
	if t.Failed() {
		t.Fatalf("page:\n%s", page)
	}
}

// The inbox shows what waits (the command, the directory, the session,
// the suggestions and what Always allow would record), escaped; Allow,
// Deny, Always allow and Reply answer through approval.resolve with the
// form's fields; the rule Always allow recorded is listed and deleted;
// the history has what was answered.
func TestApprovalsInbox(t *testing.T) {
	h := newAPHarness(t)
	bash := h.request(map[string]any{"tool_name": "Bash", "cwd": "/work/<b>repo</b>", "session_id": "s-1",
		"tool_input": map[string]any{"command": "git status && echo '<script>alert(1)</script>'"},
		"permission_suggestions": []json.RawMessage{
			json.RawMessage(`{"type":"setMode","mode":"acceptEdits","destination":"session"}`),
			json.RawMessage(`{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"git status:*"}],"behavior":"allow","destination":"session"}`),
		}})
	read := h.request(map[string]any{"tool_name": "Read", "cwd": "/work/repo", "tool_input": map[string]any{"file_path": "/etc/shadow"}})
	web := h.request(map[string]any{"tool_name": "WebFetch", "tool_input": map[string]any{"url": "https://example.com/x"}})
	deny := h.request(map[string]any{"tool_name": "Bash", "tool_input": map[string]any{"command": "rm -rf /"}})

	_, page := h.get("/ui/approvals", http.StatusOK)
	mustContain(t, page, `id="appr-`+bash+`"`, `id="appr-`+read+`"`, `id="appr-`+web+`"`, `id="appr-`+deny+`"`,
		"git status &amp;&amp; echo &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39;", "/work/&lt;b&gt;repo&lt;/b&gt;", "s-1", "/etc/shadow",
		"https://example.com/x",
		"records: allow Bash(git status:*) in this session (s-1)", "switches the agent to mode acceptEdits; records no rule here",
		"No always-allow suggestion came with it", `id="enable-notifications"`, `<th scope="col">`, "<caption", `class="scroll"`,
		`data-kinds="approval.requested,approval.resolved,`)
	mustNotContain(t, page, "<script>alert", "<b>repo")
	// Pending first, oldest first.
	if i, j := strings.Index(page, `id="appr-`+bash+`"`), strings.Index(page, `id="appr-`+deny+`"`); i > j || j > strings.Index(page, `id="history-h"`) {
		t.Fatalf("pending not first, oldest first:\n%s", page)
	}

	// Allow.
	if code, msg := h.act("approval.resolve", url.Values{"id": {read}, "decision": {"Allow"}}); code != http.StatusOK {
		t.Fatalf("Allow: %d %s", code, msg)
	}
	a := h.waitState(read, api.ApprovalAllowed)
	// Recorded as the dashboard's, with the session's short id (not its
	// cookie), whatever a form says.
	sid := a.Resolution.BySession
	if a.Resolution.By != "ui" || a.Resolution.Decision != api.DecisionAllow || len(sid) != 8 || a.Resolution.ByPid != 0 ||
		strings.Contains(h.cookie(), sid) {
		t.Fatalf("allowed: %+v (cookie %s)", a.Resolution, h.cookie())
	}
	// Deny.
	if code, msg := h.act("approval.resolve", url.Values{"id": {deny}, "decision": {"Deny"}}); code != http.StatusOK {
		t.Fatalf("Deny: %d %s", code, msg)
	}
	h.waitState(deny, api.ApprovalDenied)
	// Reply: what the agent is told.
	if code, msg := h.act("approval.resolve", url.Values{"id": {web}, "decision": {"Reply"}, "user_message": {"use the <mirror> instead"}}); code != http.StatusOK {
		t.Fatalf("Reply: %d %s", code, msg)
	}
	if a := h.waitState(web, api.ApprovalReplied); a.Resolution.UserMessage != "use the <mirror> instead" {
		t.Fatalf("replied: %+v", a.Resolution)
	}
	// Always allow with the second suggestion: a rule for this session.
	if code, msg := h.act("approval.resolve", url.Values{"id": {bash}, "decision": {"AlwaysAllow"}, "suggestion": {"1"}}); code != http.StatusOK {
		t.Fatalf("AlwaysAllow: %d %s", code, msg)
	}
	a = h.waitState(bash, api.ApprovalAlwaysAllowed)
	if a.Resolution.SuggestionIndex == nil || *a.Resolution.SuggestionIndex != 1 || a.Resolution.RuleID == "" {
		t.Fatalf("always allowed: %+v", a.Resolution)
	}
	rule := a.Resolution.RuleID
	// It answers the like at once from now on.
	again := h.request(map[string]any{"tool_name": "Bash", "session_id": "s-1", "tool_input": map[string]any{"command": "git status --short"}})
	if a := h.approval(again); a.State != api.ApprovalAllowed || a.Resolution.By != api.ByRule {
		t.Fatalf("the rule did not answer: %+v", a)
	}

	_, page = h.get("/ui/approvals", http.StatusOK)
	mustContain(t, page, "Nothing is waiting for an answer.", `id="rule-`+rule+`"`, "Bash(git status:*)", "session s-1",
		"AlwaysAllow by ui session "+sid+", recorded rule "+rule, "Allow by ui session "+sid, "Deny by ui session "+sid,
		"Reply by ui session "+sid, "Allow by rule "+rule,
		`action="/ui/act/approval.rule_delete"`)
	_, one := h.get("/ui/approvals?state=replied", http.StatusOK)
	hist := one[strings.Index(one, `id="history-h"`):]
	if !strings.Contains(hist, web) || strings.Contains(hist, read) {
		t.Fatalf("history filtered on replied:\n%s", hist)
	}
	_, detail := h.get("/ui/approvals/"+web, http.StatusOK)
	mustContain(t, detail, "use the &lt;mirror&gt; instead", "Reply by ui")
	mustNotContain(t, detail, `action="/ui/act/approval.resolve"`)

	// The rule deleted: the like is asked again.
	if code, msg := h.act("approval.rule_delete", url.Values{"id": {rule}}); code != http.StatusOK {
		t.Fatalf("rule_delete: %d %s", code, msg)
	}
	if got := h.caller.callsOf("approval.rule_delete"); len(got) != 1 || got[0].Params != `{"id":"`+rule+`"}` {
		t.Fatalf("rule_delete calls: %+v", got)
	}
	if a := h.approval(h.request(map[string]any{"tool_name": "Bash", "session_id": "s-1", "tool_input": map[string]any{"command": "git status"}})); a.State != api.ApprovalPending {
		t.Fatalf("after the rule was deleted: %+v", a)
	}
	// Answering one that is over is the domain's conflict, said.
	if code, msg := h.act("approval.resolve", url.Values{"id": {read}, "decision": {"Deny"}}); code != http.StatusConflict || !strings.Contains(msg, "allowed") {
		t.Fatalf("resolving a finished approval: %d %q", code, msg)
	}
}

// A form the inbox cannot make sense of is refused, naming the field,
// before any method is called; a plain (script-less) form comes back to
// its page; none acts without the session's CSRF token.
func TestApprovalResolveForm(t *testing.T) {
	h := newAPHarness(t)
	id := h.request(map[string]any{"tool_name": "Bash", "tool_input": map[string]any{"command": "ls"}})
	for _, c := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"id": {id}, "decision": {"Maybe"}}, "decision: want Allow, Deny, AlwaysAllow or Reply"},
		{url.Values{"id": {id}}, "decision: want"},
		{url.Values{"id": {"../x"}, "decision": {"Allow"}}, "id: not an id"},
		{url.Values{"id": {id}, "decision": {"Reply"}, "user_message": {"  \n"}}, "user_message: the reply is empty"},
		{url.Values{"id": {id}, "decision": {"Allow"}, "user_message": {"hi"}}, "user_message goes with decision Reply"},
		{url.Values{"id": {id}, "decision": {"Allow"}, "suggestion": {"0"}}, "suggestion goes with decision AlwaysAllow"},
		{url.Values{"id": {id}, "decision": {"AlwaysAllow"}, "suggestion": {"-1"}}, "suggestion: want the index"},
		{url.Values{"id": {id}, "decision": {"Reply"}, "user_message": {strings.Repeat("x", apprMaxReply+1)}}, "user_message: at most"},
	} {
		if code, msg := h.act("approval.resolve", c.form); code != http.StatusBadRequest || !strings.Contains(msg, c.want) {
			t.Errorf("%v: %d %q, want 400 %q", c.form, code, msg, c.want)
		}
	}
	if n := len(h.caller.callsOf("approval.resolve")); n != 0 {
		t.Fatalf("a refused form called approval.resolve %d times", n)
	}
	// AlwaysAllow when the request offered no suggestion: the domain's
	// refusal comes through.
	if code, msg := h.act("approval.resolve", url.Values{"id": {id}, "decision": {"AlwaysAllow"}, "suggestion": {"0"}}); code != http.StatusBadRequest || !strings.Contains(msg, "offers no permission suggestions") {
		t.Fatalf("a suggestion out of range: %d %q", code, msg)
	}
	// The params sent are exactly those.
	h.act("approval.resolve", url.Values{"id": {id}, "decision": {"Deny"}, "message": {"not today"}})
	got := h.caller.callsOf("approval.resolve")
	if last := got[len(got)-1].Params; last != `{"decision":"Deny","id":"`+id+`","message":"not today"}` {
		t.Fatalf("approval.resolve params: %s", last)
	}
	if a := h.waitState(id, api.ApprovalDenied); a.Resolution.Message != "not today" {
		t.Fatalf("denied: %+v", a.Resolution)
	}

	// No CSRF token: refused.
	id2 := h.request(map[string]any{"tool_name": "Bash", "tool_input": map[string]any{"command": "ls"}})
	resp, _ := h.do("POST", "/ui/act/approval.resolve", url.Values{"id": {id2}, "decision": {"Allow"}}, true)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("without the CSRF token: %d", resp.StatusCode)
	}
	// A plain form: back to the page it came from.
	resp, _ = h.do("POST", "/ui/act/approval.resolve", url.Values{"id": {id2}, "decision": {"Allow"}, "csrf": {h.csrf},
		"return": {"/ui/approvals/" + id2}}, false)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/approvals/"+id2 {
		t.Fatalf("a plain form: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	h.waitState(id2, api.ApprovalAllowed)
	h.get("/ui/approvals?state=bogus", http.StatusBadRequest)
	h.get("/ui/approvals?limit=0", http.StatusBadRequest)
	h.get("/ui/approvals/a-nope", http.StatusNotFound)
}

// A new approval comes on the inbox's stream at once (the page reloads
// and app.js shows a notification when the person allowed them).
func TestApprovalsStream(t *testing.T) {
	h := newAPHarness(t)
	_, page := h.get("/ui/approvals", http.StatusOK)
	kinds := attr(t, page, "data-kinds")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.http.URL+"/ui/stream?kinds="+url.QueryEscape(kinds), nil)
	resp, err := h.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	waitLine := func(sub string) {
		t.Helper()
		deadline := time.After(time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the stream ended before %q", sub)
				}
				if strings.Contains(l, sub) {
					return
				}
			case <-deadline:
				t.Fatalf("no %q on the stream within a second", sub)
			}
		}
	}
	waitLine("event: hello")
	start := time.Now()
	id := h.request(map[string]any{"tool_name": "Bash", "tool_input": map[string]any{"command": "ls"}})
	waitLine(`"approval.requested"`)
	t.Logf("approval.requested on the stream %v after it was asked", time.Since(start))
	h.act("approval.resolve", url.Values{"id": {id}, "decision": {"Allow"}})
	waitLine(`"approval.resolved"`)
	cancel()
	for range lines {
	}
}

// registerFakeExecutors answers the executors' methods with records as
// the executors domain gives them: pool "claude" with two instances, task
// t-1 running (its messages: text in chunks, a tool call, its result, an
// error, a Claude Code assistant line), t-2 failed.
func registerFakeExecutors(mux apitest.Mux) {
	started := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	finished := started.Add(90 * time.Second)
	t1 := api.TaskRecord{ID: "t-1", SessionID: "s-9", Executor: "claude", Instance: "claude-1", State: api.TaskRunning,
		Prompt: "fix the <script>alert('p')</script> bug", Cwd: "/work/repo", Tools: []string{"Bash", "Read"},
		PermissionMode: api.ModeDefault, TimeoutMs: 600000, MessageCount: 7, CreatedAt: started, StartedAt: &started,
		Usage: &api.Usage{Source: api.UsageSourceProcfs, Scope: api.UsageScopeExecutor}}
	t2 := api.TaskRecord{ID: "t-2", SessionID: "s-8", Executor: "claude", Instance: "claude-2", State: api.TaskFailed,
		Prompt: "second", Cwd: "/work/repo", PermissionMode: api.ModeAcceptEdits, MessageCount: 0, CreatedAt: started,
		StartedAt: &started, FinishedAt: &finished, Error: &api.TaskError{Code: "exit_3", Message: "the agent exited 3"},
		TokenUsage: &api.TokenUsage{InputTokens: 10, OutputTokens: 22, CostUSD: 0.0123}, Denied: 2,
		Usage: &api.Usage{Source: api.UsageSourceProcfs, Scope: api.UsageScopeExecutor, UserSeconds: 1.5, SystemSeconds: 0.25,
			PeakRSSBytes: 48 << 20, PeakThreads: 9, Samples: 4}}
	msgs := []api.SessionMessage{
		{TaskID: "t-0", Sequence: 1, EventType: "content_block_delta", EventData: json.RawMessage(`{"delta":{"text":"an earlier task"}}`)},
		{TaskID: "t-1", Sequence: 1, EventType: "content_block_delta", EventData: json.RawMessage(`{"delta":{"text":"Hello, "}}`)},
		{TaskID: "t-1", Sequence: 2, EventType: "content_block_delta", EventData: json.RawMessage(`{"delta":{"text":"<img src=x onerror=alert(2)> world\n"}}`)},
		{TaskID: "t-1", Sequence: 3, EventType: "tool_call", EventData: json.RawMessage(`{"tool":"Bash","input":{"command":"go test ./..."}}`)},
		{TaskID: "t-1", Sequence: 4, EventType: "tool_result", EventData: json.RawMessage(`{"content":"ok  \tgithub.com/x\t0.1s"}`)},
		{TaskID: "t-1", Sequence: 5, EventType: "error", EventData: json.RawMessage(`{"message":"rate limited"}`)},
		{TaskID: "t-1", Sequence: 6, EventType: "assistant", EventData: json.RawMessage(`{"type":"assistant","message":{"content":[{"type":"text","text":"Reading it."},{"type":"tool_use","name":"Read","input":{"file_path":"/work/repo/main.go"}}]}}`)},
		{TaskID: "t-1", Sequence: 7, EventType: "system", EventData: json.RawMessage(`{"type":"system","subtype":"init"}`)},
	}
	respond := func(v any) api.Handler { return func(c api.Call) { c.Respond(v) } }
	mux.Handle("executor.list", respond(map[string]any{"pools": []api.PoolStatus{{Name: "claude", Instances: 2, MaxInstances: 4, Queued: 1,
		Executors: []api.ExecutorStatus{{Pool: "claude", ID: "claude-1", Pid: 4242, State: "busy", TaskID: "t-1", StartedAt: started},
			{Pool: "claude", ID: "claude-2", Pid: 4243, State: "idle", Paused: true, Pending: 3, StartedAt: started}}}}}))
	mux.Handle("task.list", respond(map[string]any{"tasks": []api.TaskRecord{t1, t2}, "truncated": true}))
	mux.Handle("task.get", func(c api.Call) {
		var p struct {
			ID string `json:"id"`
		}
		_ = c.Decode(&p)
		switch p.ID {
		case "t-1":
			c.Respond(map[string]any{"task": t1})
		case "t-2":
			c.Respond(map[string]any{"task": t2})
		default:
			c.Fail(api.Errorf(api.CodeNotFound, "no task %s", p.ID))
		}
	})
	mux.Handle("session.get", func(c api.Call) {
		var p struct {
			ID string `json:"id"`
		}
		_ = c.Decode(&p)
		var ms []api.SessionMessage
		if p.ID == "s-9" {
			ms = msgs
		}
		c.Respond(map[string]any{"session": api.SessionRecord{ID: p.ID, Executor: "claude"}, "messages": ms})
	})
	mux.Handle("task.stop", respond(map[string]any{"task": t1}))
}

// The agents page: pools, instances and tasks (escaped), a task waiting
// for permission marked; a task's page: its messages read, its pending
// permission answered in place, Stop.
func TestAgentsPages(t *testing.T) {
	h := newAPHarness(t)
	perm := h.request(map[string]any{"tool_name": "Bash", "task_id": "t-1", "session_id": "s-9", "cwd": "/work/repo",
		"tool_input": map[string]any{"command": "rm -rf build/"}})

	_, page := h.get("/ui/agents", http.StatusOK)
	mustContain(t, page, "claude-1", "4242", "paused, 3 pending", `href="/ui/agents/tasks/t-1"`, "fix the &lt;script&gt;",
		"asks permission", "exit_3", `action="/ui/act/task.stop"`, "2 of at most 4", `rel="next"`, "<caption",
		// t-2's cost and denials, where the task is shown.
		`<span class="error-text task-denied">2 tool uses denied</span>`, `<td class="task-cost">$0.0123</td>`)
	mustNotContain(t, page, "<script>alert")
	kinds := attr(t, page, "data-kinds")
	if strings.Contains(kinds, "task.message") || strings.Contains(kinds, "*") {
		t.Fatalf("the agents page streams %s", kinds)
	}
	if got := h.caller.callsOf("task.list"); got[len(got)-1].Params != `{"limit":50}` {
		t.Fatalf("task.list params: %s", got[len(got)-1].Params)
	}
	h.get("/ui/agents?executor=claude&state=failed", http.StatusOK)
	if got := h.caller.callsOf("task.list"); got[len(got)-1].Params != `{"executor":"claude","limit":50,"state":"failed"}` {
		t.Fatalf("task.list params: %s", got[len(got)-1].Params)
	}
	h.get("/ui/agents?state=sleeping", http.StatusBadRequest)

	_, page = h.get("/ui/agents/tasks/t-1", http.StatusOK)
	mustContain(t, page, "Hello, &lt;img src=x onerror=alert(2)&gt; world", "go test ./...", "ok  \tgithub.com/x", "rate limited",
		"Reading it.", "/work/repo/main.go", "system", `id="appr-`+perm+`"`, "rm -rf build/", `name="decision" value="Allow"`,
		`name="user_message"`, "Kill now", "claude-1", "What the agent writes shows as it comes", `<dd id="task-usage">no sample yet</dd>`)
	mustNotContain(t, page, "an earlier task", "<img src=x")
	kinds = attr(t, page, "data-kinds")
	if !strings.Contains(kinds, "task.message") || !strings.Contains(kinds, "task.progress") || !strings.Contains(kinds, "task.permission_requested") ||
		attr(t, page, "data-id") != "t-1" {
		t.Fatalf("a task's page streams %s", kinds)
	}
	// The permission answered in place.
	if code, msg := h.act("approval.resolve", url.Values{"id": {perm}, "decision": {"Allow"}}); code != http.StatusOK {
		t.Fatalf("Allow: %d %s", code, msg)
	}
	h.waitState(perm, api.ApprovalAllowed)
	// Stop, and kill.
	if code, msg := h.act("task.stop", url.Values{"id": {"t-1"}}); code != http.StatusOK {
		t.Fatalf("Stop: %d %s", code, msg)
	}
	h.act("task.stop", url.Values{"id": {"t-1"}, "force": {"true"}})
	if code, msg := h.act("task.stop", url.Values{"id": {"t 1"}}); code != http.StatusBadRequest || !strings.Contains(msg, "id: not an id") {
		t.Fatalf("Stop with a bad id: %d %q", code, msg)
	}
	if code, msg := h.act("task.stop", url.Values{"id": {"t-1"}, "force": {"maybe"}}); code != http.StatusBadRequest || !strings.Contains(msg, "force") {
		t.Fatalf("Stop with a bad force: %d %q", code, msg)
	}
	got := h.caller.callsOf("task.stop")
	if len(got) != 2 || got[0].Params != `{"force":false,"id":"t-1"}` || got[1].Params != `{"force":true,"id":"t-1"}` {
		t.Fatalf("task.stop calls: %+v", got)
	}

	_, page = h.get("/ui/agents/tasks/t-2", http.StatusOK)
	mustContain(t, page, `<dd class="error-text">exit_3 (the agent exited 3)</dd>`, "10 tokens in, 22 out", "No messages yet.", `<dd id="task-cost">$0.0123</dd>`,
		`<dd id="task-denied" class="error-text">2 tool uses denied (they did not run)</dd>`,
		`<dd id="task-usage">cpu 1.50s user &#43; 0.25s sys, peak rss 48.0 MiB, read 0 B, wrote 0 B, 9 threads `+
			`(procfs, 4 samples; the executor&#39;s tree while the task ran)</dd>`)
	mustNotContain(t, page, "Kill now", "What the agent writes shows")
	h.get("/ui/agents/tasks/t-404", http.StatusNotFound)
	h.get("/ui/agents/tasks/"+url.PathEscape("t<1>"), http.StatusBadRequest)
}

// What Always allow records is said as approvals records it.
func TestApprSuggestion(t *testing.T) {
	a := api.Approval{ID: "a-1", Kind: api.KindTool, ToolName: "Bash", Cwd: "/w", SessionID: "s-1"}
	for _, c := range []struct {
		sugg, want string
		records    bool
	}{
		{`{"type":"toolAlwaysAllow","tool":"Bash"}`, "records: allow every Bash call, in any directory and session", true},
		{`{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"npm test"}],"behavior":"allow","destination":"localSettings"}`, "records: allow Bash(npm test) in /w", true},
		{`{"type":"addRules","rules":[{"toolName":"Read","ruleContent":"src/**"},{"toolName":"Edit"}],"destination":"userSettings"}`, "records: allow Read(src/**), Edit in any directory and session", true},
		{`{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"rm:*"}],"behavior":"deny","destination":"session"}`, "records: deny Bash(rm:*) in this session (s-1)", true},
		{`{"type":"addRules","rules":[{"toolName":"Bash"}],"behavior":"ask"}`, `passes {"type":"addRules","rules":[{"toolName":"Bash"}],"behavior":"ask"} back to the agent; records no rule here`, false},
		{`{"type":"setMode","mode":"plan"}`, "switches the agent to mode plan; records no rule here", false},
		{`"x"`, `passes "x" back to the agent; records no rule here`, false},
	} {
		got := apprSuggestion(a, 0, json.RawMessage(c.sugg))
		if got.Text != c.want || got.Records != c.records {
			t.Errorf("%s: %q %v, want %q %v", c.sugg, got.Text, got.Records, c.want, c.records)
		}
	}
	// A session-scoped suggestion without a session records nothing.
	if got := apprSuggestion(api.Approval{}, 0, json.RawMessage(`{"type":"addRules","rules":[{"toolName":"Bash"}],"destination":"session"}`)); got.Records {
		t.Errorf("session scope without a session: %+v", got)
	}
}

// A task's messages as a person reads them (api.DecodeAgentMessage):
// pieces of text joined, thinking apart, tool calls one line, results,
// a tool the agent refused itself as an error, a denial as one, usage,
// the result's words; a text that is not UTF-8 is not shown as it is.
func TestAgentTaskItems(t *testing.T) {
	ms := []api.SessionMessage{
		{Sequence: 1, EventType: "content_block_delta", EventData: json.RawMessage(`{"delta":{"text":"a"}}`)},
		{Sequence: 2, EventType: "text", EventData: json.RawMessage(`{"text":"b"}`)},
		{Sequence: 3, EventType: "tool_use", EventData: json.RawMessage(`{"id":"u1","name":"Write","input":{"file_path":"/x","content":"..."}}`)},
		{Sequence: 4, EventType: "user", EventData: json.RawMessage(`{"message":{"content":[{"type":"tool_result","tool_use_id":"u1","content":[{"type":"text","text":"done"}],"is_error":true}]}}`)},
		{Sequence: 5, EventType: "result", EventData: json.RawMessage(`{"result":"all good","usage":{}}`)},
		{Sequence: 6, EventType: "weird", EventData: json.RawMessage("{\n\"k\": 1\n}")},
		{Sequence: 7, EventType: "thinking", EventData: json.RawMessage(`{"text":"hm"}`)},
		{Sequence: 8, EventType: "thinking", EventData: json.RawMessage(`{"text":"m"}`)},
		{Sequence: 9, EventType: "tool_call", EventData: json.RawMessage(`{"id":"u2","name":"Bash","input":{"command":"rm -rf build"}}`)},
		{Sequence: 10, EventType: "permission_denied", EventData: json.RawMessage(`{"id":"u2","input":{"command":"rm -rf build"},"reason":"not the build dir"}`)},
		{Sequence: 11, EventType: "tool_result", EventData: json.RawMessage(`{"id":"u2","output":"ok"}`)},
		{Sequence: 12, EventType: "usage", EventData: json.RawMessage(`{"input_tokens":3,"output_tokens":4,"cost_usd":0.25}`)},
		{Sequence: 13, EventType: "result", EventData: json.RawMessage(`{"text":"x","denied":2,"usage":{"input_tokens":3,"output_tokens":4,"cost_usd":0.25}}`)},
		{Sequence: 14, EventType: "result", EventData: json.RawMessage(`{"text":"API Error: 429","is_error":true}`)},
		{Sequence: 15, EventType: "agent_line", EventData: json.RawMessage(`{"agent":"claude-code","line":{"type":"stream_event","n":1}}`)},
		{Sequence: 16, EventType: "agent_line", EventData: json.RawMessage(`{"agent":"claude-code","line":{"type":"stream_event","n":2}}`)},
	}
	got := agentTaskItems(ms, new(int))
	var inputs []string
	for i := range got {
		if in := got[i].Input; in != nil {
			inputs = append(inputs, fmt.Sprintf("%s %q %q %v", in.Tool, in.Command, in.Path, in.Diff))
			got[i].Input = nil
		}
	}
	if want := []string{`Write "" "/x" [{+ ...}]`, `Bash "rm -rf build" "" []`, `Bash "rm -rf build" "" []`}; fmt.Sprint(inputs) != fmt.Sprint(want) {
		t.Fatalf("the tool inputs: %q, want %q", inputs, want)
	}
	want := []agentTaskItem{{Kind: "text", Text: "ab", Seq: 1}, {Kind: "tool", Label: "Write", Text: "/x", Seq: 3},
		{Kind: "error", Label: "Write", Text: "done", Seq: 4}, {Kind: "final", Text: "done", Seq: 5},
		{Kind: "other", Label: "weird", Text: `{"k":1}`, Seq: 6}, {Kind: "thinking", Text: "hmm", Seq: 7},
		{Kind: "tool", Label: "Bash", Text: "rm -rf build", Seq: 9},
		{Kind: "denied", Label: "Bash", Text: "rm -rf build", Reason: "not the build dir", Seq: 10},
		{Kind: "result", Label: "Bash", Text: "ok", Seq: 11}, {Kind: "usage", Text: "3 tokens in, 4 out, $0.2500", Seq: 12},
		{Kind: "final", Text: "2 tool uses denied, 3 tokens in, 4 out, $0.2500", Seq: 13},
		{Kind: "final", Label: "error", Text: "error: API Error: 429", Seq: 14},
		{Kind: "raw", Label: "claude-code", Text: `{"type":"stream_event","n":1}` + "\n" + `{"type":"stream_event","n":2}`, Seq: 15, N: 2}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("items:\n%+v\nwant\n%+v", got, want)
	}
	if s := funcs["text"].(func(string) string)("\xff\xfe"); !strings.Contains(s, "binary") {
		t.Fatalf("text of non-UTF-8: %q", s)
	}
}

// A plan waits in the inbox as a plan (no Always allow; Reply asks for
// another); one approval's page answers it as the inbox does.
func TestApprovalsPlanAndDetail(t *testing.T) {
	h := newAPHarness(t)
	raw, err := h.caller.Invoke(context.Background(), api.Origin{By: api.ByControl}, "approval.request", map[string]any{"kind": "plan",
		"content": "# Plan <x>\n1. refactor\n", "specs": []map[string]any{{"title": "a"}, {"title": "b"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &res)
	_, page := h.get("/ui/approvals", http.StatusOK)
	card := page[strings.Index(page, `id="appr-`+res.ID+`"`):]
	card = card[:strings.Index(card, "</section>")]
	mustContain(t, card, "Plan</a>", "# Plan &lt;x&gt;", "2 specs", "Ask for another plan")
	mustNotContain(t, card, `value="AlwaysAllow"`, "No always-allow suggestion")

	id := h.request(map[string]any{"tool_name": "Edit", "tool_input": map[string]any{"file_path": "/w/a.go", "old_string": "x", "new_string": "<y>"},
		"permission_suggestions": []map[string]any{{"type": "toolAlwaysAllow", "tool": "Edit"}}})
	_, detail := h.get("/ui/approvals/"+id, http.StatusOK)
	// The Edit's input as a diff of its values, its JSON unescaped (what
	// the agent wrote, escaped for the page once).
	mustContain(t, detail, "/w/a.go", `<del class="diff-del">- x</del>`, `<ins class="diff-add">+ &lt;y&gt;</ins>`,
		`&#34;new_string&#34;: &#34;&lt;y&gt;&#34;`, `<details class="json" id="json-`+id+`">`, "Edit</strong> run?",
		"records: allow every Edit call, in any directory and session", `value="AlwaysAllow"`, `name="user_message"`)
	if code, msg := h.act("approval.resolve", url.Values{"id": {id}, "decision": {"AlwaysAllow"}}); code != http.StatusOK {
		t.Fatalf("AlwaysAllow without a suggestion index (the first): %d %s", code, msg)
	}
	if strings.Contains(detail, `\u003c`) {
		t.Fatalf("the approval's page shows the input's JSON escapes:\n%s", detail)
	}
	if a := h.waitState(id, api.ApprovalAlwaysAllowed); a.Resolution.RuleID == "" {
		t.Fatalf("no rule recorded: %+v", a.Resolution)
	}
	if code, msg := h.act("approval.resolve", url.Values{"id": {res.ID}, "decision": {"Reply"}, "user_message": {"smaller steps"}}); code != http.StatusOK {
		t.Fatalf("Reply to a plan: %d %s", code, msg)
	}
	if a := h.waitState(res.ID, api.ApprovalReplied); a.Resolution.UserMessage != "smaller steps" {
		t.Fatalf("plan replied: %+v", a.Resolution)
	}
}

// A loop's merge waits in the inbox as a merge, of its loop: Allow and
// Deny, no Reply (there is no one to reply to) and no always-allow hint.
func TestApprovalsMerge(t *testing.T) {
	h := newAPHarness(t)
	p, err := h.m.Ask(approvals.Request{Source: api.SourcePlan, Kind: api.KindMerge, LoopID: "17959265-00ff",
		Content: "Merge loop 17959265-00ff's branch loop/17959265-00ff into main?"}, func(api.Approval) {})
	if err != nil {
		t.Fatal(err)
	}
	id := p.ID()
	h.waitState(id, api.ApprovalPending)
	_, page := h.get("/ui/approvals", http.StatusOK)
	card := page[strings.Index(page, `id="appr-`+id+`"`):]
	card = card[:strings.Index(card, "</section>")]
	mustContain(t, card, "Merge</a>", "Merge loop 17959265-00ff&#39;s branch", "17959265-00ff</code>", `value="Allow"`, `value="Deny"`)
	mustNotContain(t, card, `name="user_message"`, "No always-allow suggestion", "Plan</a>")
	_, detail := h.get("/ui/approvals/"+id, http.StatusOK)
	mustContain(t, detail, "may this loop's work merge into its base branch?", "17959265-00ff</code>")
	mustNotContain(t, detail, `name="user_message"`)
	if code, _ := h.act("approval.resolve", url.Values{"id": {id}, "decision": {"Reply"}, "user_message": {"x"}}); code == http.StatusOK {
		t.Fatal("Reply to a merge was taken")
	}
	if code, msg := h.act("approval.resolve", url.Values{"id": {id}, "decision": {"Allow"}}); code != http.StatusOK {
		t.Fatalf("Allow a merge: %d %s", code, msg)
	}
	h.waitState(id, api.ApprovalAllowed)
}

// app.js posts a form urlencoded: act reads the body with ParseForm,
// which does not read multipart (FormData as it is).
func TestAppJSPostsURLEncoded(t *testing.T) {
	b, err := assetFS.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "body: new URLSearchParams(new FormData(f))") {
		t.Fatal("app.js does not post its act forms urlencoded")
	}
}

// An approval nobody was asked because Claude Code ignores the answer of
// the hook that asked (hook_no_verdict) says so, never as a decision.
func TestApprDecisionHookNoVerdict(t *testing.T) {
	a := api.Approval{State: api.ApprovalCancelled, Resolution: &api.Resolution{By: api.ByDaemon, Reason: api.CancelHookNoVerdict}}
	got := funcs["apprDecision"].(func(api.Approval) string)(a)
	if !strings.HasPrefix(got, "cancelled: hook_no_verdict (not asked: ") || !strings.Contains(got, "register vibe-reachout's hook as PermissionRequest") {
		t.Fatalf("apprDecision: %q", got)
	}
}
