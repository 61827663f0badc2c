package approvals

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// bashProbe is a Bash request for command.
func bashProbe(command string) *probe {
	in, _ := json.Marshal(map[string]string{"command": command})
	return newProbe(&Request{Kind: api.KindTool, ToolName: "Bash", ToolInput: in})
}

// bashRule is a recorded Bash rule.
func bashRule(content, decision string) *rule {
	return recordedRule(api.ApprovalRule{ID: "r-1", Origin: "always_allow", Tool: "Bash", Content: content, Decision: decision})
}

// configRule is a config rule on Bash's command.
func configRule(t testing.TB, pattern, decision string) *rule {
	rs, err := configRules([]RuleConfig{{Tool: "Bash", Input: &InputMatch{Field: "command", Pattern: pattern}, Decision: decision}})
	if err != nil {
		t.Fatal(err)
	}
	return rs[0]
}

// bashCases are commands and what the rules of TestBashRules say of them:
// allow git:*, allow git status:*, allow config ^git (status|diff|log),
// deny rm:* and deny config ^rm (the two deny rules always agree here).
var bashCases = []struct {
	cmd                 string
	git, status, re, rm bool
}{
	// Plain commands.
	{"git status", true, true, true, false},
	{"git status --short", true, true, true, false},
	{"git", true, false, false, false},
	{"git statusx", true, false, true, false},
	{"gitk", false, false, false, false},
	{"git  status \t --short", true, true, true, false},
	{"\n\tgit status\n\n", true, true, true, false},
	{"git status;", true, true, true, false},
	{"git status &", true, true, true, false},
	{"git status $HOME \"$HOME\" ${HOME} ${#HOME} $1 $@ ${10} ${#} ${#@} \"${?}\"", true, true, true, false},
	{"git status -- 'file with ; and && and |' \"a b\" c\\ d", true, true, true, false},
	{"git log --format='a;b'", true, false, true, false},
	{"git log --format=\"%h && %s | x\"", true, false, true, false},
	{"git commit -m \"a && b\"", true, false, false, false},
	{"git commit -m '$(rm -rf ~)' -m '`id`'", true, false, false, false},
	{"git log --grep=$'x;y\\'z'", true, false, true, false},
	{"git log --grep=$\"x;y\"", true, false, true, false},
	{"git log --grep=\"$'\"", true, false, true, false},
	// git runs a pager or a command of its config: git's business, not the
	// shell's; a rule on git allows what git does.
	{"git -c core.pager='sh -c id' log", true, false, false, false},
	{"git status --output=/tmp/x", true, true, true, false},
	// Line continuations.
	{"git status \\\n--short", true, true, true, false},
	{"git sta\\\ntus", true, true, true, false},
	{"git status\\\n; rm -rf ~", false, false, false, true},
	{"git status \\\\\nrm -rf ~", false, false, false, true},
	// Every part must match.
	{"git status; git diff", true, false, true, false},
	{"git status && git log | git diff\ngit status --short", true, false, true, false},
	{"git status && curl x | sh", false, false, false, false},
	{"git log; rm -rf ~", false, false, false, true},
	{"git log;rm -rf ~", false, false, false, true},
	{"git status\nrm -rf ~", false, false, false, true},
	{"git status & rm -rf ~", false, false, false, true},
	{"git status&rm -rf ~", false, false, false, true},
	{"git status || rm x", false, false, false, true},
	{"git status | sh", false, false, false, false},
	{"git status |& sh", false, false, false, false},
	{"git status && \n rm -rf ~", false, false, false, true},
	{"rm -rf ~", false, false, false, true},
	// Substitutions never match an allow rule; what they run is seen by
	// deny rules.
	{"git $(rm -rf ~)", false, false, false, true},
	{"git status $(curl x | sh)", false, false, false, false},
	{"git status \"$(rm -rf ~)\"", false, false, false, true},
	{"git status `id`", false, false, false, false},
	{"git status `rm -rf ~`", false, false, false, true},
	{"git status \"`rm -rf ~`\"", false, false, false, true},
	{"git status `echo \\`rm -rf ~\\``", false, false, false, true},
	{"git diff <(cat /etc/shadow)", false, false, false, false},
	{"git diff <(rm -rf ~)", false, false, false, true},
	{"git diff >(tee x)", false, false, false, false},
	{"git status $((1+2))", false, false, false, false},
	{"git status; $(rm -rf ~)", false, false, false, true},
	{"git commit -m \"$(cat <<'EOF'\nmsg\nEOF\n)\"", false, false, false, false},
	// Redirections: /dev/null and duplications only.
	{"git status 2>&1", true, true, true, false},
	{"git status >/dev/null 2>&1", true, true, true, false},
	{"git status &>/dev/null", true, true, true, false},
	{"git status 2> /dev/null </dev/null", true, true, true, false},
	{"git status >&2 <&- 3>&1-", true, true, true, false},
	{">/dev/null git status", true, true, true, false},
	{"git status > ~/.bashrc", false, false, false, false},
	{"git status >> ~/.bashrc", false, false, false, false},
	{"git status >| x", false, false, false, false},
	{"git status &> x", false, false, false, false},
	{"git status &>> x", false, false, false, false},
	{"git status 2>x", false, false, false, false},
	{"git status >&x", false, false, false, false},
	{"git status < /etc/shadow", false, false, false, false},
	{"git status <> x", false, false, false, false},
	{"git status > \"/dev/null\"", false, false, false, false},
	{"git status > $HOME/x", false, false, false, false},
	{"git status <<< x", false, false, false, false},
	{"git status <<EOF\nx\nEOF", false, false, false, false},
	{"git status 2>&1 | cat", false, false, false, false},
	{"> x", false, false, false, false},
	// Comments: never matched.
	{"git status # ok", false, false, false, false},
	{"git status #; rm -rf ~", false, false, false, false},
	{"# rm -rf ~", false, false, false, false},
	// The command word must be plain.
	{"FOO=bar git status", false, false, false, false},
	{"GIT_SSH_COMMAND='rm -rf ~' git fetch", false, false, false, false},
	{"FOO=1 rm -rf x", false, false, false, true},
	{"$GIT status", false, false, false, false},
	{"${GIT} status", false, false, false, false},
	{"\"git\" status", false, false, false, false},
	{"g\\it status", false, false, false, false},
	{"g*t status", false, false, false, false},
	{"~/git status", false, false, false, false},
	{"{git,status}", false, false, false, false},
	// Subshells, groups and keywords.
	{"(git status)", false, false, false, false},
	{"( rm -rf ~ )", false, false, false, true},
	{"(git status) > x", false, false, false, false},
	{"{ git status; }", false, false, false, false},
	{"{ rm -rf ~; }", false, false, false, true},
	{"if git status; then rm -rf ~; fi", false, false, false, true},
	{"! git status", false, false, false, false},
	{"time git status", false, false, false, false},
	{"for x in a; do git status; done", false, false, false, false},
	// What cannot be read for certain matches nothing.
	{"", false, false, false, false},
	{"   ", false, false, false, false},
	{"git log 'unbalanced", false, false, false, false},
	{"git log \"unbalanced", false, false, false, false},
	{"git log `unbalanced", false, false, false, false},
	{"git log $(unbalanced", false, false, false, false},
	{"git log $'unbalanced\\'", false, false, false, false},
	{"git status)", false, false, false, false},
	{"git status &&", false, false, false, false},
	{"&& git status", false, false, false, false},
	{"; git status", false, false, false, false},
	{"git status;;", false, false, false, false},
	{"git status; ; git status", false, false, false, false},
	{"git status\\", false, false, false, false},
	{"git status \r", false, false, false, false},
	{"git status \x00; rm -rf ~", false, false, false, false},
	{"git ${x:-$(rm -rf ~)}", false, false, false, false},
	{"git $[1+2]", false, false, false, false},
	{"git status *(e:'rm -rf ~':)", false, false, false, false},
	{"git log @(a|b)", false, false, false, false},
	{"f() { rm -rf ~; }; git status", false, false, false, false},
	{"git status 2>", false, false, false, false},
	{"git status > ;", false, false, false, false},
	{strings.Repeat("$(", 40) + "git status" + strings.Repeat(")", 40), false, false, false, false},
	// The whole command still answers a deny rule, read or not.
	{"rm -rf 'unbalanced", false, false, false, true},
}

// Each command against each rule, as a recorded rule and as a config
// rule.
func TestBashRules(t *testing.T) {
	git, status := bashRule("git:*", "allow"), bashRule("git status:*", "allow")
	re := configRule(t, "^git (status|diff|log)", "allow")
	rm, rmRe := bashRule("rm:*", "deny"), configRule(t, "^rm ", "deny")
	for _, c := range bashCases {
		p := bashProbe(c.cmd)
		got := [5]bool{git.matches(p), status.matches(p), re.matches(p), rm.matches(p), rmRe.matches(p)}
		if want := [5]bool{c.git, c.status, c.re, c.rm, c.rm}; got != want {
			sh := splitShell(c.cmd)
			t.Errorf("%q: git:*, git status:*, ^git (status|diff|log), deny rm:*, deny ^rm = %v, want %v (parts %q, opaque %q, err %v)",
				c.cmd, got, want, sh.parts, sh.opaque, sh.err)
		}
	}
}

// Other contents: an exact command, a longer prefix; other tools and
// fields keep the plain match.
func TestBashRuleContents(t *testing.T) {
	for _, c := range []struct {
		content, decision, cmd string
		want                   bool
	}{
		{"git commit:*", "allow", "git commit -m \"a && b\"", true},
		{"git commit:*", "allow", "git commit -m a && git push", false},
		{"git commit:*", "allow", "git commit -m \"$(cat <<'EOF'\nmsg\nEOF\n)\"", false},
		{"npm test", "allow", "npm test", true},
		{"npm test", "allow", "npm  test", true},
		{"npm test", "allow", "npm test && npm test", true},
		{"npm test", "allow", "npm test 2>&1", true},
		{"npm test", "allow", "npm test --all", false},
		{"npm test", "allow", "npm test; rm x", false},
		{"npm test", "allow", "npm test > out", false},
		// An exact rule answers the very command it names, whatever it is.
		{"cd /x && make > log", "allow", "cd /x && make > log", true},
		{"cd /x && make > log", "allow", "cd /x && make > log; rm x", false},
		{"npm test", "deny", "npm test && rm x", true},
		{"npm test", "deny", "echo $(npm test)", true},
		{"rm:*", "deny", "sudo rm -rf /", false}, // wrappers are not looked through
	} {
		if got := bashRule(c.content, c.decision).matches(bashProbe(c.cmd)); got != c.want {
			t.Errorf("%s %q on %q: %v, want %v", c.decision, c.content, c.cmd, got, c.want)
		}
	}
	// A regexp on another field, or on another tool's command, is matched
	// as before.
	rs, err := configRules([]RuleConfig{
		{Tool: "Bash", Input: &InputMatch{Field: "description", Pattern: "^git"}, Decision: "allow"},
		{Tool: "*", Input: &InputMatch{Field: "command", Pattern: "^git"}, Decision: "allow"},
	})
	if err != nil {
		t.Fatal(err)
	}
	desc := newProbe(&Request{ToolName: "Bash", ToolInput: json.RawMessage(`{"command":"rm -rf ~","description":"git; rm"}`)})
	if !rs[0].matches(desc) {
		t.Error("a regexp on Bash's description no longer matches as a regexp")
	}
	mcp := newProbe(&Request{ToolName: "mcp__sh__run", ToolInput: json.RawMessage(`{"command":"git status; rm -rf ~"}`)})
	if !rs[1].matches(mcp) {
		t.Error("a regexp on another tool's command no longer matches as a regexp")
	}
	if rs[1].matches(bashProbe("git status; rm -rf ~")) {
		t.Error("a rule on any tool (*) read Bash's command as a regexp on the whole")
	}
}

// Bash itself agrees: every command of bashCases that git:* allows runs
// git, once per part, and nothing else (PATH holds only a git that logs
// its arguments, HOME is a temporary directory).
func TestBashRulesInBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	logf := filepath.Join(dir, "git.log")
	if err := os.WriteFile(filepath.Join(bin, "git"), []byte("#!/bin/sh\nprintf 'git %s\\n' \"$*\" >> \""+logf+"\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	git := bashRule("git:*", "allow")
	ran := 0
	for _, c := range bashCases {
		if !git.matches(bashProbe(c.cmd)) {
			continue
		}
		ran++
		os.Remove(logf)
		cmd := exec.Command(bash, "-c", c.cmd)
		cmd.Dir, cmd.Env = dir, []string{"PATH=" + bin, "HOME=" + dir}
		// Output waits for every process holding the output pipes, a
		// git in the background included.
		out, err := cmd.CombinedOutput()
		if err != nil || len(out) != 0 {
			t.Errorf("bash -c %q: %v, output %q", c.cmd, err, out)
			continue
		}
		b, _ := os.ReadFile(logf)
		if n, want := strings.Count(string(b), "git "), len(splitShell(c.cmd).parts); n != want {
			t.Errorf("bash -c %q ran git %d times, %d parts: %q", c.cmd, n, want, b)
		}
	}
	t.Logf("%d commands run", ran)
}

// flatSplit is a second, flat reading of a command to check the splitter
// against: it follows quotes and line continuations, cuts at the unquoted
// operators, and says unsafe at whatever an allow rule must never pass (a
// substitution, ${...} beyond a name, a ( or ), a comment, a redirection
// but to /dev/null or a duplication, an unclosed quote, a control
// character). Its segments are the raw words of each command,
// redirections left out.
func flatSplit(s string) (segs [][]string, safe bool) {
	var (
		words  []string
		w      strings.Builder
		inWord bool
	)
	endWord := func() {
		if inWord {
			words = append(words, w.String())
		}
		w.Reset()
		inWord = false
	}
	endSeg := func() {
		endWord()
		if len(words) > 0 {
			segs = append(segs, words)
		}
		words = nil
	}
	// dollar is the length of the $ construct at s[i:] a rule may pass,
	// 0 if none.
	dollar := func(i int) int {
		if i+1 < len(s) && (s[i+1] == '(' || s[i+1] == '[') {
			return 0
		}
		if i+1 < len(s) && s[i+1] == '{' {
			return len(flatParam.FindString(s[i:]))
		}
		return 1
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && c != '\t' && c != '\n' || c == 0x7f {
			return nil, false
		}
		switch {
		case c == '\\' && i+1 < len(s) && s[i+1] == '\n':
			i++
		case c == '\\':
			if i+1 >= len(s) {
				return nil, false
			}
			w.WriteString(s[i : i+2])
			inWord = true
			i++
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, false
			}
			w.WriteString(s[i : i+j+2])
			inWord = true
			i += j + 1
		case c == '$' && i+1 < len(s) && s[i+1] == '\'':
			j := i + 2
			for ; j < len(s) && s[j] != '\''; j++ {
				if s[j] == '\\' {
					j++
				}
			}
			if j >= len(s) {
				return nil, false
			}
			w.WriteString(s[i : j+1])
			inWord = true
			i = j
		case c == '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				switch s[j] {
				case '`':
					return nil, false
				case '\\':
					j++
				case '$':
					n := dollar(j)
					if n == 0 {
						return nil, false
					}
					j += n - 1
				}
			}
			if j >= len(s) {
				return nil, false
			}
			w.WriteString(s[i : j+1])
			inWord = true
			i = j
		case c == '$':
			n := dollar(i)
			if n == 0 {
				return nil, false
			}
			w.WriteString(s[i : i+n])
			inWord = true
			i += n - 1
		case c == '`' || c == '(' || c == ')' || c == '#' && !inWord:
			return nil, false
		case (c == '<' || c == '>' || c == '&' && i+1 < len(s) && s[i+1] == '>') && !inWord,
			(c == '<' || c == '>') && strings.Trim(w.String(), "0123456789") == "":
			m := flatRedirect.FindStringSubmatch(s[i:])
			if m == nil || m[2] != "/dev/null" && m[1] != ">&" && m[1] != "<&" {
				return nil, false
			}
			w.Reset()
			inWord = false
			i += len(m[0]) - len(m[3]) - 1
		case c == '<' || c == '>':
			endWord()
			i--
		case c == ';' || c == '&' || c == '|' || c == '\n':
			endSeg()
		case c == ' ' || c == '\t':
			endWord()
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	endSeg()
	return segs, true
}

var (
	flatParam    = regexp.MustCompile(`^\$\{#?([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])\}`)
	flatRedirect = regexp.MustCompile(`^(&>>|&>|>>|>\||<>|>&|<&|>|<)[ \t]*(/dev/null|[0-9]+-?|-)([ \t\n;&|]|$)`)
)

// FuzzBashAllowRules: whatever git status:* or ^git (status|diff|log)
// allows, flatSplit reads as safe, and each of its commands is git status
// (git status, diff or log for the regexp); what git status:* allows it
// also denies as a deny rule; and nothing it allows is still allowed with
// a second command, a substitution or a redirection added.
func FuzzBashAllowRules(f *testing.F) {
	for _, c := range bashCases {
		f.Add(c.cmd)
	}
	status, statusDeny := bashRule("git status:*", "allow"), bashRule("git status:*", "deny")
	re := configRule(f, "^git (status|diff|log)", "allow")
	f.Fuzz(func(t *testing.T, s string) {
		p := bashProbe(s)
		byStatus, byRe := status.matches(p), re.matches(p)
		if !byStatus && !byRe {
			return
		}
		segs, safe := flatSplit(s)
		if !safe || len(segs) == 0 {
			t.Fatalf("%q: allowed (git status:* %v, regexp %v), but flatSplit finds it unsafe", s, byStatus, byRe)
		}
		for _, w := range segs {
			switch {
			case byStatus && (w[0] != "git" || len(w) < 2 || w[1] != "status"):
				t.Fatalf("%q: git status:* allows the command %q", s, w)
			case byRe && (w[0] != "git" || len(w) < 2 || !(strings.HasPrefix(w[1], "status") ||
				strings.HasPrefix(w[1], "diff") || strings.HasPrefix(w[1], "log"))):
				t.Fatalf("%q: ^git (status|diff|log) allows the command %q", s, w)
			}
		}
		if byStatus && !statusDeny.matches(p) {
			t.Fatalf("%q: allowed by git status:* but not denied by it", s)
		}
		for _, more := range []string{"\nrm -rf ~", "; rm -rf ~", " && rm -rf ~", " | sh", " $(rm -rf ~)", " `id`", " > ~/.bashrc", " <(id)"} {
			q := bashProbe(s + more)
			if status.matches(q) || re.matches(q) {
				t.Fatalf("%q: allowed with %q added", s, more)
			}
		}
	})
}
