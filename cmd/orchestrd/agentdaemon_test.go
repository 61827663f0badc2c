package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/executors/agent"
)

// The daemon side of built-in agent kinds, through the real daemon and
// the scripted executor: what an agent's execute_prompt result says (its
// own session id, the tool uses denied, tokens and cost, a usage limit's
// retry_at) is recorded on the task, summed on the session, shown by the
// CLI, and the next task of the session is given the agent's session to
// resume, also after a restart of the daemon.
func TestExecutorAgentSessionResumed(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	config := execConfig(t, "instances = 1\n")
	d := startDaemonAt(t, home, config)

	echo := func(ms []api.SessionMessage, task string) []string {
		var out []string
		for _, m := range ms {
			if m.TaskID == task && m.EventType == "sdk_echo" {
				var e struct {
					ID string `json:"sdk_session_id"`
				}
				_ = json.Unmarshal(m.EventData, &e)
				out = append(out, e.ID)
			}
		}
		return out
	}

	// The first task of a session: nothing to resume; the agent says
	// its session, two denials, tokens and cost.
	t1, session := d.execute(api.TaskSpec{Prompt: script(`{"op":"echo_sdk"}`, `{"op":"sdk","text":"conv-1"}`,
		`{"op":"denied","n":2,"tool":"Bash"}`,
		`{"op":"usage","input_tokens":100,"output_tokens":20,"cache_read_tokens":7,"cost_usd":0.5}`)})
	r1 := d.waitTask(t1)
	if r1.State != api.TaskCompleted || r1.SDKSessionID != "conv-1" || r1.Denied != 2 || r1.TokenUsage == nil ||
		r1.TokenUsage.CostUSD != 0.5 || r1.TokenUsage.CacheReadTokens != 7 {
		t.Fatalf("first task: %+v %+v", r1, r1.TokenUsage)
	}
	if got := echo(d.session(session), t1); len(got) != 1 || got[0] != "" {
		t.Fatalf("the first task was given an agent session to resume: %q", got)
	}

	// The second: it resumes conv-1, and ends in conv-2.
	t2, _ := d.execute(api.TaskSpec{SessionID: session, Prompt: script(`{"op":"echo_sdk"}`, `{"op":"sdk","text":"conv-2"}`,
		`{"op":"usage","input_tokens":10,"output_tokens":2,"cost_usd":0.25}`)})
	d.waitTask(t2)
	if got := echo(d.session(session), t2); len(got) != 1 || got[0] != "conv-1" {
		t.Fatalf("the second task resumed %q, want conv-1", got)
	}
	// Another session starts its own conversation.
	t3, other := d.execute(api.TaskSpec{Prompt: script(`{"op":"echo_sdk"}`)})
	d.waitTask(t3)
	if got := echo(d.session(other), t3); len(got) != 1 || got[0] != "" || other == session {
		t.Fatalf("a new session resumed %q", got)
	}

	// session.get: the agent's session and the sum of its tasks.
	var sg struct {
		Session api.SessionRecord `json:"session"`
	}
	d.mustCall("session.get", map[string]any{"id": session}, &sg)
	if s := sg.Session; s.SDKSessionID != "conv-2" || s.Tasks != 2 || s.TokenUsage == nil ||
		s.TokenUsage.InputTokens != 110 || s.TokenUsage.OutputTokens != 22 || s.TokenUsage.CostUSD != 0.75 {
		t.Fatalf("session: %+v %+v", s, s.TokenUsage)
	}

	// A usage limit with the agent's reset time.
	t4, _ := d.execute(api.TaskSpec{Prompt: script(`{"op":"status","status":"failed","code":"usage_limit","message":"429 from the model","retry_in_ms":3600000}`)})
	r4 := d.waitTask(t4)
	if r4.State != api.TaskFailed || r4.Error == nil || r4.Error.Code != api.TaskErrUsageLimit || r4.Error.RetryAt == nil ||
		r4.Error.RetryAt.Before(time.Now().Add(50*time.Minute)) {
		t.Fatalf("usage-limited task: %+v %+v", r4, r4.Error)
	}

	// Numbers no sum can take (negative tokens or cost) are dropped, not
	// recorded: budgets, sums and metrics never go backwards.
	t6, _ := d.execute(api.TaskSpec{SessionID: session, Prompt: script(`{"op":"usage","input_tokens":-5,"output_tokens":1,"cost_usd":-3}`)})
	if r6 := d.waitTask(t6); r6.State != api.TaskCompleted || r6.TokenUsage != nil {
		t.Fatalf("a task with negative usage: %+v %+v", r6, r6.TokenUsage)
	}
	d.mustCall("session.get", map[string]any{"id": session}, &sg)
	if sg.Session.TokenUsage == nil || sg.Session.TokenUsage.CostUSD != 0.75 {
		t.Fatalf("session after negative usage: %+v", sg.Session.TokenUsage)
	}

	// The CLI shows them.
	out, errOut, code := runCLI(t, "--home", home, "tasks")
	if code != 0 || !strings.Contains(out, "2 denied") || !strings.Contains(out, "$0.5000") || !strings.Contains(out, "retry after ") {
		t.Fatalf("tasks: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = runCLI(t, "--home", home, "session", session)
	if code != 0 || !strings.Contains(errOut, "agent session conv-2") || !strings.Contains(errOut, "$0.7500") {
		t.Fatalf("session: exit %d\n%s%s", code, out, errOut)
	}

	// After a restart the store has the agent's session (the last one a
	// task reported): the next task resumes it.
	d.stop()
	d = startDaemonAt(t, home, config)
	t5, _ := d.execute(api.TaskSpec{SessionID: session, Prompt: script(`{"op":"echo_sdk"}`)})
	d.waitTask(t5)
	if got := echo(d.session(session), t5); len(got) != 1 || got[0] != "conv-2" {
		t.Fatalf("after a restart the task resumed %q, want conv-2", got)
	}
	var tg struct {
		Task api.TaskRecord `json:"task"`
	}
	d.mustCall("task.get", map[string]any{"id": t1}, &tg)
	if tg.Task.SDKSessionID != "conv-1" || tg.Task.Denied != 2 || tg.Task.TokenUsage == nil || tg.Task.TokenUsage.CostUSD != 0.5 {
		t.Fatalf("task.get after a restart: %+v", tg.Task)
	}
}

// chat's conversation continues the agent's session message after
// message; chat --new (chat.clear) starts a new orchestrd session, and
// with it a new agent conversation.
func TestExecutorAgentChatSession(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, chatConfig(t))
	send := func(msg string) (task, session string) {
		var r struct {
			TaskID    string `json:"task_id"`
			SessionID string `json:"session_id"`
		}
		d.mustCall("chat.send", map[string]any{"message": msg}, &r)
		d.waitTask(r.TaskID)
		return r.TaskID, r.SessionID
	}
	echoed := func(session, task string) string {
		for _, m := range d.session(session) {
			if m.TaskID == task && m.EventType == "sdk_echo" {
				var e struct {
					ID string `json:"sdk_session_id"`
				}
				_ = json.Unmarshal(m.EventData, &e)
				return e.ID
			}
		}
		t.Fatalf("task %s echoed nothing", task)
		return ""
	}
	msg := func(n int) string {
		return script(`{"op":"echo_sdk"}`, fmt.Sprintf(`{"op":"sdk","text":"chat-%d"}`, n))
	}
	a, s1 := send(msg(1))
	b, s2 := send(msg(2))
	if s1 != s2 || echoed(s1, a) != "" || echoed(s2, b) != "chat-1" {
		t.Fatalf("chat: sessions %s %s, resumed %q then %q", s1, s2, echoed(s1, a), echoed(s2, b))
	}
	if _, errOut, code := runCLIWith(t, "", strings.NewReader(""), "chat", "--home", d.home, "--new"); code != 0 {
		t.Fatalf("chat --new: exit %d: %s", code, errOut)
	}
	c, s3 := send(msg(3))
	if s3 == s1 || echoed(s3, c) != "" {
		t.Fatalf("after chat --new: session %s (was %s), resumed %q", s3, s1, echoed(s3, c))
	}
}

// A pool of a built-in agent kind: the daemon runs its own binary's
// `executor --agent KIND --state-dir DIR --model M [--sandboxed] --
// COMMAND`; the state directory is made 0700 in the home and shown to the
// sandboxed executor read-write (the rest of the home hidden), and
// survives a restart.
func TestExecutorAgentKindPool(t *testing.T) {
	t.Parallel()
	requireAgentKind(t, "claude-code")
	home := shortTemp(t)
	fake := filepath.Join(shortTemp(t), "fake-claude") // outside the home the sandbox hides
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	config := `[executors.cc]
agent = "claude-code"
command = ["` + fake + `", "--extra"]
instances = 1
[executors.cc.model_config]
model = "m-1"
[executors.other]
agent = "claude-code"
command = ["` + fake + `"]
`
	d := startDaemonAt(t, home, config)
	pid := d.idleExecutor("cc")
	real, err := filepath.EvalSymlinks(home)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(real, "agents", "cc")
	fi, err := os.Stat(state)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Getuid()) {
		t.Fatalf("state dir %s: %v %v", state, fi, err)
	}
	argv := cmdline(t, pid)
	want := []string{"executor", "--agent", "claude-code", "--state-dir", state, "--model", "m-1", "--sandboxed", "--", fake, "--extra", "--socket"}
	if len(argv) < len(want)+1 || !filepath.IsAbs(argv[0]) {
		t.Fatalf("executor argv %q", argv)
	}
	for i, w := range want {
		if argv[i+1] != w {
			t.Fatalf("executor argv %q, want %q after the binary", argv, want)
		}
	}
	// Inside its sandbox: the state directory is there and writable, the
	// rest of the home is not.
	root := fmt.Sprintf("/proc/%d/root", pid)
	if err := os.WriteFile(filepath.Join(root, state, "probe"), []byte("from inside"), 0o600); err != nil {
		t.Fatalf("writing the state dir inside the executor's sandbox: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(state, "probe")); err != nil || string(b) != "from inside" {
		t.Fatalf("the state dir's file outside: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(root, real, "state.db")); err == nil {
		t.Fatalf("the executor's sandbox shows the daemon's state.db")
	}
	if _, err := os.Stat(filepath.Join(real, "agents", "other")); err != nil {
		t.Fatalf("the other pool's state dir was not made: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, real, "agents", "other")); err == nil {
		t.Fatalf("the executor's sandbox shows another pool's state dir")
	}
	d.stop()
	d = startDaemonAt(t, home, config)
	d.idleExecutor("cc")
	if b, err := os.ReadFile(filepath.Join(state, "probe")); err != nil || string(b) != "from inside" {
		t.Fatalf("the state dir did not survive a restart: %q %v", b, err)
	}
}

// requireAgentKind skips a test whose agent kind has no adapter in this
// build (its adapter is another change's).
func requireAgentKind(t *testing.T, kind string) {
	t.Helper()
	if !slices.Contains(agent.Known(), kind) {
		t.Skipf("this build's orchestrd executor has no %s adapter (its --agent kinds: see orchestrd executor --help)", kind)
	}
}

// idleExecutor waits until pool has an idle executor and returns its pid.
func (d *testDaemon) idleExecutor(pool string) int {
	d.t.Helper()
	pid := 0
	eventuallyOr(d.t, 30*time.Second, "an idle executor in pool "+pool, func() bool {
		var r struct {
			Pools []api.PoolStatus `json:"pools"`
		}
		d.mustCall("executor.list", nil, &r)
		for _, p := range r.Pools {
			for _, e := range p.Executors {
				if p.Name == pool && e.State == "idle" && e.Pid > 0 {
					pid = e.Pid
					return true
				}
			}
		}
		return false
	}, func() string { return tail(d.stderr.String(), 3000) })
	return pid
}

// cmdline is a process's argv.
func cmdline(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// A loop over an agent that reports what a built-in kind does: a task
// that completed with a tool use denied is named in the next prompt's
// feedback; a usage limit with the agent's retry_at pauses the loop until
// then (not for usage_limit_pause, an hour here); the iterations' cost is
// summed and past the loop's max_cost_usd it fails budget_exceeded.
func TestExecutorAgentLoop(t *testing.T) {
	t.Parallel()
	repo := gitRepo(t)
	dir := shortTemp(t)
	scripts := filepath.Join(dir, "scripts.json")
	if err := os.WriteFile(scripts, []byte(`[
{"steps":[{"op":"denied","n":1,"tool":"Bash"},{"op":"usage","input_tokens":10,"output_tokens":1,"cost_usd":0.3}]},
{"steps":[{"op":"usage","input_tokens":10,"output_tokens":1,"cost_usd":0.3},{"op":"status","status":"failed","code":"usage_limit","message":"429","retry_in_ms":1500}]},
{"steps":[{"op":"usage","input_tokens":10,"output_tokens":1,"cost_usd":0.5}]}
]`), 0o600); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`[daemon]
sandbox = false

[lanes.net]
runners = 1
slots = 2
spares = 0

[executors.agent]
command = [%q, "--script", %q]

[loops]
executor = "agent"
validation_lane = "net"
usage_limit_pause = "1h"

[loops.code]
validation_command = "echo not yet; exit 1"
`, testExecutor(t), scripts)
	d := startDaemon(t, config)
	var r api.LoopCreatePlanResult
	d.mustCall("loop.create", api.LoopCreateParams{LoopType: api.LoopCode, Description: "do it", Repo: repo, MaxCostUSD: 1}, &r)
	id := r.ID

	paused := d.waitEventWithin(60*time.Second, "loop.paused", func(e map[string]any) bool { return e["id"] == id })
	if paused["reason"] != "usage_limit" || paused["retry_at"] != true || paused["until"] == nil {
		t.Fatalf("loop.paused: %v", paused)
	}
	d.waitEventWithin(30*time.Second, "loop.resumed", func(e map[string]any) bool { return e["id"] == id })
	g := d.waitLoop(id, api.LoopFailed, 60*time.Second)
	if g.Loop.Error != api.LoopErrBudgetExceeded || g.Loop.TokenUsage == nil || g.Loop.TokenUsage.CostUSD < 1.09 ||
		g.Loop.TokenUsage.CostUSD > 1.11 || g.Loop.MaxCostUSD != 1 {
		t.Fatalf("loop: %+v %+v", g.Loop, g.Loop.TokenUsage)
	}
	b := d.waitEvent("loop.budget_exceeded", func(e map[string]any) bool { return e["id"] == id })
	if b["max_cost_usd"] != 1.0 {
		t.Fatalf("loop.budget_exceeded: %v", b)
	}
	if len(g.Iterations) < 3 || g.Iterations[0].Denied != 1 ||
		!strings.Contains(g.Iterations[0].Feedback, "1 tool use of the agent was denied (Bash)") ||
		!strings.Contains(g.Iterations[1].Prompt, "1 tool use of the agent was denied (Bash)") {
		t.Fatalf("iterations: %+v", g.Iterations)
	}
	out, errOut, code := runCLI(t, "--home", d.home, "loop", "show", id)
	if code != 0 || !strings.Contains(out, "$1.1000") || !strings.Contains(out, "at most $1.0000") || !strings.Contains(out, "1 denied") {
		t.Fatalf("loop show: exit %d\n%s%s", code, out, errOut)
	}
}
