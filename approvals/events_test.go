package approvals

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// Every kind approvals emits is registered, sampled here, and logged as it
// promises.
func TestKinds(t *testing.T) {
	idx := 0
	eventlogtest.CheckKinds(t,
		ApprovalRequested{ID: "a-1", Source: "reachout", ApprovalKind: "tool", ToolName: "Bash", Cwd: "/p",
			SessionID: "s", RequestID: "9f0c", Deadline: time.Unix(1700000000, 0).UTC()},
		ApprovalResolved{ID: "a-1", Decision: "AlwaysAllow", By: "ui", BySession: "Xy3_abcd", ByPid: 4242, RuleID: "r-1", SuggestionIndex: &idx},
		ApprovalTimedOut{ID: "a-1"},
		ApprovalCancelled{ID: "a-5", Reason: "cancelled", By: "control", ByPid: 4243},
		ApprovalAutoResolved{ID: "a-2", Rule: "config-1", Decision: "Allow", ToolName: "Bash"},
		ApprovalRuleAdded{ID: "r-1", Tool: "Bash", Content: "git status:*", Cwd: "/p", SessionID: "s",
			Decision: "allow", FromApproval: "a-1", MatchesNothing: true},
		ApprovalRuleDeleted{ID: "r-1"},
		ApprovalRecovered{ID: "a-1", Action: "cancelled"},
		ApprovalWriteFailed{ID: "a-1", What: "record approval a-1 resolved", Error: "disk I/O error"},
		PlanAwaitingApproval{ID: "17959265-00ff", ApprovalID: "a-3", Content: "# plan", Specs: json.RawMessage(`[{"name":"x"}]`)},
		PlanApproved{ID: "17959265-00ff", ApprovalID: "a-3", SpecsSpawned: 1, By: "ui", BySession: "Xy3_abcd"},
		PlanRejected{ID: "a-3", ApprovalID: "a-3", Reason: "too big", By: "cli", ByPid: 4242},
		PlanIterated{ID: "17959265-00ff", ApprovalID: "a-3", Feedback: "split it", By: "control", ByPid: 4243},
	)
}
