package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon/control/client"
)

// Issue 37: no process the daemon started answers an approval or a plan
// gate, through any door; every resolution says where it came from.

// dashSession is a browser signed in to a daemon's dashboard: its cookie,
// its CSRF token and its short id (ui.signed_in's session).
type dashSession struct {
	root, cookie, csrf, id string
	c                      *http.Client
}

// signInDashboard signs the test process in with the key.
func signInDashboard(t *testing.T, d *testDaemon, root, key string) dashSession {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(c.CloseIdleConnections)
	resp, err := c.PostForm(root+"/ui/login", url.Values{"key": {key}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in from the test: %d, want 303", resp.StatusCode)
	}
	s := dashSession{root: root, c: c}
	u, _ := url.Parse(root + "/ui/")
	for _, ck := range jar.Cookies(u) {
		if ck.Name == uiCookieName(t, root) {
			s.cookie = ck.Value
		}
	}
	page, err := c.Get(root + "/ui/approvals")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.ReadFrom(page.Body)
	page.Body.Close()
	_, after, ok := strings.Cut(b.String(), `data-csrf="`)
	if s.cookie == "" || !ok {
		t.Fatalf("no session cookie or CSRF token (status %d)", page.StatusCode)
	}
	s.csrf = after[:strings.IndexByte(after, '"')]
	e := d.waitEvent("ui.signed_in", func(e map[string]any) bool { return e["how"] == "key" })
	s.id, _ = e["session"].(string)
	if s.id == "" || strings.Contains(s.cookie, s.id) {
		t.Fatalf("ui.signed_in %v: want a short session id that is not the cookie", e)
	}
	return s
}

// act presses a dashboard button as the test process: its status.
func (s dashSession) act(t *testing.T, action string, form url.Values) int {
	t.Helper()
	req, _ := http.NewRequest("POST", s.root+"/ui/act/"+action, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-CSRF-Token", s.csrf)
	resp, err := s.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A job on the net lane holding the dashboard's session cookie, its CSRF
// token and the daemon's API key (all stolen) presses Allow on a pending
// approval and Approve on a pending plan, and signs in: each is refused
// (403), matched to the job's process through /proc/net/tcp, with
// conn.refused naming the method and the pid; both stay pending. The same
// buttons pressed by the test process (not a process the daemon started)
// answer them, recorded as ui with the session's id, in the store, in
// approval.get and in approval.resolved and plan.approved.
func TestStartedProcessCannotAnswerThroughDashboard(t *testing.T) {
	t.Parallel()
	d, base, key := httpDaemon(t, "")
	root := strings.TrimSuffix(base, "/api/v1")
	tool := d.requestApproval(map[string]any{"kind": "tool", "tool_name": "Bash", "tool_input": map[string]any{"command": "rm -rf /"}})
	plan := d.requestApproval(map[string]any{"kind": "plan", "content": "# plan\nmerge everything", "specs": []any{}})
	s := signInDashboard(t, d, root, key)

	script := `post() { curl -s -o /dev/null -w '%{http_code}\n' -X POST -H "Cookie: $COOKIE_NAME=$COOKIE" ` +
		`-H "X-CSRF-Token: $CSRF" -H 'Accept: application/json' --data "$2" "$ROOT$1"; }
post /ui/act/approval.resolve "id=$TOOL&decision=Allow"
post /ui/act/loop.plan_approve "id=$PLAN"
curl -s -o /dev/null -w '%{http_code}\n' --data "key=$KEY" "$ROOT/ui/login"`
	rec := d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{"sh", "-c", script},
		Env: map[string]string{"COOKIE_NAME": uiCookieName(t, root), "COOKIE": s.cookie, "CSRF": s.csrf, "ROOT": root, "TOOL": tool, "PLAN": plan, "KEY": key}}))
	if rec.State != api.StateSucceeded || rec.Output != "403\n403\n403\n" {
		t.Fatalf("the job's requests: %s %q; want three 403s\n%s", rec.State, rec.Output, tail(d.stderr.String(), 2000))
	}
	for _, m := range []string{"approval.resolve", "plan.approve", "POST /ui/login"} {
		e := d.waitEvent("conn.refused", func(e map[string]any) bool { return e["method"] == m })
		if pid, _ := e["pid"].(float64); pid <= 0 || !strings.Contains(e["reason"].(string), "a process this daemon started") ||
			!strings.HasPrefix(e["peer"].(string), "127.0.0.1:") || e["socket"] != strings.TrimPrefix(root, "http://") {
			t.Fatalf("conn.refused for %s: %v", m, e)
		}
	}
	for _, id := range []string{tool, plan} {
		if a := d.getApproval(id); a.State != api.ApprovalPending {
			t.Fatalf("approval %s after the job's requests: %s %+v", id, a.State, a.Resolution)
		}
	}
	signIns := countEvents(d.events(), "ui.signed_in", nil)
	if signIns != 1 {
		t.Fatalf("%d sign-ins, want the test's only", signIns)
	}

	// The same buttons, pressed by the test process.
	if code := s.act(t, "approval.resolve", url.Values{"id": {tool}, "decision": {"Deny"}}); code != http.StatusOK {
		t.Fatalf("Deny from the test: %d", code)
	}
	if code := s.act(t, "loop.plan_approve", url.Values{"id": {plan}}); code != http.StatusOK {
		t.Fatalf("Approve from the test: %d", code)
	}
	for id, st := range map[string]api.ApprovalState{tool: api.ApprovalDenied, plan: api.ApprovalAllowed} {
		a := d.getApproval(id)
		if r := a.Resolution; a.State != st || r == nil || r.By != api.ByUI || r.BySession != s.id || r.ByPid != 0 {
			t.Fatalf("approval %s: %s %+v; want %s by ui session %s", id, a.State, a.Resolution, st, s.id)
		}
	}
	d.waitEvent("approval.resolved", func(e map[string]any) bool {
		return e["id"] == tool && e["by"] == "ui" && e["by_session"] == s.id
	})
	d.waitEvent("plan.approved", func(e map[string]any) bool {
		return e["id"] == plan && e["by"] == "ui" && e["by_session"] == s.id
	})
	out, errOut, code := runCLI(t, "approvals", "--all", "--home", d.home)
	if row := strings.Join(strings.Fields(tableRow(t, out, tool)), " "); code != 0 || !strings.Contains(row, "denied Deny/ui session "+s.id) {
		t.Fatalf("approvals --all: exit %d, row %q\n%s", code, row, errOut)
	}
}

// With the sandbox off a job can reach the control socket: it is refused
// approval.resolve, plan.approve and ui.login_link there (its SO_PEERCRED
// pid descends from the daemon), with conn.refused; both approvals stay
// pending.
func TestStartedProcessCannotAnswerThroughControlSocket(t *testing.T) {
	t.Parallel()
	d, _, _ := httpDaemonAt(t, shortTemp(t), strings.Replace(fastConfig, "[daemon]\n", "[daemon]\nsandbox = false\n", 1), "")
	tool := d.requestApproval(map[string]any{"kind": "tool", "tool_name": "Bash", "tool_input": map[string]any{"command": "rm -rf /"}})
	plan := d.requestApproval(map[string]any{"kind": "plan", "content": "# plan", "specs": []any{}})
	script := `"$BIN" approve --home "$H" "$TOOL"; echo "approve $?"
"$BIN" plan approve --home "$H" "$PLAN"; echo "plan approve $?"
"$BIN" ui --home "$H"; echo "ui $?"`
	rec := d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{"sh", "-c", script},
		Env: map[string]string{"BIN": binaryFor(t), "H": d.home, "TOOL": tool, "PLAN": plan}}))
	for _, want := range []string{"approve 1\n", "plan approve 1\n", "ui 1\n", "a process this daemon started"} {
		if !strings.Contains(rec.Output, want) {
			t.Fatalf("the job's CLI calls: %s\n%s\nwant %q", rec.State, rec.Output, want)
		}
	}
	for _, m := range []string{"approval.resolve", "plan.approve", "ui.login_link"} {
		e := d.waitEvent("conn.refused", func(e map[string]any) bool { return e["method"] == m })
		if pid, _ := e["pid"].(float64); pid <= 0 || e["socket"] != d.sock() {
			t.Fatalf("conn.refused for %s: %v", m, e)
		}
	}
	for _, id := range []string{tool, plan} {
		if a := d.getApproval(id); a.State != api.ApprovalPending {
			t.Fatalf("approval %s after the job's calls: %s %+v", id, a.State, a.Resolution)
		}
	}
}

// orchestrd approve and plan approve record cli with their own pid; a control client that
// does not say it is the CLI records control with its pid; a client
// cannot name another door (by ui is refused).
func TestResolutionSaysWhoFromControlSocket(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	first := d.requestApproval(map[string]any{"kind": "tool", "tool_name": "Read", "tool_input": map[string]any{"file_path": "/etc/hosts"}})
	cmd := exec.Command(binary, "approve", "--home", d.home, first)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("approve: %v\n%s%s", err, out.String(), errOut.String())
	}
	cli := int32(cmd.Process.Pid)
	if r := d.getApproval(first).Resolution; r == nil || r.By != api.ByCLI || r.ByPid != cli || r.BySession != "" {
		t.Fatalf("approved with the CLI: %+v, want by cli pid %d", r, cli)
	}
	d.waitEvent("approval.resolved", func(e map[string]any) bool {
		return e["id"] == first && e["by"] == "cli" && e["by_pid"] == float64(cli)
	})
	gate := d.requestApproval(map[string]any{"kind": "plan", "content": "# plan", "specs": []any{}})
	cmd = exec.Command(binary, "plan", "approve", "--home", d.home, gate)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("plan approve: %v\n%s%s", err, out.String(), errOut.String())
	}
	if r := d.getApproval(gate).Resolution; r == nil || r.By != api.ByCLI || r.ByPid != int32(cmd.Process.Pid) {
		t.Fatalf("plan approved with the CLI: %+v, want by cli pid %d", r, cmd.Process.Pid)
	}
	d.waitEvent("plan.approved", func(e map[string]any) bool {
		return e["id"] == gate && e["by"] == "cli" && e["by_pid"] == float64(cmd.Process.Pid)
	})

	second := d.requestApproval(map[string]any{"kind": "plan", "content": "# plan", "specs": []any{}})
	c, err := client.Dial(d.sock())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testCallTimeout)
	defer cancel()
	err = c.Call(ctx, "plan.approve", map[string]any{"id": second, "by": "ui"}, nil)
	if err == nil || !strings.Contains(err.Error(), `by "ui"`) {
		t.Fatalf("plan.approve by ui from a control client: %v, want refused", err)
	}
	if err := c.Call(ctx, "plan.approve", map[string]any{"id": second}, nil); err != nil {
		t.Fatal(err)
	}
	self := int32(os.Getpid())
	if r := d.getApproval(second).Resolution; r == nil || r.By != api.ByControl || r.ByPid != self {
		t.Fatalf("approved by a control client: %+v, want by control pid %d", r, self)
	}
	d.waitEvent("plan.approved", func(e map[string]any) bool {
		return e["id"] == second && e["by"] == "control" && e["by_pid"] == float64(self)
	})
	out2, _, _ := runCLI(t, "approvals", "--all", "--home", d.home)
	for id, want := range map[string]string{first: "Allow/cli pid " + strconv.Itoa(int(cli)), second: fmt.Sprintf("Allow/control pid %d", self)} {
		if row := strings.Join(strings.Fields(tableRow(t, out2, id)), " "); !strings.Contains(row, want) {
			t.Fatalf("approvals --all row %q, want %q", row, want)
		}
	}
}
