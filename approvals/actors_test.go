package approvals

import (
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
)

// approvalActors is the ids of the approval actors under the approvals
// supervisor.
func approvalActors(sys *actors.System) []string {
	var ids []string
	for _, top := range sys.Tree() {
		if top.Kind != "approvals" {
			continue
		}
		for _, c := range top.Children {
			if c.Kind == "approval" {
				ids = append(ids, c.ID)
			}
		}
	}
	return ids
}

// One actor per pending approval, under the approvals supervisor; gone
// once the approval is over.
func TestOneActorPerPendingApproval(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	var ids []string
	for i := 0; i < 3; i++ {
		p, err := h.m.Ask(toolReq(`{"command":"ls"}`), func(api.Approval) {})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID())
		h.waitEvent("approval.requested")
	}
	if got := approvalActors(h.m.sys); len(got) != 3 {
		t.Fatalf("approval actors %v, want %v", got, ids)
	}
	if e := h.call("approval.resolve", map[string]any{"id": ids[1], "decision": "Allow"}, nil); e != nil {
		t.Fatal(e)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := approvalActors(h.m.sys)
		if len(got) == 2 && !strings.Contains(strings.Join(got, ","), ids[1]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("approval actors %v after %s was resolved", got, ids[1])
		}
		time.Sleep(5 * time.Millisecond) // polling the tree, not for correctness
	}
}

// approval.wait gives up after timeout_ms: 1002 with the approval, still
// pending, as data.
func TestWaitTimeout(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	p, err := h.m.Ask(toolReq(`{"command":"ls"}`), func(api.Approval) {})
	if err != nil {
		t.Fatal(err)
	}
	c := h.start("approval.wait", map[string]any{"id": p.ID(), "timeout_ms": 30})
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("approval.wait did not give up")
	}
	if c.Err() == nil || c.Err().Code != api.CodeInvalidState || !strings.Contains(c.Err().Message, "still pending after 30 ms") {
		t.Fatalf("wait: %v", c.Err())
	}
	if d, ok := c.Err().Data.(approvalResult); !ok || d.Approval.ID != p.ID() {
		t.Fatalf("wait data %#v", c.Err().Data)
	}
	// By request_id too.
	req := toolReq(`{"command":"ls"}`)
	req.RequestID = "6f1c0e4a-1b7e-4c55-9a51-2f3d4b5c6d7e"
	p2, err := h.m.Ask(req, func(api.Approval) {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.Ask(req, func(api.Approval) {}); err == nil || !strings.Contains(err.Error(), "already pending as approval "+p2.ID()) {
		t.Fatalf("the same request_id twice: %v", err)
	}
	var out approvalOut
	if e := h.call("approval.get", map[string]any{"id": req.RequestID}, &out); e != nil || out.Approval.ID != p2.ID() {
		t.Fatalf("get by request_id: %v %+v", e, out.Approval)
	}
}
