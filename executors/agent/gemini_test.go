package agent

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/modelfake"
)

// geminiArgv is the Gemini CLI the tests run (ORCHESTRD_AGENT_CLIS,
// default /opt/agent-clis), or a skip saying why.
func geminiArgv(t *testing.T) []string {
	t.Helper()
	root := os.Getenv("ORCHESTRD_AGENT_CLIS")
	if root == "" {
		root = "/opt/agent-clis"
	}
	js := filepath.Join(root, "node_modules", "@google", "gemini-cli", "bundle", "gemini.js")
	if _, err := os.Stat(js); err != nil {
		t.Skipf("Gemini CLI is not installed (%s: %v); install @google/gemini-cli@0.61.0 under ORCHESTRD_AGENT_CLIS", js, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("Gemini CLI needs node, not on PATH: %v", err)
	}
	return []string{node, js}
}

// recHost is a Host that records what the adapter reports.
type recHost struct {
	mu    sync.Mutex
	msgs  []recMsg
	errs  []string
	asked []string // tool name + " " + input
	allow func(tool string, input json.RawMessage) Decision
	key   string
}

type recMsg struct {
	Type string
	Data json.RawMessage
}

func (h *recHost) Report(typ string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, recMsg{typ, b})
}

func (h *recHost) ReportError(code, message string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, code+": "+message)
}

func (h *recHost) Permission(tool string, input json.RawMessage) (Decision, error) {
	h.mu.Lock()
	h.asked = append(h.asked, tool+" "+string(input))
	h.mu.Unlock()
	if h.allow == nil {
		return Decision{Reason: "no"}, nil
	}
	return h.allow(tool, input), nil
}

func (h *recHost) APIKey(service string) (string, error) {
	if service != "gemini" {
		return "", os.ErrNotExist
	}
	return h.key, nil
}

func (h *recHost) of(typ string) []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]any
	for _, m := range h.msgs {
		if m.Type == typ {
			var v map[string]any
			_ = json.Unmarshal(m.Data, &v)
			out = append(out, v)
		}
	}
	return out
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
	h1 := &recHost{key: "gm-key-1"}
	r1 := a.Run(geminiTask(t, g, cwd, "remember 42"), h1)
	if r1.Status != "completed" || r1.SDKSessionID == "" || r1.Usage == nil || r1.Usage.InputTokens == 0 {
		t.Fatalf("first result = %+v, errors %q", r1, h1.errs)
	}
	var text strings.Builder
	for _, m := range h1.of(api.MsgText) {
		text.WriteString(m["text"].(string))
	}
	if n := len(h1.of(api.MsgText)); n < 3 || text.String() != "I will remember forty-two." {
		t.Fatalf("text = %q in %d messages", text.String(), n)
	}
	if th := h1.of(api.MsgThinking); len(th) == 0 || !strings.Contains(th[0]["text"].(string), "noting the number") {
		t.Fatalf("thinking = %v", th)
	}
	if res := h1.of(api.MsgResult); len(res) != 1 || res[0]["sdk_session_id"] != r1.SDKSessionID {
		t.Fatalf("result messages = %v", res)
	}

	h2 := &recHost{key: "gm-key-1"}
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
