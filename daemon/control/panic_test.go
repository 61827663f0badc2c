package control

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

// A method that panics costs its connection alone: the client hears an
// internal error for the call, its conn actor's panic is reported
// (actor.panicked: a "conn" stopped), the connection closes
// (actor_stopped), and another client goes on.
func TestMethodPanicCostsItsConnectionAlone(t *testing.T) {
	panics := make(chan actors.PanicInfo, 4)
	var sys *actors.System
	h := newHarness(t, func(o *Options) {
		o.System.Shutdown()
		sys = actors.NewSystem(actors.Options{Logger: zerolog.Nop(), OnPanic: func(p actors.PanicInfo) { panics <- p }})
		o.System = sys
	})
	h.sys = sys
	other := h.client()
	h.mustCall(other, "ping", nil, nil)
	c := h.client()
	if e := h.callErr(c, "test.panic", nil); e.Code != wire.CodeInternal {
		t.Fatalf("test.panic answered %+v, want an internal error", e)
	}
	select {
	case p := <-panics:
		if p.Kind != "conn" || p.Directive != actors.Stop {
			t.Fatalf("panic in %s/%s (%s), want a conn actor stopped", p.Kind, p.ID, p.Directive)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no actor panic reported")
	}
	h.rec.Wait(t, "the panicked connection closed", func(r *eventlog.Record) bool {
		e, ok := r.Event.(ConnClosed)
		return ok && e.Reason == ReasonActorStopped
	})
	h.mustCall(other, "ping", nil, nil)
	list, open := h.srv.Conns(api.MaxListedConns)
	if open != 1 || len(list) != 1 || list[0].Kind != "conn" || list[0].Pid == 0 {
		t.Fatalf("listed %+v (%d open), want the other client", list, open)
	}
}
