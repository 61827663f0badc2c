package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
)

// The approvals inbox (pending first, each with Allow, Deny, Always allow
// and Reply; the history; the recorded rules) and one approval's page.
// Every button is approval.resolve or approval.rule_delete, as the CLI's
// approve, deny, reply and `approvals rules rm` are.

// apprKinds change what the inbox shows (not approval.write_failed
// or notify_failed: they change no approval's state).
var apprKinds = []string{"approval.requested", "approval.resolved", "approval.timed_out", "approval.cancelled",
	"approval.auto_resolved", "approval.rule_added", "approval.rule_deleted", "approval.recovered"}

// Form bounds: what the agent is told.
const (
	apprMaxMessage = 4 << 10
	apprMaxReply   = 16 << 10
)

func init() {
	register(&page{Name: "approvals", Title: "Approvals", Pattern: "/ui/approvals", Nav: true, Kinds: apprKinds,
		Data: apprInboxData})
	register(&page{Name: "approval", ByID: true, Title: "Approval", Pattern: "/ui/approvals/{id}",
		Kinds: []string{"approval.resolved", "approval.timed_out", "approval.cancelled", "approval.auto_resolved", "approval.recovered"},
		Data:  apprPageData})
	registerAction(&action{Name: "approval.resolve", Method: "approval.resolve", Params: apprResolveForm})
	registerAction(&action{Name: "approval.rule_delete", Method: "approval.rule_delete", Params: func(f url.Values) (any, error) {
		id, err := formID(f, "id")
		if err != nil {
			return nil, err
		}
		return map[string]any{"id": id}, nil
	}})
	funcs["apprLeft"] = func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return render.Duration(time.Until(t))
	}
	funcs["apprDecision"] = render.Decision
	funcs["apprRuleMatch"] = render.RuleMatch
	funcs["apprRuleScope"] = render.RuleScope
	funcs["apprPending"] = func(st api.ApprovalState) bool { return st == api.ApprovalPending }
	funcs["apprState"] = render.StateWords
}

// apprResolveForm is approval.resolve's params from a form: id, decision
// (Allow, Deny, AlwaysAllow, Reply), message (for the agent, optional),
// user_message (Reply's, required with it only), suggestion (the index of
// the permission suggestion AlwaysAllow applies).
func apprResolveForm(f url.Values) (any, error) {
	id, err := formID(f, "id")
	if err != nil {
		return nil, err
	}
	d := api.Decision(f.Get("decision"))
	switch d {
	case api.DecisionAllow, api.DecisionDeny, api.DecisionAlwaysAllow, api.DecisionReply:
	default:
		return nil, fmt.Errorf("decision: want Allow, Deny, AlwaysAllow or Reply, got %q", clipForm(string(d)))
	}
	msg, err := formText(f, "message", apprMaxMessage)
	if err != nil {
		return nil, err
	}
	reply, err := formText(f, "user_message", apprMaxReply)
	if err != nil {
		return nil, err
	}
	p := map[string]any{"id": id, "decision": d}
	if strings.TrimSpace(msg) != "" {
		p["message"] = msg
	}
	switch {
	case d == api.DecisionReply && strings.TrimSpace(reply) == "":
		return nil, fmt.Errorf("user_message: the reply is empty: write what the agent is told")
	case d == api.DecisionReply:
		p["user_message"] = reply
	case reply != "":
		return nil, fmt.Errorf("user_message goes with decision Reply, not %s", d)
	}
	if s := strings.TrimSpace(f.Get("suggestion")); s != "" {
		if d != api.DecisionAlwaysAllow {
			return nil, fmt.Errorf("suggestion goes with decision AlwaysAllow, not %s", d)
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 1000 {
			return nil, fmt.Errorf("suggestion: want the index of a permission suggestion, got %q", clipForm(s))
		}
		p["suggestion"] = n
	}
	return p, nil
}

// apprItem is an approval as the pages show it.
type apprItem struct {
	api.Approval
	Summary     string    // the command, the file, the URL: one line
	Input       string    // tool_input, indented
	Tool        *toolView // a tool's approval: its input as the agent's values
	SpecsCount  int       // a plan's
	Suggestions []apprSuggestionView
}

// apprSuggestionView is one permission suggestion: what Always allow with it
// records (Records false: it records no rule, the requester still hears
// it).
type apprSuggestionView struct {
	Index   int
	Text    string
	Records bool
}

// newApprItem is a as a page shows it; its tool input's diffs take from
// cells, the page's (toolDiffPageCells).
func newApprItem(a api.Approval, cells *int) apprItem {
	it := apprItem{Approval: a, Summary: render.ApprovalSummary(a)}
	if len(a.ToolInput) > 0 {
		var b bytes.Buffer
		if json.Indent(&b, a.ToolInput, "", "  ") == nil {
			it.Input = b.String()
		} else {
			it.Input = string(a.ToolInput)
		}
	}
	if a.Kind == api.KindTool || (a.Kind == "" && a.ToolName != "") {
		tv := newToolViewIn(a.ToolName, a.ToolInput, cells).withJSON(a.ToolInput, "json-"+a.ID)
		it.Tool = &tv
	}
	if a.Kind == api.KindPlan {
		var specs []json.RawMessage
		if json.Unmarshal(a.Specs, &specs) == nil {
			it.SpecsCount = len(specs)
		}
	}
	if a.Kind == api.KindTool {
		for i, s := range a.PermissionSuggestions {
			it.Suggestions = append(it.Suggestions, apprSuggestion(a, i, s))
		}
	}
	return it
}

// apprSuggestion says what Always allow with suggestion i records, as
// approvals records it (its suggestionRules): {"type":"toolAlwaysAllow",
// "tool":T} allows T anywhere; {"type":"addRules","rules":[...],
// "behavior","destination"} one rule per entry, scoped by destination
// (session: this session, localSettings/projectSettings: this directory,
// else anywhere); anything else records no rule.
func apprSuggestion(a api.Approval, i int, raw json.RawMessage) apprSuggestionView {
	v := apprSuggestionView{Index: i}
	var sg struct {
		Type        string `json:"type"`
		Tool        string `json:"tool"`
		Behavior    string `json:"behavior"`
		Destination string `json:"destination"`
		Mode        string `json:"mode"`
		Rules       []struct {
			ToolName    string `json:"toolName"`
			RuleContent string `json:"ruleContent"`
		} `json:"rules"`
	}
	other := func() apprSuggestionView {
		var b bytes.Buffer
		if json.Compact(&b, raw) != nil {
			b.Reset()
			b.Write(raw)
		}
		v.Text = "passes " + render.OneLine(b.String()) + " back to the agent; records no rule here"
		if sg.Type == "setMode" && sg.Mode != "" {
			v.Text = "switches the agent to mode " + sg.Mode + "; records no rule here"
		}
		return v
	}
	if json.Unmarshal(raw, &sg) != nil {
		return other()
	}
	switch sg.Type {
	case "toolAlwaysAllow":
		if sg.Tool == "" {
			return other()
		}
		v.Text, v.Records = "records: allow every "+sg.Tool+" call, in any directory and session", true
		return v
	case "addRules":
		verb := "allow"
		switch sg.Behavior {
		case "", "allow":
		case "deny":
			verb = "deny"
		default:
			return other()
		}
		scope := "in any directory and session"
		switch sg.Destination {
		case "session":
			if a.SessionID == "" {
				return other()
			}
			scope = "in this session (" + a.SessionID + ")"
		case "localSettings", "projectSettings":
			if a.Cwd == "" {
				return other()
			}
			scope = "in " + a.Cwd
		}
		var rs []string
		for _, r := range sg.Rules {
			if r.ToolName == "" {
				continue
			}
			if r.RuleContent == "" {
				rs = append(rs, r.ToolName)
			} else {
				rs = append(rs, r.ToolName+"("+r.RuleContent+")")
			}
		}
		if len(rs) == 0 {
			return other()
		}
		v.Text, v.Records = "records: "+verb+" "+strings.Join(rs, ", ")+" "+scope, true
		return v
	}
	return other()
}

// apprInbox is the inbox.
type apprInbox struct {
	Pending   []apprItem
	History   []apprItem
	Truncated bool   // more history than shown
	More      string // the URL showing more of it
	Rules     []api.ApprovalRule
	State     string // the history's filter
	States    []string
	Limit     int
	Problems  []string
}

const (
	apprHistory    = 50
	apprHistoryMax = 2000
)

var apprHistoryStates = []string{"allowed", "denied", "always_allowed", "replied", "timed_out", "cancelled"}

type apprList struct {
	Approvals []api.Approval `json:"approvals"`
	Truncated bool           `json:"truncated"`
}

func apprInboxData(ctx context.Context, s *Server, r *http.Request) (any, error) {
	q := r.URL.Query()
	v := apprInbox{State: q.Get("state"), States: apprHistoryStates, Limit: apprHistory}
	if v.State != "" && !api.ApprovalState(v.State).Terminal() {
		return v, api.Errorf(api.CodeInvalidParams, "state: not a finished approval's state: %q", clipForm(v.State))
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > apprHistoryMax {
			return v, api.Errorf(api.CodeInvalidParams, "limit: want 1 to %d, got %q", apprHistoryMax, clipForm(l))
		}
		v.Limit = n
	}
	var pending apprList
	if err := s.call(ctx, "approval.list", map[string]any{"state": "pending"}, &pending); err != nil {
		return v, err
	}
	cells := toolDiffPageCells
	for _, a := range pending.Approvals {
		v.Pending = append(v.Pending, newApprItem(a, &cells))
	}
	// The history: a finished state, or all of them (less the pending,
	// shown above: approval.list's "all" has them too).
	hp := map[string]any{"state": "all", "limit": v.Limit}
	if v.State != "" {
		hp["state"] = v.State
	}
	var hist apprList
	if err := s.call(ctx, "approval.list", hp, &hist); err != nil {
		v.Problems = append(v.Problems, "the history: "+err.Error())
	}
	for _, a := range hist.Approvals {
		if a.State != api.ApprovalPending {
			v.History = append(v.History, newApprItem(a, &cells))
		}
	}
	if hist.Truncated && v.Limit < apprHistoryMax {
		v.Truncated = true
		nq := url.Values{}
		if v.State != "" {
			nq.Set("state", v.State)
		}
		nq.Set("limit", strconv.Itoa(min(v.Limit*4, apprHistoryMax)))
		v.More = "/ui/approvals?" + nq.Encode() + "#history-h"
	}
	var rules struct {
		Rules []api.ApprovalRule `json:"rules"`
	}
	if err := s.call(ctx, "approval.rules", nil, &rules); err != nil {
		v.Problems = append(v.Problems, "the rules: "+err.Error())
	}
	v.Rules = rules.Rules
	return v, nil
}

// apprPage is one approval's page.
type apprPage struct {
	Item apprItem
}

func apprPageData(ctx context.Context, s *Server, r *http.Request) (any, error) {
	var res struct {
		Approval api.Approval `json:"approval"`
	}
	if _, err := s.getByPath(ctx, r, "an approval", "approval.get", &res); err != nil {
		return nil, err
	}
	cells := toolDiffPageCells
	return apprPage{Item: newApprItem(res.Approval, &cells)}, nil
}
