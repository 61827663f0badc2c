package executors_test

// The executor pools' behaviour through a whole daemon (internal/daemontest:
// daemon.Run in this process; its executors the scripted test executor,
// internal/testexecutor): backpressure and the read gate while the store
// is locked, timeouts and bad input, startup and idle timeouts, sequence
// gaps, strict NDJSON and oversized lines. What needs the binary as a
// process (the CLI, signals, the sandbox, a daemon killed) is
// cmd/orchestrd's executors_test.go.

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/internal/daemontest"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// testExecutor is internal/testexecutor, built once per test binary.
func testExecutor(t *testing.T) string {
	return daemontest.Tool(t, "github.com/orchestrd/orchestrd/internal/testexecutor")
}

// execConfig is daemontest.ExecConfig on the test executor.
func execConfig(t *testing.T, extra string, args ...string) string {
	return daemontest.ExecConfig(testExecutor(t), extra, args...)
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
	logPath := filepath.Join(daemontest.ShortTemp(t), "exec.log")
	// The subscriber's queue holds the whole flood: this test is about the
	// executor's backpressure, not about a subscriber that falls behind
	// (dropped oldest first, subscriber.overflowed), which a daemon
	// releasing 3000 messages at once can outpace.
	d := daemontest.Start(t, "[daemon]\nsubscriber_queue = 8192\n"+execConfig(t, "instances = 1\nhigh_water = 20\nlow_water = 10\n", "--log", logPath))
	sub := d.Client()
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.CallTimeout)
	defer cancel()
	d.Check(sub.Call(ctx, "events.subscribe", map[string]any{"kinds": []string{"task.message", "task.finished"}}, nil))

	// The task's own record first, then another process holds the
	// store's write lock.
	id, session := daemontest.Execute(t, d, d.Home, api.TaskSpec{Prompt: daemontest.Script(`{"op":"sleep","ms":200}`, fmt.Sprintf(`{"op":"flood","n":%d}`, n))})
	unlock := lockStore(t, d.Home)
	d.WaitEvent("executor.paused", nil)
	unlock()

	seen := map[int64]int{}
	daemontest.StreamTask(t, sub.Events(), id, 30*time.Second, func(kind string, seq int64) {
		if kind == "task.message" {
			seen[seq]++
		}
	}, func() string { return fmt.Sprintf("%d of %d messages streamed, then nothing for 30 s", len(seen), n) })
	rec := daemontest.WaitTask(t, d, id)
	if rec.State != api.TaskCompleted || rec.MessageCount != n {
		t.Fatalf("task: %+v", rec)
	}
	for i := int64(1); i <= n; i++ {
		if seen[i] != 1 {
			t.Fatalf("message %d streamed %d times (want exactly once)", i, seen[i])
		}
	}
	stored := map[int64]int{}
	for _, m := range daemontest.Session(t, d, session) {
		stored[m.Sequence]++
	}
	if len(stored) != n {
		t.Fatalf("%d of %d messages stored", len(stored), n)
	}
	d.WaitEvent("executor.resumed", nil)
	log, _ := os.ReadFile(logPath)
	if !strings.Contains(string(log), "pause_notifications") || !strings.Contains(string(log), "resume_notifications") {
		t.Fatalf("the executor did not hear pause and resume:\n%s", daemontest.Tail(string(log), 500))
	}
}

// The read gate closes on bytes too: an executor that ignores pause and
// sends large messages while the store is locked is read up to
// max_pending_bytes of event data, not up to 4 x high_water messages; once
// the store is free again, every message is stored.
func TestExecutorGateBytes(t *testing.T) {
	const n, size = 100, 64 << 10
	d := daemontest.Start(t, execConfig(t, "instances = 1\nhigh_water = 50\nlow_water = 10\nmax_pending_bytes = 1048576\n", "--ignore-pause"))
	id, session := daemontest.Execute(t, d, d.Home, api.TaskSpec{Prompt: daemontest.Script(`{"op":"sleep","ms":200}`, fmt.Sprintf(`{"op":"message","n":%d,"size":%d}`, n, size))})
	unlock := lockStore(t, d.Home)

	// 16 messages of 64 KiB make 1 MiB: pending stops there (give or take
	// the line the reader has started). Without the byte gate all 100
	// would be read (4 x high_water is 200).
	peak := 0
	pending := func() int {
		var r struct {
			Pools []api.PoolStatus `json:"pools"`
		}
		d.MustCall("executor.list", nil, &r)
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
	daemontest.Eventually(t, 20*time.Second, "16 messages pending", func() bool { return pending() >= 16 }, nil)
	for range 50 { // the gate holds while the store stays locked
		pending()
	}
	t.Logf("at most %d messages pending", peak)
	if peak > 24 {
		t.Fatalf("%d messages of 64 KiB pending with max_pending_bytes = 1 MiB: the gate did not close on bytes", peak)
	}
	unlock()
	if rec := daemontest.WaitTask(t, d, id); rec.State != api.TaskCompleted || rec.MessageCount != n {
		t.Fatalf("task after the store was free again: %+v", rec)
	}
	if got := len(daemontest.Session(t, d, session)); got != n {
		t.Fatalf("%d of %d messages stored", got, n)
	}
}

// A task past its timeout_ms ends timeout (stop_task first); task.stop
// ends one cancelled; a bad token, a line that is not JSON and an unknown
// method are refused without disturbing the task.
func TestExecutorStopTimeoutAndBadInput(t *testing.T) {
	logPath := filepath.Join(daemontest.ShortTemp(t), "exec.log")
	d := daemontest.Start(t, execConfig(t, "instances = 1\nstop_grace = \"200ms\"\n", "--log", logPath))
	id, _ := daemontest.Execute(t, d, d.Home, api.TaskSpec{Prompt: daemontest.Script(`{"op":"hang"}`), TimeoutMs: 200})
	if rec := daemontest.WaitTask(t, d, id); rec.State != api.TaskTimeout || rec.Error == nil || rec.Error.Code != api.TaskErrTimeout {
		t.Fatalf("task past its timeout: %+v", rec)
	}
	id, _ = daemontest.Execute(t, d, d.Home, api.TaskSpec{Prompt: daemontest.Script(`{"op":"hang"}`)})
	daemontest.RunningExecutor(t, d, id)
	var stopped struct {
		Task api.TaskRecord `json:"task"`
	}
	d.MustCall("task.stop", map[string]any{"id": id}, &stopped)
	if stopped.Task.State != api.TaskCancelled || stopped.Task.Error == nil || stopped.Task.Error.Code != api.TaskErrStopped {
		t.Fatalf("stopped task: %+v", stopped.Task)
	}
	if err := d.Call("task.stop", map[string]any{"id": id}, nil); daemontest.RemoteCode(err) != api.CodeInvalidState {
		t.Fatalf("stopping a finished task: %v, want 1002", err)
	}
	log, _ := os.ReadFile(logPath)
	if !strings.Contains(string(log), "stop_task") {
		t.Fatalf("the executor never heard stop_task; it heard:\n%s", log)
	}

	id, session := daemontest.Execute(t, d, d.Home, api.TaskSpec{Prompt: daemontest.Script(`{"op":"bad_token","method":"get_api_key"}`,
		`{"op":"raw","line":"this is not JSON"}`, `{"op":"raw","line":"{\"jsonrpc\":\"2.0\",\"id\":\"x-1\",\"method\":\"no_such_method\"}"}`,
		`{"op":"message","n":1,"text":"still here"}`)})
	if rec := daemontest.WaitTask(t, d, id); rec.State != api.TaskCompleted {
		t.Fatalf("task after bad input: %+v", rec)
	}
	bad := daemontest.MessagesOf(daemontest.Session(t, d, session), "bad_token_result")
	if len(bad) != 1 || bad[0]["code"] != float64(-32001) || !strings.Contains(fmt.Sprint(bad[0]["message"]), "invalid session_token") {
		t.Fatalf("bad token answer: %v", bad)
	}
	d.WaitEvent("executor.bad_token", func(e map[string]any) bool { return e["method"] == "get_api_key" })
	d.WaitEvent("executor.protocol_error", nil)

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
		err := d.Call("task.execute", c.spec, nil)
		if daemontest.RemoteCode(err) != c.code || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("task.execute %+v: %v, want %d saying %q", c.spec, err, c.code, c.want)
		}
	}
}

// An executor that never listens is killed at startup_timeout, with an
// event that says why; an on-demand executor left idle is shut down at
// idle_timeout.
func TestExecutorStartupAndIdleTimeouts(t *testing.T) {
	d := daemontest.Start(t, execConfig(t, "instances = 1\nstartup_timeout = \"300ms\"\n", "--no-listen")+
		fmt.Sprintf("\n[executors.ondemand]\ncommand = [%q]\nidle_timeout = \"1s\"\n", testExecutor(t)))
	ev := d.WaitEvent("executor.start_failed", func(e map[string]any) bool { return e["pool"] == "scripted" })
	if !strings.Contains(fmt.Sprint(ev["reason"]), "no connection on") {
		t.Fatalf("start_failed: %v", ev)
	}
	killed := d.WaitEvent("executor.killed", func(e map[string]any) bool {
		return e["pool"] == "scripted" && e["reason"] == "startup_timeout"
	})
	daemontest.WaitGone(t, int(killed["pid"].(float64)))

	id, _ := daemontest.Execute(t, d, d.Home, api.TaskSpec{Executor: "ondemand", Prompt: "one task"})
	if rec := daemontest.WaitTask(t, d, id); rec.State != api.TaskCompleted {
		t.Fatalf("on-demand task: %+v", rec)
	}
	d.WaitEvent("executor.stopping", func(e map[string]any) bool {
		return e["pool"] == "ondemand" && e["reason"] == "idle_timeout"
	})
	d.WaitEvent("executor.exited", func(e map[string]any) bool { return e["pool"] == "ondemand" && e["expected"] == true })
}

// An executor that sends its sequences with gaps it never fills does not
// make the daemon hold more per task than 4 x high_water of them: past
// that it stops waiting for the oldest gaps and says so; every message it
// sent is kept.
func TestExecutorSequenceGapsBounded(t *testing.T) {
	d := daemontest.Start(t, execConfig(t, "instances = 1\nhigh_water = 4\nlow_water = 2\n"))
	id, session := daemontest.Execute(t, d, d.Home, api.TaskSpec{Prompt: daemontest.Script(`{"op":"gaps","n":100}`)})
	if rec := daemontest.WaitTask(t, d, id); rec.State != api.TaskCompleted {
		t.Fatalf("task: %+v", rec)
	}
	if ms := daemontest.Session(t, d, session); len(ms) != 100 {
		t.Fatalf("%d messages stored, want all 100", len(ms))
	}
	ev := d.WaitEvent("task.sequences_skipped", func(e map[string]any) bool { return e["task_id"] == id })
	if ev["limit"] != float64(16) || ev["from"] != float64(3) || ev["missing"].(float64) < 1 {
		t.Fatalf("sequences_skipped %v", ev)
	}
	n := 0
	for _, e := range d.Events() {
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
	home := daemontest.ShortTemp(t)
	if err := os.WriteFile(filepath.Join(home, "secrets.toml"), []byte("anthropic = \"sk-strict\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := daemontest.StartAt(t, home, execConfig(t, "instances = 1\nsecrets = [\"anthropic\"]\n", "--strict-lines"))
	id, session := daemontest.Execute(t, d, d.Home, api.TaskSpec{PermissionMode: api.ModeBypass, Prompt: daemontest.Script(
		`{"op":"key","service":"anthropic"}`, `{"op":"key","service":"openai"}`,
		`{"op":"permission","tool":"Bash","input":{"command":"ls"}}`, `{"op":"context"}`, `{"op":"message","n":2,"text":"ok"}`)})
	if rec := daemontest.WaitTask(t, d, id); rec.State != api.TaskCompleted {
		t.Fatalf("task: %+v (an empty line from the daemon makes this executor exit)", rec)
	}
	if ms := daemontest.Session(t, d, session); len(ms) < 5 {
		t.Fatalf("messages: %+v", ms)
	}
}

// A line over the JSON-RPC limit ends the connection with an error that
// names the limit in force.
func TestExecutorOversizedLine(t *testing.T) {
	d := daemontest.Start(t, execConfig(t, "instances = 1\n"))
	id, _ := daemontest.Execute(t, d, d.Home, api.TaskSpec{Prompt: daemontest.Script(`{"op":"bigline","size":8388700}`)})
	if rec := daemontest.WaitTask(t, d, id); rec.State != api.TaskFailed || rec.Error == nil || !strings.Contains(rec.Error.Message, "a line over 8388608 bytes") {
		t.Fatalf("task: %+v (%+v)", rec, rec.Error)
	}
	d.WaitEvent("executor.protocol_error", func(e map[string]any) bool {
		return strings.Contains(fmt.Sprint(e["problem"]), "a line over 8388608 bytes")
	})
}

// A hostile executor's end of a task (its error's code and message, a
// status that is none of the three) reaches the task's record and its
// subscribers whole, and the event log only as digests: what an executor
// wrote (a secret it read, a forged line, a terminal escape) never lands
// in the log as text.
func TestExecutorFinishErrorKeptOutOfTheLog(t *testing.T) {
	d := daemontest.Start(t, execConfig(t, "instances = 1\n"))
	const canary = "sk-canary-finish-3f9a"
	cases := []struct{ step, code, message string }{
		{`{"op":"status","status":"failed","code":"bad\u001b[2J","message":"` + canary + `\n{\"kind\":\"forged\"}"}`,
			"bad\x1b[2J", canary + "\n{\"kind\":\"forged\"}"},
		{`{"op":"status","status":"` + canary + `\u001b]0;title\u0007"}`,
			"bad_result", "execute_prompt's status \"" + canary + "\\x1b]0;title\\a\" is not completed, failed or cancelled"},
	}
	for _, c := range cases {
		id, _ := daemontest.Execute(t, d, d.Home, api.TaskSpec{Prompt: daemontest.Script(c.step)})
		rec := daemontest.WaitTask(t, d, id)
		if rec.State != api.TaskFailed || rec.Error == nil || rec.Error.Code != c.code || rec.Error.Message != c.message {
			t.Fatalf("task %s: %+v %+v, want failed %q %q", id, rec, rec.Error, c.code, c.message)
		}
		ev := d.WaitEvent("task.finished", func(e map[string]any) bool { return e["task_id"] == id })
		e, _ := ev["error"].(map[string]any)
		if msg, _ := e["message"].(string); !strings.HasPrefix(msg, "(") || !strings.Contains(msg, "bytes, sha256") {
			t.Errorf("task.finished's error in the log: %v", ev)
		}
	}
	log := testio.ReadFile(t, daemonrun.EventLog(d.Home))
	if strings.Contains(log, canary) || strings.Contains(log, "forged") || strings.ContainsRune(log, 0x1b) {
		t.Fatalf("the event log holds what the executor wrote:\n%s", daemontest.Tail(log, 3000))
	}
}
