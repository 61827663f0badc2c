package approvals

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Rules answer requests before anyone is asked: the config's
// ([[approvals.rules]], checked first, in order) and the ones AlwaysAllow
// recorded. Neither applies to plans.

// rule is a rule ready to match.
type rule struct {
	api.ApprovalRule
	input   *regexp.Regexp // config rules with an input match
	content matcher        // recorded rules with a content; nil: any input
	// nothing is set for a recorded rule whose content approvals cannot
	// interpret: it matches no request.
	nothing bool
}

// matcher matches a tool's input (a JSON object).
type matcher func(input map[string]any) bool

// configRules compiles the config's rules (Validate has checked them).
func configRules(rs []RuleConfig) ([]*rule, error) {
	out := make([]*rule, 0, len(rs))
	for i, rc := range rs {
		r := &rule{ApprovalRule: api.ApprovalRule{ID: fmt.Sprintf("config-%d", i+1), Origin: "config",
			Tool: rc.Tool, Cwd: rc.Cwd, Decision: rc.Decision, Message: rc.Message}}
		if rc.Input != nil {
			re, err := regexp.Compile(rc.Input.Pattern)
			if err != nil {
				return nil, fmt.Errorf("approvals.rules[%d].input.pattern: bad regular expression %q: %w", i+1, rc.Input.Pattern, err)
			}
			r.input, r.InputField, r.InputPattern = re, rc.Input.Field, rc.Input.Pattern
		}
		out = append(out, r)
	}
	return out, nil
}

// recordedRule makes a recorded rule ready to match.
func recordedRule(ar api.ApprovalRule) *rule {
	r := &rule{ApprovalRule: ar}
	if ar.Content != "" {
		r.content = contentMatcher(ar.Tool, ar.Content)
		r.nothing = r.content == nil
	}
	return r
}

// matches reports whether r answers req; input is req's tool_input decoded
// (nil if it is not a JSON object).
func (r *rule) matches(req *Request, input map[string]any) bool {
	if r.nothing {
		return false
	}
	if ok, _ := path.Match(r.Tool, req.ToolName); !ok {
		return false
	}
	if r.SessionID != "" && r.SessionID != req.SessionID {
		return false
	}
	if r.Cwd != "" {
		if r.Origin == "config" {
			if !globMatch(r.Cwd, req.Cwd) {
				return false
			}
		} else if req.Cwd != r.Cwd && !strings.HasPrefix(req.Cwd, strings.TrimSuffix(r.Cwd, "/")+"/") {
			return false
		}
	}
	if r.input != nil {
		s, ok := input[r.InputField].(string)
		if !ok || !r.input.MatchString(s) {
			return false
		}
	}
	if r.content != nil && (input == nil || !r.content(input)) {
		return false
	}
	return true
}

// contentMatcher interprets a Claude Code rule content for tool; nil when
// it cannot:
//   - Bash: "X:*" matches the command X and X followed by a space and
//     anything; any other content is the exact command;
//   - WebFetch: "domain:H" matches a url whose host is H;
//   - Read, Edit, Write, MultiEdit, NotebookEdit: a path glob ("**" any
//     number of directories) on file_path, notebook_path or path; the
//     glob is absolute by the time a rule is recorded (see absContent).
func contentMatcher(tool, content string) matcher {
	switch tool {
	case "Bash":
		if pre, ok := strings.CutSuffix(content, ":*"); ok {
			return func(in map[string]any) bool {
				c, _ := in["command"].(string)
				return c == pre || strings.HasPrefix(c, pre+" ")
			}
		}
		return func(in map[string]any) bool {
			c, _ := in["command"].(string)
			return c == content
		}
	case "WebFetch":
		host, ok := strings.CutPrefix(content, "domain:")
		if !ok || host == "" {
			return nil
		}
		return func(in map[string]any) bool {
			s, _ := in["url"].(string)
			u, err := url.Parse(s)
			return err == nil && strings.EqualFold(u.Hostname(), host)
		}
	case "Read", "Edit", "Write", "MultiEdit", "NotebookEdit":
		if !strings.HasPrefix(content, "/") || checkGlob(content) != nil {
			return nil
		}
		return func(in map[string]any) bool {
			for _, f := range []string{"file_path", "notebook_path", "path"} {
				if p, ok := in[f].(string); ok && p != "" {
					return globMatch(content, path.Clean(p))
				}
			}
			return false
		}
	}
	return nil
}

// absContent makes a path rule's content absolute, as Claude Code reads
// it: "//p" is /p, "~/p" is under the home, a relative glob is under the
// cwd the rule came from ("/p" is taken as absolute too). Other contents
// are returned as they are.
func absContent(tool, content, cwd string) string {
	switch tool {
	case "Read", "Edit", "Write", "MultiEdit", "NotebookEdit":
	default:
		return content
	}
	switch {
	case strings.HasPrefix(content, "//"):
		return content[1:]
	case strings.HasPrefix(content, "/"):
		return content
	case strings.HasPrefix(content, "~/"):
		if h, err := os.UserHomeDir(); err == nil {
			return path.Join(h, content[2:])
		}
		return content
	case cwd != "" && strings.HasPrefix(cwd, "/"):
		return path.Join(cwd, content)
	}
	return content
}

// checkGlob checks every segment of a slash-separated glob.
func checkGlob(g string) error {
	for _, seg := range strings.Split(g, "/") {
		if _, err := path.Match(seg, ""); err != nil {
			return err
		}
	}
	return nil
}

// globMatch matches a slash-separated name against a glob whose segments
// are path.Match patterns, "**" matching any number of segments (none
// included).
func globMatch(glob, name string) bool {
	return matchSegs(strings.Split(glob, "/"), strings.Split(name, "/"))
}

func matchSegs(g, n []string) bool {
	for len(g) > 0 {
		if g[0] == "**" {
			for i := 0; i <= len(n); i++ {
				if matchSegs(g[1:], n[i:]) {
					return true
				}
			}
			return false
		}
		if len(n) == 0 {
			return false
		}
		if ok, _ := path.Match(g[0], n[0]); !ok {
			return false
		}
		g, n = g[1:], n[1:]
	}
	return len(n) == 0
}

// suggestionRules are the rules an AlwaysAllow with suggestion s records
// for approval a; none for a suggestion that is not a rule (setMode, ...),
// which is still sent back to the requester.
//   - {"type":"toolAlwaysAllow","tool":"Bash"} (vibe-reachout's spec): the
//     tool, unscoped;
//   - {"type":"addRules","rules":[{"toolName":..,"ruleContent":..}],
//     "behavior":"allow"|"deny","destination":..} (Claude Code's): one
//     rule per entry, scoped by destination: session to a.SessionID,
//     localSettings and projectSettings to a.Cwd, userSettings (and
//     cliArg) unscoped.
func suggestionRules(a api.Approval, s json.RawMessage, newID func() string, now time.Time) []api.ApprovalRule {
	var sg struct {
		Type        string `json:"type"`
		Tool        string `json:"tool"`
		Behavior    string `json:"behavior"`
		Destination string `json:"destination"`
		Rules       []struct {
			ToolName    string `json:"toolName"`
			RuleContent string `json:"ruleContent"`
		} `json:"rules"`
	}
	if json.Unmarshal(s, &sg) != nil {
		return nil
	}
	base := api.ApprovalRule{Origin: "always_allow", Decision: "allow", Suggestion: s, FromApproval: a.ID, CreatedAt: now}
	switch sg.Type {
	case "toolAlwaysAllow":
		if sg.Tool == "" {
			return nil
		}
		r := base
		r.ID, r.Tool = newID(), sg.Tool
		return []api.ApprovalRule{r}
	case "addRules":
		switch sg.Behavior {
		case "allow", "deny":
			base.Decision = sg.Behavior
		case "":
		default:
			return nil // "ask": nothing to answer at once
		}
		switch sg.Destination {
		case "session":
			if a.SessionID == "" {
				return nil
			}
			base.SessionID = a.SessionID
		case "localSettings", "projectSettings":
			if a.Cwd == "" {
				return nil
			}
			base.Cwd = a.Cwd
		}
		var out []api.ApprovalRule
		for _, e := range sg.Rules {
			if e.ToolName == "" {
				continue
			}
			r := base
			r.ID, r.Tool, r.Content = newID(), e.ToolName, absContent(e.ToolName, e.RuleContent, a.Cwd)
			out = append(out, r)
		}
		return out
	}
	return nil
}
