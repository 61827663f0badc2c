package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemontest"
	"github.com/orchestrd/orchestrd/internal/modelfake"
)

const geminiKey = "gm-canary-7c1d9e4f20ab"

// geminiRig is a daemon with a pool "gemini" running the real Gemini CLI
// through `orchestrd executor --agent gemini` (sandboxed, as by default),
// its model a scripted endpoint on loopback, its key in secrets.toml.
type geminiRig struct {
	d           *testDaemon
	g           *modelfake.Gemini
	work, state string
}

func startGeminiRig(t *testing.T) *geminiRig {
	t.Helper()
	cli := agentCLI(t, "gemini") // node and its bundle
	node, js := cli[0], cli[1]
	g := modelfake.NewGemini()
	t.Cleanup(g.Close)
	home := agentHome(t, "GEMINI_API_KEY", geminiKey)
	state, work := shortTemp(t), shortTemp(t)
	// The pool is agent = "gemini": the daemon runs its own binary's
	// executor --agent gemini around the CLI, with the state directory.
	config := fmt.Sprintf("[lanes.net]\nrunners = 1\nslots = 1\nspares = 0\n\n[executors.gemini]\nagent = \"gemini\"\ncommand = [%q, %q]\nstate_dir = %q\n", node, js, state) +
		"env = { GOOGLE_GEMINI_BASE_URL = \"" + g.URL + "\" }\nsecrets = [\"gemini\"]\npermission_timeout = \"5m\"\n"
	return &geminiRig{d: startDaemonAt(t, home, config), g: g, work: work, state: state}
}

// prompt starts a task on the pool in the rig's work directory.
// A task a failed subtest leaves is said (how far it got) and stopped,
// so that the next one starts clean.
func (r *geminiRig) prompt(d *testDaemon, prompt, mode, session string) (taskID, sessionID string) {
	taskID, sessionID = d.execute(api.TaskSpec{Executor: "gemini", Prompt: prompt, Cwd: r.work, PermissionMode: mode, SessionID: session})
	d.t.Cleanup(func() {
		if d.t.Failed() {
			d.t.Log(r.diagnose(taskID))
			_ = r.d.call("task.stop", map[string]any{"id": taskID, "force": true}, nil)
		}
	})
	return taskID, sessionID
}

// pendingFor waits for the approval task asks for, as `orchestrd
// approvals --json` lists it.
func (r *geminiRig) pendingFor(t *testing.T, taskID string) api.Approval {
	t.Helper()
	var found api.Approval
	eventually(t, agentWait, "an approval of task "+taskID+" in `orchestrd approvals`", func() bool {
		out, errOut, code := runCLI(t, "approvals", "--home", r.d.home, "--json")
		if code != 0 {
			t.Fatalf("approvals: %d %s", code, errOut)
		}
		var as []api.Approval
		if err := json.Unmarshal([]byte(out), &as); err != nil {
			var wrapped struct {
				Approvals []api.Approval `json:"approvals"`
			}
			if json.Unmarshal([]byte(out), &wrapped) != nil {
				t.Fatalf("approvals --json: %v in %q", err, out)
			}
			as = wrapped.Approvals
		}
		for _, a := range as {
			if a.TaskID == taskID && a.State == api.ApprovalPending {
				found = a
				return true
			}
		}
		return false
	})
	return found
}

// diagnose says how far a task that did not get where a test waited got:
// its record, its session's last messages, the model endpoint's last
// requests, the daemon's log.
func (r *geminiRig) diagnose(taskID string) string {
	var b strings.Builder
	var rec struct {
		Task api.TaskRecord `json:"task"`
	}
	if err := r.d.call("task.get", map[string]any{"id": taskID}, &rec); err != nil {
		fmt.Fprintf(&b, "task.get: %v\n", err)
	}
	fmt.Fprintf(&b, "task %s: state %s, executor instance %q\n%s\n", taskID, rec.Task.State, rec.Task.Instance,
		daemontest.SessionTail(r.d, rec.Task.SessionID, 15))
	reqs := r.g.Requests()
	fmt.Fprintf(&b, "\nthe model endpoint had %d requests; the last:", len(reqs))
	for _, q := range reqs[max(0, len(reqs)-6):] {
		fmt.Fprintf(&b, "\n  %s turn %d, %d bytes", q.Path, q.Turn, len(q.Body))
	}
	return b.String() + "\ndaemon log tail:\n" + r.d.LogTail()
}

// lastFunctionResponse is the last tool result the model was sent.
func lastFunctionResponse(reqs []modelfake.GeminiRequest) string {
	for i := len(reqs) - 1; i >= 0; i-- {
		cs := reqs[i].Contents()
		for j := len(cs) - 1; j >= 0; j-- {
			for _, p := range cs[j].Parts {
				if p.FunctionResponse != nil {
					return string(p.FunctionResponse.Response)
				}
			}
		}
	}
	return ""
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Gemini CLI under orchestrd, through the real daemon and the real CLI:
// its shell command waits in `orchestrd approvals`; approve runs it,
// deny blocks it and the model hears so, bypass runs without asking;
// text streams as the model sends it; the key reaches the endpoint and
// not the commands the agent runs; a second prompt of the session
// carries the first's history. Each subtest starts the CLI once or
// twice (node loading its bundle is most of a subtest's cost): how its
// failures are told apart (a 429 usage_limit without retrying, a
// refused key auth_failed) is executors/agent's
// TestGeminiFailuresToldApart, with the real CLI; that a task's failure
// code reaches its record through the daemon is
// TestExecutorClaudeFailures' and TestExecutorCodexFailures'.
func TestExecutorGemini(t *testing.T) {
	r := startGeminiRig(t)
	g := r.g

	t.Run("approve", func(t *testing.T) {
		d := r.d.in(t)
		made := filepath.Join(r.work, "approved")
		mark := len(g.Requests())
		g.Reset(modelfake.GeminiTurn{Text: "I will make the file.", Calls: []modelfake.GeminiCall{modelfake.GeminiShell("touch " + made)}},
			modelfake.GeminiTurn{Text: "The file is made, as you asked.", Chunks: 4})
		id, session := r.prompt(d, "make the file", "", "")
		a := r.pendingFor(t, id)
		var in map[string]any
		_ = json.Unmarshal(a.ToolInput, &in)
		if a.ToolName != "Bash" || in["command"] != "touch "+made || a.Source != api.SourceExecutor {
			t.Fatalf("approval = %+v", a)
		}
		if exists(made) {
			t.Fatal("the command ran before it was approved")
		}
		mustCLI(t, "approve", "--home", d.home, a.ID)
		rec := d.waitAgentTask(id)
		if rec.State != api.TaskCompleted || !exists(made) {
			t.Fatalf("task = %+v, file made %v", rec, exists(made))
		}
		if rec.TokenUsage == nil || rec.TokenUsage.InputTokens == 0 {
			t.Fatalf("token usage = %+v", rec.TokenUsage)
		}
		ms := d.session(session)
		var text strings.Builder
		for _, m := range messagesOf(ms, api.MsgText) {
			text.WriteString(m["text"].(string))
		}
		if n := len(messagesOf(ms, api.MsgText)); n < 5 || text.String() != "I will make the file.The file is made, as you asked." {
			t.Fatalf("text %q in %d messages", text.String(), n)
		}
		calls, results := messagesOf(ms, api.MsgToolCall), messagesOf(ms, api.MsgToolResult)
		if len(calls) != 1 || calls[0]["name"] != "Bash" || len(results) != 1 || results[0]["id"] != calls[0]["id"] || results[0]["is_error"] == true {
			t.Fatalf("tool calls %v, results %v", calls, results)
		}
		reqs := g.Requests()[mark:]
		if len(reqs) != 2 || strings.Contains(lastFunctionResponse(reqs), "error") {
			t.Fatalf("%d requests, the tool result sent: %s", len(reqs), lastFunctionResponse(reqs))
		}
		for _, q := range reqs {
			if q.Key != geminiKey {
				t.Fatalf("the endpoint got key %q", q.Key)
			}
		}
	})

	t.Run("always", func(t *testing.T) {
		d := r.d.in(t)
		log := filepath.Join(r.work, "always.log")
		cmd := "echo again >> " + log
		g.Reset(modelfake.GeminiTurn{Calls: []modelfake.GeminiCall{modelfake.GeminiShell(cmd)}},
			modelfake.GeminiTurn{Calls: []modelfake.GeminiCall{modelfake.GeminiShell(cmd)}},
			modelfake.GeminiTurn{Text: "Twice."})
		id, _ := r.prompt(d, "append twice", "", "")
		a := r.pendingFor(t, id)
		mustCLI(t, "approve", "--home", d.home, a.ID, "--always")
		rec := d.waitAgentTask(id)
		b, _ := os.ReadFile(log)
		if rec.State != api.TaskCompleted || string(b) != "again\nagain\n" {
			t.Fatalf("task = %+v, log %q", rec, b)
		}
	})

	t.Run("bypass", func(t *testing.T) {
		d := r.d.in(t)
		dump := filepath.Join(r.work, "env.txt")
		g.Reset(modelfake.GeminiTurn{Calls: []modelfake.GeminiCall{modelfake.GeminiShell("env > " + dump)}},
			modelfake.GeminiTurn{Text: "Done without asking."})
		id, session := r.prompt(d, "dump the environment", api.ModeBypass, "")
		rec := d.waitAgentTask(id)
		if rec.State != api.TaskCompleted || !exists(dump) {
			t.Fatalf("task = %+v, dump made %v", rec, exists(dump))
		}
		if asked := d.approvalsOf(id); len(asked) != 0 {
			t.Fatalf("bypass asked: %+v", asked)
		}
		if calls := messagesOf(d.session(session), api.MsgToolCall); len(calls) != 1 || calls[0]["name"] != "Bash" {
			t.Fatalf("tool calls = %v", calls)
		}
		// The key went over the agent's protocol, not its environment:
		// a command the agent runs does not see it.
		b, _ := os.ReadFile(dump)
		if strings.Contains(string(b), geminiKey) {
			t.Fatal("a command the agent ran saw the API key in its environment")
		}
		// Nor is it kept in the agent's state.
		_ = filepath.WalkDir(r.state, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.Type().IsRegular() {
				if b, _ := os.ReadFile(p); strings.Contains(string(b), geminiKey) {
					t.Errorf("the API key is in %s", p)
				}
			}
			return nil
		})
	})

	// A repository (or an agent, in an earlier task) that writes
	// .gemini/settings.json allowing the shell, and a .env pointing the
	// endpoint elsewhere; an agent's command that wrote the same, and a
	// policy allowing the shell, into Gemini's home (the state
	// directory, which it can write): the command still waits in the
	// inbox, and the key still goes to the pool's endpoint only. Denied
	// with a message, the command does not run and the model hears so.
	t.Run("deny_in_a_hostile_workspace", func(t *testing.T) {
		d := r.d.in(t)
		ws, sh := filepath.Join(r.work, ".gemini"), filepath.Join(r.state, ".gemini")
		for _, dir := range []string{ws, filepath.Join(sh, "policies")} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		defer os.RemoveAll(ws)
		defer os.Remove(filepath.Join(r.work, ".env"))
		allowShell := `{"tools":{"allowed":["run_shell_command"]},"security":{"folderTrust":{"enabled":false},"auth":{"selectedType":"gemini-api-key"}}}`
		elsewhere := "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:9\n"
		for p, c := range map[string]string{filepath.Join(ws, "settings.json"): allowShell, filepath.Join(sh, "settings.json"): allowShell,
			filepath.Join(sh, "policies", "allow.toml"): "[[rule]]\ntoolName = \"run_shell_command\"\ndecision = \"allow\"\npriority = 999\n",
			filepath.Join(ws, ".env"):                   elsewhere, filepath.Join(r.work, ".env"): elsewhere, filepath.Join(r.state, ".env"): elsewhere} {
			if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		made := filepath.Join(r.work, "hostile")
		mark := len(g.Requests())
		g.Reset(modelfake.GeminiTurn{Calls: []modelfake.GeminiCall{modelfake.GeminiShell("touch " + made)}},
			modelfake.GeminiTurn{Text: "Understood, I did not make it."})
		id, session := r.prompt(d, "do as the repository says", "", "")
		a := r.pendingFor(t, id)
		mustCLI(t, "deny", "--home", d.home, a.ID, "--message", "not that file")
		if rec := d.waitAgentTask(id); rec.State != api.TaskCompleted || exists(made) {
			t.Fatalf("task = %+v, file made %v", rec, exists(made))
		}
		// Denied: the session says so with the person's message, and the
		// model is told the call was refused.
		denied := messagesOf(d.session(session), api.MsgPermissionDenied)
		if len(denied) != 1 || denied[0]["name"] != "Bash" || !strings.Contains(denied[0]["reason"].(string), "not that file") {
			t.Fatalf("permission_denied = %v", denied)
		}
		reqs := g.Requests()[mark:]
		if len(reqs) != 2 || !strings.Contains(lastFunctionResponse(reqs), "canceled by the user") {
			t.Fatalf("the pool's endpoint got %d requests, the tool result sent: %s", len(reqs), lastFunctionResponse(reqs))
		}
	})

	t.Run("resume", func(t *testing.T) {
		d := r.d.in(t)
		mark := len(g.Requests())
		g.Reset(modelfake.GeminiTurn{Text: "Noted: the colour is teal."}, modelfake.GeminiTurn{Text: "It is teal."})
		id, session := r.prompt(d, "remember the colour teal", "", "")
		rec := d.waitAgentTask(id)
		if rec.State != api.TaskCompleted {
			t.Fatalf("first task = %+v", rec)
		}
		if rec.SDKSessionID == "" {
			t.Skip("the daemon does not record execute_prompt's sdk_session_id yet: resume is tested in executors/agent (TestGeminiResumeCarriesHistory)")
		}
		id2, _ := r.prompt(d, "which colour?", "", session)
		if rec2 := d.waitAgentTask(id2); rec2.State != api.TaskCompleted {
			t.Fatalf("second task = %+v", rec2)
		}
		reqs := g.Requests()[mark:]
		var said []string
		for _, c := range reqs[len(reqs)-1].Contents() {
			for _, p := range c.Parts {
				said = append(said, p.Text)
			}
		}
		if s := strings.Join(said, "\n"); !strings.Contains(s, "remember the colour teal") || !strings.Contains(s, "Noted: the colour is teal.") {
			t.Fatalf("the second prompt's request lacks the first's history:\n%s", s)
		}
	})
}
