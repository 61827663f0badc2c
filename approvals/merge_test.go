package approvals

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// A loop's plan: its plan.* events name the loop (LoopID), the approval
// beside it. A loop's merge (kind merge): no rule answers it, not even
// one for every tool; no plan.* event announces it; plan.approve takes it
// (by its loop's id), plan.iterate and Reply do not.
func TestLoopPlanAndMergeEvents(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rules = []RuleConfig{{Tool: "*", Decision: "allow"}}
	h := newHarness(t, cfg, nil)
	plan := newAnswers(t)
	p, err := h.m.Ask(Request{Source: api.SourcePlan, Kind: api.KindPlan, LoopID: "1-plan", Content: "# plan",
		Specs: json.RawMessage(`["spec-a"]`)}, plan.answer)
	if err != nil {
		t.Fatal(err)
	}
	e := h.waitEvent("plan.awaiting_approval").Event.(PlanAwaitingApproval)
	if e.ID != "1-plan" || e.ApprovalID != p.ID() {
		t.Fatalf("plan.awaiting_approval %+v, want id 1-plan, approval %s", e, p.ID())
	}
	if e := h.call("plan.approve", map[string]any{"id": p.ID()}, nil); e != nil {
		t.Fatal(e)
	}
	if e := h.waitEvent("plan.approved").Event.(PlanApproved); e.ID != "1-plan" || e.ApprovalID != p.ID() {
		t.Fatalf("plan.approved %+v", e)
	}
	plan.wait()

	merge := newAnswers(t)
	mp, err := h.m.Ask(Request{Source: api.SourcePlan, Kind: api.KindMerge, LoopID: "1-code", Content: "Merge loop 1-code's branch?"}, merge.answer)
	if err != nil {
		t.Fatal(err)
	}
	if r := h.waitEvent("approval.requested").Event.(ApprovalRequested); r.ID != mp.ID() || r.ApprovalKind != api.KindMerge {
		t.Fatalf("approval.requested %+v", r)
	}
	var got struct{ Approval api.Approval }
	if e := h.call("approval.get", map[string]any{"id": mp.ID()}, &got); e != nil || got.Approval.State != api.ApprovalPending ||
		got.Approval.LoopID != "1-code" || got.Approval.Kind != api.KindMerge {
		t.Fatalf("the merge's approval: %+v %v (a rule answered it?)", got.Approval, e)
	}
	if e := h.call("plan.iterate", map[string]any{"id": mp.ID(), "feedback": "x"}, nil); e == nil || e.Code != api.CodeInvalidState ||
		!strings.Contains(e.Message, "a loop's merge") {
		t.Fatalf("plan.iterate of a merge: %v", e)
	}
	if e := h.call("approval.resolve", map[string]any{"id": mp.ID(), "decision": "Reply", "user_message": "x"}, nil); e == nil ||
		e.Code != api.CodeInvalidState || !strings.Contains(e.Message, "orchestrd approve|deny") {
		t.Fatalf("Reply to a merge: %v", e)
	}
	if e := h.call("plan.approve", map[string]any{"id": mp.ID()}, nil); e != nil {
		t.Fatalf("plan.approve of a merge: %v", e)
	}
	if a := merge.wait(); a.State != api.ApprovalAllowed {
		t.Fatalf("the merge: %s", a.State)
	}
	h.waitEvent("approval.resolved")
	for {
		select {
		case r := <-h.ev:
			if strings.HasPrefix(r.Kind, "plan.") {
				t.Fatalf("the merge announced as a plan: %s %+v", r.Kind, r.Event)
			}
			continue
		default:
		}
		break
	}
}
