package approvals

import (
	"errors"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// approval.list never cuts silently: the pending ones are listed whole
// unless a limit is given, and a cut list says truncated.
func TestListIsNeverCutSilently(t *testing.T) {
	h := newHarness(t, DefaultConfig(), newMemLog())
	const n = DefaultListLimit + 50
	ids := make([]string, n)
	for i := range ids {
		var res struct {
			ID string `json:"id"`
		}
		if err := h.call("approval.request", map[string]any{"kind": "tool", "tool_name": "Bash",
			"tool_input": map[string]any{"command": "true"}}, &res); err != nil {
			t.Fatal(err)
		}
		ids[i] = res.ID
	}
	type listed struct {
		Approvals []api.Approval `json:"approvals"`
		Truncated bool           `json:"truncated"`
	}
	list := func(params map[string]any) listed {
		t.Helper()
		var l listed
		if err := h.call("approval.list", params, &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := list(map[string]any{}); len(l.Approvals) != n || l.Truncated {
		t.Fatalf("pending without a limit: %d listed (truncated %v), want all %d", len(l.Approvals), l.Truncated, n)
	}
	if l := list(map[string]any{"limit": 10}); len(l.Approvals) != 10 || !l.Truncated {
		t.Fatalf("pending with limit 10: %d listed (truncated %v), want 10, truncated", len(l.Approvals), l.Truncated)
	}
	for _, id := range ids[:3] {
		if err := h.call("approval.resolve", map[string]any{"id": id, "decision": "Deny"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if l := list(map[string]any{"state": "denied", "limit": 2}); len(l.Approvals) != 2 || !l.Truncated {
		t.Fatalf("denied with limit 2: %d listed (truncated %v), want 2, truncated", len(l.Approvals), l.Truncated)
	}
	if l := list(map[string]any{"state": "denied", "limit": 3}); len(l.Approvals) != 3 || l.Truncated {
		t.Fatalf("denied with limit 3: %d listed (truncated %v), want 3, not truncated", len(l.Approvals), l.Truncated)
	}
}

// failingDeletes is a Log whose rule deletions fail.
type failingDeletes struct{ *memLog }

func (failingDeletes) DeleteRule(id string, done func(error)) { done(errors.New("disk full")) }

// A rule deletion the store cannot record stops the rule at once but
// fails the call (1006), saying the rule would be back after a restart.
func TestRuleDeletionNotRecorded(t *testing.T) {
	lg := failingDeletes{newMemLog()}
	h := newHarness(t, DefaultConfig(), lg)
	var req struct {
		ID string `json:"id"`
	}
	if err := h.call("approval.request", map[string]any{"kind": "tool", "tool_name": "Bash",
		"tool_input":             map[string]any{"command": "make"},
		"permission_suggestions": []any{map[string]any{"type": "toolAlwaysAllow", "tool": "Bash"}}}, &req); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Approval api.Approval `json:"approval"`
	}
	if err := h.call("approval.resolve", map[string]any{"id": req.ID, "decision": "AlwaysAllow"}, &res); err != nil {
		t.Fatal(err)
	}
	rule := res.Approval.Resolution.RuleID
	if rule == "" {
		t.Fatalf("no rule recorded: %+v", res.Approval.Resolution)
	}
	e := h.call("approval.rule_delete", map[string]any{"id": rule}, nil)
	if e == nil || e.Code != api.CodeStoreUnavailable || !strings.Contains(e.Message, "back after a restart") ||
		!strings.Contains(e.Message, "disk full") {
		t.Fatalf("rule_delete with a failing store: %v, want 1006 saying it would be back after a restart", e)
	}
	h.waitEvent("approval.write_failed")
	// It no longer applies: the next request is asked.
	if err := h.call("approval.request", map[string]any{"kind": "tool", "tool_name": "Bash",
		"tool_input": map[string]any{"command": "make"}}, &req); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Approval api.Approval `json:"approval"`
	}
	if err := h.call("approval.get", map[string]any{"id": req.ID}, &got); err != nil || got.Approval.State != api.ApprovalPending {
		t.Fatalf("after the failed deletion: %+v %v, want pending", got.Approval, err)
	}
}
