package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/internal/daemontest"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// testExecutor is internal/testexecutor, built (a tool).
func testExecutor(t *testing.T) string {
	t.Helper()
	return builtTool(t, "github.com/orchestrd/orchestrd/internal/testexecutor")
}

// execConfig is daemontest.ExecConfig on the test executor built here.
func execConfig(t *testing.T, extra string, args ...string) string {
	return daemontest.ExecConfig(testExecutor(t), extra, args...)
}

// script is a test executor prompt.
func script(steps ...string) string { return daemontest.Script(steps...) }

// CallWithin and LogTail make d a daemontest.Conn, for its task helpers.
func (d *testDaemon) CallWithin(within time.Duration, method string, params, result any) error {
	return d.callWithin(within, method, params, result)
}

func (d *testDaemon) LogTail() string { return tail(d.stderr.String(), 3000) }

func (d *testDaemon) execute(spec api.TaskSpec) (taskID, sessionID string) {
	d.t.Helper()
	return daemontest.Execute(d.t, d, d.home, spec)
}

func (d *testDaemon) waitTask(id string) api.TaskRecord {
	d.t.Helper()
	return daemontest.WaitTask(d.t, d, id)
}

// runningExecutor waits until task runs and returns its executor's pid.
func (d *testDaemon) runningExecutor(taskID string) int {
	d.t.Helper()
	return daemontest.RunningExecutor(d.t, d, taskID)
}

// approvalsOf is every approval the task asked for, whatever its state.
func (d *testDaemon) approvalsOf(taskID string) []api.Approval {
	d.t.Helper()
	var r struct {
		Approvals []api.Approval `json:"approvals"`
	}
	d.mustCall("approval.list", map[string]any{"state": "all"}, &r)
	var of []api.Approval
	for _, a := range r.Approvals {
		if a.TaskID == taskID {
			of = append(of, a)
		}
	}
	return of
}

func (d *testDaemon) session(id string) []api.SessionMessage {
	d.t.Helper()
	return daemontest.Session(d.t, d, id)
}

func messagesOf(ms []api.SessionMessage, typ string) []map[string]any {
	return daemontest.MessagesOf(ms, typ)
}

// A task from task.execute to task.finished through the real daemon and a
// real executor process: messages stored in order and streamed, progress
// and errors, a secret handed over just in time and found nowhere else,
// permissions by mode and through the approval actors.
func TestExecutorTask(t *testing.T) {
	t.Parallel()
	const canary = "sk-canary-3f9a1c77e2b4d5"
	home := shortTemp(t)
	if err := os.WriteFile(filepath.Join(home, "secrets.toml"), []byte("ANTHROPIC_API_KEY = \""+canary+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemonAt(t, home, execConfig(t, "instances = 1\nsecrets = [\"anthropic\"]\n"))
	sub := d.client()
	defer sub.Close()
	d.check(call(sub, "events.subscribe", map[string]any{"kinds": []string{"task.message", "task.progress", "task.finished"}}, nil))

	id, session := d.execute(api.TaskSpec{PermissionMode: api.ModeAcceptEdits, Prompt: script(
		`{"op":"message","n":5,"text":"part "}`,
		`{"op":"progress","percent":40,"message":"reading"}`,
		`{"op":"error","code":"TOOL_FAILED","message":"grep: no such file"}`,
		`{"op":"key","service":"anthropic"}`,
		`{"op":"key","service":"openai"}`,
		`{"op":"permission","tool":"Edit","input":{"file_path":"/tmp/x"}}`,
		`{"op":"permission","tool":"Bash","input":{"command":"git push"}}`,
		`{"op":"usage","input_tokens":100,"output_tokens":20}`,
		`{"op":"probe","path":"`+filepath.Join(home, "daemon.sock")+`"}`,
		`{"op":"probe","path":"`+filepath.Join(home, "secrets.toml")+`"}`)})

	// The Bash permission waits for a person: an approval of source
	// executor, answered here as the CLI would.
	var appr api.Approval
	eventually(t, 20*time.Second, "the executor's approval pending", func() bool {
		var r struct {
			Approvals []api.Approval `json:"approvals"`
		}
		d.mustCall("approval.list", map[string]any{}, &r)
		for _, a := range r.Approvals {
			if a.TaskID == id {
				appr = a
				return true
			}
		}
		return false
	})
	if appr.Source != api.SourceExecutor || appr.ToolName != "Bash" || appr.SessionID != session {
		t.Fatalf("approval = %+v", appr)
	}
	d.mustCall("approval.resolve", map[string]any{"id": appr.ID, "decision": "Allow", "by": "cli"}, nil)

	rec := d.waitTask(id)
	if rec.State != api.TaskCompleted || rec.MessageCount != 11 || rec.TokenUsage == nil || rec.TokenUsage.InputTokens != 100 {
		t.Fatalf("task = %+v", rec)
	}
	// Streamed: every message once, in order, then task.finished.
	var seqs []int64
	progress := false
	daemontest.StreamTask(t, sub.Events(), id, 20*time.Second, func(kind string, seq int64) {
		switch kind {
		case "task.message":
			seqs = append(seqs, seq)
		case "task.progress":
			progress = true
		}
	}, func() string { return fmt.Sprintf("no task.finished streamed; messages %v", seqs) })
	if fmt.Sprint(seqs) != "[1 2 3 4 5 6 7 8 9 10 11]" || !progress {
		t.Fatalf("streamed sequences %v (want 1..11), progress %v", seqs, progress)
	}
	// Stored, in order, byte for byte what the executor sent.
	ms := d.session(session)
	if len(ms) != 11 || ms[0].Sequence != 1 || ms[10].Sequence != 11 || string(ms[0].EventData) != `{"delta":{"text":"part "}}` {
		t.Fatalf("session messages: %+v", ms)
	}
	keys := messagesOf(ms, "key_result")
	sum := sha256.Sum256([]byte(canary))
	if len(keys) != 2 || keys[0]["ok"] != true || keys[0]["sha256"] != hex.EncodeToString(sum[:])[:12] ||
		keys[1]["ok"] != false || !strings.Contains(fmt.Sprint(keys[1]["error"]), "no API key configured for openai") {
		t.Fatalf("key results: %v", keys)
	}
	perms := messagesOf(ms, "permission_result")
	if len(perms) != 2 || perms[0]["approved"] != true || perms[0]["reason"] != "mode=acceptEdits" ||
		perms[1]["approved"] != true || perms[1]["reason"] != "user_approved" {
		t.Fatalf("permission results: %v", perms)
	}
	// The agent cannot reach the daemon's socket nor read its secrets
	// file: the sandbox hides the home from executors (but for its own
	// socket's directory: the rest is not there).
	for _, p := range messagesOf(ms, "probe_result") {
		if e := fmt.Sprint(p["error"]); p["connected"] != nil || p["read"] != nil ||
			!strings.Contains(e, "permission denied") && !strings.Contains(e, "no such file or directory") {
			t.Errorf("the executor reached %v", p)
		}
	}
	if n := len(messagesOf(ms, "probe_result")); n != 2 {
		t.Fatalf("%d probe results, want 2", n)
	}
	d.waitEvent("secret.issued", func(e map[string]any) bool { return e["task_id"] == id && e["service"] == "anthropic" })
	d.waitEvent("task.error", func(e map[string]any) bool { return e["task_id"] == id && e["code"] == "TOOL_FAILED" })

	// The secret is nowhere but in the executor: not in the event log, the
	// daemon's output, the store, the task's record or the CLI's lists.
	out, _ := exec.Command(binary, "--home", home, "tasks", "--json").CombinedOutput()
	d.stop()
	places := map[string][]byte{"daemon stderr": []byte(d.stderr.String()), "tasks --json": out}
	entries, _ := os.ReadDir(home)
	for _, e := range entries {
		if e.Name() == "secrets.toml" || e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(home, e.Name()))
		if err == nil {
			places[e.Name()] = b
		}
	}
	if len(places) < 4 {
		t.Fatalf("looked in too few places: %d", len(places))
	}
	for where, b := range places {
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("the secret is in %s", where)
		}
	}
}

// An executor killed mid-task: the task fails executor_lost at once, is
// not run again, and the pool starts a new executor for the next task.
func TestExecutorLost(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, execConfig(t, "instances = 1\n"))
	id, _ := d.execute(api.TaskSpec{Prompt: script(`{"op":"message","n":2}`, `{"op":"hang"}`)})
	pid := d.runningExecutor(id)
	d.kill("executor", pid)
	rec := d.waitTask(id)
	if rec.State != api.TaskFailed || rec.Error == nil || rec.Error.Code != api.TaskErrExecutorLost {
		t.Fatalf("task after its executor's SIGKILL: %+v", rec)
	}
	waitGone(t, pid)
	d.waitEvent("executor.exited", func(e map[string]any) bool { return e["task_id"] == id })
	// The next task runs on a new executor.
	id2, _ := d.execute(api.TaskSpec{Prompt: "after the crash"})
	if rec := d.waitTask(id2); rec.State != api.TaskCompleted {
		t.Fatalf("the next task: %+v", rec)
	}
	started := countEvents(d.events(), "task.started", func(e map[string]any) bool { return e["task_id"] == id })
	if started != 1 {
		t.Fatalf("the lost task started %d times, want once (never retried)", started)
	}
}

// The daemon stops while a task runs on an executor that ignores
// shutdown: the task ends cancelled, the executor's group is killed after
// shutdown_timeout, and nothing outlives the daemon. A daemon killed with
// a task running fails it daemon_lost at its next start.
func TestExecutorShutdownAndCrash(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	cfg := execConfig(t, "instances = 1\nshutdown_timeout = \"300ms\"\n", "--hang-on-shutdown")
	d := startDaemonAt(t, home, cfg)
	id, _ := d.execute(api.TaskSpec{Prompt: script(`{"op":"hang"}`)})
	pid := d.runningExecutor(id)
	d.stop()
	waitGone(t, pid)
	d2 := startDaemonAt(t, home, cfg)
	var r struct {
		Task api.TaskRecord `json:"task"`
	}
	d2.mustCall("task.get", map[string]any{"id": id}, &r)
	if r.Task.State != api.TaskCancelled || r.Task.Error == nil || r.Task.Error.Code != api.TaskErrDaemonShutdown {
		t.Fatalf("task after a daemon shutdown: %+v", r.Task)
	}
	d2.waitEvent("executor.killed", nil)

	// kill -9 of the daemon with a task running.
	id, _ = d2.execute(api.TaskSpec{Prompt: script(`{"op":"hang"}`)})
	pid = d2.runningExecutor(id)
	if err := syscall.Kill(d2.proc.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d2.done
	waitGone(t, pid) // the executor dies with its daemon (parent-death signal)
	d3 := startDaemonAt(t, home, cfg)
	d3.mustCall("task.get", map[string]any{"id": id}, &r)
	if r.Task.State != api.TaskFailed || r.Task.Error == nil || r.Task.Error.Code != api.TaskErrDaemonLost {
		t.Fatalf("task after a daemon crash: %+v", r.Task)
	}
	d3.waitEvent("task.recovered", func(e map[string]any) bool { return e["task_id"] == id })
}

// orchestrd prompt streams the agent's text and exits with the task's
// status; tasks and stop work from the CLI.
func TestPromptCLI(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, execConfig(t, "instances = 1\n"))
	run := func(args ...string) (string, string, int) {
		return runCLIWith(t, d.home, nil, append([]string{"--home", d.home}, args...)...)
	}
	out, errs, code := run("prompt", "--executor", "scripted", script(`{"op":"message","n":2,"text":"hello "}`,
		`{"op":"message","type":"tool_call","data":{"tool":"Bash","input":{"command":"ls -la"}}}`))
	if code != 0 || out != "hello hello \n> Bash ls -la\n" {
		t.Fatalf("prompt: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	_, errs, code = run("prompt", script(`{"op":"status","status":"failed","code":"boom","message":"it broke"}`))
	if code != 1 || !strings.Contains(errs, "failed: boom (it broke)") {
		t.Fatalf("failed prompt: exit %d, stderr %q", code, errs)
	}
	_, errs, code = run("prompt", "--mode", "yolo", "x")
	if code != 2 || !strings.Contains(errs, "--mode must be") {
		t.Fatalf("bad mode: exit %d, stderr %q", code, errs)
	}
	out, _, code = run("tasks")
	if code != 0 || !strings.Contains(out, "completed") || !strings.Contains(out, "failed (boom)") {
		t.Fatalf("tasks: exit %d\n%s", code, out)
	}
	_, errs, code = run("stop", "t-nope")
	if code == 0 || !strings.Contains(errs, `no task has an id that starts with "t-nope"`) {
		t.Fatalf("stop of an unknown task: exit %d, stderr %q", code, errs)
	}
}

// orchestrd executor runs a command-line agent per prompt: the prompt on
// its stdin, stdout lines as messages (JSON passed through, text as
// deltas), stderr as reported errors, the exit code as the status, the key
// in that one process's environment; task.stop sends it SIGINT.
func TestCLIExecutor(t *testing.T) {
	t.Parallel()
	const key = "sk-cli-executor-7d2e41"
	home := shortTemp(t)
	if err := os.WriteFile(filepath.Join(home, "secrets.toml"), []byte("anthropic = \""+key+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agent := `read prompt
case "$prompt" in
hang*) trap 'echo got SIGINT; exit 130' INT; echo waiting; sleep 30 & wait; exit 0;;
esac
echo "you said: $prompt"
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}'
echo 'careful' >&2
printf 'oops \033]0;owned\007 %s\n' "$prompt" >&2
printf %s "$AGENT_KEY" | sha256sum | cut -c1-12
echo '{"type":"result","usage":{"input_tokens":11,"output_tokens":22}}'
exit 3`
	cfg := fmt.Sprintf("[lanes.net]\nrunners = 1\nslots = 1\nspares = 0\n\n[executors.cli]\ncommand = [%q, \"executor\", \"--key-env\", \"AGENT_KEY\", \"--key-service\", \"anthropic\", \"--stop-grace\", \"5s\", \"--\", \"sh\", \"-c\", %q]\nsecrets = [\"anthropic\"]\n",
		binary, agent)
	d := startDaemonAt(t, home, cfg)
	work := shortTemp(t) // the agent's directory: not the daemon's home, which it cannot see
	id, session := d.execute(api.TaskSpec{Executor: "cli", Prompt: "hello there", Cwd: work})
	rec := d.waitTask(id)
	if rec.State != api.TaskFailed || rec.Error == nil || rec.Error.Code != "exit_3" || rec.TokenUsage == nil || rec.TokenUsage.OutputTokens != 22 {
		t.Fatalf("task: %+v, error %+v", rec, rec.Error)
	}
	ms := d.session(session)
	var got []string
	for _, m := range ms {
		got = append(got, m.EventType+" "+string(m.EventData))
	}
	sum := sha256.Sum256([]byte(key))
	want := []string{
		`content_block_delta {"delta":{"text":"you said: hello there\n"}}`,
		`assistant {"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}`,
		`content_block_delta {"delta":{"text":"` + hex.EncodeToString(sum[:])[:12] + `\n"}}`,
		`result {"type":"result","usage":{"input_tokens":11,"output_tokens":22}}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("messages:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	d.waitEvent("task.error", func(e map[string]any) bool { return e["task_id"] == id && e["message"] == "careful" })
	// An error line the agent wrote reaches the log as its size and hash
	// only; prompt, a subscriber, gets it as it is (piped: the bytes;
	// on a terminal escaped, TestAgentTextEscapedOnATerminal).
	oops := "oops \x1b]0;owned\x07 hello there"
	d.waitEvent("task.error", func(e map[string]any) bool {
		return e["task_id"] == id && e["message"] == eventlog.Digest([]byte(oops))
	})
	// ("oops" alone is in the "loops" service's name: the text's own bytes,
	// raw or JSON-escaped, hold "0;owned".)
	if b, err := os.ReadFile(filepath.Join(home, "events.ndjson")); err != nil || bytes.Contains(b, []byte("0;owned")) {
		t.Fatalf("the event log has the agent's error text (%v)", err)
	}
	_, errOut, code := runCLI(t, "--home", home, "prompt", "--executor", "cli", "--cwd", work, "hello there")
	if code != 1 || !strings.Contains(errOut, "orchestrd: agent error stderr: "+oops+"\n") {
		t.Fatalf("prompt: exit %d, stderr %q", code, errOut)
	}

	id, session = d.execute(api.TaskSpec{Executor: "cli", Prompt: "hang on", Cwd: work})
	eventually(t, 20*time.Second, "the agent waiting", func() bool { return len(d.session(session)) > 0 })
	var stopped struct {
		Task api.TaskRecord `json:"task"`
	}
	d.mustCall("task.stop", map[string]any{"id": id}, &stopped)
	if stopped.Task.State != api.TaskCancelled {
		t.Fatalf("stopped: %+v", stopped.Task)
	}
	eventually(t, 20*time.Second, "the agent's SIGINT message", func() bool {
		for _, m := range d.session(session) {
			if strings.Contains(string(m.EventData), "got SIGINT") {
				return true
			}
		}
		return false
	})
}

// A pool with network = "none" runs executors that cannot open a
// connection (a listener on the host's loopback is out of reach); a full
// queue refuses a task by name; a secret's expires_at reaches the
// executor as epoch milliseconds.
func TestExecutorNetworkQueueAndExpiry(t *testing.T) {
	t.Parallel()
	ln := loopbackListener(t)
	home := shortTemp(t)
	if err := os.WriteFile(filepath.Join(home, "secrets.toml"),
		[]byte("github = { value = \"ghp-test-value\", expires_at = 2030-01-02T03:04:05Z }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := execConfig(t, "instances = 1\nnetwork = \"none\"\nsecrets = [\"github\"]\n") +
		fmt.Sprintf("\n[executors.host]\ncommand = [%q]\ninstances = 1\nmax_instances = 1\nqueue_limit = 1\n", testExecutor(t))
	d := startDaemonAt(t, home, cfg)
	probe := script(`{"op":"net","path":"`+ln.Addr().String()+`"}`, `{"op":"key","service":"GITHUB_TOKEN"}`)
	id, session := d.execute(api.TaskSpec{Prompt: probe})
	if rec := d.waitTask(id); rec.State != api.TaskCompleted {
		t.Fatalf("task: %+v", rec)
	}
	ms := d.session(session)
	if r := messagesOf(ms, "net_result"); len(r) != 1 || r[0]["connected"] != nil {
		t.Fatalf("an executor of a network = \"none\" pool reached %s: %v", ln.Addr(), r)
	}
	want := float64(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli())
	if k := messagesOf(ms, "key_result"); len(k) != 1 || k[0]["ok"] != true || k[0]["expires_at"] != want {
		t.Fatalf("key result: %v (want expires_at %v)", k, want)
	}
	// The host pool reaches it (the check above can fail).
	id, session = d.execute(api.TaskSpec{Executor: "host", Prompt: probe})
	if rec := d.waitTask(id); rec.State != api.TaskCompleted {
		t.Fatalf("task: %+v", rec)
	}
	if r := messagesOf(d.session(session), "net_result"); len(r) != 1 || r[0]["connected"] != true {
		t.Fatalf("an executor of a host pool could not reach %s: %v", ln.Addr(), r)
	}
	// One running, one queued: the next is refused.
	running, _ := d.execute(api.TaskSpec{Executor: "host", Prompt: script(`{"op":"hang"}`)})
	d.runningExecutor(running)
	queued, _ := d.execute(api.TaskSpec{Executor: "host", Prompt: "queued"})
	eventually(t, 10*time.Second, "the queued task counted", func() bool {
		var r struct {
			Pools []api.PoolStatus `json:"pools"`
		}
		d.mustCall("executor.list", nil, &r)
		for _, p := range r.Pools {
			if p.Name == "host" {
				return p.Queued == 1
			}
		}
		return false
	})
	err := d.call("task.execute", api.TaskSpec{Executor: "host", Prompt: "one too many", Cwd: d.home}, nil)
	if remoteCode(err) != api.CodeQueueFull || !strings.Contains(fmt.Sprint(err), "queue_limit") {
		t.Fatalf("a task over queue_limit: %v, want 1004", err)
	}
	d.mustCall("task.stop", map[string]any{"id": running, "force": true}, nil)
	if rec := d.waitTask(queued); rec.State != api.TaskCompleted {
		t.Fatalf("the queued task after the running one was stopped: %+v", rec)
	}
}

// A daemon that crashes while a task holds a secret leaves it in no crash
// report: the goroutine dump of a SIGQUIT (what a Go crash prints), the
// event log, the store, or the status output taken just before.
func TestSecretNotInCrashReport(t *testing.T) {
	t.Parallel()
	const canary = "sk-crash-canary-9b17e0c4"
	home := shortTemp(t)
	if err := os.WriteFile(filepath.Join(home, "secrets.toml"), []byte("anthropic = \""+canary+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(execConfig(t, "instances = 1\nsecrets = [\"anthropic\"]\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newTestDaemon(t, home)
	cmd := daemonrun.Serve(binary, home)
	cmd.Env = append(cmd.Env, "GOTRACEBACK=all")
	cmd.Stderr, cmd.Stdout = d.stderr, d.stderr
	d.launch(cmd)
	id, session := d.execute(api.TaskSpec{Prompt: script(`{"op":"key","service":"anthropic"}`, `{"op":"hang"}`)})
	d.waitEvent("secret.issued", func(e map[string]any) bool { return e["task_id"] == id })
	pid := d.runningExecutor(id)
	var status []byte
	for _, args := range [][]string{{"status"}, {"tasks", "--json"}, {"session", "--json", session}} {
		out, err := exec.Command(binary, append([]string{"--home", home}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("orchestrd %v: %v\n%s", args, err, out)
		}
		status = append(status, out...)
	}
	if !bytes.Contains(status, []byte(id)) || !bytes.Contains(status, []byte("key_result")) {
		t.Fatalf("the status output shows neither the task nor its key result:\n%s", status)
	}
	if err := cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not die of SIGQUIT")
	}
	waitGone(t, pid) // its executors die with it
	dump := d.stderr.String()
	if !strings.Contains(dump, "goroutine ") || !strings.Contains(dump, "SIGQUIT") {
		t.Fatalf("no goroutine dump on stderr:\n%s", tail(dump, 2000))
	}
	places := map[string][]byte{"crash dump": []byte(dump), "status output": status}
	entries, _ := os.ReadDir(home)
	for _, e := range entries {
		if e.Name() == "secrets.toml" || e.IsDir() {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(home, e.Name())); err == nil {
			places[e.Name()] = b
		}
	}
	for where, b := range places {
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("the secret is in %s", where)
		}
	}
}

// A second SIGTERM while the executors are being asked to shut down kills
// the ones that ignore it now, not at their shutdown_timeout, and the
// lanes stopped after them are hurried too.
func TestSecondSignalKillsExecutors(t *testing.T) {
	t.Parallel()
	cfg := "[daemon]\nshutdown_timeout = \"60s\"\n\n" + execConfig(t, "instances = 1\nshutdown_timeout = \"60s\"\n", "--hang-on-shutdown")
	d := startDaemon(t, cfg)
	ev := d.waitEvent("executor.connected", nil)
	pid := int(ev["pid"].(float64))
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.waitEvent("executor.stopping", func(e map[string]any) bool { return e["reason"] == "server_restart" })
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.waitCleanExit("the daemon did not exit after a second SIGTERM")
	waitGone(t, pid)
	forced := countEvents(d.events(), "executor.killed", func(e map[string]any) bool { return e["reason"] == "shutdown_forced" })
	if forced != 1 {
		t.Fatalf("executor.killed {shutdown_forced}: %d, want 1", forced)
	}
}

// A plain {"type":"text","text":...} message (what an agent behind
// `orchestrd executor` prints as a JSON text line) is shown by prompt and
// session, and a running task's message count is its committed messages,
// not 0 until it ends.
func TestAgentTextAndLiveCount(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, execConfig(t, "instances = 2\nmax_instances = 2\n"))
	out, errs, code := runCLI(t, "--home", d.home, "prompt", "--executor", "scripted", "--cwd", shortTemp(t),
		script(`{"op":"message","type":"text","data":{"type":"text","text":"plain text"}}`, `{"op":"message","text":"delta"}`))
	if code != 0 || out != "plain text\ndelta\n" {
		t.Fatalf("prompt: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	id, session := d.execute(api.TaskSpec{Prompt: script(`{"op":"message","n":3,"text":"x"}`, `{"op":"sleep","ms":60000}`)})
	eventually(t, 20*time.Second, "three messages stored", func() bool { return len(d.session(session)) == 3 })
	eventually(t, 20*time.Second, "tasks showing the running task's 3 messages", func() bool {
		out, _, _ := runCLI(t, "--home", d.home, "tasks", "--json")
		var r struct {
			Tasks []api.TaskRecord `json:"tasks"`
		}
		if json.Unmarshal([]byte(out), &r) != nil {
			return false
		}
		for _, task := range r.Tasks {
			if task.ID == id {
				return task.State == api.TaskRunning && task.MessageCount == 3
			}
		}
		return false
	})
	out, _, code = runCLI(t, "--home", d.home, "session", session)
	if code != 0 || !strings.Contains(out, "xxx") {
		t.Fatalf("session: exit %d\n%s", code, out)
	}
	var stopped struct {
		Task api.TaskRecord `json:"task"`
	}
	d.mustCall("task.stop", map[string]any{"id": id}, &stopped)
}
