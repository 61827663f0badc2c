package uitest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/orchestrd/orchestrd/api"
)

// Every control is labelled and reachable by keyboard. On each page (the
// sign-in, a job, and every page the navigation names) every button,
// link, field and list box has an accessible name in Chromium's
// accessibility tree. On the jobs page, Tab from the top goes to the skip link, the
// navigation, the filter (lane, state, since, Filter) and a running
// job's Cancel button, each with a visible focus ring; the filter is
// used by keyboard (state running, Enter), and Enter on Cancel cancels
// the job.
func TestKeyboardAndLabels(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	d := startDaemon(t, config{})
	tb := newTab(t, d)
	tb.open("/ui/login")
	tb.checkNames("sign-in")
	tb.signIn()

	r, id := d.runSleeper("net")
	tb.open("/ui/jobs/" + id)
	tb.waitText("h1 .state", "running")
	tb.checkNames("job")
	// Every page the navigation names.
	nav := eval[[]string](tb, `[...document.querySelectorAll("nav[aria-label=Main] a")].map(a => a.getAttribute("href"))`)
	if len(nav) < 4 {
		t.Fatalf("the navigation names %q", nav)
	}
	for _, href := range nav {
		tb.open(href)
		tb.waitJS("page "+href, `!!document.body.dataset.page && document.body.dataset.page !== "login" && !document.querySelector("main p.error")`)
		name := eval[string](tb, `document.body.dataset.page`)
		tb.checkNames(name)
		tb.shot(name)
	}
	tb.open("/ui/jobs")
	tb.waitJS("the running job's Cancel", `!!document.querySelector('button[aria-label="Cancel job `+id+`"]')`)
	tb.checkNames("jobs")

	// Tab through the page from its top.
	eval[chromedp.Void](tb, `document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)`)
	var seen []string
	for i := 0; i < 40; i++ {
		tb.do(chromedp.KeyEvent(kb.Tab))
		f := eval[focused](tb, focusedJS)
		if f.Ring == "none" || f.Ring == "" {
			t.Errorf("%s has focus and no visible focus ring (outline %q)", f.Name, f.Ring)
		}
		seen = append(seen, f.Name)
		if f.Name == "button Cancel job "+id {
			break
		}
	}
	want := []string{"a Skip to content", "a Jobs", "select f-lane", "select f-state", "input f-since", "button Filter", "a " + id, "button Cancel job " + id}
	at := 0
	for _, s := range seen {
		if at < len(want) && s == want[at] {
			at++
		}
	}
	if at < len(want) || seen[0] != want[0] {
		t.Fatalf("Tab from the top went %q; want in order %q", seen, want)
	}

	// The filter, by keyboard: state running, then Enter on Filter.
	eval[chromedp.Void](tb, `document.getElementById("f-state").focus()`)
	for i := 0; i < 10 && eval[string](tb, `document.getElementById("f-state").value`) != "running"; i++ {
		tb.do(chromedp.KeyEvent(kb.ArrowDown))
	}
	tb.do(chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Tab)) // since, Filter
	if f := eval[focused](tb, focusedJS); f.Name != "button Filter" {
		t.Fatalf("after the state, Tab Tab is on %s, want the Filter button", f.Name)
	}
	tb.do(chromedp.KeyEvent(kb.Enter))
	tb.waitJS("the filtered jobs", `location.search === "?lane=&state=running&since=" && !!document.getElementById("job-`+id+`")`)
	tb.shot("jobs-filtered-by-keyboard")

	// Cancel keeps the focus through a reload the stream brings (another
	// job, run meanwhile), and Enter on it cancels the job.
	tb.waitJS("the live stream", `document.body.dataset.stream === "open"`)
	eval[chromedp.Void](tb, `document.querySelector('button[aria-label="Cancel job `+id+`"]').focus()`)
	loaded := eval[string](tb, `String(document.body.dataset.loaded)`)
	if _, errOut, code := d.cli("run", "--lane", "no-net", "--", "true"); code != 0 {
		t.Fatalf("orchestrd run -- true: exit %d: %s", code, errOut)
	}
	tb.waitJS("the page reloaded by the other job", `String(document.body.dataset.loaded) !== `+strconv.Quote(loaded))
	if f := eval[focused](tb, focusedJS); f.Name != "button Cancel job "+id {
		t.Fatalf("after a reload the focus is on %q, want the Cancel button it was on", f.Name)
	}
	tb.do(chromedp.KeyEvent(kb.Enter))
	tb.waitText("#live", "Done.")
	if code := r.exit(t); code != 130 {
		t.Fatalf("orchestrd run of a job cancelled by keyboard: exit %d, want 130", code)
	}
	if rec := d.job(id); rec.State != api.StateCancelled {
		t.Fatalf("job %s after Enter on Cancel: %s", id, rec.State)
	}
	// The filtered page follows: the cancelled job leaves it.
	tb.waitJS("the cancelled job to leave the running jobs", `!document.getElementById("job-`+id+`")`)
}

// focused is the element that has focus: "tag id-or-name" and its
// outline when focused.
type focused struct {
	Name string `json:"name"`
	Ring string `json:"ring"`
}

const focusedJS = `(() => {
	const e = document.activeElement;
	if (!e || e === document.body) return { name: "body", ring: "n/a" };
	const tag = e.tagName.toLowerCase();
	const name = e.getAttribute("aria-label") || (tag === "select" || tag === "input" ? e.id : e.textContent.trim());
	return { name: tag + " " + name, ring: getComputedStyle(e).outlineStyle };
})()`

// interactive are the accessibility roles a person acts on.
var interactive = map[string]bool{"button": true, "link": true, "textbox": true, "combobox": true, "searchbox": true,
	"checkbox": true, "radio": true, "listbox": true, "spinbutton": true, "switch": true, "menuitem": true, "tab": true}

// checkNames fails the test for a control of the page without an
// accessible name (Chromium's accessibility tree).
func (tb *tab) checkNames(pageName string) {
	tb.t.Helper()
	res, err := chromedp.Call(tb.ctx, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
	if err != nil {
		tb.fatalf("Accessibility.getFullAXTree: %v", err)
	}
	str := func(v *accessibility.Value) string {
		if v == nil || len(v.Value) == 0 {
			return ""
		}
		var s string
		if json.Unmarshal(v.Value, &s) != nil {
			return string(v.Value)
		}
		return s
	}
	n := 0
	var unnamed []string
	for _, node := range res.Nodes {
		role := str(node.Role)
		if node.Ignored || !interactive[role] {
			continue
		}
		n++
		if strings.TrimSpace(str(node.Name)) == "" {
			unnamed = append(unnamed, fmt.Sprintf("%s (dom node %d)", role, node.BackendDOMNodeID))
		}
	}
	if n == 0 {
		tb.fatalf("the %s page has no controls in its accessibility tree", pageName)
	}
	if len(unnamed) > 0 {
		tb.t.Errorf("the %s page has controls without an accessible name: %s", pageName, strings.Join(unnamed, ", "))
	}
}
