package clanker_test

// The clanker domain through a whole daemon (internal/daemontest:
// daemon.Run in this process on a temporary home): the pods' socket and
// its envelope, the spool and its drain, serve-repo and stale pods, a
// usage limit's pause, a pod of another uid. Its CLI (`orchestrd
// clanker`) is the built binary against that daemon. A daemon killed in
// the middle of a drain is cmd/orchestrd's clanker_test.go. The attacks
// on .clanker's files are daemon_files_test.go.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/internal/daemontest"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// podRequest is a request line exactly as clanker's client writes it:
// JSON.stringify({v: 1, id, type, payload}) and a newline.
type podRequest struct {
	V       int    `json:"v"`
	ID      string `json:"id"`
	Type    string `json:"type"`
	Payload any    `json:"payload,omitempty"`
}

// podResponse is a response line.
type podResponse struct {
	V     int             `json:"v"`
	ID    *string         `json:"id"`
	OK    bool            `json:"ok"`
	Data  json.RawMessage `json:"data"`
	Error string          `json:"error"`
}

func uuid() string {
	h := api.RandomHex(16)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// pod is one request as clanker's CLI makes it: a connection of its own,
// one line, one answer, then the connection ends.
func pod(t *testing.T, sock, typ string, payload any) podResponse {
	t.Helper()
	id := uuid()
	b, _ := json.Marshal(podRequest{V: 1, ID: id, Type: typ, Payload: payload})
	lines := podLines(t, sock, string(b))
	var r podResponse
	if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
		t.Fatalf("%s: answer %q: %v", typ, lines[0], err)
	}
	if r.V != 1 || r.ID == nil || *r.ID != id {
		t.Fatalf("%s: answer %s does not carry v 1 and the request's id %s", typ, lines[0], id)
	}
	return r
}

// podLines sends raw lines on one connection and returns one answer line
// for each.
func podLines(t *testing.T, sock string, lines ...string) []string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	var out []string
	for _, l := range lines {
		if _, err := c.Write([]byte(l + "\n")); err != nil {
			t.Fatal(err)
		}
		ans, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the answer to %.80s: %v", l, err)
		}
		out = append(out, strings.TrimSuffix(ans, "\n"))
	}
	c.(*net.UnixConn).CloseWrite()
	return out
}

func okData(t *testing.T, r podResponse, want string) {
	t.Helper()
	if !r.OK || string(r.Data) != want {
		t.Fatalf("answer ok=%v data=%s error=%q, want data %s", r.OK, r.Data, r.Error, want)
	}
}

func refused(t *testing.T, r podResponse, want string) {
	t.Helper()
	if r.OK || !strings.Contains(r.Error, want) {
		t.Fatalf("answer ok=%v data=%s error=%q, want an error containing %q", r.OK, r.Data, r.Error, want)
	}
}

// The pods' socket speaks clanker's envelope and its nine types as the
// dashboard does, and keeps .clanker in clanker's own formats.
func TestClankerIPC(t *testing.T) {
	repo := daemontest.ShortTemp(t)
	d := daemontest.Start(t, daemontest.ClankerConfig(repo, "usage_limit_pause = \"1h\"\n"))
	sock := filepath.Join(repo, ".clanker", "ipc.sock")
	d.WaitEvent("clanker.repo_started", nil)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v, mode %v, want 0600", sock, err, fi.Mode())
	}

	t.Run("envelope", func(t *testing.T) {
		// Several lines on one connection, answered in order; a bad line is
		// answered without an id and the connection goes on.
		got := podLines(t, sock, `not json`, `{"v":2,"id":"x","type":"hello"}`, `{"id":"y","type":"hello"}`,
			`{"v":1,"id":"z"}`, `{"v":1,"id":"u","type":"launch_missiles"}`, `{"v":1,"id":"h","type":"hello","payload":{"podId":"p"}}`)
		want := []string{`{"v":1,"ok":false,"error":"invalid ipc request: not JSON`, `{"v":1,"ok":false,"error":"invalid ipc request: unsupported version v=2`,
			`{"v":1,"ok":false,"error":"invalid ipc request: v is missing`, `{"v":1,"ok":false,"error":"invalid ipc request: type is missing`,
			`{"v":1,"id":"u","ok":false,"error":"unknown ipc type: launch_missiles"}`, `{"v":1,"id":"h","ok":true,"data":{"ok":true}}`}
		for i := range want {
			if !strings.HasPrefix(got[i], want[i]) {
				t.Errorf("line %d answered %s, want %s...", i+1, got[i], want[i])
			}
		}
		// A line over 1 MiB: an error, the connection closed; the socket
		// serves the next pod.
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		big := `{"v":1,"id":"big","type":"task_note","payload":{"content":"` + strings.Repeat("a", 1<<20) + `"}}` + "\n"
		go c.Write([]byte(big))
		ans, _ := bufio.NewReader(c).ReadString('\n')
		if !strings.Contains(ans, `"ok":false`) || !strings.Contains(ans, "longer than 1048576 bytes") {
			t.Errorf("an oversized line was answered %.200q", ans)
		}
		okData(t, pod(t, sock, "hello", map[string]any{"podId": "planner-1", "role": "planner", "worktree": "/w"}), `{"ok":true}`)
	})

	tasksDir := filepath.Join(repo, ".clanker", "tasks")
	t.Run("tasks", func(t *testing.T) {
		refused(t, pod(t, sock, "task_create", map[string]any{}), "Missing task payload")
		refused(t, pod(t, sock, "task_create", map[string]any{"task": map[string]any{"id": "t0"}}), "missing prompt")
		refused(t, pod(t, sock, "task_create", map[string]any{"task": map[string]any{"id": "t0", "prompt": "p", "status": "later"}}), "invalid status")
		refused(t, pod(t, sock, "task_create", map[string]any{"task": map[string]any{"id": "../t0", "prompt": "p"}}), "invalid id")
		// The task's members in the order the planner wrote them.
		create := map[string]any{"task": json.RawMessage(`{"id":"t1","title":"First","prompt":"build it","ownerDirs":["src"],"baseMainSha":"abc"}`)}
		okData(t, pod(t, sock, "task_create", create), `{"taskId":"t1"}`)
		okData(t, pod(t, sock, "task_create", create), `{"taskId":"t1"}`) // a replay: no change
		okData(t, pod(t, sock, "task_create", map[string]any{"task": map[string]any{"id": "t2", "prompt": "then this"}}), `{"taskId":"t2"}`)
		wantFile := "{\n  \"id\": \"t1\",\n  \"title\": \"First\",\n  \"prompt\": \"build it\",\n  \"ownerDirs\": [\n    \"src\"\n  ],\n  \"baseMainSha\": \"abc\",\n  \"status\": \"queued\"\n}"
		if got := testio.ReadFile(t, filepath.Join(tasksDir, "t1.json")); got != wantFile {
			t.Fatalf("tasks/t1.json is\n%s\nwant clanker's JSON.stringify(task, null, 2):\n%s", got, wantFile)
		}
		created := 0
		for _, e := range daemontest.ClankerLog(t, repo) {
			if e["type"] == "TASK_CREATED" && e["taskId"] == "t1" {
				created++
			}
		}
		if created != 1 {
			t.Fatalf("TASK_CREATED for t1 logged %d times, want once (the replay is idempotent)", created)
		}

		refused(t, pod(t, sock, "task_request", map[string]any{}), "Missing podId")
		// The oldest queued task, with the base prompt; asked again at once,
		// without the prompt.
		okData(t, pod(t, sock, "task_request", map[string]any{"podId": "slave-1"}), `{"taskId":"t1","prompt":"BASE\n\nbuild it","status":"running"}`)
		okData(t, pod(t, sock, "task_request", map[string]any{"podId": "slave-1"}), `{"taskId":"t1","status":"running"}`)
		okData(t, pod(t, sock, "task_request", map[string]any{"podId": "slave-2"}), `{"taskId":"t2","prompt":"BASE\n\nthen this","status":"running"}`)
		okData(t, pod(t, sock, "task_request", map[string]any{"podId": "slave-3"}), `{"taskId":null}`)

		refused(t, pod(t, sock, "task_status", map[string]any{"taskId": "t9", "status": "done"}), "Task not found: t9")
		refused(t, pod(t, sock, "task_status", map[string]any{"taskId": "t1"}), "Missing status")
		okData(t, pod(t, sock, "task_status", map[string]any{"taskId": "t1", "status": "needs_judge"}), `{"taskId":"t1","status":"needs_judge"}`)
		okData(t, pod(t, sock, "judge_request", map[string]any{"podId": "judge-1"}), `{"taskId":"t1","prompt":"JUDGE\n\nbuild it","status":"needs_judge"}`)
		okData(t, pod(t, sock, "judge_request", map[string]any{"podId": "judge-1"}), `{"taskId":null}`) // prompted < 60 s ago
		okData(t, pod(t, sock, "task_status", map[string]any{"taskId": "t1", "status": "rework"}), `{"taskId":"t1","status":"rework"}`)
		// rework cleared promptedAt: the slave is prompted again.
		okData(t, pod(t, sock, "task_request", map[string]any{"podId": "slave-1"}), `{"taskId":"t1","prompt":"BASE\n\nbuild it","status":"rework"}`)
		okData(t, pod(t, sock, "task_status", map[string]any{"taskId": "t2", "status": "blocked"}), `{"taskId":"t2","status":"blocked"}`)
		var t2 map[string]any
		json.Unmarshal([]byte(testio.ReadFile(t, filepath.Join(tasksDir, "t2.json"))), &t2)
		if t2["resumeSlaveId"] != "slave-2" || t2["assignedSlaveId"] != nil || t2["promptedAt"] != nil {
			t.Fatalf("a blocked task keeps its pod as resumeSlaveId and clears the assignment: %v", t2)
		}
		okData(t, pod(t, sock, "task_status", map[string]any{"taskId": "t2", "status": "failed"}), `{"taskId":"t2","status":"failed"}`)
		t2 = nil
		json.Unmarshal([]byte(testio.ReadFile(t, filepath.Join(tasksDir, "t2.json"))), &t2)
		if t2["resumeSlaveId"] != nil || t2["assignedSlaveId"] != nil || t2["status"] != "failed" {
			t.Fatalf("a failed task has no pod: %v", t2)
		}

		refused(t, pod(t, sock, "task_handoff", map[string]any{"taskId": "t1", "role": "planner"}), "Role must be slave or judge")
		okData(t, pod(t, sock, "task_handoff", map[string]any{"taskId": "t1", "role": "slave", "summary": "done", "tests": "go test",
			"usage": map[string]any{"tokens": 12, "cost": 3}}), `{"taskId":"t1","role":"slave"}`)
		wantHist := "# slave handoff\n\n## Summary\ndone\n\n## Tests\ngo test\n\n## Diffs\n(not provided)\n\n## Risks\n(none)\n"
		if got := testio.ReadFile(t, filepath.Join(repo, ".clanker", "history", "task-t1-slave.md")); got != wantHist {
			t.Fatalf("history is %q, want %q", got, wantHist)
		}
		refused(t, pod(t, sock, "task_note", map[string]any{"taskId": "t1", "role": "judge"}), "Missing content")
		okData(t, pod(t, sock, "task_note", map[string]any{"taskId": "t1", "role": "judge", "content": "looks right",
			"usage": map[string]any{"judgeTokens": 5}}), `{"taskId":"t1","role":"judge"}`)
		var t1 map[string]any
		json.Unmarshal([]byte(testio.ReadFile(t, filepath.Join(tasksDir, "t1.json"))), &t1)
		if u, _ := t1["usage"].(map[string]any); u["tokens"] != 12.0 || u["cost"] != 3.0 || u["judgeTokens"] != 5.0 {
			t.Fatalf("t1's usage is %v, want tokens 12, cost 3, judgeTokens 5", t1["usage"])
		}
		var types []string
		for _, e := range daemontest.ClankerLog(t, repo) {
			if e["taskId"] == "t1" {
				types = append(types, e["type"].(string))
			}
		}
		want := "TASK_CREATED TASK_PROMPTED TASK_NEEDS_JUDGE TASK_PROMPTED TASK_REWORK TASK_PROMPTED TASK_USAGE TASK_USAGE"
		if strings.Join(types, " ") != want {
			t.Fatalf("events.log for t1: %s\nwant %s", strings.Join(types, " "), want)
		}
		d.WaitEvent("clanker.task_prompted", func(e map[string]any) bool { return e["task_id"] == "t1" && e["role"] == "judge" })
		d.WaitEvent("clanker.handoff", func(e map[string]any) bool { return e["task_id"] == "t1" })
		d.WaitEvent("clanker.task_status", func(e map[string]any) bool { return e["task_id"] == "t2" && e["status"] == "failed" })
	})

	t.Run("fallback", func(t *testing.T) {
		// A task file clanker wrote itself (its filesystem fallback) is
		// taken in, unknown fields and all.
		f := "{\n  \"id\": \"t3\",\n  \"prompt\": \"from the fallback\",\n  \"status\": \"queued\",\n  \"custom\": {\n    \"kept\": true\n  }\n}"
		if err := os.WriteFile(filepath.Join(tasksDir, "t3.json"), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
		d.WaitEvent("clanker.task_imported", func(e map[string]any) bool { return e["task_id"] == "t3" })
		okData(t, pod(t, sock, "task_request", map[string]any{"podId": "slave-9"}), `{"taskId":"t3","prompt":"BASE\n\nfrom the fallback","status":"running"}`)
		var t3 map[string]any
		json.Unmarshal([]byte(testio.ReadFile(t, filepath.Join(tasksDir, "t3.json"))), &t3)
		if c, _ := t3["custom"].(map[string]any); c["kept"] != true {
			t.Fatalf("t3 lost its own field: %v", t3)
		}
	})

	t.Run("pods", func(t *testing.T) {
		refused(t, pod(t, sock, "heartbeat", map[string]any{"podId": "slave-1"}), "Missing pid")
		refused(t, pod(t, sock, "heartbeat", map[string]any{"podId": "../x", "pid": 1}), "invalid podId")
		okData(t, pod(t, sock, "heartbeat", map[string]any{"podId": "slave-1", "pid": 4242, "role": "slave", "ts": "2026-01-26T10:00:00.000Z"}), `{"ok":true}`)
		want := "{\n  \"slaveId\": \"slave-1\",\n  \"ts\": \"2026-01-26T10:00:00.000Z\",\n  \"pid\": 4242,\n  \"role\": \"slave\"\n}"
		if got := testio.ReadFile(t, filepath.Join(repo, ".clanker", "heartbeat", "slave-1.json")); got != want {
			t.Fatalf("heartbeat file %q, want %q", got, want)
		}
	})

	t.Run("usage_limit", func(t *testing.T) {
		okData(t, pod(t, sock, "task_create", map[string]any{"task": map[string]any{"id": "t4", "prompt": "later"}}), `{"taskId":"t4"}`)
		okData(t, pod(t, sock, "usage_limit", map[string]any{"podId": "slave-5", "role": "slave", "message": "You've hit your usage limit."}), `{"ok":true}`)
		d.WaitEvent("clanker.paused", func(e map[string]any) bool { return e["pod"] == "slave-5" })
		okData(t, pod(t, sock, "task_request", map[string]any{"podId": "slave-5"}), `{"taskId":null}`)
		var st map[string]any
		json.Unmarshal([]byte(testio.ReadFile(t, filepath.Join(repo, ".clanker", "state.json"))), &st)
		if ul, _ := st["usageLimit"].(map[string]any); st["paused"] != true || ul["active"] != true {
			t.Fatalf("state.json %v, want paused and an active usageLimit", st)
		}
		out, code := clankerCLI(t, d.Home, "clanker")
		if code != 0 || !strings.Contains(out, "PAUSED  by slave-5") || !strings.Contains(out, "orchestrd clanker resume") {
			t.Fatalf("orchestrd clanker (%d):\n%s", code, out)
		}
		if out, code := clankerCLI(t, d.Home, "clanker", "resume", repo); code != 0 || !strings.Contains(out, "resumed") {
			t.Fatalf("orchestrd clanker resume (%d): %s", code, out)
		}
		d.WaitEvent("clanker.resumed", func(e map[string]any) bool { return e["reason"] == "command" })
		okData(t, pod(t, sock, "task_request", map[string]any{"podId": "slave-5"}), `{"taskId":"t4","prompt":"BASE\n\nlater","status":"running"}`)
	})
}

// clankerCLI runs `orchestrd ARGS --home HOME` (the built binary,
// daemontest.Binary) and returns its stdout and stderr together, and its
// exit code.
func clankerCLI(t *testing.T, home string, args ...string) (string, int) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(daemontest.Binary(t), append(args, "--home", home)...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.String() + e.String(), code
}

// appendSpool appends one line as clanker does (appendFile: open with
// O_APPEND, one write, close).
func appendSpool(t *testing.T, repo, line string) {
	f, err := os.OpenFile(filepath.Join(repo, ".clanker", "ipc-spool.ndjson"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Error(err)
		return
	}
	if _, err := f.WriteString(line); err != nil {
		t.Error(err)
	}
	f.Close()
}

// A spool left while the daemon was down is drained at start (its first
// line cut by the writers' 1 MB trim goes to the dead-letter file); lines
// appended by many writers while drains run are each applied once.
func TestClankerSpoolDrain(t *testing.T) {
	repo := daemontest.ShortTemp(t)
	if err := os.MkdirAll(filepath.Join(repo, ".clanker"), 0o755); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	cut := daemontest.SpoolLine("task_create", map[string]any{"task": map[string]any{"id": "cut", "prompt": "p"}})
	appendSpool(t, repo, cut[len(cut)/2:])
	for i := range 3 {
		id := fmt.Sprintf("left-%d", i)
		ids[id] = true
		appendSpool(t, repo, daemontest.SpoolLine("task_create", map[string]any{"task": map[string]any{"id": id, "prompt": "p"}}))
	}
	appendSpool(t, repo, daemontest.SpoolLine("task_status", map[string]any{"taskId": "nope", "status": "done"}))
	d := daemontest.Start(t, daemontest.ClankerConfig(repo, ""))
	d.WaitEvent("clanker.spool_drained", func(e map[string]any) bool { return e["applied"] == 3.0 && e["dead"] == 2.0 })
	dead := testio.ReadFile(t, filepath.Join(repo, ".clanker", "ipc-spool.dead.ndjson"))
	if n := strings.Count(dead, "\n"); n != 2 || !strings.Contains(dead, "may be cut") || !strings.Contains(dead, "Task not found: nope") {
		t.Fatalf("dead letters (%d):\n%s", n, dead)
	}

	// The writers are processes of their own, as pods are (the drain looks
	// for the spool's writers among the other processes): each appends its
	// lines one open-write-close at a time, as clanker does.
	const writers, each = 8, 150
	spoolPath := filepath.Join(repo, ".clanker", "ipc-spool.ndjson")
	var procs []*exec.Cmd
	for w := range writers {
		var lines strings.Builder
		for i := range each {
			id := fmt.Sprintf("w%d-%d", w, i)
			ids[id] = true
			lines.WriteString(daemontest.SpoolLine("task_create", map[string]any{"task": map[string]any{"id": id, "prompt": "p"}}))
		}
		cmd := exec.Command("sh", "-c", `while IFS= read -r l; do printf '%s\n' "$l" >> "$SPOOL"; done`)
		cmd.Env = append(os.Environ(), "SPOOL="+spoolPath)
		cmd.Stdin = strings.NewReader(lines.String())
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
	}
	for _, cmd := range procs {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("a spool writer: %v", err)
		}
	}
	// The drain syncs each task file: on a disk another test is filling
	// it is slow, so the wait is on progress, not on a total time.
	daemontest.WhileProgressing(t, time.Minute, "every spooled task created", func() int { return daemontest.TaskFiles(repo) }, len(ids),
		func() string { return d.ClankerDiag(repo) })
	daemontest.Eventually(t, 20*time.Second, "the spool drained", func() bool {
		_, e1 := os.Stat(filepath.Join(repo, ".clanker", "ipc-spool.ndjson"))
		_, e2 := os.Stat(filepath.Join(repo, ".clanker", "ipc-spool.draining.ndjson"))
		return os.IsNotExist(e1) && os.IsNotExist(e2)
	}, nil)
	daemontest.CreatedOnce(t, repo, ids)
	if got := strings.Count(testio.ReadFile(t, filepath.Join(repo, ".clanker", "ipc-spool.dead.ndjson")), "\n"); got != 2 {
		t.Fatalf("%d dead letters, want the 2 of the start", got)
	}
}

// A pod silent past stale_after is said stale once; orchestrd clanker
// serve-repo adds a repo at run time, and a bad one is refused with why.
func TestClankerServeRepoAndStalePods(t *testing.T) {
	d := daemontest.Start(t, "")
	repo := daemontest.ShortTemp(t)
	out, code := clankerCLI(t, d.Home, "clanker", "serve-repo", repo)
	sock := filepath.Join(repo, ".clanker", "ipc.sock")
	if code != 0 || strings.TrimSpace(out) != "export CLANKER_IPC_SOCKET="+sock {
		t.Fatalf("serve-repo (%d): %q", code, out)
	}
	okData(t, pod(t, sock, "heartbeat", map[string]any{"podId": "slave-1", "pid": 7}), `{"ok":true}`)
	if out, code := clankerCLI(t, d.Home, "clanker", "serve-repo", filepath.Join(repo, "missing")); code == 0 || !strings.Contains(out, "no such file or directory") {
		t.Fatalf("serve-repo of a missing directory (%d): %q", code, out)
	}
	out, code = clankerCLI(t, d.Home, "clanker")
	if code != 0 || !strings.Contains(out, repo) || !strings.Contains(out, "slave-1") {
		t.Fatalf("orchestrd clanker (%d):\n%s", code, out)
	}
	// A repo added at run time is served again after a restart.
	d.Stop()
	d = daemontest.StartAt(t, d.Home, "")
	daemontest.Eventually(t, 20*time.Second, "the repo started again", func() bool {
		n := 0
		for _, e := range d.Events() {
			if e["kind"] == "clanker.repo_started" && e["repo"] == repo {
				n++
			}
		}
		return n == 2
	}, nil)
	okData(t, pod(t, sock, "hello", map[string]any{"podId": "slave-1"}), `{"ok":true}`)

	// One daemon at a time in this process: the second repo's is the next.
	d.Stop()
	repo2 := daemontest.ShortTemp(t)
	d2 := daemontest.Start(t, daemontest.ClankerConfig(repo2, "stale_after = \"200ms\"\n"))
	sock2 := filepath.Join(repo2, ".clanker", "ipc.sock")
	okData(t, pod(t, sock2, "heartbeat", map[string]any{"podId": "slave-7", "pid": 77, "role": "slave"}), `{"ok":true}`)
	e := d2.WaitEvent("clanker.pod_stale", func(e map[string]any) bool { return e["pod"] == "slave-7" })
	if e["pid"] != 77.0 {
		t.Fatalf("pod_stale %v", e)
	}

	// A hello is answered before the repo applies it: what the pod said
	// (the last role said, in order) is there for whatever asks next,
	// and the pod goes stale as one that said nothing since.
	okData(t, pod(t, sock2, "hello", map[string]any{"podId": "judge-3", "role": "judge", "worktree": "/w1"}), `{"ok":true}`)
	okData(t, pod(t, sock2, "hello", map[string]any{"podId": "judge-3", "worktree": "/w2"}), `{"ok":true}`)
	okData(t, pod(t, sock2, "hello", map[string]any{"podId": "../x", "role": "judge"}), `{"ok":true}`) // names no pod: nothing kept
	out, code = clankerCLI(t, d2.Home, "clanker")
	if code != 0 || !regexp.MustCompile(`judge-3 +judge `).MatchString(out) || strings.Contains(out, "../x") {
		t.Fatalf("orchestrd clanker after hellos (%d):\n%s", code, out)
	}
	e = d2.WaitEvent("clanker.pod_stale", func(e map[string]any) bool { return e["pod"] == "judge-3" })
	if e["role"] != "judge" {
		t.Fatalf("pod_stale %v", e)
	}
}

// A writer that opened the spool before the drain took it appends after
// the take: the drain waits for it to close the file, and its line is
// applied (once). The writer is a process of its own, as a pod is: the
// drain looks for the spool's writers among the other processes.
func TestClankerSpoolWriterRacesTheTake(t *testing.T) {
	repo := daemontest.ShortTemp(t)
	d := daemontest.Start(t, daemontest.ClankerConfig(repo, ""))
	d.WaitEvent("clanker.repo_started", nil)
	spoolPath := filepath.Join(repo, ".clanker", "ipc-spool.ndjson")
	// It opens the spool, appends a line, says so, and appends the second
	// when told (a line on its stdin), then closes the file.
	w := exec.Command("sh", "-c", `exec 3>>"$SPOOL" && printf '%s' "$L1" >&3 && echo written && read _ && printf '%s' "$L2" >&3`)
	w.Env = append(os.Environ(), "SPOOL="+spoolPath,
		"L1="+daemontest.SpoolLine("task_create", map[string]any{"task": map[string]any{"id": "before", "prompt": "p"}}),
		"L2="+daemontest.SpoolLine("task_create", map[string]any{"task": map[string]any{"id": "after", "prompt": "p"}}))
	tell, err := w.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(testio.StartPiped(t, w))
	if line, err := out.ReadString('\n'); line != "written\n" {
		t.Fatalf("the writer said %q: %v", line, err)
	}
	// The daemon takes the file (renames it) while the writer holds it.
	draining := filepath.Join(repo, ".clanker", "ipc-spool.draining.ndjson")
	daemontest.Eventually(t, 20*time.Second, "the spool taken", func() bool { _, err := os.Stat(draining); return err == nil }, nil)
	if n := daemontest.TaskFiles(repo); n != 0 {
		t.Fatalf("%d tasks applied while a writer still had the spool open", n)
	}
	if _, err := io.WriteString(tell, "go\n"); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(out); len(rest) > 0 {
		t.Fatalf("the writer said %q", rest)
	}
	if err := w.Wait(); err != nil {
		t.Fatalf("the writer: %v", err)
	}
	daemontest.Eventually(t, 20*time.Second, "both lines applied", func() bool { return daemontest.TaskFiles(repo) == 2 }, nil)
	daemontest.Eventually(t, 20*time.Second, "the taken spool removed", func() bool { _, err := os.Stat(draining); return os.IsNotExist(err) }, nil)
	daemontest.CreatedOnce(t, repo, map[string]bool{"before": true, "after": true})
}

// A pod of another uid is refused (conn.refused); the repo serves its own.
func TestClankerOtherUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a pod as another user")
	}
	repo := daemontest.ShortTemp(t)
	d := daemontest.Start(t, daemontest.ClankerConfig(repo, ""))
	sock := filepath.Join(repo, ".clanker", "ipc.sock")
	d.WaitEvent("clanker.repo_started", nil)
	// The socket is 0600, which alone keeps others out; opened here so
	// that the uid check is what refuses.
	for _, p := range []string{repo, filepath.Join(repo, ".clanker")} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	// This test binary, where uid 65534 can run it.
	dir := testio.ShortTemp(t, "orchpod")
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "pod")
	if err := daemonrun.CopyFile(os.Args[0], bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, sock, `{"v":1,"id":"x","type":"task_create","payload":{"task":{"id":"evil","prompt":"p"}}}`)
	cmd.Env = append(os.Environ(), "ORCHESTRD_TEST_HELPER=unixline")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), `"ok"`) {
		t.Fatalf("a pod of uid 65534 was answered: %v %q", err, out)
	}
	d.WaitEvent("conn.refused", func(e map[string]any) bool { return e["socket"] == sock && e["uid"] == 65534.0 })
	if n := daemontest.TaskFiles(repo); n != 0 {
		t.Fatalf("the refused pod's task was created")
	}
	okData(t, pod(t, sock, "hello", map[string]any{"podId": "slave-1"}), `{"ok":true}`)
}

// A usage limit pauses the fleet for usage_limit_pause, then it resumes on
// its own.
func TestClankerUsageLimitTimesOut(t *testing.T) {
	repo := daemontest.ShortTemp(t)
	d := daemontest.Start(t, daemontest.ClankerConfig(repo, "usage_limit_pause = \"300ms\"\n"))
	sock := filepath.Join(repo, ".clanker", "ipc.sock")
	d.WaitEvent("clanker.repo_started", nil)
	okData(t, pod(t, sock, "task_create", map[string]any{"task": map[string]any{"id": "t1", "prompt": "p"}}), `{"taskId":"t1"}`)
	okData(t, pod(t, sock, "usage_limit", map[string]any{"podId": "judge-1", "role": "judge"}), `{"ok":true}`)
	d.WaitEvent("clanker.resumed", func(e map[string]any) bool { return e["reason"] == "timeout" })
	okData(t, pod(t, sock, "task_request", map[string]any{"podId": "slave-1"}), `{"taskId":"t1","prompt":"BASE\n\np","status":"running"}`)
	var st map[string]any
	json.Unmarshal([]byte(testio.ReadFile(t, filepath.Join(repo, ".clanker", "state.json"))), &st)
	if ul, _ := st["usageLimit"].(map[string]any); st["paused"] != false || ul["active"] != false {
		t.Fatalf("state.json after the pause: %v", st)
	}
}
