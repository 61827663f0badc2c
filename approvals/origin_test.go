package approvals

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/apitest"
)

// The methods that answer for a person are registered as methods only a
// person may call; the others are not.
func TestPersonMethods(t *testing.T) {
	newHarness(t, DefaultConfig(), nil)
	for m, person := range map[string]bool{"approval.resolve": true, "plan.approve": true, "plan.reject": true,
		"plan.iterate": true, "approval.request": false, "approval.cancel": false, "approval.get": false,
		"approval.list": false, "approval.wait": false, "plan.get_preview": false} {
		if apitest.Person(m) != person {
			t.Errorf("%s: only a person may call it = %v, want %v", m, !person, person)
		}
	}
}

// A resolution records the door its call's front-end names (control and
// the client's pid, ui and the session), whatever a client says, but for
// a control client's by "cli"; any other by is refused and the approval
// stays pending. approval.resolved and plan.* carry who, and so does
// approval.cancelled for approval.cancel.
func TestResolutionRecordsItsOrigin(t *testing.T) {
	h := newHarness(t, DefaultConfig(), newMemLog())
	control := api.Origin{By: api.ByControl, Pid: 4242}
	ui := api.Origin{By: api.ByUI, Session: "Xy3_abcd"}
	ask := func(plan bool) (string, *answers) {
		t.Helper()
		ans := newAnswers(t)
		req := toolReq(`{"command":"ls"}`)
		if plan {
			req = Request{Source: api.SourcePlan, Kind: api.KindPlan, Content: "# plan", Specs: json.RawMessage(`[]`), Bound: true}
		}
		p, err := h.m.Ask(req, ans.answer)
		if err != nil {
			t.Fatal(err)
		}
		h.waitEvent("approval.requested")
		return p.ID(), ans
	}
	call := func(o api.Origin, method string, params map[string]any) *api.Error {
		t.Helper()
		_, err := h.mux.StartAs(t, o, method, params).Wait(t, 10*time.Second)
		return err
	}
	for _, tc := range []struct {
		o      api.Origin
		method string
		params map[string]any
		plan   bool
		want   api.Resolution // By, BySession, ByPid
		kind   string         // the plan's event, besides approval.resolved
	}{
		{control, "approval.resolve", map[string]any{"decision": "Allow"}, false, api.Resolution{By: "control", ByPid: 4242}, ""},
		{control, "approval.resolve", map[string]any{"decision": "Deny", "by": "cli"}, false, api.Resolution{By: "cli", ByPid: 4242}, ""},
		{ui, "approval.resolve", map[string]any{"decision": "Allow", "by": "ui"}, false, api.Resolution{By: "ui", BySession: "Xy3_abcd"}, ""},
		{ui, "plan.approve", map[string]any{}, true, api.Resolution{By: "ui", BySession: "Xy3_abcd"}, "plan.approved"},
		{control, "plan.reject", map[string]any{"by": "cli", "reason": "no"}, true, api.Resolution{By: "cli", ByPid: 4242}, "plan.rejected"},
		{control, "plan.iterate", map[string]any{"feedback": "smaller"}, true, api.Resolution{By: "control", ByPid: 4242}, "plan.iterated"},
	} {
		id, ans := ask(tc.plan)
		tc.params["id"] = id
		if err := call(tc.o, tc.method, tc.params); err != nil {
			t.Fatalf("%s %v as %+v: %v", tc.method, tc.params, tc.o, err)
		}
		r := ans.wait().Resolution
		if r.By != tc.want.By || r.BySession != tc.want.BySession || r.ByPid != tc.want.ByPid {
			t.Fatalf("%s %v as %+v: resolution %+v, want %+v", tc.method, tc.params, tc.o, r, tc.want)
		}
		ev := h.waitEvent("approval.resolved").Event.(ApprovalResolved)
		if ev.By != tc.want.By || ev.BySession != tc.want.BySession || ev.ByPid != tc.want.ByPid {
			t.Fatalf("approval.resolved %+v, want %+v", ev, tc.want)
		}
		if tc.kind != "" {
			b, _ := json.Marshal(h.waitEvent(tc.kind).Event)
			var got api.Resolution
			json.Unmarshal(b, &got)
			if got.By != tc.want.By || got.BySession != tc.want.BySession || got.ByPid != tc.want.ByPid {
				t.Fatalf("%s %s, want %+v", tc.kind, b, tc.want)
			}
		}
	}

	// A client names no other door: refused, still pending.
	id, _ := ask(true)
	for _, tc := range []struct {
		o  api.Origin
		by string
	}{{control, "ui"}, {control, "rule"}, {ui, "cli"}, {ui, "control"}} {
		err := call(tc.o, "plan.approve", map[string]any{"id": id, "by": tc.by})
		if err == nil || err.Code != api.CodeInvalidParams || !strings.Contains(err.Message, `by "`+tc.by+`"`) {
			t.Fatalf("plan.approve by %q as %+v: %v, want refused", tc.by, tc.o, err)
		}
	}
	if a, _, _ := h.m.Get(id); a.State != api.ApprovalPending {
		t.Fatalf("after refused calls: %s", a.State)
	}
	// approval.cancel says who cancelled.
	if err := call(ui, "approval.cancel", map[string]any{"id": id}); err != nil {
		t.Fatal(err)
	}
	if ev := h.waitEvent("approval.cancelled").Event.(ApprovalCancelled); ev.By != "ui" || ev.BySession != "Xy3_abcd" || ev.Reason != api.CancelRequested {
		t.Fatalf("approval.cancelled %+v", ev)
	}
}
