package daemon

import (
	"fmt"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/executors"
)

// executorPermissions puts an executor's request_permission to the
// approvals domain: the same actor, rules, CLI and events as the hook
// socket, source "executor". The approval is bound to the task: it is
// cancelled when the task ends, and after a daemon restart (nobody is left
// to hear the answer).
type executorPermissions struct{ m *approvals.Manager }

func (p executorPermissions) Ask(req executors.PermissionRequest, answer func(executors.PermissionAnswer)) (string, func(string), error) {
	pending, err := p.m.Ask(approvals.Request{Source: api.SourceExecutor, Kind: api.KindTool,
		ToolName: req.ToolName, ToolInput: req.ToolInput, Cwd: req.Cwd, SessionID: req.SessionID,
		TaskID: req.TaskID, PermissionSuggestions: req.Suggestions, Timeout: req.Timeout, Bound: true},
		func(a api.Approval) { answer(permissionAnswer(a)) })
	if err != nil {
		return "", nil, fmt.Errorf("asking for permission to use %s: %w", req.ToolName, err)
	}
	return pending.ID(), pending.Cancel, nil
}

// permissionAnswer is what the executor hears of a finished approval:
// approved for Allow and AlwaysAllow, and a reason a log reader (or the
// agent) understands.
func permissionAnswer(a api.Approval) executors.PermissionAnswer {
	out := executors.PermissionAnswer{ApprovalID: a.ID}
	r := a.Resolution
	if r == nil {
		out.Reason = "no resolution (" + string(a.State) + ")"
		return out
	}
	switch a.State {
	case api.ApprovalAllowed, api.ApprovalAlwaysAllowed:
		out.Approved = true
		switch {
		case r.By == api.ByRule:
			out.Reason = "rule " + r.RuleID
		case a.State == api.ApprovalAlwaysAllowed:
			out.Reason = "user_always_allowed"
		default:
			out.Reason = "user_approved"
		}
	case api.ApprovalDenied:
		out.Reason = "user_denied"
		if r.By == api.ByRule {
			out.Reason = "rule " + r.RuleID
		}
	case api.ApprovalReplied:
		out.Reason = "user_replied"
	case api.ApprovalTimedOut:
		out.Reason = fmt.Sprintf("timed out: nobody answered within %s", a.Deadline.Sub(a.CreatedAt).Round(time.Second))
	case api.ApprovalCancelled:
		out.Reason = "cancelled: " + r.Reason
	default:
		out.Reason = string(a.State)
	}
	if r.Message != "" {
		out.Reason += ": " + r.Message
	} else if r.UserMessage != "" {
		out.Reason += ": " + r.UserMessage
	}
	return out
}
