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

// requester stands for a hook's connection actor: it takes Link (watching
// the approval) and says when the approval's actor stopped.
type requester struct {
	linked chan actors.Ref
	gone   chan actors.Ref
}

func (r *requester) Receive(c *actors.Context) {
	switch m := c.Message().(type) {
	case actors.Link:
		c.Watch(m.Ref)
		r.linked <- m.Ref
	case actors.Terminated:
		r.gone <- m.Who
	}
}

// An approval asked with a Requester is linked to it: the approval's actor
// links back (Link), so each sees the other stop; the requester's actor
// stopping cancels the approval (requester_gone), after which the
// approval's actor stops and the requester hears it.
func TestApprovalLinkedToItsRequester(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	r := &requester{linked: make(chan actors.Ref, 1), gone: make(chan actors.Ref, 1)}
	ref, err := h.m.sys.Spawn(actors.Props{Kind: "hook", ID: "test", New: func() actors.Actor { return r }})
	if err != nil {
		t.Fatal(err)
	}
	ans := newAnswers(t)
	req := toolReq(`{"command":"ls"}`)
	req.Bound, req.Requester = true, ref
	if _, err := h.m.Ask(req, ans.answer); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.linked:
	case <-time.After(10 * time.Second):
		t.Fatal("the approval's actor never linked to its requester")
	}
	if err := h.m.sys.Stop(t.Context(), ref); err != nil {
		t.Fatal(err)
	}
	got := ans.wait()
	if got.State != api.ApprovalCancelled || got.Resolution.Reason != api.CancelRequesterGone {
		t.Fatalf("got %s %+v, want cancelled requester_gone", got.State, got.Resolution)
	}

	// The other way: a second requester hears its approval's actor stop.
	r2 := &requester{linked: make(chan actors.Ref, 1), gone: make(chan actors.Ref, 1)}
	ref2, err := h.m.sys.Spawn(actors.Props{Kind: "hook", ID: "test2", New: func() actors.Actor { return r2 }})
	if err != nil {
		t.Fatal(err)
	}
	req.Requester = ref2
	p, err := h.m.Ask(req, func(api.Approval) {})
	if err != nil {
		t.Fatal(err)
	}
	var approval actors.Ref
	select {
	case approval = <-r2.linked:
	case <-time.After(10 * time.Second):
		t.Fatal("the second approval's actor never linked")
	}
	p.Cancel("test")
	select {
	case who := <-r2.gone:
		if !who.Equal(approval) {
			t.Fatalf("Terminated of %s, want the approval's %s", who, approval)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the requester never heard its approval's actor stop")
	}
	h.m.sys.Stop(t.Context(), ref2)
}
