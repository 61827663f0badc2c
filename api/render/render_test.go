package render

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
)

func TestOneLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"  ls -la  ", "ls -la"},
		{"a\nb\r\nc", "a ⏎ b ⏎ c"},
		{"a\tb\x1b[31mc\x07", "a b [31mc"},
		{"del\x7f", "del"},
		{"csi\u009b31m", "csi 31m"},      // a C1 control: a CSI to some terminals
		{"sep\u2028x\u2029y", "sep x y"}, // line and paragraph separators
		{"bad\xffbyte", "bad\ufffdbyte"},
		{"echo \u202eevil\u202c", "echo ⟨U+202E⟩evil⟨U+202C⟩"}, // a bidi override cannot reorder a table's line
		{"", ""},
	} {
		if got := OneLine(c.in); got != c.want {
			t.Errorf("OneLine(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestCut(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 3, "abc"}, {"abcd", 3, "ab…"}, {"ééé", 2, "é…"}, {"abc", 0, ""}, {"", 0, ""},
	} {
		if got := Cut(c.in, c.n); got != c.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

func TestDurations(t *testing.T) {
	for _, c := range []struct {
		d         time.Duration
		age, long string
	}{
		{-time.Second, "0s", "0s"},
		{250 * time.Millisecond, "0s", "250ms"},
		{1500 * time.Millisecond, "1s", "1.5s"},
		{3*time.Minute + 5*time.Second, "3m", "3m05s"},
		{2*time.Hour + 5*time.Minute, "2h", "2h05m"},
		{47 * time.Hour, "47h", "47h00m"},
		{96 * time.Hour, "4d", "4d"},
	} {
		if got := Age(c.d); got != c.age {
			t.Errorf("Age(%v) = %q, want %q", c.d, got, c.age)
		}
		if got := Duration(c.d); got != c.long {
			t.Errorf("Duration(%v) = %q, want %q", c.d, got, c.long)
		}
	}
	if When(time.Time{}) != "-" {
		t.Errorf("When of the zero time = %q", When(time.Time{}))
	}
	at := time.Date(2026, 11, 29, 14, 5, 9, 0, time.Local)
	if got := When(at); got != "2026-11-29 14:05:09" {
		t.Errorf("When = %q", got)
	}
}

func TestApprovals(t *testing.T) {
	bash := api.Approval{ID: "a-1", Kind: api.KindTool, ToolName: "Bash", ToolInput: json.RawMessage(`{"command":"ls -la\nwc"}`)}
	plan := api.Approval{ID: "a-2", Kind: api.KindPlan, Content: "\n  # Plan\x1b]0;x\x07\n1. a\n"}
	for _, c := range []struct {
		name          string
		a             api.Approval
		summary, tool string
	}{
		{"a Bash command", bash, "ls -la ⏎ wc", "Bash"},
		{"a file", api.Approval{Kind: api.KindTool, ToolName: "Read", ToolInput: json.RawMessage(`{"file_path":"/etc/hosts"}`)}, "/etc/hosts", "Read"},
		{"no input", api.Approval{Kind: api.KindTool, ToolName: "X\x1b[2J"}, "", "X [2J"},
		{"a plan: its first line, on one line", plan, "# Plan ]0;x", "plan"},
		{"an empty merge", api.Approval{Kind: api.KindMerge}, "", "merge"},
	} {
		if got := ApprovalSummary(c.a); got != c.summary {
			t.Errorf("%s: summary %q, want %q", c.name, got, c.summary)
		}
		if got := ApprovalTool(c.a); got != c.tool {
			t.Errorf("%s: tool %q, want %q", c.name, got, c.tool)
		}
	}

	at := time.Now()
	for _, c := range []struct {
		name                  string
		state                 api.ApprovalState
		r                     *api.Resolution
		words, cell, resolved string
	}{
		{"pending", api.ApprovalPending, nil, "-", "-", "a-1 pending"},
		{"by the cli", api.ApprovalAllowed, &api.Resolution{Decision: api.DecisionAllow, By: api.ByCLI, ByPid: 4242, At: at},
			"Allow by cli pid 4242", "Allow/cli pid 4242", "a-1 allowed"},
		{"by a rule", api.ApprovalAllowed, &api.Resolution{Decision: api.DecisionAllow, By: api.ByRule, RuleID: "r-1"},
			"Allow by rule r-1", "Allow/rule r-1", "a-1 allowed by rule"},
		{"always, in the dashboard", api.ApprovalAlwaysAllowed,
			&api.Resolution{Decision: api.DecisionAlwaysAllow, By: api.ByUI, BySession: "Xy3_abcd", RuleID: "r-2"},
			"AlwaysAllow by ui session Xy3_abcd, recorded rule r-2", "AlwaysAllow/ui session Xy3_abcd",
			"a-1 always allowed by ui session Xy3_abcd (rule r-2)"},
		{"timed out", api.ApprovalTimedOut, &api.Resolution{Decision: api.DecisionTimeout, By: api.ByTimeout},
			"Timeout by timeout", "Timeout/timeout", "a-1 timed out by timeout"},
		{"cancelled", api.ApprovalCancelled, &api.Resolution{By: api.ByDaemon, Reason: api.CancelRequesterGone},
			"cancelled: requester_gone", "-/requester_gone", "a-1 cancelled by daemon (requester_gone)"},
		{"not asked", api.ApprovalCancelled, &api.Resolution{By: api.ByDaemon, Reason: api.CancelHookNoVerdict},
			"cancelled: hook_no_verdict (" + api.CancelWords(api.CancelHookNoVerdict) + ")", "-/hook_no_verdict",
			"a-1 cancelled by daemon (hook_no_verdict): " + api.CancelWords(api.CancelHookNoVerdict)},
	} {
		a := api.Approval{ID: "a-1", State: c.state, Resolution: c.r}
		if got := Decision(a); got != c.words {
			t.Errorf("%s: Decision %q, want %q", c.name, got, c.words)
		}
		if got := DecisionCell(a); got != c.cell {
			t.Errorf("%s: DecisionCell %q, want %q", c.name, got, c.cell)
		}
		if got := Resolved(a); got != c.resolved {
			t.Errorf("%s: Resolved %q, want %q", c.name, got, c.resolved)
		}
	}
}

func TestRules(t *testing.T) {
	for _, c := range []struct {
		r            api.ApprovalRule
		match, scope string
	}{
		{api.ApprovalRule{Tool: "Read"}, "Read", "anywhere"},
		{api.ApprovalRule{Tool: "Bash", Content: "git status:*", SessionID: "s-1"}, "Bash(git status:*)", "session s-1"},
		{api.ApprovalRule{Tool: "Bash", InputField: "command", InputPattern: "^git (status|diff)", Cwd: "/src/x\n"},
			"Bash where command ~ ^git (status|diff)", "directory /src/x"},
		{api.ApprovalRule{Tool: "Write", Cwd: "/a", SessionID: "s\x1b"}, "Write", "directory /a, session s"},
	} {
		if got := RuleMatch(c.r); got != c.match {
			t.Errorf("RuleMatch(%+v) = %q, want %q", c.r, got, c.match)
		}
		if got := RuleScope(c.r); got != c.scope {
			t.Errorf("RuleScope(%+v) = %q, want %q", c.r, got, c.scope)
		}
	}
}

func TestAgentLines(t *testing.T) {
	in := json.RawMessage(`{"command":"rm -rf build"}`)
	long := strings.Repeat("x", 300)
	for _, c := range []struct{ name, got, want string }{
		{"a tool call", ToolLine("Bash", in), "> Bash rm -rf build"},
		{"a call with no input", ToolLine("Ping", nil), "> Ping"},
		{"a call with no name", ToolLine("", json.RawMessage(`{"a":1}`)), `> tool {"a":1}`},
		{"a long call is cut", ToolLine("Bash", json.RawMessage(`{"command":"`+long+`"}`)), "> Bash " + long[:159] + "…"},
		{"a denial", DeniedLine("Bash", in, "not the build dir"), "! denied Bash rm -rf build: not the build dir"},
		{"a denial without a reason", DeniedLine("Write", nil, " "), "! denied Write: no reason given"},
		{"escapes in a denial", DeniedLine("Bash\x1b[31m", nil, "a\x1b]0;x\x07b"), "! denied Bash [31m: a ]0;x b"},
		{"a failure", FailedLine("Bash", "exit 1\nboom"), "! Bash failed: exit 1 ⏎ boom"},
		{"a result", ToolResultLine("Read", "a.go\nb.go"), "< Read: a.go ⏎ b.go"},
		{"a result of no tool named", ToolResultLine("", "ok"), "< tool: ok"},
		{"an error", ErrorLine("rate\nlimited"), "error: rate ⏎ limited"},
		{"another kind", OtherLine("progress", `{"p":1}`), `[progress] {"p":1}`},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", c.name, c.got, c.want)
		}
	}
	u := &api.TokenUsage{InputTokens: 120, OutputTokens: 30, CostUSD: 0.0042}
	for _, c := range []struct {
		name    string
		isError bool
		text    string
		denied  int
		u       *api.TokenUsage
		want    string
	}{
		{"nothing to say", false, "all good", 0, &api.TokenUsage{}, "done"},
		{"denials and usage", false, "ok", 2, u, "2 tool uses denied, 120 tokens in, 30 out, $0.0042"},
		{"one denial", false, "", 1, nil, "1 tool use denied"},
		{"an error", true, "API Error:\n429", 0, nil, "error: API Error: ⏎ 429"},
		{"an error with no words", true, "", 0, nil, "error"},
	} {
		if got := ResultWords(c.isError, c.text, c.denied, c.u); got != c.want {
			t.Errorf("%s: ResultWords %q, want %q", c.name, got, c.want)
		}
	}
	if got := ResultLine(false, "", 0, nil); got != "-- result: done" {
		t.Errorf("ResultLine = %q", got)
	}
	if got := PartResult(api.AgentPart{Kind: api.MsgResult, Denied: 3}); got != "3 tool uses denied" {
		t.Errorf("PartResult = %q", got)
	}
	if DeniedOfAgent(1) != "1 tool use of the agent was denied" || DeniedOfAgent(2) != "2 tool uses of the agent were denied" {
		t.Errorf("DeniedOfAgent: %q, %q", DeniedOfAgent(1), DeniedOfAgent(2))
	}
	if got := Tokens(&api.TokenUsage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3, CacheWriteTokens: 4, CostUSD: 1}); got != "1 tokens in, 2 out, 3 cache read, 4 cache write" {
		t.Errorf("Tokens = %q", got)
	}
	if Usage(nil) != "no tokens reported" || Usage(u) != "120 tokens in, 30 out, $0.0042" {
		t.Errorf("Usage: %q, %q", Usage(nil), Usage(u))
	}
}

func TestTasks(t *testing.T) {
	retry := time.Date(2026, 11, 29, 15, 4, 0, 0, time.Local)
	start := time.Date(2026, 11, 29, 14, 0, 0, 0, time.Local)
	end := start.Add(3*time.Minute + 5*time.Second)
	limit := &api.TaskError{Code: api.TaskErrUsageLimit, Message: "429", RetryAt: &retry}
	for _, c := range []struct {
		name        string
		t           api.TaskRecord
		state, took string
	}{
		{"queued", api.TaskRecord{State: api.TaskQueued}, "queued", "-"},
		{"completed with denials", api.TaskRecord{State: api.TaskCompleted, Denied: 2, StartedAt: &start, FinishedAt: &end},
			"completed (2 denied)", "3m05s"},
		{"a usage limit", api.TaskRecord{State: api.TaskFailed, Error: limit, StartedAt: &start},
			"failed (usage_limit, retry after 2026-11-29 15:04)", "5m00s"},
		{"a hostile code", api.TaskRecord{State: api.TaskFailed, Error: &api.TaskError{Code: "x\x1b[2J"}}, "failed (x [2J)", "-"},
	} {
		if got := TaskState(c.t); got != c.state {
			t.Errorf("%s: TaskState %q, want %q", c.name, got, c.state)
		}
		if got := Took(c.t, start.Add(5*time.Minute)); got != c.took {
			t.Errorf("%s: Took %q, want %q", c.name, got, c.took)
		}
	}
	wantLimit := "usage_limit: the agent hit its provider's rate or usage limit (429); retry after " +
		retry.Format("2006-01-02 15:04:05 MST")
	for _, c := range []struct {
		e    *api.TaskError
		want string
	}{
		{nil, ""},
		{limit, wantLimit},
		{&api.TaskError{Code: api.TaskErrAuthFailed}, "auth_failed: the agent's provider refused its key (see the pool's secrets)"},
		{&api.TaskError{Code: "executor_exited", Message: "exit\nstatus 2"}, "executor_exited (exit ⏎ status 2)"},
	} {
		if got := TaskError(c.e); got != c.want {
			t.Errorf("TaskError(%+v) = %q, want %q", c.e, got, c.want)
		}
	}
	for _, c := range []struct {
		u    *api.TokenUsage
		want string
	}{
		{nil, "-"}, {&api.TokenUsage{InputTokens: 5}, "-"}, {&api.TokenUsage{CostUSD: 0.0123}, "$0.0123"},
	} {
		if got := Cost(c.u); got != c.want {
			t.Errorf("Cost(%+v) = %q, want %q", c.u, got, c.want)
		}
	}
	if Tools(nil) != "the executor's" || Tools([]string{"Bash", "Read"}) != "Bash, Read" {
		t.Errorf("Tools: %q, %q", Tools(nil), Tools([]string{"Bash", "Read"}))
	}
}

// FuzzOneLineForms: whatever an agent or a requester wrote, no one-line
// form panics, and each is one line of printable UTF-8: no newline, no
// control character, no line separator.
func FuzzOneLineForms(f *testing.F) {
	f.Add("Bash", `{"command":"ls -la\nwc"}`, "not the build dir", "usage_limit")
	f.Add("Bash\x1b[31m", `{"command":"\u001b]0;x\u0007"}`, "a\x1b]0;x\x07b\r\n", "x\x9b2J")
	f.Add("", "not json\xff", "\u2028\u2029\x00", "")
	f.Add("Read", `{"file_path":"/etc/hosts\u0085"}`, "é\xc3", "\x7f")
	f.Fuzz(func(t *testing.T, tool, input, text, code string) {
		in := json.RawMessage(input)
		a := api.Approval{ID: "a-1", Kind: api.KindTool, ToolName: tool, ToolInput: in, Content: text,
			Resolution: &api.Resolution{Decision: api.Decision(code), By: tool, BySession: text, Reason: code, RuleID: text}}
		plan := a
		plan.Kind = api.KindPlan
		rec := api.TaskRecord{State: api.TaskState(code), Denied: len(text), Error: &api.TaskError{Code: code, Message: text}}
		forms := map[string]string{
			"OneLine": OneLine(text), "Cut": Cut(OneLine(text), 5), "StateWords": StateWords(code),
			"ApprovalSummary": ApprovalSummary(a),
			"RuleMatch":       RuleMatch(api.ApprovalRule{Tool: tool, Content: text, InputField: code, InputPattern: text}),
			"RuleScope":       RuleScope(api.ApprovalRule{Cwd: text, SessionID: code}), "plan summary": ApprovalSummary(plan), "ApprovalTool": ApprovalTool(a),
			"Decision": Decision(a), "DecisionCell": DecisionCell(a), "Resolved": Resolved(a),
			"ToolName": ToolName(tool), "ToolSummary": ToolSummary(tool, in), "ToolLine": ToolLine(tool, in),
			"DeniedLine": DeniedLine(tool, in, text), "FailedLine": FailedLine(tool, text),
			"ToolResultLine": ToolResultLine(tool, text), "ErrorLine": ErrorLine(text), "OtherLine": OtherLine(code, text),
			"ResultLine": ResultLine(true, text, len(code), nil), "TaskState": TaskState(rec), "TaskError": TaskError(rec.Error),
		}
		for name, s := range forms {
			if !utf8.ValidString(s) {
				t.Fatalf("%s is not UTF-8: %q", name, s)
			}
			for _, r := range s {
				if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Cf, r) {
					t.Fatalf("%s holds the control or format character %U: %q", name, r, s)
				}
			}
		}
	})
}

// An agent task's usage says whose tree it is, and what no sample means.
func TestTaskUsage(t *testing.T) {
	u := &api.Usage{Source: api.UsageSourceProcfs, Scope: api.UsageScopeExecutor, UserSeconds: 1, SystemSeconds: 0.5,
		PeakRSSBytes: 3 << 20, ReadBytes: 2048, PeakThreads: 2, Samples: 1}
	none := &api.Usage{Source: api.UsageSourceProcfs, Scope: api.UsageScopeExecutor}
	for _, c := range []struct {
		rec      api.TaskRecord
		line     string
		cpu, rss string
	}{
		{api.TaskRecord{State: api.TaskCompleted, Usage: u}, "cpu 1.00s user + 0.50s sys, peak rss 3.0 MiB, read 2.0 KiB, " +
			"wrote 0 B, 2 threads (procfs, 1 sample; the executor's tree while the task ran)", "1.50s", "3.0 MiB"},
		{api.TaskRecord{State: api.TaskCompleted, Usage: none}, "none: it ended before its first sample", "-", "-"},
		{api.TaskRecord{State: api.TaskRunning, Usage: none}, "no sample yet", "-", "-"},
		{api.TaskRecord{State: api.TaskCompleted}, "", "-", "-"},
	} {
		cpu, rss := TaskCPU(c.rec)
		if got := TaskUsage(c.rec); got != c.line || cpu != c.cpu || rss != c.rss {
			t.Errorf("%+v: %q, %q, %q; want %q, %q, %q", c.rec.Usage, got, cpu, rss, c.line, c.cpu, c.rss)
		}
	}
}

// What a terminal or a bidi-aware renderer would act on shows as marks.
func TestVisible(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"ls -la", "ls -la"},
		{"a\tb\nc", "a\tb\nc"},
		{"\x1b[31mred\x1b[0m", "␛[31mred␛[0m"},
		{"rm\x00x\x7f", "rm␀x␡"},
		{"echo \u202eevil\u202c", "echo ⟨U+202E⟩evil⟨U+202C⟩"},
		{"\u2066x\u2069 \u200f \u0085", "⟨U+2066⟩x⟨U+2069⟩ ⟨U+200F⟩ ⟨U+0085⟩"},
		{"bad \xff byte", "bad \ufffd byte"},
		{"zero\u200bwidth sep\u2028x", "zero⟨U+200B⟩width sep⟨U+2028⟩x"},
		{"<script>alert(1)</script> &&", "<script>alert(1)</script> &&"}, // html/template escapes it
	} {
		if got := Visible(c.in); got != c.want {
			t.Errorf("Visible(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
