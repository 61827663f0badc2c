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

// matcher matches a request.
type matcher func(p *probe) bool

// probe is a request as rules match it: its tool_input decoded once, and
// a Bash command split once, when a rule first asks.
type probe struct {
	req   *Request
	input map[string]any // nil if tool_input is not a JSON object
	shell *shellCommand
}

func newProbe(req *Request) *probe {
	p := &probe{req: req}
	_ = json.Unmarshal(req.ToolInput, &p.input)
	return p
}

// bash is the request's Bash command ("" for another tool) and, split,
// what the shell would run.
func (p *probe) bash() (string, *shellCommand) {
	if p.req.ToolName != "Bash" {
		return "", nil
	}
	c, _ := p.input["command"].(string)
	if p.shell == nil {
		p.shell = splitShell(c)
	}
	return c, p.shell
}

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
		r.content = contentMatcher(ar.Tool, ar.Content, ar.Decision == "deny")
		r.nothing = r.content == nil
	}
	return r
}

// matches reports whether r answers p's request.
func (r *rule) matches(p *probe) bool {
	if r.nothing {
		return false
	}
	req := p.req
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
	if r.input != nil && !r.inputMatches(p) {
		return false
	}
	if r.content != nil && (p.input == nil || !r.content(p)) {
		return false
	}
	return true
}

// inputMatches matches a config rule's regular expression. On a Bash
// command it is matched as a Bash content rule is: an allow rule's against
// every part of a command the splitter vouches for, a deny rule's against
// the whole command or any part. Other fields and tools: the field's
// value.
func (r *rule) inputMatches(p *probe) bool {
	s, ok := p.input[r.InputField].(string)
	if !ok {
		return false
	}
	if r.InputField != "command" || p.req.ToolName != "Bash" {
		return r.input.MatchString(s)
	}
	_, sh := p.bash()
	if r.Decision == "deny" {
		return r.input.MatchString(s) || sh.any(r.input.MatchString)
	}
	return sh.every(r.input.MatchString)
}

// contentMatcher interprets a Claude Code rule content for tool (for a
// deny rule if deny); nil when it cannot:
//   - Bash: "X:*" matches the command X and X followed by a space and
//     anything; any other content is the exact command. As Claude Code
//     does, a command is split into the simple commands it runs (see
//     splitShell): an allow rule answers it when it answers every one,
//     and none is opaque (a substitution, a redirection to a file, ...);
//     an exact rule also answers the very command it names. A deny rule
//     answers the whole command or any part, nested ones included;
//   - WebFetch: "domain:H" matches a url whose host is H;
//   - Read, Edit, Write, MultiEdit, NotebookEdit: a path glob ("**" any
//     number of directories) on file_path, notebook_path or path; the
//     glob is absolute by the time a rule is recorded (see absContent).
func contentMatcher(tool, content string, deny bool) matcher {
	switch tool {
	case "Bash":
		return bashMatcher(content, deny)
	case "WebFetch":
		host, ok := strings.CutPrefix(content, "domain:")
		if !ok || host == "" {
			return nil
		}
		return func(p *probe) bool {
			s, _ := p.input["url"].(string)
			u, err := url.Parse(s)
			return err == nil && strings.EqualFold(u.Hostname(), host)
		}
	case "Read", "Edit", "Write", "MultiEdit", "NotebookEdit":
		if !strings.HasPrefix(content, "/") || checkGlob(content) != nil {
			return nil
		}
		return func(p *probe) bool {
			for _, f := range []string{"file_path", "notebook_path", "path"} {
				if s, ok := p.input[f].(string); ok && s != "" {
					return globMatch(content, path.Clean(s))
				}
			}
			return false
		}
	}
	return nil
}

// bashMatcher is a Bash rule's content: "X:*" or an exact command.
func bashMatcher(content string, deny bool) matcher {
	pre, prefix := strings.CutSuffix(content, ":*")
	ok := func(c string) bool { return c == content }
	if prefix {
		ok = func(c string) bool { return c == pre || strings.HasPrefix(c, pre+" ") }
	}
	return func(p *probe) bool {
		c, sh := p.bash()
		switch {
		case sh == nil:
			return false
		case deny:
			return ok(c) || sh.any(ok)
		case !prefix && c == content:
			return true
		}
		return sh.every(ok)
	}
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
