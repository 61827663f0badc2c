package agent

import (
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

// geminiArgv is the Gemini CLI the tests run (ORCHESTRD_AGENT_CLIS,
// default /opt/agent-clis), or a skip saying why.
func geminiArgv(t *testing.T) []string {
	t.Helper()
	argv, err := modelfake.CLI("gemini")
	if err != nil {
		t.Skip(err)
	}
	return argv
}

func geminiTask(t *testing.T, g *modelfake.Gemini, cwd, prompt string) Task {
	return Task{ID: "t-" + prompt[:4], Prompt: prompt, Cwd: cwd, Proc: &Proc{},
		Env: append(os.Environ(), "GOOGLE_GEMINI_BASE_URL="+g.URL)}
}

// The second prompt of a session resumes the first's (session/load): the
// model is sent the first prompt and its answer again; the key goes
// over the protocol (the endpoint gets it) and the text streams.
func TestGeminiResumeCarriesHistory(t *testing.T) {
	argv := geminiArgv(t)
	g := modelfake.NewGemini(
		modelfake.GeminiTurn{Text: "I will remember forty-two.", Chunks: 3, Thought: "noting the number"},
		modelfake.GeminiTurn{Text: "It was forty-two."})
	defer g.Close()
	state, cwd := t.TempDir(), t.TempDir()
	a, err := New(KindGemini, Options{Argv: argv, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	h1 := &testHost{key: "gm-key-1"}
	r1 := a.Run(geminiTask(t, g, cwd, "remember 42"), h1)
	if r1.Status != "completed" || r1.SDKSessionID == "" || r1.Usage == nil || r1.Usage.InputTokens == 0 {
		t.Fatalf("first result = %+v, errors %q", r1, h1.errs)
	}
	if n := len(h1.of(api.MsgText)); n < 3 || h1.texts() != "I will remember forty-two." || !slices.Equal(h1.keyAsks, []string{"gemini"}) {
		t.Fatalf("text = %q in %d messages, keys asked for %q", h1.texts(), n, h1.keyAsks)
	}
	if th := h1.of(api.MsgThinking); len(th) == 0 || !strings.Contains(th[0]["text"].(string), "noting the number") {
		t.Fatalf("thinking = %v", th)
	}
	if res := h1.of(api.MsgResult); len(res) != 1 || res[0]["sdk_session_id"] != r1.SDKSessionID {
		t.Fatalf("result messages = %v", res)
	}

	h2 := &testHost{key: "gm-key-1"}
	task := geminiTask(t, g, cwd, "what number?")
	task.Resume = r1.SDKSessionID
	r2 := a.Run(task, h2)
	if r2.Status != "completed" || r2.SDKSessionID != r1.SDKSessionID {
		t.Fatalf("second result = %+v, errors %q", r2, h2.errs)
	}
	turns := g.Turns()
	if len(turns) != 2 {
		t.Fatalf("the endpoint got %d conversation requests", len(turns))
	}
	var said []string
	for _, c := range turns[1].Contents() {
		for _, p := range c.Parts {
			said = append(said, c.Role+": "+p.Text)
		}
	}
	joined := strings.Join(said, "\n")
	for _, want := range []string{"user: remember 42", "model: I will remember forty-two.", "user: what number?"} {
		if !strings.Contains(joined, want) {
			t.Fatalf("the second request lacks %q:\n%s", want, joined)
		}
	}
	for _, r := range g.Requests() {
		if r.Key != "gm-key-1" {
			t.Fatalf("request %s carried key %q", r.Path, r.Key)
		}
	}
	// The replayed history is not reported again as this prompt's text.
	for _, m := range h2.of(api.MsgText) {
		if strings.Contains(m["text"].(string), "remember") {
			t.Fatalf("the history came back as text: %v", m)
		}
	}
}

// geminiLines are the lines of a capture of Gemini CLI 0.61's --acp
// stdout (testdata/gemini/NAME.jsonl, from runs against modelfake).
func geminiLines(t testing.TB, name string) [][]byte {
	b, err := os.ReadFile(filepath.Join("testdata", "gemini", name+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		out = append(out, []byte(l))
	}
	return out
}

// geminiReplay feeds a capture to a run as if the agent had printed it and
// returns what the adapter answered the agent.
func geminiReplay(t *testing.T, h *testHost, name string) []map[string]any {
	var w strings.Builder
	r := &geminiRun{h: h, w: &w, live: true}
	for _, l := range geminiLines(t, name) {
		r.handle(Line{B: l})
	}
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(w.String()), "\n") {
		if l == "" {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("the adapter wrote %q: %v", l, err)
		}
		out = append(out, v)
	}
	return out
}

// The captured lines decode to the messages orchestrd shows, and the
// permission request is answered as the daemon decided.
func TestGeminiDecodesCapturedLines(t *testing.T) {
	h := &testHost{decide: func(string, json.RawMessage) Decision { return Decision{Approved: true} }}
	sent := geminiReplay(t, h, "allow")
	if len(h.asked) != 1 || h.asked[0] != `Bash {"command":"touch /tmp/gx/w/made"}` {
		t.Fatalf("asked %q", h.asked)
	}
	if len(sent) != 1 || sent[0]["result"].(map[string]any)["outcome"].(map[string]any)["optionId"] != "proceed_once" {
		t.Fatalf("answered %v", sent)
	}
	calls, results := h.of(api.MsgToolCall), h.of(api.MsgToolResult)
	if len(calls) != 1 || calls[0]["name"] != "Bash" || len(results) != 1 || results[0]["id"] != calls[0]["id"] {
		t.Fatalf("calls %v results %v", calls, results)
	}
	if len(h.of(api.MsgText)) != 3 || len(h.of(api.MsgThinking)) != 1 {
		t.Fatalf("messages %+v", h.msgs)
	}

	h = &testHost{decide: func(string, json.RawMessage) Decision { return Decision{Reason: "user_denied: no"} }}
	sent = geminiReplay(t, h, "deny")
	if len(sent) != 1 || sent[0]["result"].(map[string]any)["outcome"].(map[string]any)["optionId"] != "cancel" {
		t.Fatalf("answered %v", sent)
	}
	if d := h.of(api.MsgPermissionDenied); len(d) != 1 || d[0]["reason"] != "user_denied: no" || d[0]["name"] != "Bash" {
		t.Fatalf("permission_denied %v", d)
	}

	h = &testHost{}
	if sent = geminiReplay(t, h, "yolo"); len(sent) != 0 || len(h.asked) != 0 {
		t.Fatalf("yolo: answered %v, asked %v", sent, h.asked)
	}
	if calls := h.of(api.MsgToolCall); len(calls) != 1 || calls[0]["name"] != "Bash" {
		t.Fatalf("yolo calls %v", calls)
	}
}

// A session/load's replay of the history (before the agent's
// available_commands_update) is not this prompt's text.
func TestGeminiLoadReplayIsNotReported(t *testing.T) {
	h := &testHost{}
	r := &geminiRun{h: h, w: &strings.Builder{}}
	for _, l := range geminiLines(t, "load") {
		r.handle(Line{B: l})
	}
	if txt := h.of(api.MsgText); len(txt) != 1 || txt[0]["text"] != "second answer" {
		t.Fatalf("text %v", txt)
	}
}

// An over-long permission request is refused, not left unanswered.
func TestGeminiOverlongPermissionIsRefused(t *testing.T) {
	h := &testHost{}
	var w strings.Builder
	r := &geminiRun{h: h, w: &w, live: true}
	r.handle(Line{B: []byte(`{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"sessionId":"x","toolCall":{"title":"` + strings.Repeat("a", 100)), Split: true})
	if w.String() != `{"id":7,"jsonrpc":"2.0","result":{"outcome":{"outcome":"cancelled"}}}`+"\n" || r.denied != 1 || len(h.asked) != 0 {
		t.Fatalf("answered %q, denied %d, asked %v", w.String(), r.denied, h.asked)
	}
}

// The line decoder takes anything: it never panics, reports only valid
// JSON, and answers each request of the agent's at most once.
func FuzzGeminiLine(f *testing.F) {
	for _, name := range []string{"allow", "deny", "yolo", "401", "load"} {
		for _, l := range geminiLines(f, name) {
			f.Add(l, false)
		}
	}
	f.Add([]byte(`{"jsonrpc":"2.0","id":"x","method":"session/request_permission","params":{"toolCall":{"toolCallId":"run_shell_command__a__b","title":"rm -rf /"},"options":[{"optionId":"o","kind":"allow_always"}]}}`), false)
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"session/request_permission"`), true)
	f.Fuzz(func(t *testing.T, line []byte, split bool) {
		n := 0
		h := &testHost{decide: func(string, json.RawMessage) Decision { n++; return Decision{Approved: n%2 == 0} }}
		var w strings.Builder
		r := &geminiRun{h: h, w: &w, live: true}
		r.handle(Line{B: line, Split: split})
		if out := strings.TrimSuffix(w.String(), "\n"); out != "" {
			if strings.Contains(out, "\n") || !json.Valid([]byte(out)) {
				t.Fatalf("answered %q", out)
			}
			if strings.Contains(out, "allow_always") || strings.Contains(out, `"optionId":"o"`) {
				t.Fatalf("answered allow_always: %q", out)
			}
		}
	})
}

// A 429 stops the agent at its first retry (it would wait 600 s):
// usage_limit, with the retry time the endpoint gave; one without a
// delay too. A refused key (401), or none at all, is auth_failed.
func TestGeminiFailuresToldApart(t *testing.T) {
	argv := geminiArgv(t)
	state, cwd := t.TempDir(), t.TempDir()
	a, err := New(KindGemini, Options{Argv: argv, StateDir: state, Model: "gemini-2.5-flash"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		turn  modelfake.GeminiTurn
		key   string
		code  string
		retry bool
	}{
		{"429 with a delay", modelfake.GeminiTurn{Status: 429, RetryDelay: "600s"}, "k", api.TaskErrUsageLimit, true},
		{"429", modelfake.GeminiTurn{Status: 429}, "k", api.TaskErrUsageLimit, false},
		{"401", modelfake.GeminiTurn{Status: 401}, "k", api.TaskErrAuthFailed, false},
		{"403", modelfake.GeminiTurn{Status: 403}, "k", api.TaskErrAuthFailed, false},
		{"no key", modelfake.GeminiTurn{Text: "never"}, "", api.TaskErrAuthFailed, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := modelfake.NewGemini(c.turn, c.turn, c.turn)
			defer g.Close()
			h := &testHost{key: c.key}
			before := time.Now()
			res := a.Run(geminiTask(t, g, cwd, "anything"), h)
			if res.Status != "failed" || res.Error == nil || res.Error.Code != c.code {
				t.Fatalf("result = %+v %+v, errors %q", res, res.Error, h.errs)
			}
			// What the endpoint said is not copied into the task's error
			// (the message is the adapter's own words).
			if strings.Contains(res.Error.Message, "API key not valid") || strings.Contains(res.Error.Message, "Permission denied on the API key") {
				t.Fatalf("the error copies the endpoint's words: %q", res.Error.Message)
			}
			if c.retry && (res.Error.RetryAt == nil || res.Error.RetryAt.Before(before.Add(500*time.Second))) {
				t.Fatalf("retry_at = %v", res.Error.RetryAt)
			}
			if n := len(g.Requests()); n > 1 {
				t.Fatalf("the endpoint got %d requests", n)
			}
			for _, r := range g.Requests() {
				if r.Model != "gemini-2.5-flash" {
					t.Fatalf("model %q", r.Model)
				}
			}
		})
	}
}

// The task's tools reach the CLI: the others are not offered to the
// model. Plan mode runs.
func TestGeminiToolsAndPlanMode(t *testing.T) {
	argv := geminiArgv(t)
	g := modelfake.NewGemini(modelfake.GeminiTurn{Text: "a plan"}, modelfake.GeminiTurn{Text: "planned"})
	defer g.Close()
	state, cwd := t.TempDir(), t.TempDir()
	a, err := New(KindGemini, Options{Argv: argv, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	task := geminiTask(t, g, cwd, "read only")
	task.Tools = []string{"Read", "glob"}
	h := &testHost{key: "k"}
	if res := a.Run(task, h); res.Status != "completed" {
		t.Fatalf("result = %+v, errors %q", res, h.errs)
	}
	tools := g.Requests()[0].Tools()
	if !slices.Contains(tools, "read_file") || !slices.Contains(tools, "glob") || slices.Contains(tools, "run_shell_command") || slices.Contains(tools, "write_file") {
		t.Fatalf("tools offered: %v", tools)
	}
	if p, _ := filepath.Glob(filepath.Join(state, "policy-*")); len(p) != 0 {
		t.Fatalf("policy files left: %v", p)
	}
	task = geminiTask(t, g, cwd, "plan it")
	task.PermissionMode = api.ModePlan
	if res := a.Run(task, h); res.Status != "completed" {
		t.Fatalf("plan: result = %+v, errors %q", res, h.errs)
	}
	if res := a.Run(Task{PermissionMode: "sometimes", Proc: &Proc{}}, h); res.Error == nil || res.Error.Code != "bad_permission_mode" {
		t.Fatalf("unknown mode: %+v", res)
	}
}

// The tool's name is the CLI's, which prefixes the model's call id with
// it: a model that names its call after another tool changes nothing.
func TestGeminiToolNameIsTheCLIs(t *testing.T) {
	for id, want := range map[string]string{
		"run_shell_command__write_file__x": "Bash",
		"write_file__run_shell_command__1": "Write",
		"replace__1":                       "Edit",
		"read_file__r":                     "read_file",
		"no separator":                     "unknown",
		"bad name!__x":                     "unknown",
	} {
		tc := acpToolCall{ToolCallID: id, Title: "t"}
		if name, _ := tc.nameInput(); name != want {
			t.Errorf("%q: %q, want %q", id, name, want)
		}
	}
	tc := acpToolCall{ToolCallID: "run_shell_command__1", Title: "git status && rm -rf ~"}
	if _, in := tc.nameInput(); string(in) != `{"command":"git status \u0026\u0026 rm -rf ~"}` {
		t.Errorf("input %s", in)
	}
}
