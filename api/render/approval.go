package render

import (
	"strings"

	"github.com/orchestrd/orchestrd/api"
)

// ApprovalSummary is one line saying what an approval asks: a plan's (or a
// merge's) first line that is not blank, else what the tool call does
// (api.ToolSummary: a Bash command, the file a Read/Edit/Write touches...);
// "" when there is nothing to say.
func ApprovalSummary(a api.Approval) string {
	if a.Kind == api.KindPlan || a.Kind == api.KindMerge {
		for _, l := range strings.Split(a.Content, "\n") {
			if l = OneLine(l); l != "" {
				return l
			}
		}
		return ""
	}
	return ToolSummary(a.ToolName, a.ToolInput)
}

// ApprovalTool is what an approval's tool column says: a plan's or a
// merge's kind, else the tool's name on one line ("" when none).
func ApprovalTool(a api.Approval) string {
	if a.Kind == api.KindPlan || a.Kind == api.KindMerge {
		return a.Kind
	}
	return OneLine(a.ToolName)
}

// Decision is a finished approval's decision and who gave it, in words:
// "Allow by cli pid 4242", "Allow by rule r-1", "AlwaysAllow by ui
// session Xy3_abcd, recorded rule r-2", "cancelled: requester_gone";
// "-" while it has none.
func Decision(a api.Approval) string {
	r := a.Resolution
	if r == nil {
		return "-"
	}
	if r.Decision == "" {
		if r.Reason != "" {
			s := "cancelled: " + OneLine(r.Reason)
			if w := api.CancelWords(r.Reason); w != "" {
				s += " (" + w + ")"
			}
			return s
		}
		return "-"
	}
	s := string(r.Decision)
	switch {
	case r.By == api.ByRule && r.RuleID != "":
		s += " by rule " + r.RuleID
	case r.By != "":
		s += " by " + r.Who()
	}
	if r.RuleID != "" && r.By != api.ByRule {
		s += ", recorded rule " + r.RuleID
	}
	return OneLine(s)
}

// DecisionCell is Decision for a table's DECISION/BY column, without
// spaces around its parts: "Allow/cli pid 4242", "Deny/ui session
// Xy3_abcd", "Allow/rule r-1", "Timeout/timeout", "-/requester_gone";
// "-" while it has none.
func DecisionCell(a api.Approval) string {
	r := a.Resolution
	if r == nil {
		return "-"
	}
	if r.Decision == "" {
		return "-/" + dash(OneLine(r.Reason))
	}
	by := r.Who()
	if r.RuleID != "" && r.By == api.ByRule {
		by = "rule " + r.RuleID
	}
	return OneLine(string(r.Decision) + "/" + dash(by))
}

// Resolved says how an approval ended, after its id: "a-1 allowed", "a-1
// always allowed by ui session Xy3_abcd (rule r-2)", "a-1 cancelled
// (hook_no_verdict): WORDS". By the CLI is not said: the CLI asked.
func Resolved(a api.Approval) string {
	s := a.ID + " " + StateWords(string(a.State))
	r := a.Resolution
	if r == nil {
		return s
	}
	if r.By != "" && r.By != api.ByCLI {
		s += " by " + r.Who()
	}
	if a.State == api.ApprovalAlwaysAllowed && r.RuleID != "" {
		s += " (rule " + r.RuleID + ")"
	}
	if r.Reason != "" {
		s += " (" + r.Reason + ")"
		if w := api.CancelWords(r.Reason); w != "" {
			s += ": " + w
		}
	}
	return OneLine(s)
}

// RuleMatch is what an approval rule matches: "Bash(git status:*)",
// "Read", "Bash where command ~ ^git (status|diff)".
func RuleMatch(r api.ApprovalRule) string {
	s := r.Tool
	if r.Content != "" {
		s += "(" + r.Content + ")"
	}
	if r.InputField != "" {
		s += " where " + r.InputField + " ~ " + r.InputPattern
	}
	return OneLine(s)
}

// RuleScope is where an approval rule applies: "directory /src/x,
// session s-1"; "anywhere" when it is not scoped.
func RuleScope(r api.ApprovalRule) string {
	var parts []string
	if r.Cwd != "" {
		parts = append(parts, "directory "+r.Cwd)
	}
	if r.SessionID != "" {
		parts = append(parts, "session "+r.SessionID)
	}
	if len(parts) == 0 {
		return "anywhere"
	}
	return OneLine(strings.Join(parts, ", "))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
