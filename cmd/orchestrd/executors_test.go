package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

var (
	testExecOnce sync.Once
	testExecPath string
	testExecErr  error
)

// testExecutor builds internal/testexecutor once per test binary.
func testExecutor(t *testing.T) string {
	t.Helper()
	testExecOnce.Do(func() {
		testExecPath = filepath.Join(filepath.Dir(binary), "testexecutor")
		testExecErr = daemonrun.Build("../..", "./internal/testexecutor", testExecPath)
	})
	if testExecErr != nil {
		t.Fatal(testExecErr)
	}
	return testExecPath
}

// execConfig is a daemon with one small lane and one executor pool
// "scripted" running the test executor with args; extra is more of the
// pool's table.
func execConfig(t *testing.T, extra string, args ...string) string {
	cmd := append([]string{testExecutor(t)}, args...)
	q := make([]string, len(cmd))
	for i, a := range cmd {
		q[i] = fmt.Sprintf("%q", a)
	}
	return "[lanes.net]\nrunners = 1\nslots = 1\nspares = 0\n\n[executors.scripted]\ncommand = [" +
		strings.Join(q, ", ") + "]\n" + extra
}

// script is a test executor prompt.
func script(steps ...string) string { return `{"steps":[` + strings.Join(steps, ",") + `]}` }

func (d *testDaemon) execute(spec api.TaskSpec) (taskID, sessionID string) {
	d.t.Helper()
	if spec.Executor == "" {
		spec.Executor = "scripted"
	}
	if spec.Cwd == "" {
		spec.Cwd = d.home
	}
	var r struct {
		TaskID    string `json:"task_id"`
		SessionID string `json:"session_id"`
	}
	d.mustCall("task.execute", spec, &r)
	return r.TaskID, r.SessionID
}

func (d *testDaemon) waitTask(id string) api.TaskRecord {
	d.t.Helper()
	var r struct {
		Task     api.TaskRecord `json:"task"`
		TimedOut bool           `json:"timed_out"`
	}
	d.check(d.callWithin(testWaitTimeout+testCallTimeout, "task.wait",
		map[string]any{"id": id, "timeout_ms": testWaitTimeout.Milliseconds()}, &r))
	if r.TimedOut {
		d.t.Fatalf("task %s still %s after %s", id, r.Task.State, testWaitTimeout)
	}
	return r.Task
}

// runningExecutor waits until task runs and returns its executor's pid.
func (d *testDaemon) runningExecutor(taskID string) int {
	d.t.Helper()
	pid := 0
	eventually(d.t, 20*time.Second, "task "+taskID+" running on an executor", func() bool {
		var r struct {
			Pools []api.PoolStatus `json:"pools"`
		}
		d.mustCall("executor.list", nil, &r)
		for _, p := range r.Pools {
			for _, e := range p.Executors {
				if e.TaskID == taskID && e.Pid > 0 {
					pid = e.Pid
					return true
				}
			}
		}
		return false
	})
	return pid
}

func (d *testDaemon) session(id string) []api.SessionMessage {
	d.t.Helper()
	var r struct {
		Messages []api.SessionMessage `json:"messages"`
	}
	d.mustCall("session.get", map[string]any{"id": id}, &r)
	return r.Messages
}

func messagesOf(ms []api.SessionMessage, typ string) []map[string]any {
	var out []map[string]any
	for _, m := range ms {
		if m.EventType == typ {
			var v map[string]any
			_ = json.Unmarshal(m.EventData, &v)
			out = append(out, v)
		}
	}
	return out
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
	for done := false; !done; {
		select {
		case ev := <-sub.Events():
			var m struct {
				TaskID   string `json:"task_id"`
				Sequence int64  `json:"sequence"`
			}
			_ = json.Unmarshal(ev.Data, &m)
			if m.TaskID != id {
				continue
			}
			switch ev.Event {
			case "task.message":
				seqs = append(seqs, m.Sequence)
			case "task.progress":
				progress = true
			case "task.finished":
				done = true
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no task.finished streamed; messages %v", seqs)
		}
	}
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
	if !killChild(d.proc.Pid(), pid) {
		t.Fatalf("executor %d gone before it was killed", pid)
	}
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
	started := 0
	for _, e := range d.events() {
		if e["kind"] == "task.started" && e["task_id"] == id {
			started++
		}
	}
	if started != 1 {
		t.Fatalf("the lost task started %d times, want once (never retried)", started)
	}
}

// lockStore takes the write lock of home's state.db as another process
// would, until unlock (once; the test's end unlocks too).
func lockStore(t *testing.T, home string) (unlock func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(home, "state.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		conn.Close()
		db.Close()
		t.Fatal(err)
	}
	var once sync.Once
	unlock = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
				t.Error(err)
			}
			conn.Close()
			db.Close()
		})
	}
	t.Cleanup(unlock)
	return unlock
}

// A flood of report_message while the store is locked by another process:
// the daemon pauses the executor, resumes it, and every message is stored
// and streamed exactly once.
//
// Not parallel: the flood is larger than a subscription's queue, which
// drops the oldest events of a subscriber that falls behind, as designed;
// a test process starved by other tests fell behind (message 1481
// streamed 0 times).
func TestExecutorBackpressure(t *testing.T) {
	const n = 3000
	logPath := filepath.Join(shortTemp(t), "exec.log")
	// The subscriber's queue holds the whole flood: this test is about the
	// executor's backpressure, not about a subscriber that falls behind
	// (dropped oldest first, subscriber.overflowed), which a daemon
	// releasing 3000 messages at once can outpace.
	d := startDaemon(t, "[daemon]\nsubscriber_queue = 8192\n"+execConfig(t, "instances = 1\nhigh_water = 20\nlow_water = 10\n", "--log", logPath))
	sub := d.client()
	defer sub.Close()
	d.check(call(sub, "events.subscribe", map[string]any{"kinds": []string{"task.message", "task.finished"}}, nil))

	// The task's own record first, then another process holds the
	// store's write lock.
	id, session := d.execute(api.TaskSpec{Prompt: script(`{"op":"sleep","ms":200}`, fmt.Sprintf(`{"op":"flood","n":%d}`, n))})
	unlock := lockStore(t, d.home)
	d.waitEvent("executor.paused", nil)
	unlock()

	seen := map[int64]int{}
	for done := false; !done; {
		select {
		case ev := <-sub.Events():
			var m struct {
				TaskID   string `json:"task_id"`
				Sequence int64  `json:"sequence"`
			}
			_ = json.Unmarshal(ev.Data, &m)
			if m.TaskID != id {
				continue
			}
			if ev.Event == "task.finished" {
				done = true
			} else if ev.Event == "task.message" {
				seen[m.Sequence]++
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d messages streamed, then nothing for 30 s", len(seen), n)
		}
	}
	rec := d.waitTask(id)
	if rec.State != api.TaskCompleted || rec.MessageCount != n {
		t.Fatalf("task: %+v", rec)
	}
	for i := int64(1); i <= n; i++ {
		if seen[i] != 1 {
			t.Fatalf("message %d streamed %d times (want exactly once)", i, seen[i])
		}
	}
	stored := map[int64]int{}
	for _, m := range d.session(session) {
		stored[m.Sequence]++
	}
	if len(stored) != n {
		t.Fatalf("%d of %d messages stored", len(stored), n)
	}
	d.waitEvent("executor.resumed", nil)
	log, _ := os.ReadFile(logPath)
	if !strings.Contains(string(log), "pause_notifications") || !strings.Contains(string(log), "resume_notifications") {
		t.Fatalf("the executor did not hear pause and resume:\n%s", tail(string(log), 500))
	}
}

// The read gate closes on bytes too: an executor that ignores pause and
// sends large messages while the store is locked is read up to
// max_pending_bytes of event data, not up to 4 x high_water messages; once
// the store is free again, every message is stored.
func TestExecutorGateBytes(t *testing.T) {
	t.Parallel()
	const n, size = 100, 64 << 10
	d := startDaemon(t, execConfig(t, "instances = 1\nhigh_water = 50\nlow_water = 10\nmax_pending_bytes = 1048576\n", "--ignore-pause"))
	id, session := d.execute(api.TaskSpec{Prompt: script(`{"op":"sleep","ms":200}`, fmt.Sprintf(`{"op":"message","n":%d,"size":%d}`, n, size))})
	unlock := lockStore(t, d.home)

	// 16 messages of 64 KiB make 1 MiB: pending stops there (give or take
	// the line the reader has started). Without the byte gate all 100
	// would be read (4 x high_water is 200).
	peak := 0
	pending := func() int {
		var r struct {
			Pools []api.PoolStatus `json:"pools"`
		}
		d.mustCall("executor.list", nil, &r)
		for _, p := range r.Pools {
			for _, e := range p.Executors {
				if e.TaskID == id {
					peak = max(peak, e.Pending)
					return e.Pending
				}
			}
		}
		return 0
	}
	eventually(t, 20*time.Second, "16 messages pending", func() bool { return pending() >= 16 })
	for range 50 { // the gate holds while the store stays locked
		pending()
	}
	t.Logf("at most %d messages pending", peak)
	if peak > 24 {
		t.Fatalf("%d messages of 64 KiB pending with max_pending_bytes = 1 MiB: the gate did not close on bytes", peak)
	}
	unlock()
	if rec := d.waitTask(id); rec.State != api.TaskCompleted || rec.MessageCount != n {
		t.Fatalf("task after the store was free again: %+v", rec)
	}
	if got := len(d.session(session)); got != n {
		t.Fatalf("%d of %d messages stored", got, n)
	}
}

// A task past its timeout_ms ends timeout (stop_task first); task.stop
// ends one cancelled; a bad token, a line that is not JSON and an unknown
// method are refused without disturbing the task.
func TestExecutorStopTimeoutAndBadInput(t *testing.T) {
	t.Parallel()
	logPath := filepath.Join(shortTemp(t), "exec.log")
	d := startDaemon(t, execConfig(t, "instances = 1\nstop_grace = \"200ms\"\n", "--log", logPath))
	id, _ := d.execute(api.TaskSpec{Prompt: script(`{"op":"hang"}`), TimeoutMs: 200})
	if rec := d.waitTask(id); rec.State != api.TaskTimeout || rec.Error == nil || rec.Error.Code != api.TaskErrTimeout {
		t.Fatalf("task past its timeout: %+v", rec)
	}
	id, _ = d.execute(api.TaskSpec{Prompt: script(`{"op":"hang"}`)})
	d.runningExecutor(id)
	var stopped struct {
		Task api.TaskRecord `json:"task"`
	}
	d.mustCall("task.stop", map[string]any{"id": id}, &stopped)
	if stopped.Task.State != api.TaskCancelled || stopped.Task.Error == nil || stopped.Task.Error.Code != api.TaskErrStopped {
		t.Fatalf("stopped task: %+v", stopped.Task)
	}
	if err := d.call("task.stop", map[string]any{"id": id}, nil); remoteCode(err) != api.CodeInvalidState {
		t.Fatalf("stopping a finished task: %v, want 1002", err)
	}
	log, _ := os.ReadFile(logPath)
	if !strings.Contains(string(log), "stop_task") {
		t.Fatalf("the executor never heard stop_task; it heard:\n%s", log)
	}

	id, session := d.execute(api.TaskSpec{Prompt: script(`{"op":"bad_token","method":"get_api_key"}`,
		`{"op":"raw","line":"this is not JSON"}`, `{"op":"raw","line":"{\"jsonrpc\":\"2.0\",\"id\":\"x-1\",\"method\":\"no_such_method\"}"}`,
		`{"op":"message","n":1,"text":"still here"}`)})
	if rec := d.waitTask(id); rec.State != api.TaskCompleted {
		t.Fatalf("task after bad input: %+v", rec)
	}
	bad := messagesOf(d.session(session), "bad_token_result")
	if len(bad) != 1 || bad[0]["code"] != float64(-32001) || !strings.Contains(fmt.Sprint(bad[0]["message"]), "invalid session_token") {
		t.Fatalf("bad token answer: %v", bad)
	}
	d.waitEvent("executor.bad_token", func(e map[string]any) bool { return e["method"] == "get_api_key" })
	d.waitEvent("executor.protocol_error", nil)

	// Bad task.execute params are refused by name.
	for _, c := range []struct {
		spec api.TaskSpec
		code int
		want string
	}{
		{api.TaskSpec{Executor: "scripted", Prompt: " ", Cwd: "/"}, api.CodeInvalidParams, "prompt is empty"},
		{api.TaskSpec{Executor: "scripted", Prompt: "x", Cwd: "rel"}, api.CodeInvalidParams, "cwd must be an absolute path"},
		{api.TaskSpec{Executor: "scripted", Prompt: "x", Cwd: "/", PermissionMode: "yolo"}, api.CodeInvalidParams, "permission_mode"},
		{api.TaskSpec{Executor: "nope", Prompt: "x", Cwd: "/"}, api.CodeNotFound, `no executor pool "nope" (have scripted)`},
		{api.TaskSpec{Executor: "scripted", Prompt: "x", Cwd: "/", SessionID: "s-unknown"}, api.CodeNotFound, "no session s-unknown"},
	} {
		err := d.call("task.execute", c.spec, nil)
		if remoteCode(err) != c.code || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("task.execute %+v: %v, want %d saying %q", c.spec, err, c.code, c.want)
		}
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
		cmd := exec.Command(binary, append([]string{"--home", d.home}, args...)...)
		cmd.Dir = d.home
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
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
	if b, err := os.ReadFile(filepath.Join(home, "events.ndjson")); err != nil || bytes.Contains(b, []byte("oops")) {
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

// An executor that never listens is killed at startup_timeout, with an
// event that says why; an on-demand executor left idle is shut down at
// idle_timeout.
func TestExecutorStartupAndIdleTimeouts(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, execConfig(t, "instances = 1\nstartup_timeout = \"300ms\"\n", "--no-listen")+
		fmt.Sprintf("\n[executors.ondemand]\ncommand = [%q]\nidle_timeout = \"1s\"\n", testExecutor(t)))
	ev := d.waitEvent("executor.start_failed", func(e map[string]any) bool { return e["pool"] == "scripted" })
	if !strings.Contains(fmt.Sprint(ev["reason"]), "no connection on") {
		t.Fatalf("start_failed: %v", ev)
	}
	killed := d.waitEvent("executor.killed", func(e map[string]any) bool {
		return e["pool"] == "scripted" && e["reason"] == "startup_timeout"
	})
	waitGone(t, int(killed["pid"].(float64)))

	id, _ := d.execute(api.TaskSpec{Executor: "ondemand", Prompt: "one task"})
	if rec := d.waitTask(id); rec.State != api.TaskCompleted {
		t.Fatalf("on-demand task: %+v", rec)
	}
	d.waitEvent("executor.stopping", func(e map[string]any) bool {
		return e["pool"] == "ondemand" && e["reason"] == "idle_timeout"
	})
	d.waitEvent("executor.exited", func(e map[string]any) bool { return e["pool"] == "ondemand" && e["expected"] == true })
}

// A pool with network = "none" runs executors that cannot open a
// connection (a listener on the host's loopback is out of reach); a full
// queue refuses a task by name; a secret's expires_at reaches the
// executor as epoch milliseconds.
func TestExecutorNetworkQueueAndExpiry(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
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
	err = d.call("task.execute", api.TaskSpec{Executor: "host", Prompt: "one too many", Cwd: d.home}, nil)
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
	forced := 0
	for _, e := range d.events() {
		if e["kind"] == "executor.killed" && e["reason"] == "shutdown_forced" {
			forced++
		}
	}
	if forced != 1 {
		t.Fatalf("executor.killed {shutdown_forced}: %d, want 1", forced)
	}
}

// An executor that sends its sequences with gaps it never fills does not
// make the daemon hold more per task than 4 x high_water of them: past
// that it stops waiting for the oldest gaps and says so; every message it
// sent is kept.
func TestExecutorSequenceGapsBounded(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, execConfig(t, "instances = 1\nhigh_water = 4\nlow_water = 2\n"))
	id, session := d.execute(api.TaskSpec{Prompt: script(`{"op":"gaps","n":100}`)})
	if rec := d.waitTask(id); rec.State != api.TaskCompleted {
		t.Fatalf("task: %+v", rec)
	}
	if ms := d.session(session); len(ms) != 100 {
		t.Fatalf("%d messages stored, want all 100", len(ms))
	}
	ev := d.waitEvent("task.sequences_skipped", func(e map[string]any) bool { return e["task_id"] == id })
	if ev["limit"] != float64(16) || ev["from"] != float64(3) || ev["missing"].(float64) < 1 {
		t.Fatalf("sequences_skipped %v", ev)
	}
	n := 0
	for _, e := range d.events() {
		if e["kind"] == "task.sequences_skipped" && e["task_id"] == id {
			n++
		}
	}
	// Half the window at a time: about 100/8 events, never one a message.
	if n > 100/8+1 {
		t.Fatalf("%d task.sequences_skipped events for 100 messages", n)
	}
}

// Every line the daemon sends an executor is one JSON-RPC message and one
// newline: an executor whose parser refuses an empty line (as strict
// NDJSON readers do) runs a task through requests, answers and
// notifications to its end.
func TestExecutorLinesAreStrictNDJSON(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	if err := os.WriteFile(filepath.Join(home, "secrets.toml"), []byte("anthropic = \"sk-strict\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemonAt(t, home, execConfig(t, "instances = 1\nsecrets = [\"anthropic\"]\n", "--strict-lines"))
	id, session := d.execute(api.TaskSpec{PermissionMode: api.ModeBypass, Prompt: script(
		`{"op":"key","service":"anthropic"}`, `{"op":"key","service":"openai"}`,
		`{"op":"permission","tool":"Bash","input":{"command":"ls"}}`, `{"op":"context"}`, `{"op":"message","n":2,"text":"ok"}`)})
	if rec := d.waitTask(id); rec.State != api.TaskCompleted {
		t.Fatalf("task: %+v (an empty line from the daemon makes this executor exit)", rec)
	}
	if ms := d.session(session); len(ms) < 5 {
		t.Fatalf("messages: %+v", ms)
	}
}

// A line over the JSON-RPC limit ends the connection with an error that
// names the limit in force.
func TestExecutorOversizedLine(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, execConfig(t, "instances = 1\n"))
	id, _ := d.execute(api.TaskSpec{Prompt: script(`{"op":"bigline","size":8388700}`)})
	if rec := d.waitTask(id); rec.State != api.TaskFailed || rec.Error == nil || !strings.Contains(rec.Error.Message, "a line over 8388608 bytes") {
		t.Fatalf("task: %+v (%+v)", rec, rec.Error)
	}
	d.waitEvent("executor.protocol_error", func(e map[string]any) bool {
		return strings.Contains(fmt.Sprint(e["problem"]), "a line over 8388608 bytes")
	})
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
