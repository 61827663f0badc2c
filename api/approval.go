package api

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// ApprovalState is where a pending approval is: pending, then exactly one
// of the terminal states.
type ApprovalState string

const (
	ApprovalPending       ApprovalState = "pending"
	ApprovalAllowed       ApprovalState = "allowed"
	ApprovalDenied        ApprovalState = "denied"
	ApprovalAlwaysAllowed ApprovalState = "always_allowed"
	ApprovalReplied       ApprovalState = "replied"
	ApprovalTimedOut      ApprovalState = "timed_out"
	ApprovalCancelled     ApprovalState = "cancelled"
)

// Terminal reports whether s is a final state.
func (s ApprovalState) Terminal() bool {
	switch s {
	case ApprovalAllowed, ApprovalDenied, ApprovalAlwaysAllowed, ApprovalReplied, ApprovalTimedOut, ApprovalCancelled:
		return true
	}
	return false
}

// ValidApprovalState reports whether s names a state.
func ValidApprovalState(s string) bool {
	return ApprovalState(s) == ApprovalPending || ApprovalState(s).Terminal()
}

// Decision is how an approval was answered, spelled as on vibe-reachout's
// wire (PascalCase).
type Decision string

const (
	DecisionAllow       Decision = "Allow"
	DecisionDeny        Decision = "Deny"
	DecisionAlwaysAllow Decision = "AlwaysAllow"
	DecisionReply       Decision = "Reply"
	DecisionTimeout     Decision = "Timeout"
)

// State is the state an approval resolved with d ends in; "" for a
// decision that is not one.
func (d Decision) State() ApprovalState {
	switch d {
	case DecisionAllow:
		return ApprovalAllowed
	case DecisionDeny:
		return ApprovalDenied
	case DecisionAlwaysAllow:
		return ApprovalAlwaysAllowed
	case DecisionReply:
		return ApprovalReplied
	case DecisionTimeout:
		return ApprovalTimedOut
	}
	return ""
}

// Where an approval came from (Approval.Source).
const (
	SourceReachout = "reachout" // vibe-reachout's hook socket
	SourcePlan     = "plan"     // a Loopr plan gate (approval.request kind plan)
	SourceControl  = "control"  // approval.request kind tool on the control socket
	SourceExecutor = "executor" // an Agor executor's request_permission
)

// Kinds of approval (Approval.Kind).
const (
	KindTool = "tool" // may a tool run?
	KindPlan = "plan" // may a plan's specs be spawned?
	// KindMerge: may a complete loop tree's root merge into its base?
	// Never announced as a plan (plan.awaiting_approval), never answered
	// by a rule; plan.approve and plan.reject take it by its loop's id.
	KindMerge = "merge"
)

// Who or what resolved an approval (Resolution.By): the door it came
// through, as its front-end knows it, or the daemon itself.
const (
	ByControl = "control" // a control-socket client (Resolution.ByPid) that did not say it is the CLI
	ByCLI     = "cli"     // a control-socket client that said so (by: "cli"), as orchestrd's CLI does
	ByUI      = "ui"      // the dashboard (Resolution.BySession)
	ByRule    = "rule"    // a config or recorded rule (Resolution.RuleID)
	ByTimeout = "timeout" // its deadline passed
	ByDaemon  = "daemon"  // the daemon cancelled it (Resolution.Reason)
	ByRequest = "requester"
	// ByTelegram: a tap or a reply in a Telegram chat the bot obeys
	// ([approvals.telegram]); Resolution.BySession is "<chat id>:<user
	// id>" (Telegram's ids, never a name).
	ByTelegram = "telegram"
)

// Reasons an approval was cancelled (Resolution.Reason).
const (
	CancelRequesterGone = "requester_gone"
	CancelDaemonStopped = "daemon_stopping"
	CancelDaemonRestart = "daemon_restarted"
	CancelRequested     = "cancelled" // approval.cancel
	// CancelHookNoVerdict: the requester could not act on an answer, so
	// nobody was asked: a hook that forwarded its hook_event_name ran as
	// Claude Code's PreToolUse hook (or another but PermissionRequest),
	// where Claude Code ignores the PermissionRequest answer vibe-
	// reachout's hook prints ("hook_no_verdict"): the tool went on to
	// Claude Code's own permission check. Register the hook as
	// PermissionRequest.
	CancelHookNoVerdict = "hook_no_verdict"
)

// CancelWords says a cancellation's reason to people when its code is not
// enough ("" when it is).
func CancelWords(reason string) string {
	if reason == CancelHookNoVerdict {
		return "not asked: the hook ran as a Claude Code hook other than PermissionRequest (PreToolUse...), " +
			"which ignores its answer, so Claude Code decided by itself; register vibe-reachout's hook as PermissionRequest"
	}
	return ""
}

// Approval is one question put to a person: may this tool run, may this
// plan go ahead. The JSON is what approval.list and approval.get answer
// and what notify_command reads on its stdin.
type Approval struct {
	ID        string          `json:"id"`
	State     ApprovalState   `json:"state"`
	Source    string          `json:"source"`
	Kind      string          `json:"kind"`
	RequestID string          `json:"request_id,omitempty"` // the hook's request_id
	ToolName  string          `json:"tool_name,omitempty"`
	ToolInput json.RawMessage `json:"tool_input,omitempty"`
	Cwd       string          `json:"cwd,omitempty"`
	SessionID string          `json:"session_id,omitempty"`
	TaskID    string          `json:"task_id,omitempty"`
	// PermissionSuggestions are the always-allow options the requester
	// offered; approval.resolve's suggestion indexes them.
	PermissionSuggestions []json.RawMessage `json:"permission_suggestions,omitempty"`
	// AssistantContext is the agent's last words before the request (the
	// hook sends it), for the person deciding.
	AssistantContext string `json:"assistant_context,omitempty"`
	// LoopID is the loop a plan or merge approval is of (a loop's gate
	// asked it): the plan.* events name the loop by it, as Loopr's client
	// expects.
	LoopID string `json:"loop_id,omitempty"`
	// Content and Specs are a plan's (kind plan).
	Content    string          `json:"content,omitempty"`
	Specs      json.RawMessage `json:"specs,omitempty"` // a JSON array
	CreatedAt  time.Time       `json:"created_at"`
	Deadline   time.Time       `json:"deadline"`
	Resolution *Resolution     `json:"resolution,omitempty"`
}

// Resolution is how an approval ended.
type Resolution struct {
	Decision    Decision `json:"decision"` // Timeout for timed_out; "" for cancelled
	Message     string   `json:"message,omitempty"`
	UserMessage string   `json:"user_message,omitempty"`
	// Suggestion is the permission suggestion applied (AlwaysAllow), and
	// SuggestionIndex its index in the request's permission_suggestions.
	Suggestion      json.RawMessage `json:"suggestion,omitempty"`
	SuggestionIndex *int            `json:"suggestion_index,omitempty"`
	By              string          `json:"by"`
	// BySession is the dashboard session's short id (By ui: the one in
	// ui.signed_in; By telegram "<chat>:<user>"), ByPid the control client's pid (By control or cli;
	// absent when unknown).
	BySession string    `json:"by_session,omitempty"`
	ByPid     int32     `json:"by_pid,omitempty"`
	RuleID    string    `json:"rule_id,omitempty"` // By rule, or the rule AlwaysAllow recorded
	Reason    string    `json:"reason,omitempty"`  // why it was cancelled
	At        time.Time `json:"at"`
}

// Who is who resolved, for people: "ui session Xy3_abcd", "cli pid 4242",
// "control pid 4243", "rule", "timeout".
func (r Resolution) Who() string {
	switch {
	case r.By == ByTelegram && r.BySession != "":
		chat, user, ok := strings.Cut(r.BySession, ":")
		if !ok || user == chat { // a private chat's id is its user's
			return r.By + " chat " + chat
		}
		return r.By + " chat " + chat + " user " + user
	case r.BySession != "":
		return r.By + " session " + r.BySession
	case r.ByPid != 0:
		return r.By + " pid " + strconv.Itoa(int(r.ByPid))
	}
	return r.By
}

// ApprovalRule answers matching requests before anyone is asked: a rule
// from the config file ([[approvals.rules]], Origin "config", ID "config-N"
// by position) or one recorded by an AlwaysAllow (Origin "always_allow").
type ApprovalRule struct {
	ID     string `json:"id"`
	Origin string `json:"origin"` // config | always_allow
	Tool   string `json:"tool"`   // a glob on tool_name
	// InputField and InputPattern match a field of tool_input (a regular
	// expression on its string value); config rules only.
	InputField   string `json:"input_field,omitempty"`
	InputPattern string `json:"input_pattern,omitempty"`
	Cwd          string `json:"cwd,omitempty"`        // a glob (config) or the exact cwd it was scoped to
	SessionID    string `json:"session_id,omitempty"` // the session it was scoped to
	// Content is a Claude Code rule content the suggestion carried
	// ("git status:*" for Bash, a path glob for Read/Edit/Write).
	Content      string          `json:"content,omitempty"`
	Decision     string          `json:"decision"` // allow | deny
	Message      string          `json:"message,omitempty"`
	Suggestion   json.RawMessage `json:"suggestion,omitempty"` // always_allow: the suggestion it came from
	FromApproval string          `json:"from_approval,omitempty"`
	CreatedAt    time.Time       `json:"created_at"`
}
