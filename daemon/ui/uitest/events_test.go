package uitest

import (
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// The events page shows the newest first, live: a job run while it is
// open adds its events at the top without a reload, each a line of its
// fields with a link to the job, and its JSON shown only when asked for
// (a click, or the keyboard).
func TestEventsNewestFirst(t *testing.T) {
	t.Parallel()
	d, tb := signedIn(t, config{})
	tb.open("/ui/events")
	tb.waitJS("the events page's stream", `document.body.dataset.page === "events" && document.body.dataset.stream === "open" && !!document.body.dataset.loaded`)
	eval[chromedp.Void](tb, `window.notReloaded = true`)
	kinds := eval[[]string](tb, `[...document.querySelectorAll("#events li.event .kind")].map((k) => k.textContent)`)
	if len(kinds) < 2 || kinds[0] != "ui.signed_in" || !slices.Contains(kinds, "daemon.started") {
		t.Fatalf("the events page lists %v: want the newest first (the sign-in), the daemon's start after it", kinds)
	}

	out, errOut, code := d.cli("run", "--lane", "net", "--", "sh", "-c", `echo "id=$ORCHESTRD_JOB_ID"; exit 3`)
	if code == 0 {
		t.Fatalf("run: exit 0, want the job's 3: %s", errOut)
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(out, "id="), "\n")
	// The job's events, in the page's order: its end above its start.
	ofJob := `[...document.querySelectorAll("#events li.event")].filter((li) => li.querySelector("a") && li.querySelector("a").textContent === ` +
		jsID(id) + `).map((li) => li.querySelector(".kind").textContent)`
	tb.waitJS("job "+id+"'s end, live", ofJob+`.includes("job.finished")`)
	if kinds := eval[[]string](tb, ofJob); slices.Index(kinds, "job.finished") > slices.Index(kinds, "job.queued") ||
		slices.Index(kinds, "job.queued") < 0 {
		t.Fatalf("job %s's events read %v: want the newest first", id, kinds)
	}
	first := `[...document.querySelectorAll("#events li.event")].find((li) => li.querySelector(".kind").textContent === "job.finished")`
	if !eval[bool](tb, `window.notReloaded === true`) {
		t.Fatal("the events page was reloaded to show new events")
	}
	line := eval[string](tb, first+`.querySelector(".fields").textContent`)
	if !strings.Contains(line, "exit_code 3") || !strings.Contains(line, "state failed") || strings.Contains(line, "{") {
		t.Fatalf("the job's end reads %q: want its fields as words, not JSON", line)
	}
	if eval[bool](tb, first+`.querySelector("details.json").open`) || eval[bool](tb, first+`.querySelector("details.json pre").checkVisibility()`) {
		t.Fatal("the JSON shows before it is asked for")
	}
	eval[chromedp.Void](tb, first+`.querySelector("details.json summary").focus()`)
	tb.do(chromedp.KeyEvent(kb.Enter))
	tb.waitJS("the JSON, shown", first+`.querySelector("details.json").open && `+first+`.querySelector("details.json pre").checkVisibility()`)
	if js := eval[string](tb, first+`.querySelector("details.json pre").textContent`); !strings.Contains(js, `"exit_code": 3`) {
		t.Fatalf("the JSON on demand is %q", js)
	}
	tb.shot("events-newest-first")
}
