package approvals

import (
	"encoding/json"
	"time"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// The event kinds approvals emits: approval.* for every approval's steps
// and its rules, plan.* for the plan gate's. Kinds are noun.verb_past;
// field names are stable snake_case and only ever added to; empty optional
// fields are omitted. A tool's input is never in an event (it can be a
// whole file): it is in the store and in approval.get.

// ApprovalRequested: an approval is pending until someone answers it or
// Deadline passes. ApprovalKind is the approval's kind (tool, plan): the
// log line's own "kind" is the event's.
type ApprovalRequested struct {
	ID           string    `json:"id"`
	Source       string    `json:"source"`
	ApprovalKind string    `json:"approval_kind"`
	ToolName     string    `json:"tool_name,omitempty"`
	Cwd          string    `json:"cwd,omitempty"`
	SessionID    string    `json:"session_id,omitempty"`
	RequestID    string    `json:"request_id,omitempty"`
	Deadline     time.Time `json:"deadline"`
}

func (ApprovalRequested) Kind() string { return "approval.requested" }

// ApprovalResolved: someone answered a pending approval, through By: cli
// or control (ByPid, the client's pid), ui (BySession, the dashboard
// session's short id, as in ui.signed_in). RuleID is the rule an
// AlwaysAllow recorded (the first, if its suggestion made several),
// SuggestionIndex the suggestion it applied.
type ApprovalResolved struct {
	ID              string `json:"id"`
	Decision        string `json:"decision"`
	By              string `json:"by"`
	BySession       string `json:"by_session,omitempty"`
	ByPid           int32  `json:"by_pid,omitempty"`
	RuleID          string `json:"rule_id,omitempty"`
	SuggestionIndex *int   `json:"suggestion_index,omitempty"`
}

func (ApprovalResolved) Kind() string { return "approval.resolved" }

// ApprovalTimedOut: nobody answered before the deadline; the requester is
// answered Timeout.
type ApprovalTimedOut struct {
	ID string `json:"id"`
}

func (ApprovalTimedOut) Kind() string { return "approval.timed_out" }

// ApprovalCancelled: the approval ended unanswered: requester_gone,
// daemon_stopping, daemon_restarted, cancelled (approval.cancel, or the
// reason its client gave), store_unavailable, hook_no_verdict (at once:
// its requester could not act on an answer, Request.Unheard). By and the rest are who
// cancelled it with approval.cancel (as in approval.resolved).
type ApprovalCancelled struct {
	ID        string `json:"id"`
	Reason    string `json:"reason"`
	By        string `json:"by,omitempty"`
	BySession string `json:"by_session,omitempty"`
	ByPid     int32  `json:"by_pid,omitempty"`
}

func (ApprovalCancelled) Kind() string { return "approval.cancelled" }

// ApprovalAutoResolved: a rule answered a request at once; nobody was
// asked.
type ApprovalAutoResolved struct {
	ID       string `json:"id"`
	Rule     string `json:"rule"`
	Decision string `json:"decision"`
	ToolName string `json:"tool_name"`
}

func (ApprovalAutoResolved) Kind() string { return "approval.auto_resolved" }

// ApprovalRuleAdded: an AlwaysAllow recorded a rule. MatchesNothing says
// its content is one approvals cannot interpret (a tool it has no matcher
// for): the rule is kept but answers no request.
type ApprovalRuleAdded struct {
	ID             string `json:"id"`
	Tool           string `json:"tool"`
	Content        string `json:"content,omitempty"`
	Cwd            string `json:"cwd,omitempty"`
	SessionID      string `json:"session_id,omitempty"`
	Decision       string `json:"decision"`
	FromApproval   string `json:"from_approval"`
	MatchesNothing bool   `json:"matches_nothing,omitempty"`
}

func (ApprovalRuleAdded) Kind() string { return "approval.rule_added" }

// ApprovalRuleDeleted: a recorded rule was deleted (approval.rule_delete).
type ApprovalRuleDeleted struct {
	ID string `json:"id"`
}

func (ApprovalRuleDeleted) Kind() string { return "approval.rule_deleted" }

// ApprovalRecovered: an approval a previous daemon left pending, at
// start: Action cancelled (its requester is gone: daemon_restarted) or
// pending (asked again until its deadline).
type ApprovalRecovered struct {
	ID     string `json:"id"`
	Action string `json:"action"`
}

func (ApprovalRecovered) Kind() string { return "approval.recovered" }

// ApprovalWriteFailed: the state store could not record an approval's
// step (What); the approval goes on (its answer is not held back).
type ApprovalWriteFailed struct {
	ID    string `json:"id"`
	What  string `json:"what"`
	Error string `json:"error"`
}

func (ApprovalWriteFailed) Kind() string { return "approval.write_failed" }

// PlanAwaitingApproval: a plan (an approval of kind plan) is pending.
// Subscribers get {id, content, specs} (Loopr's event), with the approval's
// id beside; the log line only the sizes: a loop's plan is what its agent
// wrote. ID in every plan.* event is the plan's loop (Loopr's client knows
// plans by their loops: plan.approve takes it), or the approval for a plan
// no loop asked (approval.request kind plan); ApprovalID is the approval.
// A loop's merge (kind merge) is not a plan: no plan.* event.
type PlanAwaitingApproval struct {
	ID           string          `json:"id"`
	ApprovalID   string          `json:"approval_id"`
	Content      string          `json:"-"`
	Specs        json.RawMessage `json:"-"`
	ContentBytes int             `json:"content_bytes"`
	SpecsCount   int             `json:"specs"`
}

func (PlanAwaitingApproval) Kind() string { return "plan.awaiting_approval" }

// WireData is Loopr's plan.awaiting_approval: the plan and its specs.
func (e PlanAwaitingApproval) WireData() any {
	return struct {
		ID         string          `json:"id"`
		Content    string          `json:"content"`
		Specs      json.RawMessage `json:"specs"`
		ApprovalID string          `json:"approval_id"`
	}{e.ID, e.Content, e.Specs, e.ApprovalID}
}

// PlanApproved: a plan was allowed; SpecsSpawned is the number of its
// specs. By, BySession and ByPid are who allowed it, as in
// approval.resolved (Loopr's client reads id and specs_spawned).
type PlanApproved struct {
	ID           string `json:"id"`
	ApprovalID   string `json:"approval_id"`
	SpecsSpawned int    `json:"specs_spawned"`
	By           string `json:"by"`
	BySession    string `json:"by_session,omitempty"`
	ByPid        int32  `json:"by_pid,omitempty"`
}

func (PlanApproved) Kind() string { return "plan.approved" }

// PlanRejected: a plan was denied, for Reason, by By (as in
// approval.resolved).
type PlanRejected struct {
	ID         string `json:"id"`
	ApprovalID string `json:"approval_id"`
	Reason     string `json:"reason"`
	By         string `json:"by"`
	BySession  string `json:"by_session,omitempty"`
	ByPid      int32  `json:"by_pid,omitempty"`
}

func (PlanRejected) Kind() string { return "plan.rejected" }

// PlanIterated: a plan was sent back with Feedback (resolved Reply), by
// By (as in approval.resolved).
type PlanIterated struct {
	ID         string `json:"id"`
	ApprovalID string `json:"approval_id"`
	Feedback   string `json:"feedback"`
	By         string `json:"by"`
	BySession  string `json:"by_session,omitempty"`
	ByPid      int32  `json:"by_pid,omitempty"`
}

func (PlanIterated) Kind() string { return "plan.iterated" }

func init() {
	eventlog.Register(ApprovalRequested{}, ApprovalResolved{}, ApprovalTimedOut{}, ApprovalCancelled{},
		ApprovalAutoResolved{}, ApprovalRuleAdded{}, ApprovalRuleDeleted{}, ApprovalRecovered{},
		ApprovalWriteFailed{}, PlanAwaitingApproval{}, PlanApproved{}, PlanRejected{}, PlanIterated{})
}
