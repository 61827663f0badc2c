package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/modelfake"
)

// replay decodes a captured stream-json file line by line.
func replay(t *testing.T, name string) (*claudeStream, []claudeMsg, []*claudePermission) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "claude", name))
	if err != nil {
		t.Fatal(err)
	}
	s := newClaudeStream()
	var all []claudeMsg
	var perms []*claudePermission
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		msgs, p := s.Line(line)
		if len(msgs) == 0 {
			t.Fatalf("%s: a line gave no message: %.200s", name, line)
		}
		checkMsgs(t, msgs, line)
		all = append(all, msgs...)
		if p != nil {
			perms = append(perms, p)
		}
	}
	return s, all, perms
}

// checkMsgs checks what every line must give: messages that encode, a
// structured first message carrying the line as raw.
func checkMsgs(t testing.TB, msgs []claudeMsg, line []byte) {
	for i, m := range msgs {
		b, err := json.Marshal(m.Data)
		if err != nil {
			t.Fatalf("message %s of %.200q does not encode: %v", m.Type, line, err)
		}
		var back map[string]json.RawMessage
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("message %s encodes to a non-object %.200s", m.Type, b)
		}
		if i == 0 && m.Type != api.MsgAgentLine {
			if _, ok := back["raw"]; !ok {
				t.Fatalf("the first message (%s) of a line has no raw: %.300s", m.Type, b)
			}
		}
		if i > 0 {
			if _, ok := back["raw"]; ok {
				t.Fatalf("message %d (%s) of a line repeats raw", i, m.Type)
			}
		}
	}
}

func texts(msgs []claudeMsg, typ string) []string {
	var out []string
	for _, m := range msgs {
		if m.Type == typ {
			out = append(out, m.Data.(api.MsgTextData).Text)
		}
	}
	return out
}

func first[T any](t *testing.T, msgs []claudeMsg, typ string) T {
	t.Helper()
	for _, m := range msgs {
		if m.Type == typ {
			return m.Data.(T)
		}
	}
	t.Fatalf("no %s message", typ)
	var zero T
	return zero
}

func TestClaudeStreamText(t *testing.T) {
	s, msgs, _ := replay(t, "text.jsonl")
	// The deltas as they came, and not the whole message again.
	if got := texts(msgs, api.MsgText); !slices.Equal(got, []string{"Hel", "lo ", "world"}) {
		t.Fatalf("text messages %q, want the three deltas", got)
	}
	if got := texts(msgs, api.MsgThinking); !slices.Equal(got, []string{"let me think"}) {
		t.Fatalf("thinking messages %q", got)
	}
	res := first[api.ResultData](t, msgs, api.MsgResult)
	if res.IsError || res.Text != "Hello world" || res.SDKSessionID == "" || res.SDKSessionID != s.SessionID || res.Turns != 1 {
		t.Fatalf("result %+v (session %s)", res, s.SessionID)
	}
	u := first[api.UsageData](t, msgs, api.MsgUsage)
	if u.InputTokens != 10 || u.OutputTokens != 5 || u.CostUSD <= 0 {
		t.Fatalf("usage %+v", u)
	}
	if s.RateLimited || s.AuthFailed || !s.ResultSeen || s.Denied() != 0 {
		t.Fatalf("stream state %+v", s)
	}
	if n := len(msgs); n < 10 {
		t.Fatalf("only %d messages: every line gives one", n)
	}
}

func TestClaudeStreamToolCalls(t *testing.T) {
	s, msgs, perms := replay(t, "allow.jsonl")
	call := first[api.ToolCallData](t, msgs, api.MsgToolCall)
	if call.Name != "Bash" || call.ID != "toolu_01_00" || !strings.Contains(string(call.Input), "echo hi > f.txt") {
		t.Fatalf("tool call %+v", call)
	}
	if len(perms) != 1 || perms[0].Tool != "Bash" || perms[0].ToolUseID != "toolu_01_00" || perms[0].RequestID == "" ||
		!strings.Contains(string(perms[0].Input), "echo hi") {
		t.Fatalf("permissions asked %+v", perms)
	}
	tr := first[api.ToolResultData](t, msgs, api.MsgToolResult)
	if tr.ID != "toolu_01_00" || tr.IsError {
		t.Fatalf("tool result %+v", tr)
	}
	if s.Denied() != 0 {
		t.Fatalf("denied %d", s.Denied())
	}

	// Denied by the host: the tool result carries the reason, the result's
	// permission_denials count it once.
	s, msgs, _ = replay(t, "deny.jsonl")
	tr = first[api.ToolResultData](t, msgs, api.MsgToolResult)
	if !tr.IsError || !strings.Contains(tr.Output, "NOPE-REASON") {
		t.Fatalf("denied tool result %+v", tr)
	}
	if s.Denied() != 1 || first[api.ResultData](t, msgs, api.MsgResult).Denied != 1 {
		t.Fatalf("denied %d", s.Denied())
	}
	// The host's own count of the same tool use is not a second denial.
	s.deny("toolu_01_00")
	if s.Denied() != 1 {
		t.Fatalf("one tool use denied twice counts %d", s.Denied())
	}

	// Denied by Claude Code itself (no host to ask): a permission_denied.
	s, msgs, _ = replay(t, "selfdeny.jsonl")
	pd := first[api.PermissionDeniedData](t, msgs, api.MsgPermissionDenied)
	if pd.Name != "Bash" || pd.ID != "toolu_01_00" || !strings.Contains(pd.Reason, "needs approval") {
		t.Fatalf("permission_denied %+v", pd)
	}
	if s.Denied() != 1 {
		t.Fatalf("self-denied counts %d", s.Denied())
	}
}

func TestClaudeStreamFailures(t *testing.T) {
	s, _, _ := replay(t, "401.jsonl")
	if !s.AuthFailed || s.RateLimited {
		t.Fatalf("401: %+v", s)
	}
	s, _, _ = replay(t, "429long.jsonl")
	if !s.RateLimited || s.RetryAt != nil {
		t.Fatalf("429 with a Retry-After Claude Code does not wait for: %+v", s)
	}
	// A Retry-After of 2 s: the api_retry's delay is longer than Claude
	// Code's own backoff, so it is the endpoint's.
	s = newClaudeStream()
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	b, err := os.ReadFile("testdata/claude/429.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		s.Line(line)
		if s.RateLimited {
			break // the adapter kills Claude Code here
		}
	}
	if !s.RateLimited || s.RetryAt == nil || s.RetryAt.Before(now.Add(2*time.Second)) || s.RetryAt.After(now.Add(5*time.Second)) {
		t.Fatalf("429 with Retry-After 2: %+v (retry at %v)", s, s.RetryAt)
	}
	// Claude Code's own backoff is no reset time.
	s = newClaudeStream()
	s.Line([]byte(`{"type":"system","subtype":"api_retry","attempt":3,"max_retries":10,"retry_delay_ms":2422,"error_status":429,"error":"rate_limit"}`))
	if !s.RateLimited || s.RetryAt != nil {
		t.Fatalf("backoff taken as a reset time: %+v", s)
	}
	s = newClaudeStream()
	s.Line([]byte(`{"type":"result","subtype":"success","is_error":true,"result":"Claude AI usage limit reached|1795000000","session_id":"x"}`))
	if !s.RateLimited || s.RetryAt == nil || s.RetryAt.Unix() != 1795000000 {
		t.Fatalf("usage limit with its reset: %+v", s)
	}
	s = newClaudeStream()
	s.Line([]byte(`{"type":"result","subtype":"success","is_error":true,"result":"Not logged in · Please run /login","api_error_status":null}`))
	if !s.AuthFailed {
		t.Fatalf("no key: %+v", s)
	}
}

func TestClaudeStreamOddLines(t *testing.T) {
	s := newClaudeStream()
	for _, tc := range []struct{ line, want string }{
		{`not json`, api.MsgAgentLine},
		{`{"type":"system","subtype":"status"}`, api.MsgAgentLine},
		{`{"type":"assistant","message":"a string"}`, api.MsgAgentLine},
		{`{"type":"user","message":{"content":"typed text"}}`, api.MsgAgentLine},
		{`{"type":"stream_event","event":[]}`, api.MsgAgentLine},
		{"{\"type\":\"assistant\",\"message\":{\"id\":\"m\",\"content\":[{\"type\":\"text\",\"text\":\"\\u001b]0;owned\\u0007\"}]}}", api.MsgText},
		{"\xff\xfe", api.MsgAgentLine},
	} {
		msgs, p := s.Line([]byte(tc.line))
		if p != nil || len(msgs) == 0 || msgs[0].Type != tc.want {
			t.Fatalf("%q gave %+v %+v, want %s", tc.line, msgs, p, tc.want)
		}
		checkMsgs(t, msgs, []byte(tc.line))
	}
	// Claude Code ends its run with its first result: a second is not its.
	s.Line([]byte(`{"type":"result","is_error":false,"result":"one","session_id":"real","total_cost_usd":0.5}`))
	s.Line([]byte(`{"type":"result","is_error":true,"result":"forged","session_id":"forged","total_cost_usd":99}`))
	if s.Result.Text != "one" || s.SessionID != "real" || s.Result.Usage.CostUSD != 0.5 {
		t.Fatalf("a second result taken: %+v", s.Result)
	}
	// A result of another session than the init's is not Claude Code's.
	s = newClaudeStream()
	s.Line([]byte(`{"type":"system","subtype":"init","session_id":"A"}`))
	s.Line([]byte(`{"type":"result","is_error":false,"result":"forged","session_id":"B","total_cost_usd":99}`))
	if s.ResultSeen || s.Result != nil || s.SessionID != "A" {
		t.Fatalf("a result of another session taken: %+v", s.Result)
	}
	// A request id is asked about once.
	req := []byte(`{"type":"control_request","request_id":"q1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"ls"},"tool_use_id":"tu1"}}`)
	if _, p := s.Line(req); p == nil || p.Tool != "Bash" {
		t.Fatalf("can_use_tool not asked: %+v", p)
	}
	if _, p := s.Line(req); p != nil {
		t.Fatalf("the same request id asked twice: %+v", p)
	}
	if got := controlRequestID(req); got != "q1" {
		t.Fatalf("controlRequestID = %q", got)
	}
	for _, b := range []string{`{"type":"control_request","request_id":"a\"b"`, `{"type":"user","request_id":"x"}`, `{"type":"control_request","request_id":"`} {
		if got := controlRequestID([]byte(b)); got != "" {
			t.Fatalf("controlRequestID(%q) = %q", b, got)
		}
	}
	// A control request the adapter does not serve is answered (an error),
	// not asked about.
	_, p := s.Line([]byte(`{"type":"control_request","request_id":"r1","request":{"subtype":"hook_callback"}}`))
	if p == nil || p.Tool != "" || p.RequestID != "r1" {
		t.Fatalf("other control request: %+v", p)
	}
	if got := clean("a\x1b[31mred\x07\nb", 100); got != "a [31mred  b" {
		t.Fatalf("clean: %q", got)
	}
}

// FuzzClaudeLine: no line makes the decoder panic, give nothing, or give
// a message that does not encode.
func FuzzClaudeLine(f *testing.F) {
	files, _ := filepath.Glob("testdata/claude/*.jsonl")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			f.Add(line)
		}
	}
	f.Add([]byte(`{"type":"control_request","request_id":"x","request":{"subtype":"can_use_tool","tool_name":"Bash","input":[1]}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		s := newClaudeStream()
		for range 2 {
			msgs, p := s.Line(line)
			if len(msgs) == 0 {
				t.Fatalf("no message for %q", line)
			}
			checkMsgs(t, msgs, line)
			if p != nil && p.Tool != "" && !json.Valid(p.Input) {
				t.Fatalf("permission input %q is not JSON", p.Input)
			}
		}
		// The same line taken as one over LineMax: no panic, messages
		// that encode, a permission with a request id.
		msgs, p := newClaudeStream().Oversized(line)
		for _, m := range msgs {
			if _, err := json.Marshal(m.Data); err != nil {
				t.Fatalf("oversized %s does not encode: %v", m.Type, err)
			}
		}
		if p != nil && p.RequestID == "" {
			t.Fatalf("oversized permission without a request id")
		}
	})
}

func TestClaudeArgs(t *testing.T) {
	a := &Claude{Opts: Options{Argv: []string{"claude", "--extra"}, Model: "m1"}}
	args, r := a.Args(Task{PermissionMode: api.ModeAcceptEdits, Tools: []string{"Bash", "Write"}, Resume: "sess-1"})
	if r != nil {
		t.Fatal(r.Error)
	}
	got := strings.Join(args, " ")
	for _, want := range []string{"-p --output-format stream-json --input-format stream-json --verbose --include-partial-messages",
		"--permission-prompt-tool stdio", "--permission-mode acceptEdits", "--tools Bash,Write", "--model m1", "--resume sess-1"} {
		if !strings.Contains(got, want) {
			t.Fatalf("args %q lack %q", got, want)
		}
	}
	if args[len(args)-1] != "--extra" {
		t.Fatalf("the pool's extra arguments are not last: %q", got)
	}
	args, _ = a.Args(Task{PermissionMode: api.ModePlan})
	if !strings.Contains(strings.Join(args, " "), "--permission-mode plan") {
		t.Fatalf("plan: %q", args)
	}
	args, _ = a.Args(Task{})
	if s := strings.Join(args, " "); strings.Contains(s, "--permission-mode") || strings.Contains(s, "--tools") || strings.Contains(s, "--resume") {
		t.Fatalf("default task: %q", s)
	}
	if _, r := a.Args(Task{PermissionMode: "yolo\x1b[2J"}); r == nil || r.Error.Code != "bad_permission_mode" || strings.Contains(r.Error.Message, "\x1b") {
		t.Fatalf("unknown mode: %+v", r)
	}
	_, r = a.Args(Task{PermissionMode: api.ModeBypass})
	if os.Geteuid() == 0 {
		if r == nil || r.Error.Code != "bypass_refused" {
			t.Fatalf("bypass as root outside the sandbox: %+v", r)
		}
	} else if r != nil {
		t.Fatalf("bypass as an ordinary user: %+v", r.Error)
	}
	a.Opts.Sandboxed = true
	if _, r := a.Args(Task{PermissionMode: api.ModeBypass}); r != nil {
		t.Fatalf("bypass in the sandbox: %+v", r.Error)
	}
	env := strings.Join(a.Env(Task{PermissionMode: api.ModeBypass, Env: []string{"A=1"}}, "sk-x"), " ")
	for _, want := range []string{"A=1", "ANTHROPIC_API_KEY=sk-x", "IS_SANDBOX=1", "DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"} {
		if !strings.Contains(env, want) {
			t.Fatalf("env %q lacks %q", env, want)
		}
	}
	if env := strings.Join(a.Env(Task{}, ""), " "); strings.Contains(env, "IS_SANDBOX") || strings.Contains(env, "ANTHROPIC_API_KEY") {
		t.Fatalf("env without bypass or key: %q", env)
	}
}

// A line over LineMax is refused with a report_error; the lines after it
// are read.
func TestClaudeLineTooLong(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "claude")
	body := "#!/bin/sh\nhead -c " + "2500000" + " /dev/zero | tr '\\0' a\necho\n" +
		`echo '{"type":"result","is_error":false,"result":"fine","session_id":"s1","total_cost_usd":0.25,"usage":{"input_tokens":1,"output_tokens":2}}'` + "\n" +
		"cat >/dev/null\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	h := &testHost{}
	res := (&Claude{Opts: Options{Argv: []string{script}}}).Run(Task{Cwd: dir, Env: []string{"PATH=/usr/bin:/bin"}, Proc: &Proc{}}, h)
	if res.Status != "completed" || res.SDKSessionID != "s1" || res.Usage == nil || res.Usage.CostUSD != 0.25 {
		t.Fatalf("result %+v (%+v)", res, res.Error)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.errs) != 1 || !strings.HasPrefix(h.errs[0], "line_too_long") {
		t.Fatalf("errors %q", h.errs)
	}
	for _, m := range h.msgs {
		if b, _ := json.Marshal(m.Data); len(b) > LineMax {
			t.Fatalf("a %s message of %d bytes", m.Type, len(b))
		}
	}
}

// claudeCLI is the pinned Claude Code binary, or the test is skipped.
func claudeCLI(t *testing.T) string {
	t.Helper()
	argv, err := modelfake.CLI("claude-code")
	if err != nil {
		t.Skip(err)
	}
	return argv[0]
}

func endpoint(t *testing.T, turns ...modelfake.Turn) *modelfake.Anthropic {
	t.Helper()
	ep, err := modelfake.NewAnthropic(turns...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ep.Close() })
	return ep
}

func runClaude(t *testing.T, a *Claude, ep *modelfake.Anthropic, tk Task, h *testHost) Result {
	t.Helper()
	if tk.Cwd == "" {
		tk.Cwd = t.TempDir()
	}
	tk.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "ANTHROPIC_BASE_URL=" + ep.URL}
	tk.Proc = &Proc{}
	return a.Run(tk, h)
}

// The real CLI: a second run with Resume carries the first's conversation
// to the endpoint; a permission allowed lets the tool run, one denied
// does not and the model gets the reason.
func TestClaudeRealResumeAndPermissions(t *testing.T) {
	cli := claudeCLI(t)
	state := t.TempDir()
	a := &Claude{Opts: Options{Argv: []string{cli}, StateDir: state}}
	work := t.TempDir()
	ep := endpoint(t,
		modelfake.Turn{Text: []string{"first ", "answer"}},
		modelfake.Turn{Tools: []modelfake.ToolUse{{Name: "Write", Input: map[string]string{"file_path": filepath.Join(work, "yes.txt"), "content": "yes"}}}},
		modelfake.Turn{Text: []string{"wrote"}},
		modelfake.Turn{Tools: []modelfake.ToolUse{{Name: "Write", Input: map[string]string{"file_path": filepath.Join(work, "no.txt"), "content": "no"}}}},
		modelfake.Turn{Text: []string{"could not"}},
	)
	h := &testHost{key: "sk-test-key"}
	r1 := runClaude(t, a, ep, Task{Prompt: "remember PINEAPPLE", Cwd: work}, h)
	if r1.Status != "completed" || r1.SDKSessionID == "" || r1.Usage == nil || r1.Usage.CostUSD <= 0 {
		t.Fatalf("first run %+v %+v", r1, r1.Error)
	}
	if got := strings.Join(texts(h.msgs, api.MsgText), ""); got != "first answer" {
		t.Fatalf("first run's text %q", got)
	}
	if got := ep.Requests()[0].Header.Get("X-Api-Key"); got != "sk-test-key" {
		t.Fatalf("the endpoint got key %q", got)
	}

	h = &testHost{key: "sk-test-key", decide: func(tool string, in json.RawMessage) Decision {
		if strings.Contains(string(in), "no.txt") {
			return Decision{Reason: "NOT-THIS-FILE"}
		}
		return Decision{Approved: true}
	}}
	r2 := runClaude(t, a, ep, Task{Prompt: "write yes", Cwd: work, Resume: r1.SDKSessionID}, h)
	if r2.Status != "completed" || r2.SDKSessionID != r1.SDKSessionID || r2.Denied != 0 {
		t.Fatalf("second run %+v %+v", r2, r2.Error)
	}
	req := ep.Scripted()[1]
	if !req.Said("user", "PINEAPPLE") || !req.Said("assistant", "first answer") || !req.Said("user", "write yes") {
		t.Fatalf("the resumed run's request lacks the first conversation: %.3000s", req.Body)
	}
	if b, err := os.ReadFile(filepath.Join(work, "yes.txt")); err != nil || string(b) != "yes" {
		t.Fatalf("allowed write: %q %v", b, err)
	}

	r3 := runClaude(t, a, ep, Task{Prompt: "write no", Cwd: work, Resume: r2.SDKSessionID}, h)
	if r3.Status != "completed" || r3.Denied != 1 {
		t.Fatalf("third run %+v %+v", r3, r3.Error)
	}
	if _, err := os.Stat(filepath.Join(work, "no.txt")); !os.IsNotExist(err) {
		t.Fatalf("a denied write happened: %v", err)
	}
	trs := modelfake.ToolResults(ep.Scripted()[4])
	if len(trs) != 2 || !trs[1].IsError || !strings.Contains(trs[1].ResultText(), "NOT-THIS-FILE") {
		t.Fatalf("the model's tool results: %+v", trs)
	}
	pd := h.of(api.MsgPermissionDenied)
	if len(pd) != 1 || pd[0]["reason"] != "NOT-THIS-FILE" {
		t.Fatalf("permission_denied messages %+v", pd)
	}
	if !slices.Equal(h.tools(), []string{"Write", "Write"}) || !slices.Equal(h.keyAsks, []string{"anthropic", "anthropic"}) {
		t.Fatalf("asked about %q, keys for %q", h.asked, h.keyAsks)
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatal(err)
	}
	if ents, _ := filepath.Glob(filepath.Join(state, "projects", "*", r1.SDKSessionID+".jsonl")); len(ents) != 1 {
		t.Fatalf("the transcript is not in the state directory")
	}
}

// A 429 ends the run at once (usage_limit), not after Claude Code's ten
// retries; a 401 is auth_failed; no key at all too.
func TestClaudeRealFailures(t *testing.T) {
	cli := claudeCLI(t)
	a := &Claude{Opts: Options{Argv: []string{cli}, StateDir: t.TempDir()}}
	ep := endpoint(t, modelfake.Turn{Status: 429, RetryAfter: "20"}, modelfake.Turn{Status: 429}, modelfake.Turn{Status: 429})
	start := time.Now()
	r := runClaude(t, a, ep, Task{Prompt: "hi"}, &testHost{key: "k"})
	if r.Status != "failed" || r.Error.Code != api.TaskErrUsageLimit || r.Error.RetryAt == nil || r.Error.RetryAt.Before(start.Add(19*time.Second)) {
		t.Fatalf("429: %+v %+v", r, r.Error)
	}
	if n := ep.Served(); n != 1 {
		t.Fatalf("the endpoint was asked %d times: Claude Code retried", n)
	}

	ep = endpoint(t, modelfake.Turn{Status: 401, ErrorMessage: "invalid x-api-key"})
	r = runClaude(t, a, ep, Task{Prompt: "hi"}, &testHost{key: "bad"})
	if r.Status != "failed" || r.Error.Code != api.TaskErrAuthFailed {
		t.Fatalf("401: %+v %+v", r, r.Error)
	}
	ep = endpoint(t)
	r = runClaude(t, a, ep, Task{Prompt: "hi"}, &testHost{})
	if r.Status != "failed" || r.Error.Code != api.TaskErrAuthFailed {
		t.Fatalf("no key: %+v %+v", r, r.Error)
	}
}

// A tool input over LineMax: Claude Code's lines that carry it are
// refused, its permission request is denied (not left unanswered: it
// would wait), the model hears why, the run completes.
func TestClaudeRealHugeToolInput(t *testing.T) {
	cli := claudeCLI(t)
	a := &Claude{Opts: Options{Argv: []string{cli}, StateDir: t.TempDir()}}
	work := t.TempDir()
	huge := "echo " + strings.Repeat("A", LineMax+LineMax/4) + " > huge.txt"
	ep := endpoint(t, modelfake.Turn{Tools: []modelfake.ToolUse{{Name: "Bash", Input: map[string]string{"command": huge}}}},
		modelfake.Turn{Text: []string{"gave up"}})
	h := &testHost{key: "k", decide: func(string, json.RawMessage) Decision { return Decision{Approved: true} }}
	r := runClaude(t, a, ep, Task{Prompt: "write a lot", Cwd: work}, h)
	if r.Status != "completed" || r.Denied != 1 {
		t.Fatalf("run %+v %+v", r, r.Error)
	}
	if _, err := os.Stat(filepath.Join(work, "huge.txt")); !os.IsNotExist(err) {
		t.Fatalf("the refused command ran: %v", err)
	}
	h.mu.Lock()
	errs, asked := strings.Join(h.errs, "\n"), len(h.asked)
	h.mu.Unlock()
	if !strings.Contains(errs, "line_too_long") || asked != 0 {
		t.Fatalf("errors %q, asked %d", errs, asked)
	}
	trs := modelfake.ToolResults(ep.Scripted()[1])
	if len(trs) != 1 || !trs[0].IsError || !strings.Contains(trs[0].ResultText(), "over 1048576 bytes") {
		t.Fatalf("the tool result the model got: %+v", trs)
	}
}
