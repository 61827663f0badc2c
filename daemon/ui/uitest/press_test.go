package uitest

import (
	"testing"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/orchestrd/orchestrd/api"
)

// A press on a button holds the page's reload until the button is let go:
// content swapped between the press and the release took the pressed
// button away and the click was lost (a Cancel that did nothing, seen in
// TestLoopPlanApproved under load). Here an event comes while the mouse
// is down on a running job's Cancel: the page holds its reload, the
// release cancels the job, and the held reload comes after.
func TestPressHoldsReload(t *testing.T) {
	t.Parallel()
	d, tb := signedIn(t, config{})
	asked := tb.acceptDialogs()
	r, id := d.runSleeper("net")
	tb.open("/ui/jobs/" + id)
	tb.waitText("h1 .state", "running")
	tb.waitJS("the page's stream", `document.body.dataset.stream === "open"`)
	sel := `.actions form.act:not(:has(input[name=force])) button`
	x := eval[float64](tb, `(() => { const r = document.querySelector("`+sel+`").getBoundingClientRect(); return r.left + r.width / 2; })()`)
	y := eval[float64](tb, `(() => { const r = document.querySelector("`+sel+`").getBoundingClientRect(); return r.top + r.height / 2; })()`)
	// What the content was at the press itself, taken in the press's own
	// dispatch: a reload that lands between an earlier look and the press
	// (one the page's own events asked for, late under load) is no fault.
	eval[chromedp.Void](tb, `window.addEventListener("pointerdown", () => { window.loadedAtPress = document.body.dataset.loaded || "" }, { capture: true, once: true })`)
	mouse := func(typ input.DispatchMouseEventType) {
		t.Helper()
		p := input.DispatchMouseEventParams{Type: typ, X: x, Y: y, Button: input.MouseButtonLeft, ClickCount: 1}
		if _, err := chromedp.Call(tb.ctx, input.DispatchMouseEvent, p); err != nil {
			tb.fatalf("mouse %s at %.0f,%.0f: %v", typ, x, y, err)
		}
	}
	mouse(input.DispatchMouseEventTypeMousePressed)
	// An event for the job's page while the button is down: a reader
	// opens its stream.
	follow := d.startCLI("logs", "-f", id)
	tb.waitJS("the reload held while pressed", `document.body.dataset.held === "true"`)
	if eval[string](tb, `document.body.dataset.loaded || ""`) != eval[string](tb, `window.loadedAtPress`) {
		t.Fatal("the page's content was reloaded while the button was down")
	}
	mouse(input.DispatchMouseEventTypeMouseReleased)
	tb.waitText("#live", "Done.")
	tb.waitText("h1 .state", "cancelled")
	if a := asked(); len(a) != 0 {
		t.Fatalf("a job's Cancel asked %q", a)
	}
	if rec := d.job(id); rec.State != api.StateCancelled {
		t.Fatalf("job %s after the press: %+v", id, rec)
	}
	if code := r.exit(t); code != 130 {
		t.Fatalf("orchestrd run of a cancelled job: exit %d, want 130", code)
	}
	follow.exit(t)
}
