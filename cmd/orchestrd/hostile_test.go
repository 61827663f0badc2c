package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/internal/reachouthook"
)

// The attacks of issue 21 that a hostile job, agent or local process of the
// daemon's own uid makes on what the daemon guards: its environment, its
// secrets, the cgroups of its runners, the sockets of its executors and
// vibe-reachout's hook socket. Each drives the real binary.

// testBinary is this test binary, which a job or an agent runs as a small
// tool (helperMain, with ORCHESTRD_TEST_HELPER in its environment).
func testBinary(t *testing.T) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}

// agentText is the text an `orchestrd executor` agent printed: its stdout
// lines, joined.
func agentText(ms []api.SessionMessage) string {
	var b strings.Builder
	for _, m := range messagesOf(ms, "content_block_delta") {
		if d, ok := m["delta"].(map[string]any); ok {
			b.WriteString(fmt.Sprint(d["text"]))
		}
	}
	return b.String()
}

// cliPool is an [executors.NAME] table running `orchestrd executor -- ARGV`
// (the prompt in place of {prompt}), with extra keys.
func cliPool(name string, argv []string, extra string) string {
	q := []string{fmt.Sprintf("%q", binary), `"executor"`, `"--"`}
	for _, a := range argv {
		q = append(q, fmt.Sprintf("%q", a))
	}
	return fmt.Sprintf("\n[executors.%s]\ncommand = [%s]\n%s", name, strings.Join(q, ", "), extra)
}

// Jobs get a clean environment: the base variables, the lane's
// inherit_env, its env, the job's; never the daemon's API key (read for
// secrets.toml from the daemon's environment, as README advises), nor
// anything else of the daemon's. Executors the same, by the same rule.
func TestHostileEnvironment(t *testing.T) {
	t.Parallel()
	const key, other = "sk-ant-env-canary-61f0c2", "other-canary-9d41"
	home := shortTemp(t)
	if err := os.WriteFile(filepath.Join(home, "secrets.toml"), []byte("anthropic = { env = \"ANTHROPIC_API_KEY\" }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := "[lanes.net]\nrunners = 1\nslots = 2\nspares = 0\ninherit_env = [\"MYTOOL_*\"]\nenv = { LANE_VAR = \"lane\", OVER = \"lane\" }\n" +
		cliPool("env", []string{"env"}, "inherit_env = [\"MYTOOL_HOME\"]\n")
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newTestDaemon(t, home)
	cmd := daemonrun.Serve(binary, home)
	cmd.Env = append(cmd.Env, "ANTHROPIC_API_KEY="+key, "OTHER_SECRET="+other, "MYTOOL_HOME=/opt/mytool", "LC_TIME=C")
	cmd.Stderr, cmd.Stdout = d.stderr, d.stderr
	d.launch(cmd)

	rec := d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{"env"}, Env: map[string]string{"OVER": "job"}}))
	out := rec.Output
	if rec.State != api.StateSucceeded {
		t.Fatalf("env job: %+v", rec)
	}
	for _, want := range []string{"LANE_VAR=lane\n", "OVER=job\n", "MYTOOL_HOME=/opt/mytool\n", "LC_TIME=C\n", "PATH="} {
		if !strings.Contains(out, want) {
			t.Errorf("the job's environment lacks %q:\n%s", want, out)
		}
	}
	for _, leak := range []string{key, other, "OTHER_SECRET", "XDG_CONFIG_HOME", "ORCHESTRD_LOG_"} {
		if strings.Contains(out, leak) {
			t.Errorf("the job's environment has %q:\n%s", leak, out)
		}
	}
	// The CLI's run prints the same.
	cliOut, _, code := runCLI(t, "--home", home, "run", "--lane", "net", "--", "env")
	if code != 0 || strings.Contains(cliOut, key) || strings.Contains(cliOut, other) || !strings.Contains(cliOut, "LANE_VAR=lane") {
		t.Fatalf("orchestrd run -- env (exit %d):\n%s", code, cliOut)
	}

	id, session := d.execute(api.TaskSpec{Executor: "env", Prompt: "x", Cwd: shortTemp(t)})
	if r := d.waitTask(id); r.State != api.TaskCompleted {
		t.Fatalf("env agent: %+v", r)
	}
	text := agentText(d.session(session))
	if !strings.Contains(text, "MYTOOL_HOME=/opt/mytool") || !strings.Contains(text, "PATH=") || !strings.Contains(text, "LC_TIME=C") ||
		strings.Contains(text, key) || strings.Contains(text, other) {
		t.Fatalf("the agent's environment:\n%s", text)
	}
}

// A pool receives only the secrets its secrets list names (by any of
// their names); one it does not list is refused as one not configured
// is (-32002), said in secret.refused {pool, reason}; a pool that lists
// none gets none.
func TestHostileSecretScope(t *testing.T) {
	t.Parallel()
	const anth, gh = "sk-ant-scope-canary-0b3e", "ghp-scope-canary-77a1"
	home := shortTemp(t)
	if err := os.WriteFile(filepath.Join(home, "secrets.toml"),
		[]byte("ANTHROPIC_API_KEY = \""+anth+"\"\ngithub = \""+gh+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := execConfig(t, "instances = 1\nsecrets = [\"anthropic\"]\n") +
		fmt.Sprintf("\n[executors.bare]\ncommand = [%q]\ninstances = 1\n", testExecutor(t))
	d := startDaemonAt(t, home, cfg)
	probe := script(`{"op":"key","service":"anthropic"}`, `{"op":"key","service":"GITHUB_TOKEN"}`,
		`{"op":"key","service":"github"}`, `{"op":"key","service":"openai"}`)
	results := func(pool string) []map[string]any {
		id, session := d.execute(api.TaskSpec{Executor: pool, Prompt: probe})
		if rec := d.waitTask(id); rec.State != api.TaskCompleted {
			t.Fatalf("%s: %+v", pool, rec)
		}
		return messagesOf(d.session(session), "key_result")
	}
	keys := results("scripted")
	if len(keys) != 4 || keys[0]["ok"] != true {
		t.Fatalf("scripted's key results: %v", keys)
	}
	for _, k := range keys[1:] {
		if k["ok"] != false || !strings.Contains(fmt.Sprint(k["error"]), "no API key configured") || k["code"] != float64(-32002) {
			t.Fatalf("scripted got a secret its pool does not list: %v", keys)
		}
	}
	for _, k := range results("bare") {
		if k["ok"] != false {
			t.Fatalf("a pool that lists no secret got one: %v", k)
		}
	}
	d.waitEvent("secret.refused", func(e map[string]any) bool {
		return e["pool"] == "scripted" && e["service"] == "GITHUB_TOKEN" && e["reason"] == "not_allowed"
	})
	d.waitEvent("secret.refused", func(e map[string]any) bool {
		return e["pool"] == "scripted" && e["service"] == "openai" && e["reason"] == "not_configured"
	})
	d.waitEvent("secret.refused", func(e map[string]any) bool {
		return e["pool"] == "bare" && e["service"] == "anthropic" && e["reason"] == "not_allowed"
	})
	d.waitEvent("secret.issued", func(e map[string]any) bool {
		return e["pool"] == "scripted" && e["service"] == "anthropic" && e["entry"] == "ANTHROPIC_API_KEY"
	})
	d.stop()
	b, err := os.ReadFile(filepath.Join(home, "events.ndjson"))
	if err != nil || bytes.Contains(b, []byte(anth)) || bytes.Contains(b, []byte(gh)) {
		t.Fatalf("a secret is in the event log (%v)", err)
	}
}

// An executor sees no cgroup: it cannot freeze or kill a runner's, and
// so every lane's jobs, even as root.
func TestHostileExecutorCgroups(t *testing.T) {
	t.Parallel()
	attack := `n=$(ls -A /sys/fs/cgroup 2>/dev/null | wc -l); f=$(find /sys/fs/cgroup -name cgroup.freeze 2>/dev/null | wc -l)
for c in $(find /sys/fs/cgroup -name cgroup.freeze 2>/dev/null); do echo 1 > "$c" 2>/dev/null && echo "froze $c"; done
echo "entries=$n freeze_files=$f"`
	d := startDaemon(t, "[lanes.net]\nrunners = 1\nslots = 1\nspares = 0\n"+cliPool("evil", []string{"sh", "-c", attack}, ""))
	id, session := d.execute(api.TaskSpec{Executor: "evil", Prompt: "x", Cwd: shortTemp(t)})
	if r := d.waitTask(id); r.State != api.TaskCompleted {
		t.Fatalf("agent: %+v", r)
	}
	if text := agentText(d.session(session)); !strings.Contains(text, "entries=0 freeze_files=0") || strings.Contains(text, "froze") {
		t.Fatalf("the agent saw cgroups:\n%s", text)
	}
	// The lane still runs jobs.
	if rec := d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{"true"}})); rec.State != api.StateSucceeded {
		t.Fatalf("job after the attack: %+v", rec)
	}
}

// An agent of one pool tries to take another pool's executor socket
// (where it lived before, a shared folder under /tmp with predictable
// names, and where it lives now) before that executor starts: it reaches
// nothing, and the other pool's task runs on its own executor, its prompt
// and session token seen by no one else.
func TestHostileExecutorSocketTakeover(t *testing.T) {
	t.Parallel()
	capture := filepath.Join(shortTemp(t), "captured")
	cfg := execConfig(t, "instances = 0\nmax_instances = 1\n") +
		cliPool("evil", []string{testBinary(t), "{prompt}"}, "instances = 1\nenv = { ORCHESTRD_TEST_HELPER = \"attacksock\" }\n")
	d := startDaemon(t, cfg)
	victim := filepath.Join(d.home, "executors", "scripted-1", "executor.sock")
	_, evilSession := d.execute(api.TaskSpec{Executor: "evil", Cwd: shortTemp(t),
		Prompt: capture + " /tmp/orchestrd-executors-*/scripted-1.sock " + victim})
	var text string
	eventually(t, 20*time.Second, "the squatter's attacks", func() bool {
		text = agentText(d.session(evilSession))
		return strings.Contains(text, "attacks done")
	})
	if strings.Contains(text, "bind ok") || strings.Contains(text, "connect ok") {
		t.Fatalf("the agent reached another executor's socket:\n%s", text)
	}
	id, session := d.execute(api.TaskSpec{Prompt: script(`{"op":"message","n":2,"text":"mine "}`)})
	if rec := d.waitTask(id); rec.State != api.TaskCompleted || rec.MessageCount != 2 {
		t.Fatalf("the victim's task: %+v", rec)
	}
	if ms := d.session(session); len(ms) != 2 {
		t.Fatalf("the victim's messages: %+v", ms)
	}
	if b, err := os.ReadFile(capture); err == nil && len(b) > 0 {
		t.Fatalf("the squatter heard the daemon: %s", b)
	}
	d.waitEvent("executor.spawned", func(e map[string]any) bool {
		return e["executor"] == "scripted-1" && e["socket"] == victim && e["transport"] == "socket"
	})
}

// What listens at an executor's socket path must be the process the
// daemon spawned (or its child): an executor that puts a link there to
// another process's socket gets that process no word from the daemon,
// and is killed (executor.peer_refused).
func TestHostileExecutorPeerCheck(t *testing.T) {
	t.Parallel()
	dir := shortTemp(t)
	outside := filepath.Join(dir, "outside.sock")
	ln, err := net.Listen("unix", outside)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(got)
				return
			}
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			b, _ := io.ReadAll(c)
			c.Close()
			got <- string(b)
		}
	}()
	relay := fmt.Sprintf(`ln -s %q "$0" && exec sleep 60`, outside)
	d := startDaemon(t, fmt.Sprintf("[lanes.net]\nrunners = 1\nslots = 1\nspares = 0\n\n[executors.relay]\n"+
		"command = [\"sh\", \"-c\", %q, \"{socket}\"]\ninstances = 1\nstartup_timeout = \"30s\"\n", relay))
	ev := d.waitEvent("executor.peer_refused", func(e map[string]any) bool { return e["executor"] == "relay-1" })
	if int(ev["peer_pid"].(float64)) != os.Getpid() || !strings.Contains(fmt.Sprint(ev["reason"]), "is not the executor") {
		t.Fatalf("peer_refused %v", ev)
	}
	d.waitEvent("executor.killed", func(e map[string]any) bool { return e["executor"] == "relay-1" && e["reason"] == "peer_refused" })
	select {
	case b := <-got:
		if b != "" {
			t.Fatalf("the daemon spoke to a process that is not its executor: %q", b)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon never dialled the relayed socket")
	}
	for _, e := range d.events() {
		if e["kind"] == "executor.connected" && e["executor"] == "relay-1" {
			t.Fatalf("the relayed executor was taken as connected: %v", e)
		}
	}
}

// The executor's own socketpair (transport = "fd"): nothing on any path.
func TestExecutorTransportFD(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, execConfig(t, "instances = 1\ntransport = \"fd\"\n"))
	ev := d.waitEvent("executor.spawned", func(e map[string]any) bool { return e["executor"] == "scripted-1" })
	if ev["transport"] != "fd" || ev["socket"] != nil {
		t.Fatalf("spawned %v", ev)
	}
	id, session := d.execute(api.TaskSpec{Prompt: script(`{"op":"message","n":3,"text":"fd "}`)})
	if rec := d.waitTask(id); rec.State != api.TaskCompleted || len(d.session(session)) != 3 {
		t.Fatalf("task over a socketpair: %+v", rec)
	}
	ents, err := os.ReadDir(filepath.Join(d.home, "executors"))
	if err != nil || len(ents) != 0 {
		t.Fatalf("an fd executor made a socket directory: %v %v", ents, err)
	}
}

// A daemon killed with -9 leaves its executors' socket directories; the
// next one on the home removes them.
func TestExecutorSocketsAfterKill(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	cfg := execConfig(t, "instances = 1\n")
	d := startDaemonAt(t, home, cfg)
	d.waitEvent("executor.connected", func(e map[string]any) bool { return e["executor"] == "scripted-1" })
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.done
	stale := filepath.Join(home, "executors", "stale-9")
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	d2 := startDaemonAt(t, home, cfg)
	d2.waitEvent("executor.connected", func(e map[string]any) bool { return e["executor"] == "scripted-1" })
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("what the dead daemon left is still there: %v", err)
	}
	d2.stop()
	if ents, err := os.ReadDir(filepath.Join(home, "executors")); err == nil && len(ents) > 0 {
		t.Fatalf("sockets left after a clean stop: %v", ents)
	}
}

// vibe-reachout's hook socket, outside the daemon's home: no job and no
// agent can connect to it, remove it or bind in its place (each sandbox
// hides it); a process outside them that replaces it loses it again
// within a check (reachout.socket_replaced), and the hook asks the daemon
// once more.
func TestHostileReachoutSocket(t *testing.T) {
	t.Parallel()
	dir := shortTemp(t)
	sock := filepath.Join(dir, "vibe-reachout.sock")
	capture := filepath.Join(dir, "captured")
	cfg := fmt.Sprintf("[approvals.reachout]\nsocket = %q\n\n[lanes.net]\nrunners = 1\nslots = 1\nspares = 0\n", sock) +
		cliPool("evil", []string{testBinary(t), "{prompt}"}, "env = { ORCHESTRD_TEST_HELPER = \"attacksock\" }\n")
	d := startDaemon(t, cfg)
	d.waitEvent("reachout.listening", func(e map[string]any) bool { return e["socket"] == sock })
	asks := func(what string) {
		t.Helper()
		req := reachouthook.Request{RequestID: reachouthook.NewRequestID(), ToolName: "Bash",
			ToolInput: []byte(`{"command":"rm -rf ~"}`), Cwd: "/w", SessionID: "s", PermissionSuggestions: []json.RawMessage{}}
		done := make(chan error, 1)
		go func() {
			r, err := reachouthook.Send(sock, req, 30*time.Second)
			if err == nil && r.Decision != "Deny" {
				err = fmt.Errorf("decision %q", r.Decision)
			}
			done <- err
		}()
		var a struct {
			Approval api.Approval `json:"approval"`
		}
		eventually(t, 20*time.Second, what+": the hook's request pending", func() bool {
			select {
			case err := <-done:
				t.Fatalf("%s: the hook's exchange ended before it was answered: %v\nevents: %v", what, err, d.events())
			default:
			}
			return d.call("approval.get", map[string]any{"id": req.RequestID}, &a) == nil
		})
		d.mustCall("approval.resolve", map[string]any{"id": a.Approval.ID, "decision": "Deny"}, nil)
		if err := <-done; err != nil {
			t.Fatalf("%s: the hook did not hear the daemon: %v", what, err)
		}
	}
	asks("at start")

	// A job, on a sandboxed runner.
	rec := d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{testBinary(t), "- " + sock},
		Env: map[string]string{"ORCHESTRD_TEST_HELPER": "attacksock"}}))
	if !strings.Contains(rec.Output, "attacks done") || strings.Contains(rec.Output, " ok") {
		t.Fatalf("a job reached the hook socket:\n%s", rec.Output)
	}
	// An agent, in its sandbox.
	id, session := d.execute(api.TaskSpec{Executor: "evil", Cwd: shortTemp(t), Prompt: capture + " " + sock})
	if r := d.waitTask(id); r.State != api.TaskCompleted {
		t.Fatalf("agent: %+v", r)
	}
	if text := agentText(d.session(session)); !strings.Contains(text, "attacks done") || strings.Contains(text, " ok") {
		t.Fatalf("an agent reached the hook socket:\n%s", text)
	}
	asks("after the sandboxed attacks")

	// A process of the daemon's uid outside every sandbox replaces it.
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	imp, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	imp.(*net.UnixListener).SetUnlinkOnClose(false)
	defer imp.Close()
	ev := d.waitEvent("reachout.socket_replaced", func(e map[string]any) bool { return e["socket"] == sock })
	if ev["found"] != "socket" || ev["took_back"] != true {
		t.Fatalf("socket_replaced %v", ev)
	}
	asks("after it was taken back")
	if b, err := os.ReadFile(capture); err == nil && len(b) > 0 {
		t.Fatalf("an attacker heard a hook: %s", b)
	}
}

// Without the sandbox a job can reach the hook socket's path; it is still
// refused as a process the daemon started, before it is read.
func TestHostileReachoutPeer(t *testing.T) {
	t.Parallel()
	dir := shortTemp(t)
	sock := filepath.Join(dir, "vibe-reachout.sock")
	d := startDaemon(t, fmt.Sprintf("[daemon]\nsandbox = false\n\n[approvals.reachout]\nsocket = %q\n\n"+
		"[lanes.net]\nrunners = 1\nslots = 1\nspares = 0\n", sock))
	d.waitEvent("reachout.listening", func(e map[string]any) bool { return e["socket"] == sock })
	line := `{"request_id":"` + reachouthook.NewRequestID() + `","tool_name":"Bash","tool_input":{"command":"id"},"cwd":"/","session_id":"s","permission_suggestions":[]}`
	rec := d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{testBinary(t), sock, line},
		Env: map[string]string{"ORCHESTRD_TEST_HELPER": "unixline"}}))
	if strings.Contains(rec.Output, "decision") {
		t.Fatalf("a job was answered on the hook socket: %q", rec.Output)
	}
	d.waitEvent("conn.refused", func(e map[string]any) bool {
		return e["socket"] == sock && strings.Contains(fmt.Sprint(e["reason"]), "a process this daemon started")
	})
	if ids := d.pendingIDs(); len(ids) != 0 {
		t.Fatalf("a job's request became an approval: %v", ids)
	}
}
