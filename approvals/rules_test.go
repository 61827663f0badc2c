package approvals

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Every suggestion form makes the rules the contract says, and each rule
// matches the requests it should and no others.
func TestSuggestionRules(t *testing.T) {
	home, _ := os.UserHomeDir()
	from := api.Approval{ID: "a-1", ToolName: "Bash", Cwd: "/work/p", SessionID: "s1"}
	type probe struct {
		tool, input, cwd, session string
		want                      bool
	}
	for _, tc := range []struct {
		name       string
		suggestion string
		rules      []api.ApprovalRule // ID, Origin, Suggestion, FromApproval, CreatedAt not compared
		probes     []probe
	}{
		{"spec toolAlwaysAllow", `{"type":"toolAlwaysAllow","tool":"Bash"}`,
			[]api.ApprovalRule{{Tool: "Bash", Decision: "allow"}},
			[]probe{{"Bash", `{"command":"anything"}`, "/else", "s9", true}, {"Read", `{}`, "/work/p", "s1", false}}},
		{"addRules session, Bash prefix", `{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"git status:*"}],"behavior":"allow","destination":"session"}`,
			[]api.ApprovalRule{{Tool: "Bash", Content: "git status:*", SessionID: "s1", Decision: "allow"}},
			[]probe{
				{"Bash", `{"command":"git status"}`, "/x", "s1", true},
				{"Bash", `{"command":"git status -s"}`, "/x", "s1", true},
				{"Bash", `{"command":"git statusx"}`, "/x", "s1", false},
				{"Bash", `{"command":"git status"}`, "/x", "s2", false},
				{"Bash", `{"command":"git push"}`, "/x", "s1", false},
			}},
		{"addRules localSettings, Bash exact", `{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"npm test"}],"behavior":"allow","destination":"localSettings"}`,
			[]api.ApprovalRule{{Tool: "Bash", Content: "npm test", Cwd: "/work/p", Decision: "allow"}},
			[]probe{
				{"Bash", `{"command":"npm test"}`, "/work/p", "", true},
				{"Bash", `{"command":"npm test"}`, "/work/p/sub", "", true},
				{"Bash", `{"command":"npm test"}`, "/work/px", "", false},
				{"Bash", `{"command":"npm test --all"}`, "/work/p", "", false},
			}},
		{"addRules projectSettings, WebFetch domain", `{"type":"addRules","rules":[{"toolName":"WebFetch","ruleContent":"domain:docs.rs"}],"behavior":"allow","destination":"projectSettings"}`,
			[]api.ApprovalRule{{Tool: "WebFetch", Content: "domain:docs.rs", Cwd: "/work/p", Decision: "allow"}},
			[]probe{
				{"WebFetch", `{"url":"https://docs.rs/tokio"}`, "/work/p", "", true},
				{"WebFetch", `{"url":"https://evil.example/docs.rs"}`, "/work/p", "", false},
				{"WebFetch", `{"url":"https://docs.rs/x"}`, "/other", "", false},
			}},
		{"addRules userSettings, several rules, relative path glob", `{"type":"addRules","rules":[{"toolName":"Read","ruleContent":"src/**"},{"toolName":"Edit","ruleContent":"//etc/*.conf"},{"toolName":"Write","ruleContent":"~/notes/*.md"}],"behavior":"allow","destination":"userSettings"}`,
			[]api.ApprovalRule{{Tool: "Read", Content: "/work/p/src/**", Decision: "allow"}, {Tool: "Edit", Content: "/etc/*.conf", Decision: "allow"},
				{Tool: "Write", Content: path.Join(home, "notes/*.md"), Decision: "allow"}},
			[]probe{
				{"Read", `{"file_path":"/work/p/src/a/b/c.go"}`, "/anywhere", "", true},
				{"Read", `{"file_path":"/work/p/src"}`, "/anywhere", "", true},
				{"Read", `{"file_path":"/work/p/src/../secret"}`, "/anywhere", "", false},
				{"Read", `{"file_path":"/work/p/docs/x"}`, "/anywhere", "", false},
				{"Edit", `{"file_path":"/etc/nginx.conf"}`, "/", "", true},
				{"Edit", `{"file_path":"/etc/nginx/x.conf"}`, "/", "", false},
				{"Write", `{"file_path":"` + path.Join(home, "notes/todo.md") + `"}`, "/", "", true},
			}},
		{"addRules NotebookEdit path field", `{"type":"addRules","rules":[{"toolName":"NotebookEdit","ruleContent":"/nb/*.ipynb"}],"behavior":"allow","destination":"userSettings"}`,
			[]api.ApprovalRule{{Tool: "NotebookEdit", Content: "/nb/*.ipynb", Decision: "allow"}},
			[]probe{{"NotebookEdit", `{"notebook_path":"/nb/a.ipynb"}`, "/", "", true}, {"NotebookEdit", `{"notebook_path":"/nb/a.py"}`, "/", "", false}}},
		{"addRules deny behavior", `{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"rm:*"}],"behavior":"deny","destination":"userSettings"}`,
			[]api.ApprovalRule{{Tool: "Bash", Content: "rm:*", Decision: "deny"}},
			[]probe{{"Bash", `{"command":"rm -rf x"}`, "/", "", true}}},
		{"addRules a content it cannot read: matches nothing", `{"type":"addRules","rules":[{"toolName":"mcp__db__query","ruleContent":"select *"}],"behavior":"allow","destination":"userSettings"}`,
			[]api.ApprovalRule{{Tool: "mcp__db__query", Content: "select *", Decision: "allow"}},
			[]probe{{"mcp__db__query", `{"sql":"select *"}`, "/", "", false}}},
		{"addRules without content: the whole tool", `{"type":"addRules","rules":[{"toolName":"Glob"}],"behavior":"allow","destination":"userSettings"}`,
			[]api.ApprovalRule{{Tool: "Glob", Decision: "allow"}},
			[]probe{{"Glob", `{"pattern":"*"}`, "/", "", true}}},
		{"setMode: no rule", `{"type":"setMode","mode":"acceptEdits","destination":"session"}`, nil, nil},
		{"ask behavior: no rule", `{"type":"addRules","rules":[{"toolName":"Bash"}],"behavior":"ask","destination":"session"}`, nil, nil},
		{"not JSON: no rule", `nope`, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			rs := suggestionRules(from, json.RawMessage(tc.suggestion), func() string { n++; return fmt.Sprintf("r-%d", n) }, time.Now())
			if len(rs) != len(tc.rules) {
				t.Fatalf("rules %+v, want %+v", rs, tc.rules)
			}
			for i, r := range rs {
				w := tc.rules[i]
				if r.Tool != w.Tool || r.Content != w.Content || r.Cwd != w.Cwd || r.SessionID != w.SessionID || r.Decision != w.Decision ||
					r.Origin != "always_allow" || r.FromApproval != "a-1" || r.ID != fmt.Sprintf("r-%d", i+1) || string(r.Suggestion) != tc.suggestion {
					t.Errorf("rule %d: %+v, want %+v", i, r, w)
				}
			}
			for _, p := range tc.probes {
				req := Request{Kind: api.KindTool, ToolName: p.tool, ToolInput: json.RawMessage(p.input), Cwd: p.cwd, SessionID: p.session}
				got := false
				for _, r := range rs {
					got = got || recordedRule(r).matches(newProbe(&req))
				}
				if got != p.want {
					t.Errorf("%s %s (cwd %s, session %s): matched %v, want %v", p.tool, p.input, p.cwd, p.session, got, p.want)
				}
			}
		})
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		glob, name string
		want       bool
	}{
		{"/a/**", "/a", true}, {"/a/**", "/a/b/c", true}, {"/a/**/z", "/a/z", true}, {"/a/**/z", "/a/b/c/z", true},
		{"/a/*", "/a/b/c", false}, {"/a/*.go", "/a/x.go", true}, {"/a/**/*.go", "/a/b/x.py", false}, {"/work/*", "/work", false},
	} {
		if got := globMatch(tc.glob, tc.name); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.glob, tc.name, got, tc.want)
		}
	}
}

// Validate names every problem with its full key, rules counted from 1.
func TestValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Rules = []RuleConfig{{Tool: "Bash", Input: &InputMatch{Field: "command", Pattern: "^git "}, Cwd: "/w/**", Decision: "allow"}}
	if errs := Validate("approvals", ok); len(errs) != 0 {
		t.Fatalf("a good config: %v", errs)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want []string
	}{
		{"timeout", func(c *Config) { c.Timeout.Duration = 0 }, []string{"approvals.timeout must be > 0"}},
		{"notify_timeout", func(c *Config) { c.NotifyTimeout.Duration = -time.Second }, []string{"approvals.notify_timeout must be > 0"}},
		{"notify_command", func(c *Config) { c.NotifyCommand = []string{""} }, []string{"approvals.notify_command[0]"}},
		{"rule without tool or decision", func(c *Config) { c.Rules = append(c.Rules, RuleConfig{}) },
			[]string{"approvals.rules[2].tool is required", "approvals.rules[2].decision is required"}},
		{"bad glob", func(c *Config) { c.Rules[0].Tool = "Ba[sh" }, []string{`approvals.rules[1].tool: bad glob "Ba[sh"`}},
		{"bad cwd glob", func(c *Config) { c.Rules[0].Cwd = "/w/[" }, []string{`approvals.rules[1].cwd: bad glob "/w/["`}},
		{"bad regexp", func(c *Config) { c.Rules[0].Input.Pattern = "^git (" }, []string{`approvals.rules[1].input.pattern: bad regular expression "^git ("`}},
		{"input without field", func(c *Config) { c.Rules[0].Input.Field = "" }, []string{"approvals.rules[1].input.field is required"}},
		{"decision", func(c *Config) { c.Rules[0].Decision = "maybe" }, []string{`approvals.rules[1].decision must be "allow" or "deny", got "maybe"`}},
		{"message on allow", func(c *Config) { c.Rules[0].Message = "m" }, []string{"approvals.rules[1].message"}},
	} {
		c := ok
		c.Rules = append([]RuleConfig(nil), ok.Rules...)
		in := *ok.Rules[0].Input
		c.Rules[0].Input = &in
		tc.mod(&c)
		errs := Validate("approvals", c)
		if len(errs) != len(tc.want) {
			t.Errorf("%s: %v, want %d errors", tc.name, errs, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(errs[i].Error(), w) {
				t.Errorf("%s: %q, want it to start %q", tc.name, errs[i], w)
			}
		}
	}
}
