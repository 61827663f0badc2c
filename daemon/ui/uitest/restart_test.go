package uitest

import (
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// A tab left open on the jobs page while the daemon restarts, cleanly
// and then killed with SIGKILL, recovers by itself: it says the daemon is
// away, reconnects once it is back, still signed in (the session is in
// the state store), reloads what it shows and goes on live: a job the
// new daemon runs appears without a reload of the page.
func TestTabSurvivesRestart(t *testing.T) {
	t.Parallel()
	d, tb := signedIn(t, config{samePort: true})
	tb.open("/ui/jobs")
	tb.waitJS("the jobs page's live stream", `document.body.dataset.page === "jobs" && document.body.dataset.stream === "open"`)
	eval[chromedp.Void](tb, `window.notReloaded = true`)

	for i, how := range []string{"stop", "kill"} {
		loaded := eval[string](tb, `document.body.dataset.loaded || ""`)
		d.restart(how == "kill")
		n := string(rune('1' + i))
		tb.waitJS("the tab to reconnect after the "+how, `document.body.dataset.reconnected === "`+n+`" && document.body.dataset.stream === "open"`)
		tb.waitJS("what the tab shows reloaded", `document.body.dataset.loaded !== `+jsID(loaded)+` && !document.getElementById("main").classList.contains("stale")`)
		if page := eval[string](tb, `document.body.dataset.page`); page != "jobs" {
			t.Fatalf("after the %s the tab shows %q, want the jobs page, signed in", how, page)
		}
		if !eval[bool](tb, `window.notReloaded === true`) {
			t.Fatalf("after the %s the tab was navigated, not reconnected", how)
		}
		if live := eval[string](tb, `document.getElementById("live").textContent`); !strings.Contains(live, "The daemon is back") {
			t.Fatalf("after the %s the tab says %q", how, live)
		}
		tb.shot("restart-" + how)

		// Fresh data: a job of the new daemon shows up live.
		out, errOut, code := d.cli("run", "--lane", "net", "--", "sh", "-c", `echo "id=$ORCHESTRD_JOB_ID"`)
		if code != 0 {
			t.Fatalf("run after the %s: exit %d: %s", how, code, errOut)
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(out, "id="), "\n")
		row := `document.getElementById(` + jsID("job-"+id) + `)`
		tb.waitJS("job "+id+"'s row after the "+how, row+` && `+row+`.querySelector(".state").textContent === "succeeded"`)
	}
	// The new daemons said what they restored.
	if got := len(eventsOf(d, "ui.sessions_restored")); got != 2 {
		t.Fatalf("%d ui.sessions_restored events, want one a restart", got)
	}
}

// eventsOf is d's events of kind.
func eventsOf(d *daemon, kind string) []map[string]any {
	var out []map[string]any
	for _, e := range d.events() {
		if e["kind"] == kind {
			out = append(out, e)
		}
	}
	return out
}

// A tab whose pages answer but whose live stream is lost each time before
// it says hello (refused, cut by something between) waits longer and
// longer between its tries, up to 5 s, as it does while the daemon is
// away: it never asks for its page 4 times a second for ever.
func TestTabReconnectBacksOff(t *testing.T) {
	_, tb := signedIn(t, config{})
	// Every stream the page opens fails at once; the waits the page asks
	// for are noted.
	if _, err := chromedp.Call(tb.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
window.waits = [];
const realSetTimeout = window.setTimeout;
window.setTimeout = (f, ms, ...args) => { if (ms >= 250) window.waits.push(ms); return realSetTimeout(f, ms, ...args); };
window.EventSource = class {
  constructor(url) { this.url = url; realSetTimeout(() => { if (this.onerror) this.onerror(new Event("error")); }, 0); }
  addEventListener() {}
  close() {}
};`}); err != nil {
		t.Fatalf("Page.addScriptToEvaluateOnNewDocument: %v", err)
	}
	tb.open("/ui/jobs")
	tb.waitJS("six tries, each answered, each stream lost", `Number(document.body.dataset.reconnected) >= 6`)
	waits := eval[[]float64](tb, `window.waits`)
	if slices.Max(waits) < 4000 {
		t.Fatalf("the tab waited %v between its tries: it does not back off", waits)
	}
	if live := eval[string](tb, `document.getElementById("live").textContent`); !strings.Contains(live, "Reconnecting") {
		t.Fatalf("the tab says %q", live)
	}
	tb.shot("reconnect-backoff")
}
