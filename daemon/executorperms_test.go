package daemon

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

func TestPermissionAnswer(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	res := func(by, rule, reason, msg string) *api.Resolution {
		return &api.Resolution{By: by, RuleID: rule, Reason: reason, Message: msg}
	}
	for _, c := range []struct {
		name     string
		a        api.Approval
		approved bool
		reason   string
	}{
		{"allowed by the cli", api.Approval{State: api.ApprovalAllowed, Resolution: res(api.ByCLI, "", "", "")}, true, "user_approved"},
		{"allowed by a rule", api.Approval{State: api.ApprovalAllowed, Resolution: res(api.ByRule, "config-1", "", "")}, true, "rule config-1"},
		{"always allowed", api.Approval{State: api.ApprovalAlwaysAllowed, Resolution: res(api.ByCLI, "r-1", "", "")}, true, "user_always_allowed"},
		{"denied with a message", api.Approval{State: api.ApprovalDenied, Resolution: res(api.ByCLI, "", "", "not in prod")}, false, "user_denied: not in prod"},
		{"replied", api.Approval{State: api.ApprovalReplied, Resolution: &api.Resolution{By: api.ByCLI, UserMessage: "use rg"}}, false, "user_replied: use rg"},
		{"timed out", api.Approval{State: api.ApprovalTimedOut, CreatedAt: t0, Deadline: t0.Add(30 * time.Second),
			Resolution: res(api.ByTimeout, "", "", "")}, false, "timed out: nobody answered within 30s"},
		{"cancelled", api.Approval{State: api.ApprovalCancelled, Resolution: res(api.ByDaemon, "", "daemon_stopping", "")}, false, "cancelled: daemon_stopping"},
		{"no resolution", api.Approval{State: api.ApprovalPending}, false, "no resolution (pending)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := permissionAnswer(c.a)
			if got.Approved != c.approved || got.Reason != c.reason {
				t.Fatalf("permissionAnswer = {approved %v, reason %q}, want {%v, %q}", got.Approved, got.Reason, c.approved, c.reason)
			}
		})
	}
}

// An executor's request without suggestions offers the exact call, and
// nothing a rule would read wider than it.
func TestExactSuggestion(t *testing.T) {
	for _, c := range []struct {
		tool, input, want string
	}{
		{"Bash", `{"command":"make test"}`, `{"behavior":"allow","destination":"session","rules":[{"ruleContent":"make test","toolName":"Bash"}],"type":"addRules"}`},
		{"Bash", `{"command":"rm -rf /tmp/x:*"}`, ``},
		{"Bash", `{"command":"  "}`, ``},
		{"Write", `{"file_path":"/src/a.go"}`, `{"behavior":"allow","destination":"session","rules":[{"ruleContent":"/src/a.go","toolName":"Write"}],"type":"addRules"}`},
		{"Edit", `{"file_path":"/src/*.go"}`, ``},
		{"Edit", `{"file_path":"src/a.go"}`, ``},
		{"Edit", `{"file_path":"/src/../etc/passwd"}`, ``},
		{"Read", `{"file_path":"//etc/passwd"}`, ``},
		{"WebFetch", `{"url":"https://example.com"}`, ``},
		{"Bash", `not json`, ``},
	} {
		got := exactSuggestion(c.tool, json.RawMessage(c.input))
		if string(got) != c.want {
			t.Errorf("%s %s: got %s, want %s", c.tool, c.input, got, c.want)
		}
	}
}
