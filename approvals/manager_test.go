package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

func toolReq(input string) Request {
	return Request{Source: api.SourceReachout, Kind: api.KindTool, ToolName: "Bash",
		ToolInput: json.RawMessage(input), Cwd: "/work/p", SessionID: "s1", Bound: true}
}

type approvalOut struct {
	Approval api.Approval `json:"approval"`
}

// A pending approval ends in the state its one resolution names; the
// answer, the method's result and the events agree.
func TestResolveEachDecision(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	for _, tc := range []struct {
		params map[string]any
		state  api.ApprovalState
		check  func(*api.Resolution) bool
	}{
		{map[string]any{"decision": "Allow"}, api.ApprovalAllowed, func(r *api.Resolution) bool { return r.By == "control" }},
		{map[string]any{"decision": "Deny", "message": "not now", "by": "cli"}, api.ApprovalDenied,
			func(r *api.Resolution) bool { return r.Message == "not now" && r.By == "cli" }},
		{map[string]any{"decision": "Reply", "user_message": "use rg"}, api.ApprovalReplied,
			func(r *api.Resolution) bool { return r.UserMessage == "use rg" }},
	} {
		ans := newAnswers(t)
		p, err := h.m.Ask(toolReq(`{"command":"ls"}`), ans.answer)
		if err != nil {
			t.Fatal(err)
		}
		h.waitEvent("approval.requested")
		tc.params["id"] = p.ID()
		var out approvalOut
		if e := h.call("approval.resolve", tc.params, &out); e != nil {
			t.Fatalf("resolve %v: %v", tc.params, e)
		}
		got := ans.wait()
		if got.State != tc.state || out.Approval.State != tc.state || !tc.check(got.Resolution) {
			t.Fatalf("resolve %v: answer %+v %+v, result %s", tc.params, got.State, got.Resolution, out.Approval.State)
		}
		r := h.waitEvent("approval.resolved")
		if ev := r.Event.(ApprovalResolved); ev.ID != p.ID() || ev.Decision != tc.params["decision"] {
			t.Fatalf("approval.resolved %+v", ev)
		}
		if e := h.call("approval.resolve", map[string]any{"id": p.ID(), "decision": "Allow"}, nil); e == nil ||
			e.Code != api.CodeInvalidState || !strings.Contains(e.Message, "is already "+string(tc.state)) {
			t.Fatalf("second resolve: %v, want 1002 naming %s", e, tc.state)
		}
	}
}

// Two resolvers racing: exactly one wins, the other hears 1002 naming the
// state the winner put it in; the requester hears once.
func TestFirstResolutionWins(t *testing.T) {
	h := newHarness(t, DefaultConfig(), newMemLog())
	for i := 0; i < 30; i++ {
		ans := newAnswers(t)
		p, err := h.m.Ask(toolReq(`{"command":"ls"}`), ans.answer)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]*api.Error, 2)
		for j, d := range []string{"Allow", "Deny"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[j] = h.call("approval.resolve", map[string]any{"id": p.ID(), "decision": d}, nil)
			}()
		}
		wg.Wait()
		got := ans.wait()
		won := 0
		for j, e := range errs {
			if e == nil {
				won++
				continue
			}
			if e.Code != api.CodeInvalidState || !strings.Contains(e.Message, "already "+string(got.State)) {
				t.Fatalf("loser %d: %v, want 1002 naming %s", j, e, got.State)
			}
		}
		if won != 1 {
			t.Fatalf("%d resolvers won (%v)", won, errs)
		}
	}
}

// No answer before the deadline: timed_out, by timeout, answered Timeout.
func TestTimeout(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	ans := newAnswers(t)
	req := toolReq(`{"command":"ls"}`)
	req.Timeout = 50 * time.Millisecond
	p, err := h.m.Ask(req, ans.answer)
	if err != nil {
		t.Fatal(err)
	}
	got := ans.wait()
	if got.State != api.ApprovalTimedOut || got.Resolution.Decision != api.DecisionTimeout || got.Resolution.By != api.ByTimeout {
		t.Fatalf("got %s %+v", got.State, got.Resolution)
	}
	if ev := h.waitEvent("approval.timed_out").Event.(ApprovalTimedOut); ev.ID != p.ID() {
		t.Fatalf("approval.timed_out %+v", ev)
	}
}

// Cancel ends it once, whatever the number of calls; the answer comes
// once, cancelled with the reason.
func TestCancel(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	ans := newAnswers(t)
	p, err := h.m.Ask(toolReq(`{"command":"ls"}`), ans.answer)
	if err != nil {
		t.Fatal(err)
	}
	p.Cancel(api.CancelRequesterGone)
	p.Cancel(api.CancelRequesterGone)
	got := ans.wait()
	if got.State != api.ApprovalCancelled || got.Resolution.Reason != api.CancelRequesterGone {
		t.Fatalf("got %s %+v", got.State, got.Resolution)
	}
	if ev := h.waitEvent("approval.cancelled").Event.(ApprovalCancelled); ev.Reason != api.CancelRequesterGone {
		t.Fatalf("approval.cancelled %+v", ev)
	}
	p.Cancel("again")
	if e := h.call("approval.resolve", map[string]any{"id": p.ID(), "decision": "Allow"}, nil); e == nil ||
		!strings.Contains(e.Message, "already cancelled") {
		t.Fatalf("resolve after cancel: %v", e)
	}
}

// The resolution is committed before anyone hears it: with the store's
// write held, neither the requester nor the resolver nor a waiter hears.
func TestResolutionCommittedBeforeAnyoneHears(t *testing.T) {
	lg := newMemLog()
	lg.gate = make(chan struct{})
	h := newHarness(t, DefaultConfig(), lg)
	ans := newAnswers(t)
	p, err := h.m.Ask(toolReq(`{"command":"ls"}`), ans.answer)
	if err != nil {
		t.Fatal(err)
	}
	h.waitEvent("approval.requested")
	wait := h.start("approval.wait", map[string]any{"id": p.ID()})
	res := h.start("approval.resolve", map[string]any{"id": p.ID(), "decision": "Allow"})
	// A cancel queued behind the resolution loses to it.
	p.Cancel(api.CancelRequesterGone)
	select {
	case a := <-ans.ch:
		t.Fatalf("answered %s before the resolution was committed", a.State)
	case <-res.Done():
		t.Fatal("approval.resolve answered before the resolution was committed")
	case <-wait.Done():
		t.Fatal("approval.wait answered before the resolution was committed")
	case r := <-h.ev:
		if r.Kind == "approval.resolved" {
			t.Fatal("approval.resolved before the resolution was committed")
		}
	case <-time.After(200 * time.Millisecond):
	}
	close(lg.gate)
	if got := ans.wait(); got.State != api.ApprovalAllowed {
		t.Fatalf("answer %s", got.State)
	}
	<-res.Done()
	<-wait.Done()
	if res.Err() != nil || wait.Err() != nil {
		t.Fatalf("resolve %v, wait %v", res.Err(), wait.Err())
	}
	if a := lg.get(p.ID()); a.State != api.ApprovalAllowed {
		t.Fatalf("store has %s", a.State)
	}
}

// AlwaysAllow records the rule its suggestion names, in the same commit;
// the next matching request is answered at once, before Ask returns.
func TestAlwaysAllowRecordsARule(t *testing.T) {
	lg := newMemLog()
	h := newHarness(t, DefaultConfig(), lg)
	req := toolReq(`{"command":"git status -s"}`)
	req.PermissionSuggestions = []json.RawMessage{
		json.RawMessage(`{"type":"setMode","mode":"acceptEdits","destination":"session"}`),
		json.RawMessage(`{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"git status:*"}],"behavior":"allow","destination":"session"}`),
	}
	ans := newAnswers(t)
	p, err := h.m.Ask(req, ans.answer)
	if err != nil {
		t.Fatal(err)
	}
	if e := h.call("approval.resolve", map[string]any{"id": p.ID(), "decision": "AlwaysAllow", "suggestion": 5}, nil); e == nil ||
		e.Code != api.CodeInvalidParams || !strings.Contains(e.Message, "suggestion 5 is out of range") {
		t.Fatalf("suggestion 5: %v", e)
	}
	var out approvalOut
	if e := h.call("approval.resolve", map[string]any{"id": p.ID(), "decision": "AlwaysAllow", "suggestion": 1}, &out); e != nil {
		t.Fatal(e)
	}
	got := ans.wait()
	if got.State != api.ApprovalAlwaysAllowed || string(got.Resolution.Suggestion) != string(req.PermissionSuggestions[1]) ||
		got.Resolution.SuggestionIndex == nil || *got.Resolution.SuggestionIndex != 1 || got.Resolution.RuleID == "" {
		t.Fatalf("answer %s %+v", got.State, got.Resolution)
	}
	rs, _ := lg.Rules()
	if len(rs) != 1 || rs[0].Tool != "Bash" || rs[0].Content != "git status:*" || rs[0].SessionID != "s1" || rs[0].ID != got.Resolution.RuleID {
		t.Fatalf("recorded rules %+v", rs)
	}
	// Same session, matching command: at once.
	ans2 := newAnswers(t)
	req2 := toolReq(`{"command":"git status"}`)
	if _, err := h.m.Ask(req2, ans2.answer); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-ans2.ch:
		if a.State != api.ApprovalAllowed || a.Resolution.By != api.ByRule || a.Resolution.RuleID != rs[0].ID {
			t.Fatalf("auto answer %s %+v", a.State, a.Resolution)
		}
	default:
		t.Fatal("a request matching a recorded rule was not answered before Ask returned")
	}
	h.waitEvent("approval.auto_resolved")
	// Another session: asked.
	ans3 := newAnswers(t)
	req3 := toolReq(`{"command":"git status"}`)
	req3.SessionID = "s2"
	p3, err := h.m.Ask(req3, ans3.answer)
	if err != nil {
		t.Fatal(err)
	}
	if a, _, _ := h.m.Get(p3.ID()); a.State != api.ApprovalPending {
		t.Fatalf("other session: %s", a.State)
	}
	// Deleting the rule: asked again.
	if e := h.call("approval.rule_delete", map[string]any{"id": rs[0].ID}, nil); e != nil {
		t.Fatal(e)
	}
	h.waitEvent("approval.rule_deleted")
	p4, err := h.m.Ask(toolReq(`{"command":"git status"}`), newAnswers(t).answer)
	if err != nil {
		t.Fatal(err)
	}
	if a, _, _ := h.m.Get(p4.ID()); a.State != api.ApprovalPending {
		t.Fatalf("after rule_delete: %s", a.State)
	}
	if e := h.call("approval.rule_delete", map[string]any{"id": rs[0].ID}, nil); e == nil || e.Code != api.CodeNotFound {
		t.Fatalf("deleting it twice: %v", e)
	}
}

// Config rules answer first, in order; they cannot be deleted.
func TestConfigRules(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rules = []RuleConfig{
		{Tool: "Bash", Input: &InputMatch{Field: "command", Pattern: `^rm `}, Decision: "deny", Message: "no rm"},
		{Tool: "Bash", Input: &InputMatch{Field: "command", Pattern: `^git (status|diff|log)`}, Decision: "allow"},
		{Tool: "Read", Cwd: "/work/**", Decision: "allow"},
	}
	h := newHarness(t, cfg, nil)
	for _, tc := range []struct {
		tool, input, cwd string
		state            api.ApprovalState
		rule             string
	}{
		{"Bash", `{"command":"rm -rf /"}`, "/x", api.ApprovalDenied, "config-1"},
		{"Bash", `{"command":"git diff"}`, "/x", api.ApprovalAllowed, "config-2"},
		{"Bash", `{"command":"git push"}`, "/x", api.ApprovalPending, ""},
		{"Bash", `{"command":42}`, "/x", api.ApprovalPending, ""},
		{"Read", `{"file_path":"/etc/passwd"}`, "/work/p/q", api.ApprovalAllowed, "config-3"},
		{"Read", `{"file_path":"/etc/passwd"}`, "/home", api.ApprovalPending, ""},
	} {
		req := Request{Source: api.SourceControl, Kind: api.KindTool, ToolName: tc.tool, ToolInput: json.RawMessage(tc.input), Cwd: tc.cwd}
		p, err := h.m.Ask(req, func(api.Approval) {})
		if err != nil {
			t.Fatal(err)
		}
		a, _, _ := h.m.Get(p.ID())
		if a.State != tc.state || (tc.rule != "" && a.Resolution.RuleID != tc.rule) {
			t.Errorf("%s %s in %s: %s %+v, want %s by %s", tc.tool, tc.input, tc.cwd, a.State, a.Resolution, tc.state, tc.rule)
		}
		if tc.state == api.ApprovalDenied && a.Resolution.Message != "no rm" {
			t.Errorf("deny message %q", a.Resolution.Message)
		}
	}
	var rs struct{ Rules []api.ApprovalRule }
	if e := h.call("approval.rules", nil, &rs); e != nil || len(rs.Rules) != 3 || rs.Rules[0].ID != "config-1" || rs.Rules[0].Origin != "config" {
		t.Fatalf("approval.rules: %v %+v", e, rs)
	}
	if e := h.call("approval.rule_delete", map[string]any{"id": "config-2"}, nil); e == nil || e.Code != api.CodeInvalidState ||
		!strings.Contains(e.Message, "config file") {
		t.Fatalf("deleting a config rule: %v", e)
	}
}

// A request whose requester cannot act on an answer (Unheard) is recorded
// cancelled with its reason at once: no rule answers it (a deny rule
// would be shown as if it held), nobody is asked.
func TestUnheard(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rules = []RuleConfig{{Tool: "Bash", Decision: "deny"}}
	h := newHarness(t, cfg, nil)
	ans := newAnswers(t)
	req := toolReq(`{"command":"ls"}`)
	req.Unheard = api.CancelHookNoVerdict
	p, err := h.m.Ask(req, ans.answer)
	if err != nil {
		t.Fatal(err)
	}
	got := ans.wait()
	if got.ID != p.ID() || got.State != api.ApprovalCancelled || got.Resolution.Reason != api.CancelHookNoVerdict || got.Resolution.RuleID != "" {
		t.Fatalf("got %s %+v", got.State, got.Resolution)
	}
	if ev := h.waitEvent("approval.cancelled").Event.(ApprovalCancelled); ev.ID != p.ID() || ev.Reason != api.CancelHookNoVerdict {
		t.Fatalf("approval.cancelled %+v", ev)
	}
	if a, _, _ := h.m.Get(p.ID()); a.State != api.ApprovalCancelled {
		t.Fatalf("kept as %s", a.State)
	}
	if e := h.call("approval.resolve", map[string]any{"id": p.ID(), "decision": "Allow"}, nil); e == nil {
		t.Fatal("resolved an approval nobody was asked")
	}
}

// Shutdown: a bound approval is answered (cancelled daemon_stopping), an
// unbound one stays pending in the store.
func TestShutdown(t *testing.T) {
	lg := newMemLog()
	h := newHarness(t, DefaultConfig(), lg)
	ans := newAnswers(t)
	bound, err := h.m.Ask(toolReq(`{"command":"ls"}`), ans.answer)
	if err != nil {
		t.Fatal(err)
	}
	var id struct{ ID string }
	if e := h.call("approval.request", map[string]any{"kind": "plan", "content": "# plan"}, &id); e != nil {
		t.Fatal(e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	got := ans.wait()
	if got.State != api.ApprovalCancelled || got.Resolution.Reason != api.CancelDaemonStopped {
		t.Fatalf("bound: %s %+v", got.State, got.Resolution)
	}
	if a := lg.get(bound.ID()); a.State != api.ApprovalCancelled {
		t.Fatalf("bound in the store: %s", a.State)
	}
	if a := lg.get(id.ID); a.State != api.ApprovalPending {
		t.Fatalf("plan in the store: %s", a.State)
	}
	if _, err := h.m.Ask(toolReq(`{}`), ans.answer); err == nil || !strings.Contains(err.Error(), "stopping") {
		t.Fatalf("Ask after Shutdown: %v", err)
	}
}

// Recover: a bound approval a dead daemon left is cancelled
// daemon_restarted; a control one is pending again, one past its deadline
// times out at once.
func TestRecover(t *testing.T) {
	lg := newMemLog()
	now := time.Now().UTC()
	for _, a := range []api.Approval{
		{ID: "a-old-1", State: api.ApprovalPending, Source: api.SourceReachout, Kind: api.KindTool, ToolName: "Bash", CreatedAt: now, Deadline: now.Add(time.Hour)},
		{ID: "a-old-2", State: api.ApprovalPending, Source: api.SourcePlan, Kind: api.KindPlan, Content: "p", CreatedAt: now, Deadline: now.Add(time.Hour)},
		{ID: "a-old-3", State: api.ApprovalPending, Source: api.SourceControl, Kind: api.KindTool, ToolName: "Bash", CreatedAt: now, Deadline: now.Add(-time.Second)},
	} {
		lg.approvals[a.ID] = a
	}
	h := newHarness(t, DefaultConfig(), lg)
	st, err := h.m.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st != (RecoverStats{Cancelled: 1, Pending: 1, TimedOut: 1}) {
		t.Fatalf("stats %+v", st)
	}
	if a := lg.get("a-old-1"); a.State != api.ApprovalCancelled || a.Resolution.Reason != api.CancelDaemonRestart {
		t.Fatalf("reachout: %s %+v", a.State, a.Resolution)
	}
	var out approvalOut
	if e := h.call("approval.wait", map[string]any{"id": "a-old-3", "timeout_ms": 10000}, &out); e != nil || out.Approval.State != api.ApprovalTimedOut {
		t.Fatalf("past its deadline: %v %s", e, out.Approval.State)
	}
	var sp struct {
		SpecsSpawned int `json:"specs_spawned"`
	}
	if e := h.call("plan.approve", map[string]any{"id": "a-old-2"}, &sp); e != nil {
		t.Fatal(e)
	}
	if a := lg.get("a-old-2"); a.State != api.ApprovalAllowed {
		t.Fatalf("plan: %s", a.State)
	}
}

// approval.request refuses what it cannot ask, naming the param.
func TestRequestParams(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	for _, tc := range []struct {
		params map[string]any
		want   string
	}{
		{map[string]any{}, "kind is required"},
		{map[string]any{"kind": "x"}, `kind "x"`},
		{map[string]any{"kind": "tool"}, "tool_name"},
		{map[string]any{"kind": "tool", "tool_name": "Bash", "tool_input": []int{1}}, "tool_input"},
		{map[string]any{"kind": "plan"}, "content"},
		{map[string]any{"kind": "plan", "content": "c", "specs": map[string]int{}}, "specs"},
		{map[string]any{"kind": "tool", "tool_name": "Bash", "bogus": 1}, "bogus"},
	} {
		e := h.call("approval.request", tc.params, nil)
		if e == nil || e.Code != api.CodeInvalidParams || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%v: %v, want -32602 naming %s", tc.params, e, tc.want)
		}
	}
	var id struct{ ID string }
	if e := h.call("approval.request", map[string]any{"kind": "tool", "tool_name": "Bash"}, &id); e != nil {
		t.Fatal(e)
	}
	for _, tc := range []struct {
		params map[string]any
		want   string
	}{
		{map[string]any{"id": id.ID, "decision": "Maybe"}, `"Maybe"`},
		{map[string]any{"id": id.ID}, "decision is required"},
		{map[string]any{"id": id.ID, "decision": "Reply"}, "user_message"},
		{map[string]any{"id": id.ID, "decision": "Allow", "suggestion": 0}, "suggestion"},
		{map[string]any{"decision": "Allow"}, "id is required"},
	} {
		e := h.call("approval.resolve", tc.params, nil)
		if e == nil || e.Code != api.CodeInvalidParams || !strings.Contains(e.Message, tc.want) {
			t.Errorf("resolve %v: %v, want -32602 naming %s", tc.params, e, tc.want)
		}
	}
	if e := h.call("approval.get", map[string]any{"id": "a-nope"}, nil); e == nil || e.Code != api.CodeNotFound {
		t.Errorf("get unknown: %v", e)
	}
	if e := h.call("plan.approve", map[string]any{"id": id.ID}, nil); e == nil || e.Code != api.CodeInvalidState ||
		!strings.Contains(e.Message, "not a plan") {
		t.Errorf("plan.approve on a tool: %v", e)
	}
}

// Await hears a pending approval's end, or a finished one's at once; an
// unknown one is 1001. plan.* take an id SetPlanID maps.
func TestAwaitAndPlanID(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	first := newAnswers(t)
	p, err := h.m.Ask(Request{Source: api.SourcePlan, Kind: api.KindPlan, Content: "# plan", Specs: json.RawMessage(`["spec-a"]`)}, first.answer)
	if err != nil {
		t.Fatal(err)
	}
	later := newAnswers(t)
	if _, err := h.m.Await(p.ID(), later.answer); err != nil {
		t.Fatal(err)
	}
	h.m.SetPlanID(func(id string) (string, bool) { return p.ID(), id == "1-loop" })
	var pv map[string]any
	if e := h.call("plan.get_preview", map[string]any{"id": "1-loop"}, &pv); e != nil || pv["id"] != p.ID() || pv["status"] != "pending" {
		t.Fatalf("plan.get_preview by the loop's id: %v %v", pv, e)
	}
	var ap map[string]any
	if e := h.call("plan.approve", map[string]any{"id": "1-loop"}, &ap); e != nil || ap["approved"] != true || ap["specs_spawned"] != float64(1) {
		t.Fatalf("plan.approve by the loop's id: %v %v", ap, e)
	}
	if a := later.wait(); a.State != api.ApprovalAllowed {
		t.Fatalf("Await heard %s", a.State)
	}
	if a := first.wait(); a.State != api.ApprovalAllowed {
		t.Fatalf("Ask heard %s", a.State)
	}
	again := newAnswers(t)
	if _, err := h.m.Await(p.ID(), again.answer); err != nil || again.wait().State != api.ApprovalAllowed {
		t.Fatalf("Await of a finished approval: %v", err)
	}
	var ae *api.Error
	if _, err := h.m.Await("a-nope", func(api.Approval) {}); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("Await of no approval: %v", err)
	}
}

// OnEnded hears each approval's end once, with its final record (state,
// source, resolution), before its event; an approval a rule answers at
// once was never pending and is not heard.
func TestOnEnded(t *testing.T) {
	ended := make(chan api.Approval, 8)
	cfg := DefaultConfig()
	cfg.Rules = []RuleConfig{{Tool: "Read", Decision: "allow"}}
	h := newHarness(t, cfg, nil, func(o *Options) {
		o.OnEnded = func(a api.Approval) { ended <- a }
	})
	next := func() api.Approval {
		t.Helper()
		select {
		case a := <-ended:
			return a
		case <-time.After(10 * time.Second):
			t.Fatal("OnEnded not called within 10s")
			return api.Approval{}
		}
	}
	ans := newAnswers(t)
	p, err := h.m.Ask(toolReq(`{"command":"ls"}`), ans.answer)
	if err != nil {
		t.Fatal(err)
	}
	h.waitEvent("approval.requested")
	if e := h.call("approval.resolve", map[string]any{"id": p.ID(), "decision": "Deny"}, nil); e != nil {
		t.Fatal(e)
	}
	if a := next(); a.ID != p.ID() || a.State != api.ApprovalDenied || a.Source != api.SourceReachout ||
		a.Resolution == nil || a.Resolution.At.Before(a.CreatedAt) {
		t.Fatalf("OnEnded got %+v", a)
	}
	req := toolReq(`{"command":"ls"}`)
	req.Timeout = 20 * time.Millisecond
	if _, err := h.m.Ask(req, newAnswers(t).answer); err != nil {
		t.Fatal(err)
	}
	if a := next(); a.State != api.ApprovalTimedOut {
		t.Fatalf("OnEnded got %s, want timed_out", a.State)
	}
	read := toolReq(`{"file_path":"/work/p/x"}`)
	read.ToolName = "Read"
	if _, err := h.m.Ask(read, newAnswers(t).answer); err != nil {
		t.Fatal(err)
	}
	h.waitEvent("approval.auto_resolved")
	select {
	case a := <-ended:
		t.Fatalf("OnEnded heard an approval a rule answered: %+v", a)
	default:
	}
}
