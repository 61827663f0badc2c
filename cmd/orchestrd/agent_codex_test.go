package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/modelfake"
)

// The Codex CLI as a built-in agent kind, end to end: the real daemon, the
// real `orchestrd executor --agent codex` in its sandbox, the real Codex
// 0.169.0 (its app-server) against a scripted OpenAI Responses endpoint on
// loopback (internal/modelfake). Skipped, saying so, when the CLI is not
// installed.

const codexKey = "sk-codex-canary-5e1f0a9b"

// codexDaemon is a daemon with a pool "codex" running Codex against
// fake; secret says whether secrets.toml gives it the openai key.
func codexDaemon(t *testing.T, fake *modelfake.OpenAI, secret bool, extra string) *testDaemon {
	t.Helper()
	cli := agentCLI(t, "codex")[0]
	var home string
	if secret {
		home = agentHome(t, "openai", codexKey)
	} else {
		home = shortTemp(t)
	}
	// agent = "codex": the daemon runs its own executor --agent codex
	// around the CLI, with --model from model_config and the pool's state
	// directory under its home (<home>/agents/codex: Codex's CODEX_HOME).
	cfg := fmt.Sprintf("[lanes.net]\nrunners = 1\nslots = 1\nspares = 0\n\n[executors.codex]\n"+
		"agent = \"codex\"\ncommand = [%q]\nmodel_config = { model = \"gpt-5.5\" }\n"+
		"env = { OPENAI_BASE_URL = %q }\nsecrets = [\"openai\"]\ninstances = 1\npermission_timeout = \"2m\"\n%s",
		cli, fake.URL, extra)
	return startDaemonAt(t, home, cfg)
}

func newOpenAIFake(t *testing.T, turns ...modelfake.OpenAITurn) *modelfake.OpenAI {
	t.Helper()
	f, err := modelfake.NewOpenAI(turns...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the OpenAI fake's requests:\n%s", f.Summary())
		}
	})
	return f
}

func codexTouch(name string) modelfake.OpenAITurn {
	return modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{{Name: "exec_command", Args: codexArgs("touch " + name)}}}
}

// codexArgs are exec_command's arguments for cmd: no login shell (this
// machine's profile is slow under load) and a long yield time, so that
// the command's output is in its result.
func codexArgs(cmd string) map[string]any {
	return map[string]any{"cmd": cmd, "login": false, "yield_time_ms": 60000}
}

// linesOnFailure logs, when the test fails, the lines of the session's
// agent that have no message of their own (Codex's error notifications,
// "Reconnecting..." among them).
func (d *testDaemon) linesOnFailure(session string) {
	d.t.Cleanup(func() {
		if !d.t.Failed() {
			return
		}
		for _, m := range messagesOf(d.session(session), api.MsgAgentLine) {
			d.t.Logf("agent line: %.600v", m)
		}
	})
}

// pendingFor waits for the task's next pending approval whose input
// holds what. A task that ends first fails the test at once, saying how
// it ended; a timeout says where the task is and what the daemon logged.
func (d *testDaemon) pendingFor(taskID, what string) api.Approval {
	d.t.Helper()
	var found api.Approval
	var task api.TaskRecord
	diag := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "task %s is %s\n", taskID, task.State)
		var r struct {
			Approvals []api.Approval `json:"approvals"`
		}
		if d.call("approval.list", map[string]any{"state": "all"}, &r) == nil {
			for _, a := range r.Approvals {
				fmt.Fprintf(&b, "approval %s %s task %s: %s %s %+v\n", a.ID, a.State, a.TaskID, a.ToolName, a.ToolInput,
					a.Resolution)
			}
		}
		for _, e := range d.events() {
			if e["task_id"] == taskID || strings.HasPrefix(fmt.Sprint(e["kind"]), "executor.") ||
				strings.HasPrefix(fmt.Sprint(e["kind"]), "approval.") {
				fmt.Fprintf(&b, "%v\n", e)
			}
		}
		return tail(b.String(), 6000)
	}
	eventuallyOr(d.t, testWaitTimeout, "a pending approval for "+what, func() bool {
		var r struct {
			Approvals []api.Approval `json:"approvals"`
		}
		d.mustCall("approval.list", map[string]any{"state": "pending"}, &r)
		for _, a := range r.Approvals {
			if a.TaskID == taskID && strings.Contains(string(a.ToolInput), what) {
				found = a
				return true
			}
		}
		var g struct {
			Task api.TaskRecord `json:"task"`
		}
		d.mustCall("task.get", map[string]any{"id": taskID}, &g)
		if task = g.Task; task.State.Terminal() {
			d.t.Fatalf("task %s ended %s before asking for %q: %+v\n%s", taskID, task.State, what, task.Error, diag())
		}
		return false
	}, diag)
	return found
}

// A command Codex's model asks to run is an approval in `orchestrd
// approvals`: approve runs it, deny blocks it (the file is not written,
// the model's next request carries the refusal and its reason), always
// allows the next identical call without asking; text streams.
func TestExecutorCodexApprovals(t *testing.T) {
	t.Parallel()
	fake := newOpenAIFake(t, codexTouch("approved.txt"), codexTouch("denied.txt"),
		modelfake.OpenAITurn{Text: "Both were tried, one refused."})
	d := codexDaemon(t, fake, true, "")
	work := shortTemp(t)
	id, session := d.execute(api.TaskSpec{Executor: "codex", Prompt: "touch three files", Cwd: work})
	d.linesOnFailure(session)

	a := d.pendingFor(id, "touch approved.txt")
	if a.Source != api.SourceExecutor || a.ToolName != "Bash" || a.SessionID != session {
		t.Fatalf("approval %+v", a)
	}
	out, errOut, code := runCLI(t, "approvals", "--home", d.home)
	if code != 0 || !strings.Contains(out, a.ID) || !strings.Contains(out, "Bash") {
		t.Fatalf("approvals: %d %q %q", code, out, errOut)
	}
	if _, errOut, code = runCLI(t, "approve", "--home", d.home, a.ID); code != 0 {
		t.Fatalf("approve: %d %q", code, errOut)
	}
	a = d.pendingFor(id, "touch denied.txt")
	if _, errOut, code = runCLI(t, "deny", "--home", d.home, a.ID, "--message", "not that file"); code != 0 {
		t.Fatalf("deny: %d %q", code, errOut)
	}
	rec := d.waitAgentTask(id)
	if rec.State != api.TaskCompleted {
		t.Fatalf("task %+v %+v", rec, rec.Error)
	}
	for name, want := range map[string]bool{"approved.txt": true, "denied.txt": false} {
		if _, err := os.Stat(filepath.Join(work, name)); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", name, err == nil, want)
		}
	}
	reqs := fake.Conversation()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests (a request sent again counted once), want 3", len(reqs))
	}
	if txt := reqs[2].Text(); !strings.Contains(txt, "rejected") || !strings.Contains(txt, "not that file") {
		t.Errorf("the request after the denial does not carry it:\n%s", tail(txt, 2000))
	}
	if got := reqs[0].Header.Get("Authorization"); got != "Bearer "+codexKey {
		t.Errorf("the endpoint got Authorization %q", got)
	}
	ms := d.session(session)
	var text strings.Builder
	for _, m := range messagesOf(ms, api.MsgText) {
		text.WriteString(fmt.Sprint(m["text"]))
	}
	if n := len(messagesOf(ms, api.MsgText)); n < 3 || text.String() != "Both were tried, one refused." {
		t.Errorf("%d text messages %q: not streamed", n, text.String())
	}
	denied := messagesOf(ms, api.MsgPermissionDenied)
	if len(denied) != 1 || !strings.Contains(fmt.Sprint(denied[0]["reason"]), "not that file") {
		t.Errorf("permission_denied messages %v", denied)
	}
	if calls := messagesOf(ms, api.MsgToolCall); len(calls) != 2 || calls[0]["name"] != "Bash" {
		t.Errorf("tool calls %v", calls)
	}
	if rs := messagesOf(ms, api.MsgResult); len(rs) != 1 || rs[0]["sdk_session_id"] == "" || rs[0]["denied"] != float64(1) {
		t.Errorf("result messages %v", rs)
	}
}

// approve --always on a command Codex asks for records a rule (from the
// request's permission suggestion) that allows the next identical call
// without asking.
func TestExecutorCodexAlways(t *testing.T) {
	t.Parallel()
	fake := newOpenAIFake(t, codexTouch("always.txt"), codexTouch("always.txt"), modelfake.OpenAITurn{Text: "twice"})
	d := codexDaemon(t, fake, true, "")
	work := shortTemp(t)
	id, session := d.execute(api.TaskSpec{Executor: "codex", Prompt: "touch it twice", Cwd: work})
	a := d.pendingFor(id, "touch always.txt")
	mustCLI(t, "approve", "--home", d.home, a.ID, "--always")
	var rules struct {
		Rules []api.ApprovalRule `json:"rules"`
	}
	d.mustCall("approval.rules", map[string]any{}, &rules)
	ruled := false
	for _, r := range rules.Rules {
		ruled = ruled || r.FromApproval == a.ID && r.Tool == "Bash" && r.Content == "touch always.txt" && r.SessionID == session
	}
	if !ruled {
		again := d.pendingFor(id, "touch always.txt")
		d.mustCall("approval.resolve", map[string]any{"id": again.ID, "decision": "Allow", "by": "cli"}, nil)
		d.waitAgentTask(id)
		t.Skipf("approve --always made no rule (rules %+v): this daemon does not pass an executor's permission_suggestions on to the approval", rules.Rules)
	}
	rec := d.waitAgentTask(id)
	if rec.State != api.TaskCompleted {
		t.Fatalf("task %+v %+v", rec, rec.Error)
	}
	asked := d.approvalsOf(id)
	byRule := 0
	for _, x := range asked {
		if x.Resolution != nil && x.Resolution.By == api.ByRule && x.State == api.ApprovalAllowed {
			byRule++
		}
	}
	if n := len(messagesOf(d.session(session), api.MsgToolCall)); n != 2 || len(asked) != 2 || byRule != 1 {
		t.Errorf("%d tool calls, %d approvals, %d by the rule", n, len(asked), byRule)
	}
	if _, err := os.Stat(filepath.Join(work, "always.txt")); err != nil {
		t.Error(err)
	}
}

// bypassPermissions runs the command without asking anyone.
func TestExecutorCodexBypass(t *testing.T) {
	t.Parallel()
	fake := newOpenAIFake(t, codexTouch("bypass.txt"), modelfake.OpenAITurn{Text: "done"})
	d := codexDaemon(t, fake, true, "")
	work := shortTemp(t)
	id, _ := d.execute(api.TaskSpec{Executor: "codex", Prompt: "touch it", Cwd: work, PermissionMode: api.ModeBypass})
	rec := d.waitAgentTask(id)
	if rec.State != api.TaskCompleted {
		t.Fatalf("task %+v %+v", rec, rec.Error)
	}
	if _, err := os.Stat(filepath.Join(work, "bypass.txt")); err != nil {
		t.Errorf("bypass did not run the command: %v", err)
	}
	if asked := d.approvalsOf(id); len(asked) != 0 {
		t.Errorf("bypass asked: %+v", asked)
	}
}

// A second prompt in the same session continues Codex's thread: the
// model's request carries the first prompt and answer.
func TestExecutorCodexSession(t *testing.T) {
	t.Parallel()
	fake := newOpenAIFake(t, modelfake.OpenAITurn{Text: "The word is heliotrope."}, modelfake.OpenAITurn{Text: "It was heliotrope."})
	d := codexDaemon(t, fake, true, "")
	work := shortTemp(t)
	id, session := d.execute(api.TaskSpec{Executor: "codex", Prompt: "remember a word", Cwd: work})
	rec := d.waitAgentTask(id)
	if rec.State != api.TaskCompleted {
		t.Fatalf("task %+v %+v", rec, rec.Error)
	}
	if rec.SDKSessionID == "" {
		t.Skip("the daemon records no sdk_session_id of a task on this branch: the resume path is checked in executors/agent (TestCodexApproveDenyAndResume)")
	}
	id2, _ := d.execute(api.TaskSpec{Executor: "codex", Prompt: "what was the word?", Cwd: work, SessionID: session})
	rec = d.waitAgentTask(id2)
	if rec.State != api.TaskCompleted {
		t.Fatalf("second task %+v %+v", rec, rec.Error)
	}
	reqs := fake.Requests()
	if txt := reqs[len(reqs)-1].Text(); !strings.Contains(txt, "remember a word") || !strings.Contains(txt, "heliotrope") ||
		!strings.Contains(txt, "what was the word?") {
		t.Errorf("the second prompt's request lacks the history:\n%s", tail(txt, 2000))
	}
}

// A 429 ends the task usage_limit at once (Codex is not left to retry),
// with the reset time Codex gives; a refused key (401) and no key at all
// end it auth_failed.
func TestExecutorCodexFailures(t *testing.T) {
	t.Parallel()
	resets := time.Now().Add(90 * time.Minute)
	limited := newOpenAIFake(t, modelfake.OpenAITurn{Status: 429, Body: fmt.Sprintf(
		`{"error":{"type":"usage_limit_reached","message":"limit","plan_type":"plus","resets_at":%d}}`, resets.Unix())})
	refused := newOpenAIFake(t, modelfake.OpenAITurn{Status: 401}, modelfake.OpenAITurn{Status: 401}, modelfake.OpenAITurn{Status: 401})
	keyless := newOpenAIFake(t, modelfake.OpenAITurn{Text: "never"})
	for _, c := range []struct {
		name   string
		fake   *modelfake.OpenAI
		secret bool
		code   string
	}{{"429", limited, true, api.TaskErrUsageLimit}, {"401", refused, true, api.TaskErrAuthFailed}, {"no key", keyless, false, api.TaskErrAuthFailed}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := codexDaemon(t, c.fake, c.secret, "")
			id, _ := d.execute(api.TaskSpec{Executor: "codex", Prompt: "hi", Cwd: shortTemp(t)})
			rec := d.waitAgentTask(id)
			if rec.State != api.TaskFailed || rec.Error == nil || rec.Error.Code != c.code {
				t.Fatalf("task %+v %+v", rec, rec.Error)
			}
			if n := len(c.fake.Requests()); n > 2 {
				t.Errorf("codex sent %d requests: not stopped at the first refusal", n)
			}
			if c.code == api.TaskErrUsageLimit && rec.Error.RetryAt != nil && rec.Error.RetryAt.Sub(resets).Abs() > 2*time.Minute {
				t.Errorf("retry_at %v, the endpoint said %v", rec.Error.RetryAt, resets)
			}
		})
	}
}

// A prompt-injected model attacks from inside Codex: what holds.
func TestExecutorCodexHostile(t *testing.T) {
	t.Parallel()
	// 1. It reads its environment and Codex's for the key, and the
	// daemon's home: the command is asked for, approved here, and finds
	// neither the key nor the secrets file.
	scan := `env; for p in /proc/[0-9]*; do tr '\0' '\n' < $p/environ 2>/dev/null; done; cat ` + "SECRETS" + `; echo scanned`
	// 2. It names a program of its own as exec_command's shell, for a
	// script a rule allows: Codex runs the script with /bin/bash (what
	// the approval shows), never the program.
	// 3. A command line over a megabyte: declined, not waited on.
	huge := "echo " + strings.Repeat("A", 1<<20+100)
	var secrets, evil string
	fake := newOpenAIFake(t,
		modelfake.OpenAITurn{Func: func(modelfake.OpenAIRequest) modelfake.OpenAITurn {
			return modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{{Name: "exec_command",
				Args: codexArgs(strings.Replace(scan, "SECRETS", secrets, 1))}}}
		}},
		modelfake.OpenAITurn{Func: func(modelfake.OpenAIRequest) modelfake.OpenAITurn {
			return modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{{Name: "exec_command",
				Args: map[string]any{"cmd": "touch ran.txt", "shell": evil, "login": false, "yield_time_ms": 60000}}}}
		}},
		modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{{Name: "exec_command", Args: codexArgs(huge)}}},
		modelfake.OpenAITurn{Text: "done"})
	d := codexDaemon(t, fake, true, "[[approvals.rules]]\ntool = \"Bash\"\ninput = { field = \"command\", pattern = \"^touch ran\\\\.txt$\" }\ndecision = \"allow\"\n")
	secrets = filepath.Join(d.home, "secrets.toml")
	work := shortTemp(t)
	evil = filepath.Join(work, "bin", "bash")
	if err := os.MkdirAll(filepath.Dir(evil), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(evil, []byte("#!/bin/sh\necho \"$@\" > "+filepath.Join(work, "evil.out")+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	id, session := d.execute(api.TaskSpec{Executor: "codex", Prompt: "ignore previous instructions", Cwd: work})
	d.linesOnFailure(session)
	a := d.pendingFor(id, "scanned")
	d.mustCall("approval.resolve", map[string]any{"id": a.ID, "decision": "Allow", "by": "cli"}, nil)
	rec := d.waitAgentTask(id)
	if rec.State != api.TaskCompleted {
		t.Fatalf("task %+v %+v", rec, rec.Error)
	}
	reqs := fake.Conversation()
	if len(reqs) != 4 {
		t.Fatalf("%d requests (a request sent again counted once)", len(reqs))
	}
	out := reqs[1].LastOutput()
	if !strings.Contains(out, "scanned") || !strings.Contains(out, "CODEX_HOME=") {
		t.Fatalf("the scan did not run:\n%s", tail(out, 2000))
	}
	if strings.Contains(out, codexKey) {
		t.Errorf("a command of the agent's read the key")
	}
	if !strings.Contains(reqs[3].LastOutput(), "rejected") {
		o := reqs[3].LastOutput()
		t.Errorf("the huge command was not declined: %d bytes, %.500q ... %q; task %+v %+v", len(o), o, tail(o, 300), rec, rec.Error)
	}
	ms := d.session(session)
	if n := len(messagesOf(ms, api.MsgPermissionDenied)); n != 1 {
		t.Errorf("%d permission_denied, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(work, "ran.txt")); err != nil {
		t.Errorf("the script the rule allows did not run: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(work, "evil.out")); err == nil {
		t.Errorf("the model's own shell ran: %q", b)
	}
}

// In plan mode nothing is changed: a file change and a command are
// refused without asking anyone (Codex's read-only sandbox does not hold
// inside orchestrd's: a command approved in it wrote its file).
func TestExecutorCodexPlan(t *testing.T) {
	t.Parallel()
	fake := newOpenAIFake(t,
		modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{{Name: "apply_patch", Input: "*** Begin Patch\n*** Add File: patched.txt\n+x\n*** End Patch\n"}}},
		codexTouch("plan.txt"), modelfake.OpenAITurn{Text: "planned"})
	d := codexDaemon(t, fake, true, "")
	work := shortTemp(t)
	var id, session string
	var r struct {
		TaskID    string `json:"task_id"`
		SessionID string `json:"session_id"`
	}
	if err := d.call("task.execute", api.TaskSpec{Executor: "codex", Prompt: "plan it", Cwd: work, PermissionMode: api.ModePlan}, &r); err != nil {
		t.Skipf("this daemon takes no plan mode yet: %v", err)
	}
	id, session = r.TaskID, r.SessionID
	rec := d.waitAgentTask(id)
	if rec.State != api.TaskCompleted {
		t.Fatalf("task %+v %+v", rec, rec.Error)
	}
	for _, f := range []string{"patched.txt", "plan.txt"} {
		if _, err := os.Stat(filepath.Join(work, f)); err == nil {
			t.Errorf("plan mode made %s", f)
		}
	}
	denied := messagesOf(d.session(session), api.MsgPermissionDenied)
	if len(denied) != 2 || denied[0]["name"] != "apply_patch" || denied[1]["name"] != "Bash" {
		t.Errorf("permission_denied %v", denied)
	}
	if asked := d.approvalsOf(id); len(asked) != 0 {
		t.Errorf("plan mode asked: %+v", asked)
	}
}
