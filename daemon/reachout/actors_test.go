package reachout

import (
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
)

// A panic while serving one hook connection (here in the Asker) is that
// connection's actor's panic: actor.panicked for a "hook", that hook
// closed unanswered (its protocol has no error line: Claude Code goes on
// to its own check), and another hook waiting meanwhile is answered.
func TestHookPanicCostsItsConnectionAlone(t *testing.T) {
	h := newHarness(t, Options{})
	h.asker.panicOn = "Boom"
	waiting := h.dial(requestLine(uuid1), true)
	first := h.asker.next(t)
	boom := h.dial(strings.Replace(requestLine("550e8400-e29b-41d4-a716-446655440001"), `"Bash"`, `"Boom"`, 1), true)
	h.asker.next(t)
	select {
	case p := <-h.panics:
		if p.Kind != "hook" || p.Directive != actors.Stop {
			t.Fatalf("panic in %s/%s (%s), want a hook actor stopped", p.Kind, p.ID, p.Directive)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no actor panic reported")
	}
	if got := readAll(t, boom); got != "" {
		t.Fatalf("the panicked hook heard %q, want nothing", got)
	}
	list, open := h.srv.Conns(api.MaxListedConns)
	if open != 1 || len(list) != 1 || list[0].Kind != "hook" || list[0].Pid == 0 {
		t.Fatalf("hook connections listed: %+v (%d open), want the waiting one with its pid", list, open)
	}
	first.resolve(api.ApprovalAllowed, api.Resolution{Decision: api.DecisionAllow, Message: "ok"})
	if got := readAll(t, waiting); !strings.Contains(got, `"decision":"Allow"`) {
		t.Fatalf("the waiting hook heard %q, want its allow", got)
	}
}

// linkedApproval stands for the approval's actor: it links to the hook's
// connection actor as approvals' does.
type linkedApproval struct{ requester actors.Ref }

func (a *linkedApproval) Receive(c *actors.Context) {
	if _, ok := c.Message().(actors.Started); ok {
		c.Watch(a.requester)
		c.Send(a.requester, actors.Link{Ref: c.Self()})
	}
}

// The hook's connection actor is linked to the approval it waits on: that
// actor stopping without an answer closes the hook, unanswered, at once.
func TestHookSeesItsApprovalActorStop(t *testing.T) {
	h := newHarness(t, Options{})
	c := h.dial(requestLine(uuid1), true)
	a := h.asker.next(t)
	if a.req.Requester.IsZero() {
		t.Fatal("the request names no requester actor")
	}
	ref, err := h.sys.Spawn(actors.Props{Kind: "approval", ID: "fake",
		New: func() actors.Actor { return &linkedApproval{requester: a.req.Requester} }})
	if err != nil {
		t.Fatal(err)
	}
	// Stopped before or after the hook's actor handles Link, the hook
	// hears Terminated (a watch of an actor gone is answered at once).
	if err := h.sys.Stop(t.Context(), ref); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, c); got != "" {
		t.Fatalf("the hook heard %q, want nothing", got)
	}
	if cs := a.cancelled(); len(cs) == 0 || cs[0] != api.CancelRequesterGone {
		t.Fatalf("cancelled %v, want requester_gone", cs)
	}
}
