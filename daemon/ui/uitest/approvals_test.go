package uitest

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// hookRun is one run of a stand-in of vibe-reachout's hook (Claude Code's
// PermissionRequest hook, cmd/orchbench/internal/hook): it asks the
// daemon's hook socket and waits for the answer.
type hookRun struct {
	*testio.Proc
	stdout, stderr *testio.SyncBuffer
}

// askHook runs the hook for a Bash command in /work/p, with one
// suggestion (allow rm:* from then on), as Claude Code would.
func askHook(t *testing.T, sock, command string) *hookRun {
	t.Helper()
	input, _ := json.Marshal(map[string]any{"session_id": "s-1", "transcript_path": "/nonexistent", "cwd": "/work/p",
		"permission_mode": "default", "hook_event_name": "PermissionRequest", "tool_name": "Bash",
		"tool_input": map[string]any{"command": command},
		"permission_suggestions": []any{map[string]any{"type": "addRules", "behavior": "allow", "destination": "localSettings",
			"rules": []any{map[string]any{"toolName": "Bash", "ruleContent": "rm:*"}}}}})
	h := &hookRun{stdout: &testio.SyncBuffer{}, stderr: &testio.SyncBuffer{}}
	cmd := exec.Command(tool(t, "github.com/orchestrd/orchestrd/cmd/orchbench/internal/hook"), "-socket", sock)
	cmd.Stdin = strings.NewReader(string(input))
	cmd.Stdout, cmd.Stderr = h.stdout, h.stderr
	h.Proc = testio.Start(t, cmd)
	return h
}

// answer waits for the hook's end: what it printed for Claude Code.
func (h *hookRun) answer(t *testing.T) string {
	t.Helper()
	select {
	case <-h.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("the hook is still waiting after 60s: %s", h.stderr.String())
	}
	if err := h.Err(); err != nil {
		t.Fatalf("the hook: %v\n%s", err, h.stderr.String())
	}
	return h.stdout.String()
}

// hookAnswer is Claude Code's hook output for decision.
func hookAnswer(decision string) string {
	return `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":` + decision + `}}` + "\n"
}

// sameJSON says a and b are one JSON value (key order aside).
func sameJSON(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}

// The approvals inbox: a request vibe-reachout's hook asks appears on the
// open page without a reload, with what it asks, and the browser's
// notification once the person allowed notifications; Allow answers the
// waiting hook Allow and the request moves to the history; Always allow
// answers it with the suggestion's permission and records the rule
// (orchestrd approvals rules), which the page lists and which answers the
// next such request before anyone is asked.
func TestApprovals(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	d := startDaemon(t, config{extra: "[approvals.reachout]\nsocket = \"{{home}}/hook.sock\"\n"})
	sock := filepath.Join(d.home, "hook.sock")
	d.waitEvent("reachout.listening", func(e map[string]any) bool { return e["socket"] == sock })
	tb := newTab(t, d)
	tb.signIn()
	// The person allows the dashboard's notifications; what the page
	// shows is noted as well (a headless browser shows none).
	if _, err := chromedp.CallBrowser(tb.ctx, browser.SetPermission, browser.SetPermissionParams{
		Permission: &browser.PermissionDescriptor{Name: "notifications"}, Setting: browser.PermissionSettingGranted,
		Origin: d.base, BrowserContextID: chromedp.FromContext(tb.ctx).BrowserContextID}); err != nil {
		t.Fatalf("Browser.setPermission: %v", err)
	}
	if _, err := chromedp.Call(tb.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
window.notes = [];
if (window.Notification) window.Notification = class extends window.Notification {
  constructor(title, opts) { window.notes.push(title + " | " + ((opts && opts.body) || "")); super(title, opts); }
};`}); err != nil {
		t.Fatalf("Page.addScriptToEvaluateOnNewDocument: %v", err)
	}
	tb.open("/ui/approvals")
	tb.waitJS("the inbox's live stream", `document.body.dataset.page === "approvals" && document.body.dataset.stream === "open" && !!document.body.dataset.loaded`)
	tb.waitJS("an empty inbox", `!!document.getElementById("no-pending")`)
	tb.click(chromedp.CSS("#enable-notifications"))
	tb.waitText("#enable-notifications", "Notifications on")
	tb.shot("approvals-empty")
	eval[chromedp.Void](tb, `window.notReloaded = true`)

	// card waits for the pending card asking about command and returns
	// its approval id.
	card := func(command string) string {
		t.Helper()
		find := `[...document.querySelectorAll(".card.approval")].find(c => c.querySelector("code.what") && c.querySelector("code.what").textContent.includes(` + jsID(command) + `))`
		tb.waitJS("the approval of "+command, `!!`+find)
		id := strings.TrimPrefix(eval[string](tb, find+`.id`), "appr-")
		if !eval[bool](tb, `window.notReloaded === true`) {
			t.Fatal("the inbox was reloaded to show a new approval")
		}
		return id
	}
	button := func(id, decision string) chromedp.CSS {
		return chromedp.CSS(`[id="appr-` + id + `"] form:has(input[name=decision][value=` + decision + `]) button`)
	}

	// Allow.
	h1 := askHook(t, sock, "rm -rf build-1")
	a1 := card("rm -rf build-1")
	text := eval[string](tb, `document.getElementById("appr-`+a1+`").innerText`)
	for _, want := range []string{"Bash", "/work/p", "s-1", "reachout", "Always allow"} {
		if !strings.Contains(text, want) {
			t.Fatalf("the approval's card lacks %q:\n%s", want, text)
		}
	}
	tb.waitJS("the browser's notification", `window.notes.length === 1 && window.notes[0].startsWith("orchestrd: an approval is waiting")`)
	if n := eval[string](tb, `document.getElementById("pending-count").textContent`); n != "(1)" {
		t.Fatalf("the inbox counts %s waiting, want (1)", n)
	}
	tb.shot("approval-pending")
	tb.click(button(a1, "Allow"))
	if got, want := h1.answer(t), hookAnswer(`{"behavior":"allow"}`); !sameJSON(got, want) {
		t.Fatalf("the hook answered %q after Allow, want %q", got, want)
	}
	tb.waitText("#live", "Allowed.")
	tb.waitJS("the approval in the history, allowed", `!document.getElementById("appr-`+a1+`") && [...document.querySelectorAll("#approval-history tr")].some(r => r.textContent.includes(`+jsID(a1)+`) && r.querySelector(".state-allowed"))`)

	// Always allow.
	h2 := askHook(t, sock, "rm -rf build-2")
	a2 := card("rm -rf build-2")
	tb.click(button(a2, "AlwaysAllow"))
	want := hookAnswer(`{"behavior":"allow","updatedPermissions":[{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"rm:*"}],"behavior":"allow","destination":"localSettings"}]}`)
	if got := h2.answer(t); !sameJSON(got, want) {
		t.Fatalf("the hook answered %q after Always allow, want %q", got, want)
	}
	out, errOut, code := d.cli("approvals", "rules", "--json")
	if code != 0 {
		t.Fatalf("orchestrd approvals rules: exit %d: %s", code, errOut)
	}
	var rules struct{ Rules []api.ApprovalRule }
	if err := json.Unmarshal([]byte(out), &rules); err != nil {
		t.Fatalf("approvals rules --json: %v\n%s", err, out)
	}
	var rule *api.ApprovalRule
	for i, r := range rules.Rules {
		if r.FromApproval == a2 {
			rule = &rules.Rules[i]
		}
	}
	if rule == nil || rule.Origin != "always_allow" || rule.Tool != "Bash" || rule.Decision != "allow" {
		t.Fatalf("no always-allow rule from approval %s: %+v", a2, rules.Rules)
	}
	tb.waitJS("the rule on the page", `!!document.getElementById("rule-`+rule.ID+`") && document.getElementById("rule-`+rule.ID+`").textContent.includes(`+jsID(a2)+`)`)
	tb.shot("approvals-rule")

	// The rule answers the next such request: nobody is asked.
	h3 := askHook(t, sock, "rm -rf build-3")
	if got := h3.answer(t); !strings.Contains(got, `"behavior":"allow"`) {
		t.Fatalf("a request the rule matches got %q", got)
	}
	d.waitEvent("approval.auto_resolved", nil)
	if n := eval[int](tb, `document.querySelectorAll(".card.approval").length`); n != 0 {
		t.Fatalf("%d approvals wait on the page after the rule answered", n)
	}
}
