package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

const approvalsConfig = `
[lanes.net]
runners = 1
slots = 1
spares = 0
network = "host"
[approvals]
timeout = "1s"
[[approvals.rules]]
tool = "Bash"
input = { field = "command", pattern = "^rm " }
decision = "deny"
message = "never rm"
[[approvals.rules]]
tool = "Bash"
input = { field = "command", pattern = "^git (status|diff|log)" }
decision = "allow"
`

type approvalResult struct {
	Approval api.Approval `json:"approval"`
}

// request asks approval.request and returns the id.
func (d *testDaemon) requestApproval(params map[string]any) string {
	d.t.Helper()
	var r struct{ ID string }
	d.mustCall("approval.request", params, &r)
	if r.ID == "" {
		d.t.Fatalf("approval.request %v: no id", params)
	}
	return r.ID
}

func (d *testDaemon) getApproval(id string) api.Approval {
	d.t.Helper()
	var r approvalResult
	d.mustCall("approval.get", map[string]any{"id": id}, &r)
	return r.Approval
}

// waitApproval starts approval.wait on its own connection; the channel
// gets the approval, or the zero one and the error.
func (d *testDaemon) waitApproval(id string) <-chan approvalOrErr {
	ch := make(chan approvalOrErr, 1)
	go func() {
		var r approvalResult
		err := d.call("approval.wait", map[string]any{"id": id, "timeout_ms": 20000}, &r)
		ch <- approvalOrErr{r.Approval, err}
	}()
	return ch
}

type approvalOrErr struct {
	a   api.Approval
	err error
}

func tool(name, command string) map[string]any {
	return map[string]any{"kind": "tool", "tool_name": name, "tool_input": map[string]any{"command": command},
		"cwd": "/work/p", "session_id": "s1", "timeout_ms": 60000}
}

// The approvals domain over the control socket of the real daemon: every
// decision, AlwaysAllow's rule answering the next request at once, racing
// resolvers, the timeout, config rules, cancel, rule_delete and the plan
// gate, each with its events in the log.
func TestApprovals(t *testing.T) {
	t.Parallel()
	d0 := startDaemon(t, approvalsConfig)

	t.Run("decisions", func(t *testing.T) {
		d := d0.in(t)
		for _, tc := range []struct {
			params map[string]any
			state  api.ApprovalState
		}{
			{map[string]any{"decision": "Allow", "by": "cli"}, api.ApprovalAllowed},
			{map[string]any{"decision": "Deny", "message": "not today"}, api.ApprovalDenied},
			{map[string]any{"decision": "Reply", "user_message": "use rg instead"}, api.ApprovalReplied},
		} {
			id := d.requestApproval(tool("Bash", "make deploy"))
			if a := d.getApproval(id); a.State != api.ApprovalPending || a.ToolName != "Bash" || string(a.ToolInput) != `{"command":"make deploy"}` {
				t.Fatalf("approval.get before: %+v", a)
			}
			w := d.waitApproval(id)
			tc.params["id"] = id
			var r approvalResult
			d.mustCall("approval.resolve", tc.params, &r)
			got := <-w
			if got.err != nil || got.a.State != tc.state || r.Approval.State != tc.state {
				t.Fatalf("%v: wait %v %s, resolve %s", tc.params, got.err, got.a.State, r.Approval.State)
			}
			res := got.a.Resolution
			switch tc.state {
			case api.ApprovalAllowed:
				if res.By != "cli" {
					t.Errorf("by %q", res.By)
				}
			case api.ApprovalDenied:
				if res.Message != "not today" || res.By != "control" || res.ByPid != int32(os.Getpid()) {
					t.Errorf("deny %+v", res)
				}
			case api.ApprovalReplied:
				if res.UserMessage != "use rg instead" {
					t.Errorf("reply %+v", res)
				}
			}
			d.waitEvent("approval.requested", func(e map[string]any) bool {
				return e["id"] == id && e["source"] == "control" && e["approval_kind"] == "tool" && e["tool_name"] == "Bash"
			})
			d.waitEvent("approval.resolved", func(e map[string]any) bool {
				return e["id"] == id && e["decision"] == tc.params["decision"]
			})
			err := d.call("approval.resolve", map[string]any{"id": id, "decision": "Allow"}, nil)
			if remoteCode(err) != api.CodeInvalidState || !strings.Contains(err.Error(), "is already "+string(tc.state)) {
				t.Fatalf("resolving it again: %v", err)
			}
		}
	})

	t.Run("always allow records a rule", func(t *testing.T) {
		d := d0.in(t)
		p := tool("Bash", "npm test --watch=false")
		p["permission_suggestions"] = []json.RawMessage{
			json.RawMessage(`{"type":"setMode","mode":"acceptEdits","destination":"session"}`),
			json.RawMessage(`{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"npm test:*"}],"behavior":"allow","destination":"session"}`),
		}
		id := d.requestApproval(p)
		var r approvalResult
		d.mustCall("approval.resolve", map[string]any{"id": id, "decision": "AlwaysAllow", "suggestion": 1}, &r)
		res := r.Approval.Resolution
		if r.Approval.State != api.ApprovalAlwaysAllowed || res.SuggestionIndex == nil || *res.SuggestionIndex != 1 || res.RuleID == "" {
			t.Fatalf("resolved %s %+v", r.Approval.State, res)
		}
		var rules struct{ Rules []api.ApprovalRule }
		d.mustCall("approval.rules", nil, &rules)
		if len(rules.Rules) != 3 || rules.Rules[0].ID != "config-1" || rules.Rules[1].ID != "config-2" ||
			rules.Rules[2].ID != res.RuleID || rules.Rules[2].Content != "npm test:*" || rules.Rules[2].SessionID != "s1" {
			t.Fatalf("approval.rules: %+v", rules.Rules)
		}
		d.waitEvent("approval.rule_added", func(e map[string]any) bool { return e["id"] == res.RuleID && e["from_approval"] == id })
		// The same request again: answered by the rule, nobody asked.
		id2 := d.requestApproval(tool("Bash", "npm test"))
		a := d.getApproval(id2)
		if a.State != api.ApprovalAllowed || a.Resolution.By != "rule" || a.Resolution.RuleID != res.RuleID {
			t.Fatalf("second request: %s %+v", a.State, a.Resolution)
		}
		d.waitEvent("approval.auto_resolved", func(e map[string]any) bool { return e["id"] == id2 && e["rule"] == res.RuleID })
		// Another session is asked.
		other := tool("Bash", "npm test")
		other["session_id"] = "s2"
		id3 := d.requestApproval(other)
		if a := d.getApproval(id3); a.State != api.ApprovalPending {
			t.Fatalf("other session: %s", a.State)
		}
		d.mustCall("approval.cancel", map[string]any{"id": id3}, nil)
		// Deleted, the rule answers no more.
		d.mustCall("approval.rule_delete", map[string]any{"id": res.RuleID}, nil)
		d.waitEvent("approval.rule_deleted", func(e map[string]any) bool { return e["id"] == res.RuleID })
		id4 := d.requestApproval(tool("Bash", "npm test"))
		if a := d.getApproval(id4); a.State != api.ApprovalPending {
			t.Fatalf("after rule_delete: %s", a.State)
		}
		d.mustCall("approval.cancel", map[string]any{"id": id4}, nil)
		if err := d.call("approval.rule_delete", map[string]any{"id": "config-1"}, nil); remoteCode(err) != api.CodeInvalidState ||
			!strings.Contains(err.Error(), "config file") {
			t.Fatalf("deleting a config rule: %v", err)
		}
		if err := d.call("approval.rule_delete", map[string]any{"id": res.RuleID}, nil); remoteCode(err) != api.CodeNotFound {
			t.Fatalf("deleting it twice: %v", err)
		}
	})

	t.Run("racing resolvers", func(t *testing.T) {
		d := d0.in(t)
		for i := 0; i < 5; i++ {
			id := d.requestApproval(tool("Bash", "make"))
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for j, dec := range []string{"Allow", "Deny"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[j] = d.call("approval.resolve", map[string]any{"id": id, "decision": dec}, nil)
				}()
			}
			wg.Wait()
			a := d.getApproval(id)
			won := 0
			for _, err := range errs {
				if err == nil {
					won++
				} else if remoteCode(err) != api.CodeInvalidState || !strings.Contains(err.Error(), "is already "+string(a.State)) {
					t.Fatalf("loser: %v (approval %s)", err, a.State)
				}
			}
			if won != 1 {
				t.Fatalf("%d winners: %v", won, errs)
			}
		}
	})

	t.Run("timeout", func(t *testing.T) {
		d := d0.in(t)
		p := tool("Bash", "sleep")
		delete(p, "timeout_ms") // [approvals] timeout: 1s
		id := d.requestApproval(p)
		got := <-d.waitApproval(id)
		if got.err != nil || got.a.State != api.ApprovalTimedOut || got.a.Resolution.Decision != api.DecisionTimeout {
			t.Fatalf("wait: %v %+v", got.err, got.a)
		}
		d.waitEvent("approval.timed_out", func(e map[string]any) bool { return e["id"] == id })
	})

	t.Run("config rules", func(t *testing.T) {
		d := d0.in(t)
		a := d.getApproval(d.requestApproval(tool("Bash", "rm -rf build")))
		if a.State != api.ApprovalDenied || a.Resolution.RuleID != "config-1" || a.Resolution.Message != "never rm" {
			t.Fatalf("rm: %s %+v", a.State, a.Resolution)
		}
		a = d.getApproval(d.requestApproval(tool("Bash", "git log -3")))
		if a.State != api.ApprovalAllowed || a.Resolution.RuleID != "config-2" {
			t.Fatalf("git log: %s %+v", a.State, a.Resolution)
		}
		d.waitEvent("approval.auto_resolved", func(e map[string]any) bool {
			return e["id"] == a.ID && e["rule"] == "config-2" && e["decision"] == "Allow"
		})
	})

	t.Run("cancel and list", func(t *testing.T) {
		d := d0.in(t)
		id := d.requestApproval(tool("Bash", "make clean"))
		var l struct{ Approvals []api.Approval }
		d.mustCall("approval.list", nil, &l)
		if !hasApproval(l.Approvals, id) {
			t.Fatalf("approval.list lacks %s", id)
		}
		var r approvalResult
		d.mustCall("approval.cancel", map[string]any{"id": id, "reason": "changed my mind"}, &r)
		if r.Approval.State != api.ApprovalCancelled || r.Approval.Resolution.Reason != "changed my mind" {
			t.Fatalf("cancel: %+v", r.Approval)
		}
		d.waitEvent("approval.cancelled", func(e map[string]any) bool { return e["id"] == id && e["reason"] == "changed my mind" })
		d.mustCall("approval.list", nil, &l)
		if hasApproval(l.Approvals, id) {
			t.Fatalf("approval.list still has %s", id)
		}
		d.mustCall("approval.list", map[string]any{"state": "cancelled"}, &l)
		if !hasApproval(l.Approvals, id) {
			t.Fatalf("approval.list state cancelled lacks %s", id)
		}
		if err := d.call("approval.list", map[string]any{"state": "sideways"}, nil); remoteCode(err) != api.CodeInvalidParams ||
			!strings.Contains(err.Error(), `"sideways"`) {
			t.Fatalf("bad state: %v", err)
		}
		if err := d.call("approval.resolve", map[string]any{"id": "a-nope", "decision": "Allow"}, nil); remoteCode(err) != api.CodeNotFound {
			t.Fatalf("unknown id: %v", err)
		}
	})

	t.Run("plans", func(t *testing.T) {
		d := d0.in(t)
		plan := func() string {
			return d.requestApproval(map[string]any{"kind": "plan", "content": "# Plan\n1. a\n2. b",
				"specs": []map[string]any{{"name": "a"}, {"name": "b"}}, "timeout_ms": 60000})
		}
		id := plan()
		e := d.waitEvent("plan.awaiting_approval", func(e map[string]any) bool { return e["id"] == id })
		// The log has its sizes, never the plan (a loop's agent wrote it);
		// subscribers get the plan (TestLooprClient).
		if e["content"] != nil || e["content_bytes"] != float64(len("# Plan\n1. a\n2. b")) || e["specs"] != float64(2) {
			t.Fatalf("plan.awaiting_approval %v", e)
		}
		var pv struct {
			Content string
			Specs   []map[string]any
		}
		d.mustCall("plan.get_preview", map[string]any{"id": id}, &pv)
		if pv.Content != "# Plan\n1. a\n2. b" || len(pv.Specs) != 2 {
			t.Fatalf("preview %+v", pv)
		}
		var ap struct {
			SpecsSpawned int `json:"specs_spawned"`
		}
		d.mustCall("plan.approve", map[string]any{"id": id}, &ap)
		if ap.SpecsSpawned != 2 {
			t.Fatalf("specs_spawned %d", ap.SpecsSpawned)
		}
		d.waitEvent("plan.approved", func(e map[string]any) bool { return e["id"] == id && e["specs_spawned"] == float64(2) })
		if err := d.call("plan.reject", map[string]any{"id": id}, nil); remoteCode(err) != api.CodeInvalidState ||
			!strings.Contains(err.Error(), "already allowed") {
			t.Fatalf("reject after approve: %v", err)
		}

		id = plan()
		d.mustCall("plan.iterate", map[string]any{"id": id, "feedback": "split b"}, nil)
		if a := d.getApproval(id); a.State != api.ApprovalReplied || a.Resolution.UserMessage != "split b" {
			t.Fatalf("iterate: %s %+v", a.State, a.Resolution)
		}
		d.waitEvent("plan.iterated", func(e map[string]any) bool { return e["id"] == id && e["feedback"] == "split b" })

		id = plan()
		d.mustCall("plan.reject", map[string]any{"id": id, "reason": "too big"}, nil)
		if a := d.getApproval(id); a.State != api.ApprovalDenied {
			t.Fatalf("reject: %s", a.State)
		}
		d.waitEvent("plan.rejected", func(e map[string]any) bool { return e["id"] == id && e["reason"] == "too big" })

		tid := d.requestApproval(tool("Bash", "make"))
		if err := d.call("plan.approve", map[string]any{"id": tid}, nil); remoteCode(err) != api.CodeInvalidState ||
			!strings.Contains(err.Error(), "not a plan") {
			t.Fatalf("plan.approve on a tool approval: %v", err)
		}
		d.mustCall("approval.cancel", map[string]any{"id": tid}, nil)
	})
}

func hasApproval(as []api.Approval, id string) bool {
	for _, a := range as {
		if a.ID == id {
			return true
		}
	}
	return false
}

// A bad [[approvals.rules]] entry stops the daemon with exit 2, naming the
// rule and the key.
func TestApprovalsBadRuleExits2(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	for _, tc := range []struct{ cfg, want string }{
		{"[[approvals.rules]]\ntool = \"Bash\"\ndecision = \"allow\"\ninput = { field = \"command\", pattern = \"^git (\" }\n",
			`approvals.rules[1].input.pattern: bad regular expression "^git ("`},
		{"[[approvals.rules]]\ntool = \"Bash\"\ndecision = \"allow\"\n[[approvals.rules]]\ntool = \"[\"\ndecision = \"deny\"\n",
			`approvals.rules[2].tool: bad glob "["`},
		{"[[approvals.rules]]\ntool = \"Bash\"\ndecision = \"allow\"\nwhen = \"always\"\n", "unknown key approvals.rules[1].when"},
		{"[approvals]\ntimeout = \"0s\"\n", "approvals.timeout must be > 0"},
	} {
		p := filepath.Join(home, "bad.toml")
		if err := os.WriteFile(p, []byte(tc.cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(binary, "serve", "--home", home, "--config", p).CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("config %q: exit %v, output %q; want exit 2 naming %q", tc.cfg, err, out, tc.want)
		}
	}
}
