package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/testio"
)

const approvalsCLIConfig = `
[lanes.net]
runners = 1
slots = 1
spares = 0
network = "host"
[approvals]
timeout = "10m"
[[approvals.rules]]
tool = "Bash"
input = { field = "command", pattern = "^git (status|diff)" }
decision = "allow"
`

// cliRequest asks approval.request on the daemon for a tool approval.
func (d *testDaemon) cliRequest(toolName string, input map[string]any, extra map[string]any) string {
	d.t.Helper()
	p := map[string]any{"kind": "tool", "tool_name": toolName, "tool_input": input, "cwd": "/src/proj",
		"session_id": "s-cli"}
	for k, v := range extra {
		p[k] = v
	}
	return d.requestApproval(p)
}

// tableRow is the line of a table that starts with id.
func tableRow(t *testing.T, out, id string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, id+" ") {
			return l
		}
	}
	t.Fatalf("no row for %s in:\n%s", id, out)
	return ""
}

// The list, each way of resolving from the CLI (by "cli"), the errors
// it prints (exit 1, the daemon's message), history and rules.
func TestApprovalsCLI(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, approvalsCLIConfig)
	h := d.home
	out, errOut, code := runCLI(t, "approvals", "--home", h)
	if code != 0 || out != "no pending approvals\n" || errOut != "" {
		t.Fatalf("approvals with none: %d %q %q", code, out, errOut)
	}
	long := "make test && " + strings.Repeat("x", 100)
	bash := d.cliRequest("Bash", map[string]any{"command": "make test\nmake lint"}, map[string]any{
		"permission_suggestions": []any{map[string]any{"type": "toolAlwaysAllow", "tool": "Bash"}}})
	read := d.cliRequest("Read", map[string]any{"file_path": "/etc/hosts"}, nil)
	glob := d.cliRequest("Glob", map[string]any{"pattern": "**/*.go", "path": "/src"}, nil)
	longID := d.cliRequest("Bash", map[string]any{"command": long}, nil)
	plan := d.requestApproval(map[string]any{"kind": "plan", "content": "\n# Ship the release\n\n1. tag", "specs": []any{}})

	out, errOut, code = runCLI(t, "approvals", "--home", h)
	if code != 0 || errOut != "" {
		t.Fatalf("approvals: %d %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 6 || strings.Join(strings.Fields(lines[0]), " ") != "ID AGE SOURCE TOOL SUMMARY CWD" {
		t.Fatalf("approvals:\n%s", out)
	}
	for _, c := range []struct{ id, want string }{
		{bash, "control Bash make test ⏎ make lint /src/proj"},
		{read, "control Read /etc/hosts /src/proj"},
		// What a Glob looks for, as the dashboard says it (api.ToolSummary).
		{glob, `control Glob **/*.go /src/proj`},
		{plan, "plan plan # Ship the release -"},
	} {
		row := strings.Join(strings.Fields(tableRow(t, out, c.id)), " ")
		if !strings.HasSuffix(row, c.want) || !strings.Contains(row, c.id+" 0s ") && !strings.Contains(row, c.id+" 1s ") {
			t.Errorf("row %q, want it to end %q", row, c.want)
		}
	}
	// Not a terminal: the summary is cut at 60 characters.
	if row := tableRow(t, out, longID); !strings.Contains(row, " "+long[:59]+"… ") {
		t.Errorf("long command's row %q, want it cut at 60 with …", row)
	}
	var listed struct{ Approvals []api.Approval }
	out, _, code = runCLI(t, "approvals", "--home", h, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed.Approvals) != 5 {
		t.Fatalf("approvals --json: %d %s", code, out)
	}

	// approve, deny, reply: by "cli", what the daemon answered.
	out, errOut, code = runCLI(t, "approve", "--home", h, read)
	if code != 0 || out != read+" allowed\n" || errOut != "" {
		t.Fatalf("approve: %d %q %q", code, out, errOut)
	}
	if a := d.getApproval(read); a.State != api.ApprovalAllowed || a.Resolution.By != api.ByCLI {
		t.Fatalf("after approve: %+v %+v", a, a.Resolution)
	}
	out, errOut, code = runCLI(t, "deny", "--home", h, glob, "--message", "not now")
	if code != 0 || out != glob+" denied\n" {
		t.Fatalf("deny: %d %q %q", code, out, errOut)
	}
	if a := d.getApproval(glob); a.State != api.ApprovalDenied || a.Resolution.Message != "not now" || a.Resolution.By != api.ByCLI {
		t.Fatalf("after deny: %+v %+v", a, a.Resolution)
	}
	out, errOut, code = runCLI(t, "reply", "--home", h, longID, "use", "make check")
	if code != 0 || out != longID+" replied\n" {
		t.Fatalf("reply: %d %q %q", code, out, errOut)
	}
	if a := d.getApproval(longID); a.State != api.ApprovalReplied || a.Resolution.UserMessage != "use make check" {
		t.Fatalf("after reply: %+v %+v", a, a.Resolution)
	}
	out, errOut, code = runCLI(t, "approve", "--home", h, bash, "--always", "--suggestion", "0")
	if code != 0 || !strings.HasPrefix(out, bash+" always allowed (rule ") {
		t.Fatalf("approve --always: %d %q %q", code, out, errOut)
	}
	a := d.getApproval(bash)
	if a.State != api.ApprovalAlwaysAllowed || a.Resolution.RuleID == "" || a.Resolution.SuggestionIndex == nil {
		t.Fatalf("after approve --always: %+v %+v", a, a.Resolution)
	}
	ruleID := a.Resolution.RuleID

	// Errors: the daemon's message, exit 1; usage errors exit 2.
	_, errOut, code = runCLI(t, "approve", "--home", h, read)
	if code != 1 || !strings.Contains(errOut, "already allowed") {
		t.Fatalf("approve twice: %d %q", code, errOut)
	}
	_, errOut, code = runCLI(t, "deny", "--home", h, "a-nosuch-1")
	if code != 1 || !strings.Contains(errOut, "a-nosuch-1") {
		t.Fatalf("deny of an unknown id: %d %q", code, errOut)
	}
	_, errOut, code = runCLI(t, "approve", "--home", h, plan, "--always", "--suggestion", "3")
	if code != 1 || !strings.Contains(errOut, "suggestion 3") {
		t.Fatalf("a suggestion out of range: %d %q", code, errOut)
	}
	for _, args := range [][]string{{"approve"}, {"reply", plan}, {"approve", plan, "--suggestion", "1"}, {"approvals", "bogus"}} {
		if _, errOut, code := runCLI(t, append(args, "--home", h)...); code != exitUsage || strings.Count(errOut, "\n") != 1 ||
			!strings.HasSuffix(errOut, " --help)\n") {
			t.Errorf("%v: %d %q", args, code, errOut)
		}
	}

	// History: state and decision/by.
	out, _, code = runCLI(t, "approvals", "--home", h, "--all")
	if code != 0 || !strings.Contains(strings.Join(strings.Fields(strings.SplitN(out, "\n", 2)[0]), " "), "ID AGE STATE DECISION/BY SOURCE TOOL SUMMARY CWD") {
		t.Fatalf("approvals --all:\n%s", out)
	}
	for id, want := range map[string]string{read: "allowed Allow/cli", glob: "denied Deny/cli",
		bash: "always_allowed AlwaysAllow/cli", plan: "pending -"} {
		if row := strings.Join(strings.Fields(tableRow(t, out, id)), " "); !strings.Contains(row, want) {
			t.Errorf("history row %q, want %q", row, want)
		}
	}
	out, _, _ = runCLI(t, "approvals", "--home", h, "--all", "--limit", "2", "--json")
	var cut struct {
		Approvals []api.Approval
		Truncated bool
	}
	if json.Unmarshal([]byte(out), &cut) != nil || len(cut.Approvals) != 2 || !cut.Truncated {
		t.Fatalf("approvals --all --limit 2 --json: %s", out)
	}
	// A cut list says so, and which command shows more.
	out, errOut, code = runCLI(t, "approvals", "--home", h, "--all", "--limit", "2")
	if code != 0 || strings.Count(out, "\n") != 3 || errOut != "orchestrd: 2 approvals shown, there are more: orchestrd approvals --home "+h+" --all --limit 20\n" {
		t.Fatalf("approvals --all --limit 2: exit %d\n%s\nstderr: %s", code, out, errOut)
	}
	if _, errOut, _ := runCLI(t, "approvals", "--home", h, "--all"); strings.Contains(errOut, "there are more") {
		t.Fatalf("approvals --all (every one shown) says there are more: %s", errOut)
	}

	// Rules: the config's first, then the recorded one; rm.
	out, _, code = runCLI(t, "approvals", "--home", h, "rules")
	if code != 0 {
		t.Fatalf("approvals rules: %d", code)
	}
	if row := strings.Join(strings.Fields(tableRow(t, out, "config-1")), " "); row != "config-1 config Bash where command ~ ^git (status|diff) anywhere allow" {
		t.Errorf("config rule row %q", row)
	}
	if row := strings.Join(strings.Fields(tableRow(t, out, ruleID)), " "); row != ruleID+" always_allow Bash anywhere allow" {
		t.Errorf("recorded rule row %q", row)
	}
	out, _, code = runCLI(t, "approvals", "rules", "rm", ruleID, "--home", h)
	if code != 0 || out != "deleted rule "+ruleID+"\n" {
		t.Fatalf("rules rm: %d %q", code, out)
	}
	_, errOut, code = runCLI(t, "approvals", "--home", h, "rules", "rm", ruleID)
	if code != 1 || !strings.Contains(errOut, ruleID) {
		t.Fatalf("rules rm twice: %d %q", code, errOut)
	}
	_, errOut, code = runCLI(t, "approvals", "--home", h, "rules", "rm", "config-1")
	if code != 1 || !strings.Contains(errOut, "config") {
		t.Fatalf("rules rm of a config rule: %d %q", code, errOut)
	}
	out, _, _ = runCLI(t, "--home", h, "approvals", "rules", "--json")
	var rules struct{ Rules []api.ApprovalRule }
	if json.Unmarshal([]byte(out), &rules) != nil || len(rules.Rules) != 1 || rules.Rules[0].ID != "config-1" {
		t.Fatalf("rules --json after rm: %s", out)
	}
}

// lineReader collects a process's stdout and waits for text in it.
type lineReader struct {
	t    *testing.T
	mu   sync.Mutex
	buf  strings.Builder
	more chan struct{}
	off  int // what wait has consumed
}

func newLineReader(t *testing.T, r io.Reader) *lineReader {
	l := &lineReader{t: t, more: make(chan struct{}, 1)}
	go func() {
		br := bufio.NewReader(r)
		b := make([]byte, 4096)
		for {
			n, err := br.Read(b)
			l.mu.Lock()
			l.buf.Write(b[:n])
			l.mu.Unlock()
			select {
			case l.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return l
}

func (l *lineReader) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// wait returns once s appears after what earlier waits consumed.
func (l *lineReader) wait(s string) {
	l.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		all := l.all()
		if i := strings.Index(all[l.off:], s); i >= 0 {
			l.off += i + len(s)
			return
		}
		select {
		case <-l.more:
		case <-deadline:
			l.t.Fatalf("no %q within 20s; output:\n%s", s, all)
		}
	}
}

// startWatch runs approvals --watch with stdin; its stdout is read.
func startWatch(t *testing.T, home string, stdin *os.File) (*exec.Cmd, *lineReader) {
	t.Helper()
	cmd := exec.Command(binary, "approvals", "--watch", "--home", home)
	cmd.Stdin = stdin
	cmd.Stderr = os.Stderr
	return cmd, newLineReader(t, testio.StartPiped(t, cmd))
}

// stopWatch sends SIGINT and expects a clean exit 0.
func stopWatch(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("approvals --watch after SIGINT: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("approvals --watch did not exit on SIGINT")
	}
}

// Without a terminal --watch only prints: the pending ones, each new one,
// and how each ends.
func TestApprovalsWatchPrints(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, approvalsCLIConfig)
	before := d.cliRequest("Read", map[string]any{"file_path": "/etc/passwd"}, nil)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	cmd, out := startWatch(t, d.home, devnull)
	out.wait("watching for approvals (Ctrl-C to stop)\n")
	out.wait(before + "  control  Read  /etc/passwd\n")
	id := d.cliRequest("Bash", map[string]any{"command": "rm -rf build"}, nil)
	out.wait(id + "  control  Bash  rm -rf build\n")
	out.wait("    cwd /src/proj  session s-cli\n")
	d.mustCall("approval.resolve", map[string]any{"id": id, "decision": "Deny"}, nil)
	out.wait(id + ": Deny by control pid " + strconv.Itoa(os.Getpid()) + "\n")
	d.mustCall("approval.cancel", map[string]any{"id": before}, nil)
	out.wait(before + ": cancelled (")
	// A config rule answers at once: printed as such.
	d.cliRequest("Bash", map[string]any{"command": "git status"}, nil)
	out.wait(": Bash Allow at once by rule config-1\n")
	stopWatch(t, cmd)
	if all := out.all(); strings.Contains(all, watchPrompt) {
		t.Fatalf("prompted without a terminal:\n%s", all)
	}
}

// watchPty opens a pseudo-terminal (openPty) whose master's output (the
// echo) is drained, so that it never fills; closed at the test's end.
func watchPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, slave = openPty(t)
	copied := make(chan struct{})
	go func() { io.Copy(io.Discard, master); close(copied) }()
	t.Cleanup(func() { slave.Close(); master.Close(); <-copied })
	return master, slave
}

// On a terminal --watch asks for a key for each pending approval and
// resolves it (by cli): a, d, A, r with a line; s skips; an approval
// resolved elsewhere while asked about moves the prompt on. The terminal's
// mode is restored on SIGINT.
func TestApprovalsWatchKeys(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, approvalsCLIConfig)
	master, slave := watchPty(t)
	orig, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if orig.Lflag&(unix.ICANON|unix.ECHO) != unix.ICANON|unix.ECHO {
		t.Fatalf("a fresh pty is not in cooked mode: %#x", orig.Lflag)
	}
	first := d.cliRequest("Bash", map[string]any{"command": "make deploy"}, nil)
	cmd, out := startWatch(t, d.home, slave)
	out.wait("a key answers the one asked about")
	prompt := func(id string) {
		t.Helper()
		out.wait(id + ": " + watchPrompt)
	}
	key := func(s string) {
		t.Helper()
		if _, err := master.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	state := func(id string, want api.ApprovalState) api.Approval {
		t.Helper()
		var a api.Approval
		eventually(t, 20*time.Second, id+" "+string(want), func() bool {
			a = d.getApproval(id)
			return a.State == want
		})
		if (a.Resolution.By != api.ByCLI || a.Resolution.ByPid != int32(cmd.Process.Pid)) && want != api.ApprovalPending {
			t.Fatalf("%s resolved by %+v, want cli pid %d", id, a.Resolution, cmd.Process.Pid)
		}
		return a
	}

	prompt(first)
	// In key mode: no echo, no line editing.
	eventually(t, 20*time.Second, "key mode", func() bool {
		tm, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
		return err == nil && tm.Lflag&(unix.ICANON|unix.ECHO) == 0 && tm.Lflag&unix.ISIG != 0
	})
	key("x") // means nothing: asked again
	out.wait("'x'? \n")
	prompt(first)
	key("a")
	out.wait("Allow\n")
	state(first, api.ApprovalAllowed)
	out.wait(first + ": Allow by cli pid " + strconv.Itoa(cmd.Process.Pid) + "\n")

	second := d.cliRequest("Bash", map[string]any{"command": "make release"}, map[string]any{
		"permission_suggestions": []any{map[string]any{"type": "toolAlwaysAllow", "tool": "Bash"}}})
	prompt(second)
	key("r")
	out.wait("reply: ")
	key("run make check first\n")
	a := state(second, api.ApprovalReplied)
	if a.Resolution.UserMessage != "run make check first" {
		t.Fatalf("reply %+v", a.Resolution)
	}

	third := d.cliRequest("Write", map[string]any{"file_path": "/src/proj/main.go", "content": "package main"}, nil)
	prompt(third)
	key("d")
	state(third, api.ApprovalDenied)

	fourth := d.cliRequest("Bash", map[string]any{"command": "make bench"}, map[string]any{
		"permission_suggestions": []any{map[string]any{"type": "toolAlwaysAllow", "tool": "Bash"}}})
	prompt(fourth)
	key("A")
	a = state(fourth, api.ApprovalAlwaysAllowed)
	if a.Resolution.RuleID == "" {
		t.Fatalf("AlwaysAllow recorded no rule: %+v", a.Resolution)
	}
	d.mustCall("approval.rule_delete", map[string]any{"id": a.Resolution.RuleID}, nil)

	// Resolved elsewhere while asked about: the prompt moves on to the
	// next; s skips one (it stays pending).
	fifth := d.cliRequest("Read", map[string]any{"file_path": "/etc/shadow"}, nil)
	prompt(fifth)
	sixth := d.cliRequest("Read", map[string]any{"file_path": "/etc/group"}, nil)
	out.wait(sixth + "  control  Read  /etc/group\n")
	d.mustCall("approval.resolve", map[string]any{"id": fifth, "decision": "Deny"}, nil)
	out.wait(fifth + ": Deny by control pid " + strconv.Itoa(os.Getpid()) + "\n")
	prompt(sixth)
	key("s")
	out.wait("skip\n")
	if a := d.getApproval(sixth); a.State != api.ApprovalPending {
		t.Fatalf("skipped approval is %s", a.State)
	}

	stopWatch(t, cmd)
	tm, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil || tm.Lflag != orig.Lflag || tm.Cc != orig.Cc {
		t.Fatalf("terminal not restored: lflag %#x want %#x (%v)", tm.Lflag, orig.Lflag, err)
	}
}

// The key a person presses at --watch's prompt and what it does.
func TestWatchKeyDecision(t *testing.T) {
	t.Parallel()
	for key, want := range map[byte]api.Decision{'a': api.DecisionAllow, 'y': api.DecisionAllow,
		'd': api.DecisionDeny, 'n': api.DecisionDeny, 'A': api.DecisionAlwaysAllow, 'r': api.DecisionReply,
		's': "", '\r': ""} {
		if got, ok := keyDecision(key); !ok || got != want {
			t.Errorf("key %q: %q %v, want %q", key, got, ok, want)
		}
	}
	for _, key := range []byte{'x', 'D', 'R', 0x1b} {
		if _, ok := keyDecision(key); ok {
			t.Errorf("key %q means something", key)
		}
	}
}
