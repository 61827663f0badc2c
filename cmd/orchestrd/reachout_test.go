package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/internal/testio"
	"github.com/orchestrd/orchestrd/wire"
)

// The daemon in place of vibe-reachout's bot: a real-like hook process
// (cmd/orchbench/internal/hook, written as the real hook is) asks, a
// control client answers.

// hookBinary is the hook, built (a tool: anyone may run it, and a test
// runs it as another user).
func hookBinary(t *testing.T) string {
	t.Helper()
	return builtTool(t, "github.com/orchestrd/orchestrd/cmd/orchbench/internal/hook")
}

// reachoutDaemon starts a daemon whose hook socket is home/hook.sock, and
// waits until it listens.
func reachoutDaemon(t *testing.T, extra string) (*testDaemon, string) {
	t.Helper()
	home := shortTemp(t)
	sock := filepath.Join(home, "hook.sock")
	d := startDaemonAt(t, home, fmt.Sprintf("[approvals.reachout]\nsocket = %q\n", sock)+extra)
	d.waitEvent("reachout.listening", func(e map[string]any) bool { return e["socket"] == sock })
	return d, sock
}

// hookProc is one run of the hook.
type hookProc struct {
	*testio.Proc
	stdout *testio.SyncBuffer
	stderr *testio.SyncBuffer
}

const hookInput = `{"session_id":"s-1","transcript_path":"/nonexistent","cwd":"/work/p","permission_mode":"default",` +
	`"hook_event_name":"PermissionRequest","tool_name":"Bash","tool_input":{"command":"rm -rf build"},` +
	`"permission_suggestions":[{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"rm:*"}],"behavior":"allow","destination":"localSettings"}]}`

func startHook(t *testing.T, sock string, cred *syscall.Credential, args ...string) *hookProc {
	t.Helper()
	return startHookWith(t, sock, hookInput, cred, args...)
}

// startHookWith is startHook with input, Claude Code's hook JSON, on its
// stdin.
func startHookWith(t *testing.T, sock, input string, cred *syscall.Credential, args ...string) *hookProc {
	t.Helper()
	h := &hookProc{stdout: &testio.SyncBuffer{}, stderr: &testio.SyncBuffer{}}
	cmd := exec.Command(hookBinary(t), append([]string{"-socket", sock}, args...)...)
	cmd.Stdin = strings.NewReader(input)
	cmd.Stdout, cmd.Stderr = h.stdout, h.stderr
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	h.Proc = testio.Start(t, cmd)
	return h
}

// requestID is the request_id the hook sent.
func (h *hookProc) requestID(t *testing.T) string {
	t.Helper()
	var id string
	eventually(t, 20*time.Second, "the hook's request_id", func() bool {
		for _, l := range strings.Split(h.stderr.String(), "\n") {
			if s, ok := strings.CutPrefix(l, "hook: request_id "); ok {
				id = s
				return true
			}
		}
		return false
	})
	return id
}

// exit waits for the hook to end: its stdout and exit code.
func (h *hookProc) exit(t *testing.T) (string, int) {
	t.Helper()
	select {
	case <-h.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the hook did not end; stderr: %s", h.stderr.String())
	}
	return h.stdout.String(), exitCode(t, h.Err())
}

// answered waits for the hook to end; t fails, naming the hook what, unless
// it exited 0 with each of wants in its stdout.
func (h *hookProc) answered(t *testing.T, what string, wants ...string) {
	t.Helper()
	stdout, code := h.exit(t)
	ok := code == 0
	for _, w := range wants {
		ok = ok && strings.Contains(stdout, w)
	}
	if !ok {
		t.Fatalf("%s: exit %d, stdout %q, stderr %s", what, code, stdout, h.stderr.String())
	}
}

// pending waits until the hook's request is a pending approval (get takes
// the hook's request_id as the id) and returns it.
func (d *testDaemon) pendingApproval(requestID string) api.Approval {
	d.t.Helper()
	var res struct {
		Approval api.Approval `json:"approval"`
	}
	eventually(d.t, 20*time.Second, "approval of request "+requestID, func() bool {
		return d.call("approval.get", map[string]any{"id": requestID}, &res) == nil
	})
	return res.Approval
}

func (d *testDaemon) pendingIDs() []string {
	d.t.Helper()
	var res struct {
		Approvals []api.Approval `json:"approvals"`
	}
	d.mustCall("approval.list", map[string]any{}, &res)
	var ids []string
	for _, a := range res.Approvals {
		ids = append(ids, a.ID)
	}
	return ids
}

// Every decision given over the control socket reaches the hook and
// becomes Claude Code's answer, as the real bot's would.
func TestReachoutDecisions(t *testing.T) {
	t.Parallel()
	d, sock := reachoutDaemon(t, "")
	out := func(decision string) string {
		return `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":` + decision + `}}` + "\n"
	}
	for _, c := range []struct {
		name    string
		resolve map[string]any
		state   api.ApprovalState
		want    string
	}{
		{"allow", map[string]any{"decision": "Allow"}, api.ApprovalAllowed, out(`{"behavior":"allow"}`)},
		{"deny", map[string]any{"decision": "Deny", "message": "not the build dir"}, api.ApprovalDenied,
			out(`{"behavior":"deny","message":"not the build dir"}`)},
		{"reply", map[string]any{"decision": "Reply", "user_message": "use make clean"}, api.ApprovalReplied,
			out(`{"behavior":"deny","message":"The user wants you to modify your approach: use make clean"}`)},
		// Last: the rule it records answers the same request from then on.
		{"always allow", map[string]any{"decision": "AlwaysAllow", "suggestion": 0}, api.ApprovalAlwaysAllowed,
			out(`{"behavior":"allow","updatedPermissions":[{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"rm:*"}],"behavior":"allow","destination":"localSettings"}]}`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := d.in(t)
			h := startHook(t, sock, nil)
			rid := h.requestID(t)
			a := d.pendingApproval(rid)
			if a.State != api.ApprovalPending || a.Source != api.SourceReachout || a.RequestID != rid || a.ToolName != "Bash" ||
				a.Cwd != "/work/p" || a.SessionID != "s-1" || string(a.ToolInput) != `{"command":"rm -rf build"}` ||
				len(a.PermissionSuggestions) != 1 {
				t.Fatalf("pending approval %+v", a)
			}
			c.resolve["id"] = a.ID
			var res struct {
				Approval api.Approval `json:"approval"`
			}
			d.mustCall("approval.resolve", c.resolve, &res)
			if res.Approval.State != c.state {
				t.Fatalf("resolved %+v", res.Approval)
			}
			stdout, code := h.exit(t)
			if code != 0 || stdout != c.want {
				t.Fatalf("hook exit %d, stdout %q\nwant %q\nstderr %s", code, stdout, c.want, h.stderr.String())
			}
		})
	}
}

// The approvals timeout, capped by the hook's own timeout_seconds (read
// from its config file, whose token never shows), ends in Timeout: the
// hook exits 1 without output (Claude Code asks in the terminal).
func TestReachoutTimeout(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	sock := filepath.Join(home, "hook.sock")
	// The daemon's XDG_CONFIG_HOME (daemonrun.Serve): home/xdg-config.
	cfgDir := filepath.Join(home, "xdg-config", "vibe-reachout")
	if err := os.MkdirAll(cfgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	const token = "987654:TOKEN-NEVER-LOGGED"
	if err := os.WriteFile(filepath.Join(cfgDir, "config.toml"),
		[]byte("telegram_bot_token = \""+token+"\"\nallowed_chat_ids = [1]\ntimeout_seconds = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemonAt(t, home, fmt.Sprintf("[approvals]\ntimeout = \"10m\"\n[approvals.reachout]\nsocket = %q\n", sock))
	ev := d.waitEvent("reachout.listening", nil)
	if ev["socket"] != sock || ev["timeout_ms"] != float64(1000) {
		t.Fatalf("listening %v", ev)
	}
	h := startHook(t, sock, nil, "-timeout", "1")
	rid := h.requestID(t)
	stdout, code := h.exit(t)
	if code != 1 || stdout != "" || !strings.Contains(h.stderr.String(), "timed out") {
		t.Fatalf("hook exit %d, stdout %q, stderr %s", code, stdout, h.stderr.String())
	}
	a := d.pendingApproval(rid)
	if a.State != api.ApprovalTimedOut {
		t.Fatalf("approval %+v", a)
	}
	d.waitEvent("approval.timed_out", func(e map[string]any) bool { return e["id"] == a.ID })
	b, _ := os.ReadFile(daemonrun.EventLog(home))
	if strings.Contains(string(b), "TOKEN") || strings.Contains(d.stderr.String(), "TOKEN") {
		t.Fatal("the hook's token got into the daemon's log or events")
	}
}

// A hook killed while it waits cancels its approval at once
// (requester_gone): its connection's actor and the approval's are linked,
// both end (the hook's gone from frontend.list, the approval's from the
// tree); a hook that only shut its write side (as every hook does after
// its line) is still waiting, listed.
func TestReachoutHookKilled(t *testing.T) {
	t.Parallel()
	d, sock := reachoutDaemon(t, "")
	waiting := startHook(t, sock, nil)
	wa := d.pendingApproval(waiting.requestID(t))
	killed := startHook(t, sock, nil)
	ka := d.pendingApproval(killed.requestID(t))
	if err := killed.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.waitEvent("approval.cancelled", func(e map[string]any) bool {
		return e["id"] == ka.ID && e["reason"] == api.CancelRequesterGone
	})
	for _, id := range d.pendingIDs() {
		if id == ka.ID {
			t.Fatalf("the killed hook's approval %s is still pending", id)
		}
	}
	eventually(t, 20*time.Second, "the killed hook's connection and approval actors gone", func() bool {
		var fe api.FrontEndList
		d.mustCall("frontend.list", nil, &fe)
		for _, f := range fe.FrontEnds {
			if f.Name == "hook" && (f.ConnsOpen != 1 || len(f.Conns) != 1 || int(f.Conns[0].Pid) != waiting.Cmd.Process.Pid) {
				return false
			}
		}
		var tr struct {
			Tree []actors.TreeNode `json:"tree"`
		}
		d.mustCall("tree.get", nil, &tr)
		return !treeHasID(tr.Tree, ka.ID) && treeHasID(tr.Tree, wa.ID)
	})
	if got := d.pendingApproval(wa.RequestID); got.State != api.ApprovalPending {
		t.Fatalf("the waiting hook's approval: %+v", got)
	}
	d.mustCall("approval.resolve", map[string]any{"id": wa.ID, "decision": "Allow"}, nil)
	waiting.answered(t, "waiting hook", `"behavior":"allow"`)
}

// Malformed requests are closed without an answer and logged
// (reachout.request_refused); a hook waiting meanwhile is undisturbed.
func TestReachoutMalformed(t *testing.T) {
	t.Parallel()
	d, sock := reachoutDaemon(t, "")
	h := startHook(t, sock, nil)
	a := d.pendingApproval(h.requestID(t))
	const id = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
	for _, c := range []struct{ name, line, want string }{
		{"not JSON", "{nope\n", "request is not JSON"},
		{"missing field", `{"request_id":"` + id + `","tool_name":"Bash","tool_input":{},"cwd":"/"}` + "\n", "missing session_id"},
		{"not a UUID", `{"request_id":"1234","tool_name":"Bash","tool_input":{},"cwd":"/","session_id":"s"}` + "\n", `request_id \"1234\" is not a UUID`},
		{"over 1 MiB", `{"request_id":"` + id + `","tool_name":"` + strings.Repeat("x", wire.MaxReachoutLine) + `"}` + "\n",
			"reachout request line longer than 1048576 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := d.in(t)
			conn, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// Written from a goroutine: the daemon stops reading a line
			// that is too long.
			go func() {
				io.WriteString(conn, c.line)
				conn.(*net.UnixConn).CloseWrite()
			}()
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			got, err := io.ReadAll(conn)
			if len(got) != 0 || (err != nil && !strings.Contains(err.Error(), "connection reset")) {
				t.Fatalf("answered %q, %v", got, err)
			}
			d.waitEvent("reachout.request_refused", func(e map[string]any) bool {
				s, _ := e["error"].(string)
				return strings.Contains(s, strings.ReplaceAll(c.want, `\"`, `"`))
			})
		})
	}
	if got := d.pendingApproval(a.RequestID); got.State != api.ApprovalPending {
		t.Fatalf("the waiting hook's approval: %+v", got)
	}
	d.mustCall("approval.resolve", map[string]any{"id": a.ID, "decision": "Deny", "message": "no"}, nil)
	h.answered(t, "waiting hook", `"message":"no"`)
}

// A hook of another uid is refused (conn.refused) and falls back.
func TestReachoutOtherUID(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to run the hook as another user")
	}
	d, sock := reachoutDaemon(t, "")
	// The home is 0700 and the socket 0600, which alone keep others out;
	// open them so that the uid check is what refuses.
	if err := os.Chmod(d.home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	h := startHook(t, sock, &syscall.Credential{Uid: 65534, Gid: 65534})
	if stdout, code := h.exit(t); code != 1 || stdout != "" {
		t.Fatalf("hook of uid 65534: %d %q %s", code, stdout, h.stderr.String())
	}
	d.waitEvent("conn.refused", func(e map[string]any) bool { return e["socket"] == sock && e["uid"] == float64(65534) })
	if ids := d.pendingIDs(); len(ids) != 0 {
		t.Fatalf("pending %v", ids)
	}
}

// squatHook has uid 65534 (nobody) listen at path, in a directory made
// its own, until the test ends (the test executor listens there and takes
// one connection); it returns the squatter's pid.
func squatHook(t *testing.T, path string) int {
	t.Helper()
	dir := filepath.Dir(path)
	bin := filepath.Join(dir, "squatter") // where uid 65534 may run it
	if err := daemonrun.CopyFile(testExecutor(t), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--socket", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr testio.SyncBuffer
	cmd.Stderr = &stderr
	testio.Start(t, cmd)
	eventuallyOr(t, 20*time.Second, "uid 65534 listening at "+path, func() bool {
		fi, err := os.Lstat(path)
		return err == nil && fi.Mode().Type() == os.ModeSocket
	}, stderr.String)
	return cmd.Process.Pid
}

// Another user listening at vibe-reachout's path before the daemon starts
// would answer Claude Code's permission requests. Asked for in the config,
// the hook socket makes serve exit 2 in one line naming that user's uid
// and pid; on by default only, the daemon goes on without it, says so at
// error level, and its ready line and status say whose it is.
func TestReachoutSquattedByAnotherUID(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to listen at the hook's path as another user (uid 65534)")
	}
	sock := filepath.Join(shortTemp(t), "hook.sock")
	pid := squatHook(t, sock)
	home := startupHome(t, fmt.Sprintf("[approvals.reachout]\nsocket = %q\n", sock))
	cmd := serveCmd(home, nil)
	var stdout, stderr testio.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := runExpectingExit(t, cmd)
	want := fmt.Sprintf("orchestrd serve: vibe-reachout's hook socket ([approvals.reachout] socket) cannot be made at %s: "+
		"in use by another user's process (uid 65534, pid %d)\n", sock, pid)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || stderr.String() != want {
		t.Fatalf("serve: %v\nstdout %q\nstderr %q\nwant exit 2 and %q", err, stdout.String(), stderr.String(), want)
	}

	xdg := shortTemp(t)
	sock = filepath.Join(xdg, "vibe-reachout.sock")
	pid = squatHook(t, sock)
	d := newTestDaemon(t, startupHome(t, ""))
	cmd = serveCmd(d.home, nil, "--log-format", "json")
	cmd.Env = append(cmd.Env, "XDG_RUNTIME_DIR="+xdg)
	cmd.Stdout, cmd.Stderr = d.stderr, d.stderr
	d.launch(cmd)
	off := fmt.Sprintf("off: %s in use by another user's process (uid 65534, pid %d)", sock, pid)
	if r := readyLine(t, d); r.raw["hook"] != off {
		t.Fatalf("ready line: hook %v, want %q", r.raw["hook"], off)
	}
	said := false
	for _, l := range stderrLines(t, d.stderr.String()) {
		if strings.HasPrefix(l.Message, "reachout: ") {
			if l.Level != "error" || !strings.Contains(l.Message, "another user") || l.raw["uid"] != float64(65534) || l.raw["pid"] != float64(pid) {
				t.Errorf("the hook socket's log line: %v", l.raw)
			}
			said = true
		}
	}
	if !said {
		t.Errorf("no log line about the hook socket:\n%s", d.stderr.String())
	}
	out, errOut, code := runCLI(t, "status", "--home", d.home)
	if fe := frontEndLines(out); code != 0 || fe["hook"] != off {
		t.Fatalf("status: exit %d, hook %q, want %q\n%s%s", code, fe["hook"], off, out, errOut)
	}
}

// Without [approvals.reachout] socket the daemon listens where the hook
// looks: $XDG_RUNTIME_DIR/vibe-reachout.sock (daemonrun.Serve makes it the
// home); enabled = false: no socket at all.
func TestReachoutDefaultPathAndDisabled(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "")
	sock := filepath.Join(d.home, "vibe-reachout.sock")
	d.waitEvent("reachout.listening", func(e map[string]any) bool { return e["socket"] == sock })
	h := startHook(t, sock, nil)
	a := d.pendingApproval(h.requestID(t))
	d.mustCall("approval.resolve", map[string]any{"id": a.ID, "decision": "Allow"}, nil)
	h.answered(t, "hook", "allow")

	off := startDaemon(t, "[approvals.reachout]\nenabled = false\n")
	off.mustCall("approval.list", map[string]any{}, nil) // it is up
	if _, err := os.Stat(filepath.Join(off.home, "vibe-reachout.sock")); !os.IsNotExist(err) {
		t.Fatalf("socket with reachout disabled: %v", err)
	}
	for _, e := range off.events() {
		if k, _ := e["kind"].(string); strings.HasPrefix(k, "reachout.") {
			t.Fatalf("reachout event with reachout disabled: %v", e)
		}
	}
}

// A daemon that stops answers its waiting hooks Timeout (as the real bot
// does when it stops): they fall back to the terminal at once.
func TestReachoutDaemonStops(t *testing.T) {
	t.Parallel()
	d, sock := reachoutDaemon(t, "")
	h := startHook(t, sock, nil)
	a := d.pendingApproval(h.requestID(t))
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stdout, code := h.exit(t)
	if code != 1 || stdout != "" || !strings.Contains(h.stderr.String(), "timed out") {
		t.Fatalf("hook: %d %q %s", code, stdout, h.stderr.String())
	}
	d.waitCleanExit("the daemon did not stop")
	found := false
	for _, e := range d.events() {
		if e["kind"] == "approval.cancelled" && e["id"] == a.ID && e["reason"] == api.CancelDaemonStopped {
			found = true
		}
	}
	if !found {
		t.Fatal("no approval.cancelled daemon_stopping")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left: %v", err)
	}
}

// A hook that runs as Claude Code's PreToolUse hook (which ignores the
// PermissionRequest answer vibe-reachout's hook prints: hook_no_verdict)
// is never answered as if its answer held: even with a rule that would
// deny the call, nobody is asked, the hook hears nothing (Claude Code
// goes on to its own check) and the approval is on record cancelled
// hook_no_verdict, which approvals --all and the dashboard say in words,
// never "denied". The same call from a PermissionRequest hook is denied
// by the rule.
func TestReachoutPreToolUseNotShownDenied(t *testing.T) {
	t.Parallel()
	d, sock := reachoutDaemon(t, "[[approvals.rules]]\ntool = \"Bash\"\ndecision = \"deny\"\n")
	pre := strings.Replace(hookInput, `"hook_event_name":"PermissionRequest"`, `"hook_event_name":"PreToolUse"`, 1)
	h := startHookWith(t, sock, pre, nil)
	rid := h.requestID(t)
	if out, code := h.exit(t); code != 1 || out != "" {
		t.Fatalf("the PreToolUse hook: exit %d, stdout %q; want exit 1 and no answer", code, out)
	}
	var res struct {
		Approval api.Approval `json:"approval"`
	}
	d.mustCall("approval.get", map[string]any{"id": rid}, &res)
	a := res.Approval
	if a.State != api.ApprovalCancelled || a.Resolution == nil || a.Resolution.Reason != api.CancelHookNoVerdict || a.Resolution.Decision != "" {
		t.Fatalf("the PreToolUse hook's approval: %+v (%+v)", a, a.Resolution)
	}
	d.waitEvent("approval.cancelled", func(e map[string]any) bool { return e["id"] == a.ID && e["reason"] == api.CancelHookNoVerdict })
	out, errs, code := runCLI(t, "--home", d.home, "approvals", "--all")
	if code != 0 || !strings.Contains(out, "-/hook_no_verdict") || strings.Contains(out, "Deny") ||
		!strings.Contains(out, "hook_no_verdict: not asked: the hook ran as a Claude Code hook other than PermissionRequest") ||
		!strings.Contains(out, "register vibe-reachout's hook as PermissionRequest") {
		t.Fatalf("approvals --all: exit %d, stderr %q\n%s", code, errs, out)
	}

	// As PermissionRequest, the rule answers.
	h = startHook(t, sock, nil)
	h.answered(t, "the PermissionRequest hook", `"behavior":"deny"`)
}

// treeHasID reports whether an actor of id is in the tree.
func treeHasID(nodes []actors.TreeNode, id string) bool {
	for _, n := range nodes {
		if n.ID == id || treeHasID(n.Children, id) {
			return true
		}
	}
	return false
}

// What a requester wrote is shown as text in `approvals`, never acted on
// by the terminal: a cwd and a session id holding a terminal escape (which
// would retitle the window or worse) and a bidi override (which reorders
// what is read) come out as marks (the table printed the cwd as it came;
// so did `approvals watch`, mended alike).
func TestApprovalsListShowsRequesterTextAsText(t *testing.T) {
	t.Parallel()
	d, sock := reachoutDaemon(t, "")
	in := strings.Replace(hookInput, `"cwd":"/work/p"`, `"cwd":"/work/p\u001b]2;pwned\u0007\u202egnp.exe"`, 1)
	in = strings.Replace(in, `"session_id":"s-1"`, `"session_id":"s\u001b[2J-1"`, 1)
	h := startHookWith(t, sock, in, nil)
	d.pendingApproval(h.requestID(t))
	out, errs, code := runCLI(t, "--home", d.home, "approvals")
	if code != 0 || !strings.Contains(out, "rm -rf build") || strings.ContainsAny(out, "\x1b\x07\u202e") ||
		!strings.Contains(out, "⟨U+202E⟩") {
		t.Fatalf("approvals: exit %d, stderr %q\n%q", code, errs, out)
	}
	d.mustCall("approval.resolve", map[string]any{"id": h.requestID(t), "decision": "Deny"}, nil)
	h.exit(t)
}
