package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// fullApproval has every field set, JSON with odd spacing and escapes that
// a re-encoding would change.
func fullApproval(id string, created time.Time) api.Approval {
	return api.Approval{ID: id, State: api.ApprovalPending, Source: api.SourceReachout, Kind: api.KindTool,
		RequestID: "0f6c1b9e-2d4a-4c8e-9b1a-3e5f7a9c1d2e", ToolName: "Bash",
		ToolInput: json.RawMessage(`{"command" : "echo \u00e9 && ls </tmp>",  "timeout":1.50e3}`),
		Cwd:       "/home/u/proj", SessionID: "sess-1", TaskID: "task-9",
		PermissionSuggestions: []json.RawMessage{
			json.RawMessage(`{"type":"toolAlwaysAllow","tool":"Bash"}`),
			json.RawMessage(`{ "type": "addRules", "rules": [ {"toolName":"Bash","ruleContent":"ls:*"} ], "behavior":"allow","destination":"session" }`),
		},
		AssistantContext: "I will list the files.\nThen <b>stop</b>.",
		Content:          "# Plan\n\n1. é", LoopID: "17959265-00ff",
		Specs:     json.RawMessage(`[ {"name":"a"} , {"name":"b"}]`),
		CreatedAt: usec(created), Deadline: usec(created.Add(10 * time.Minute))}
}

func TestApprovalRoundTrip(t *testing.T) {
	s := openT(t, dbPath(t), testOpts)
	aps := s.Approvals()
	now := time.Now()
	a := fullApproval("a-1f2e3d-1", now)
	if err := aps.Request(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, ok, err := aps.Get(a.ID)
	if err != nil || !ok {
		t.Fatalf("Get: %v %v", ok, err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Fatalf("pending approval:\n got %+v\nwant %+v", got, a)
	}
	// Byte for byte, not only equal as JSON.
	if string(got.ToolInput) != string(a.ToolInput) || string(got.Specs) != string(a.Specs) ||
		string(got.PermissionSuggestions[1]) != string(a.PermissionSuggestions[1]) {
		t.Fatalf("JSON changed: %s %s %s", got.ToolInput, got.Specs, got.PermissionSuggestions[1])
	}
	// The hook's request_id finds it too.
	if byReq, ok, err := aps.Get(a.RequestID); !ok || err != nil || byReq.ID != a.ID {
		t.Fatalf("Get by request_id: %+v %v %v", byReq, ok, err)
	}
	if _, ok, err := aps.Get("a-nope-1"); ok || err != nil {
		t.Fatalf("Get of an unknown id: %v %v", ok, err)
	}
	if p, err := aps.Pending(); err != nil || len(p) != 1 || !reflect.DeepEqual(p[0], a) {
		t.Fatalf("Pending: %+v %v", p, err)
	}

	idx := 1
	resolved := a
	resolved.State = api.ApprovalAlwaysAllowed
	resolved.Resolution = &api.Resolution{Decision: api.DecisionAlwaysAllow, Message: "ok then",
		UserMessage: "next time ask", Suggestion: a.PermissionSuggestions[1], SuggestionIndex: &idx, By: api.ByCLI,
		ByPid: 4242, RuleID: "r-1f2e3d-1", At: usec(now.Add(time.Second))}
	rule := api.ApprovalRule{ID: "r-1f2e3d-1", Origin: "always_allow", Tool: "Bash", SessionID: "sess-1",
		Content: "ls:*", Decision: "allow", Suggestion: a.PermissionSuggestions[1], FromApproval: a.ID,
		CreatedAt: usec(now.Add(time.Second))}
	if err := aps.Resolve(ctx, resolved, rule); err != nil {
		t.Fatal(err)
	}
	got, _, err = aps.Get(a.ID)
	if err != nil || !reflect.DeepEqual(got, resolved) {
		t.Fatalf("resolved approval:\n got %+v (%+v)\nwant %+v (%+v) %v", got, got.Resolution, resolved, resolved.Resolution, err)
	}
	if string(got.Resolution.Suggestion) != string(a.PermissionSuggestions[1]) {
		t.Fatalf("suggestion changed: %s", got.Resolution.Suggestion)
	}
	rules, err := aps.Rules()
	if err != nil || len(rules) != 1 || !reflect.DeepEqual(rules[0], rule) {
		t.Fatalf("Rules:\n got %+v %v\nwant %+v", rules, err, rule)
	}
	if p, err := aps.Pending(); err != nil || len(p) != 0 {
		t.Fatalf("Pending after the resolution: %+v %v", p, err)
	}

	// A config rule's fields survive too.
	cfgRule := api.ApprovalRule{ID: "r-x-2", Origin: "always_allow", Tool: "Bash*", InputField: "command",
		InputPattern: "^git (status|diff)", Cwd: "/src/*", Decision: "deny", Message: "no", CreatedAt: usec(now.Add(2 * time.Second))}
	b := fullApproval("a-1f2e3d-2", now.Add(time.Millisecond))
	b.RequestID = ""
	b.State, b.Resolution = api.ApprovalDenied, &api.Resolution{Decision: api.DecisionDeny, By: api.ByUI, BySession: "Xy3_abcd", At: usec(now)}
	if err := aps.Request(ctx, b); err != nil {
		t.Fatal(err)
	}
	if got, _, err := aps.Get(b.ID); err != nil || !reflect.DeepEqual(got, b) {
		t.Fatalf("an approval recorded resolved:\n got %+v (%+v)\nwant %+v (%+v) %v", got, got.Resolution, b, b.Resolution, err)
	}
	if err := s.Do(ctx, ApprovalResolved(fullApprovalDone("a-1f2e3d-missing"), cfgRule)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("resolving an unknown approval: %v", err)
	}
	if rules, _ := aps.Rules(); len(rules) != 1 {
		t.Fatalf("a failed resolution recorded its rule: %+v", rules)
	}
	if err := aps.DeleteRule(ctx, rule.ID); err != nil {
		t.Fatal(err)
	}
	if err := aps.DeleteRule(ctx, rule.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleting a deleted rule: %v", err)
	}
	if rules, _ := aps.Rules(); len(rules) != 0 {
		t.Fatalf("rules after the delete: %+v", rules)
	}
}

func fullApprovalDone(id string) api.Approval {
	a := fullApproval(id, time.Now())
	a.State, a.Resolution = api.ApprovalAllowed, &api.Resolution{Decision: api.DecisionAllow, By: api.ByCLI}
	return a
}

// The first resolution wins: a second is refused with ErrFinished naming
// the state, and neither its resolution nor its rules are written.
func TestApprovalSecondResolutionRefused(t *testing.T) {
	s := openT(t, dbPath(t), testOpts)
	aps := s.Approvals()
	a := fullApproval("a-1-1", time.Now())
	if err := aps.Request(ctx, a); err != nil {
		t.Fatal(err)
	}
	first := a
	first.State, first.Resolution = api.ApprovalDenied, &api.Resolution{Decision: api.DecisionDeny, Message: "no", By: "cli", At: usec(time.Now())}
	if err := aps.Resolve(ctx, first); err != nil {
		t.Fatal(err)
	}
	second := a
	second.State, second.Resolution = api.ApprovalAlwaysAllowed, &api.Resolution{Decision: api.DecisionAlwaysAllow, By: "control"}
	err := aps.Resolve(ctx, second, api.ApprovalRule{ID: "r-1", Origin: "always_allow", Tool: "Bash", Decision: "allow"})
	if !errors.Is(err, ErrFinished) || !strings.Contains(err.Error(), "it is denied") {
		t.Fatalf("second resolution: %v", err)
	}
	got, _, _ := aps.Get(a.ID)
	if got.State != api.ApprovalDenied || got.Resolution.Message != "no" {
		t.Fatalf("after the refused resolution: %+v %+v", got, got.Resolution)
	}
	if rules, _ := aps.Rules(); len(rules) != 0 {
		t.Fatalf("the refused resolution's rule was recorded: %+v", rules)
	}
	// A rule whose id is taken rolls the whole resolution back.
	if err := aps.Request(ctx, fullApproval("a-1-2", time.Now())); err != nil {
		t.Fatal(err)
	}
	r := api.ApprovalRule{ID: "r-dup", Origin: "always_allow", Tool: "Bash", Decision: "allow"}
	third := fullApprovalDone("a-1-2")
	if err := aps.Resolve(ctx, third, r, r); err == nil {
		t.Fatal("a resolution with a duplicate rule id was recorded")
	}
	if got, _, _ := aps.Get("a-1-2"); got.State != api.ApprovalPending {
		t.Fatalf("half a resolution was recorded: %s", got.State)
	}
	// Bad input is refused before it is queued, naming the problem.
	for _, c := range []struct {
		w    Write
		says string
	}{
		{ApprovalRequested(api.Approval{Source: "control", Kind: "tool"}), "no id"},
		{ApprovalRequested(api.Approval{ID: "a", Kind: "tool"}), "no source"},
		{ApprovalRequested(api.Approval{ID: "a", Source: "control", Kind: "tool", ToolInput: json.RawMessage(`{"a":`)}), "tool_input is not valid JSON"},
		{ApprovalRequested(api.Approval{ID: "a", Source: "control", Kind: "tool", PermissionSuggestions: []json.RawMessage{json.RawMessage(`{}`), json.RawMessage(`x`)}}), "permission_suggestions[1] is not valid JSON"},
		{ApprovalRequested(api.Approval{ID: "a", Source: "control", Kind: "tool", State: api.ApprovalAllowed}), "a allowed approval needs its resolution"},
		{ApprovalRequested(api.Approval{ID: "a", Source: "control", Kind: "tool", State: "maybe"}), `unknown state "maybe"`},
		{ApprovalResolved(api.Approval{ID: "a", State: api.ApprovalPending}), `"pending" is not a terminal state`},
		{ApprovalResolved(fullApprovalDone("a"), api.ApprovalRule{ID: "r", Origin: "config", Tool: "X", Decision: "maybe"}), `rule 0: decision "maybe" is not allow or deny`},
		{RuleDeleted(""), "no rule id"},
	} {
		if err := s.Do(ctx, c.w); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want it to say %q", c.w.what(), err, c.says)
		}
	}
	if err := aps.Request(ctx, fullApproval("a-1-1", time.Now())); !errors.Is(err, ErrExists) {
		t.Fatalf("requesting an existing id: %v", err)
	}
}

func TestApprovalListOrderFilterLimit(t *testing.T) {
	s := openT(t, dbPath(t), testOpts)
	aps := s.Approvals()
	base := time.Now().Add(-time.Hour)
	// a-0 .. a-9, created a second apart; the even ones resolved, the
	// plans from source plan.
	for i := range 10 {
		a := api.Approval{ID: fmt.Sprintf("a-%d", i), Source: api.SourceControl, Kind: api.KindTool, ToolName: "Bash",
			CreatedAt: base.Add(time.Duration(i) * time.Second)}
		if i%3 == 0 {
			a.Source, a.Kind = api.SourcePlan, api.KindPlan
		}
		if i%2 == 0 {
			a.State, a.Resolution = api.ApprovalAllowed, &api.Resolution{Decision: api.DecisionAllow, By: "cli", At: a.CreatedAt}
		}
		if err := aps.Request(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(as []api.Approval, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range as {
			out = append(out, a.ID)
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		q    ApprovalQuery
		want string
	}{
		{ApprovalQuery{}, "a-9 a-8 a-7 a-6 a-5 a-4 a-3 a-2 a-1 a-0"},
		{ApprovalQuery{State: "all", Limit: 3}, "a-9 a-8 a-7"},
		{ApprovalQuery{State: "pending"}, "a-9 a-7 a-5 a-3 a-1"},
		{ApprovalQuery{State: "allowed", Limit: 2}, "a-8 a-6"},
		{ApprovalQuery{Source: "plan"}, "a-9 a-6 a-3 a-0"},
		{ApprovalQuery{State: "pending", Source: "plan"}, "a-9 a-3"},
		{ApprovalQuery{State: "denied"}, ""},
	} {
		if got := ids(aps.List(c.q)); got != c.want {
			t.Errorf("List(%+v) = %q, want %q", c.q, got, c.want)
		}
	}
	if got := ids(aps.Pending()); got != "a-1 a-3 a-5 a-7 a-9" {
		t.Errorf("Pending = %q, want oldest first", got)
	}
	if _, err := aps.List(ApprovalQuery{State: "maybe"}); err == nil || !strings.Contains(err.Error(), `unknown state "maybe"`) {
		t.Errorf("List of an unknown state: %v", err)
	}
	if _, err := aps.List(ApprovalQuery{Limit: -1}); err == nil {
		t.Error("List with a negative limit")
	}
}

// Pruning takes finished approvals past the count or the age and never a
// pending one.
func TestApprovalPrune(t *testing.T) {
	s := openT(t, dbPath(t), testOpts)
	aps := s.Approvals()
	base := time.Now().Add(-time.Hour)
	for i := range 8 {
		a := api.Approval{ID: fmt.Sprintf("a-%d", i), Source: api.SourceControl, Kind: api.KindTool, CreatedAt: base}
		if i < 6 {
			a.State, a.Resolution = api.ApprovalDenied, &api.Resolution{Decision: api.DecisionDeny, By: "cli",
				At: base.Add(time.Duration(i) * time.Minute)}
		}
		if err := aps.Request(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	n, err := aps.Prune(ctx, 4, time.Time{})
	if err != nil || n != 2 {
		t.Fatalf("Prune keep 4: %d %v", n, err)
	}
	n, err = aps.Prune(ctx, 0, base.Add(3*time.Minute+time.Second))
	if err != nil || n != 2 {
		t.Fatalf("Prune by age: %d %v", n, err)
	}
	left, _ := aps.List(ApprovalQuery{})
	var ids []string
	for _, a := range left {
		ids = append(ids, a.ID)
	}
	if got := strings.Join(ids, " "); got != "a-7 a-6 a-5 a-4" {
		t.Fatalf("left after pruning: %q", got)
	}
}

// A file a version-1 orchestrd made (jobs only) gains the approvals tables
// at Open and keeps its jobs.
func TestApprovalsMigrationFromVersion1(t *testing.T) {
	path := dbPath(t)
	old, err := open(path, testOpts, migrations[:1])
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	insertV1Job(t, path, "j-old")
	if v := userVersion(t, path); v != 1 {
		t.Fatalf("the old file is at version %d", v)
	}
	s := openT(t, path, testOpts)
	if v := userVersion(t, path); v != SchemaVersion() {
		t.Fatalf("user_version %d after the upgrade", v)
	}
	if rec, ok, err := s.Jobs().Get("j-old"); !ok || err != nil || rec.State != api.StateQueued {
		t.Fatalf("the old job: %+v %v %v", rec, ok, err)
	}
	a := fullApproval("a-new-1", time.Now())
	if err := s.Approvals().Request(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.Approvals().Get(a.ID); !ok || err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("approval in the upgraded file: %+v %v %v", got, ok, err)
	}
}
