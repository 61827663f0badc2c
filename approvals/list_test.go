package approvals

import (
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
