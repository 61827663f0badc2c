package uitest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The charts page draws the last hour from what the daemon did: jobs
// that succeeded and failed (bars whose values add up to the jobs run),
// a lane's queue that grew to two, a runner that was killed and
// restarted, an approval that waited and was answered, an agent's tokens
// and cost. Each chart says its values as text (and in its SVG's
// description), and the page fits a phone's width.
func TestCharts(t *testing.T) {
	t.Parallel()
	exe := tool(t, "github.com/orchestrd/orchestrd/internal/testexecutor")
	d, tb := signedIn(t, config{extra: fmt.Sprintf("[approvals.reachout]\nsocket = \"{{home}}/hook.sock\"\n"+
		"[executors.scripted]\ncommand = [%q]\ninstances = 1\n", exe)})

	// Known jobs: 3 succeed and 2 fail on lane net.
	for i := 0; i < 3; i++ {
		if _, errOut, code := d.cli("run", "--lane", "net", "--", "true"); code != 0 {
			t.Fatalf("run true: exit %d: %s", code, errOut)
		}
	}
	for i := 0; i < 2; i++ {
		if _, _, code := d.cli("run", "--lane", "net", "--", "sh", "-c", "exit 3"); code == 0 {
			t.Fatal("run exit 3: exit 0")
		}
	}
	tb.open("/ui/charts")
	tb.waitJS("the charts page", `document.body.dataset.page === "charts" && document.body.dataset.stream === "open"`)
	sum := func(chart, series string) string {
		return `[...document.querySelectorAll("#chart-` + chart + ` rect[data-series=` + series + `]")].reduce((n, r) => n + Number(r.dataset.value), 0)`
	}
	tb.waitText("#chart-jobs-latest", "succeeded 3 (")
	tb.waitText("#chart-jobs-latest", "failed 2 (")
	if n := eval[int](tb, sum("jobs", "succeeded")); n != 3 {
		t.Fatalf("the succeeded bars add up to %d, want 3", n)
	}
	if n := eval[int](tb, sum("jobs", "failed")); n != 2 {
		t.Fatalf("the failed bars add up to %d, want 2", n)
	}
	if c := eval[string](tb, `document.querySelector("#chart-jobs rect[data-series=succeeded]").getAttribute("class")`); c != "s0" {
		t.Fatalf("a succeeded bar's class is %q", c)
	}
	// The text alternative: the SVG is an image labelled by its title and
	// its description, which says what the text under it says.
	if ok := eval[bool](tb, `(() => { const s = document.querySelector("#chart-jobs svg");
		const d = document.getElementById(s.getAttribute("aria-labelledby").split(" ")[1]);
		return s.getAttribute("role") === "img" && d.textContent === document.getElementById("chart-jobs-latest").textContent; })()`); !ok {
		t.Fatal("the jobs chart's SVG has no text alternative saying its values")
	}

	// A queue on lane no-net (2 slots): 4 jobs that wait for a file, 2 of
	// them queued.
	flag := filepath.Join(t.TempDir(), "go-on")
	var runs []*running
	for i := 0; i < 4; i++ {
		runs = append(runs, d.startCLI("run", "--lane", "no-net", "--", "sh", "-c", `while [ ! -e "$1" ]; do sleep 0.05; done`, "sh", flag))
	}
	tb.waitText("#chart-queue-latest", "no-net 2 now (2 at most)")
	if n := eval[int](tb, `document.querySelectorAll("#chart-queue polyline[data-series=no-net]").length`); n != 1 {
		t.Fatalf("lane no-net's queue: %d lines", n)
	}
	tb.shot("charts-queue")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if code := r.exit(t); code != 0 {
			t.Fatalf("a queued job: exit %d", code)
		}
	}
	tb.waitText("#chart-jobs-latest", "succeeded 7 (")
	tb.waitText("#chart-queue-latest", "no-net 0 now (2 at most)")

	// A runner killed: it is restarted.
	var pid int
	for _, e := range d.events() {
		if e["kind"] == "runner.ready" && e["lane"] == "net" {
			pid = int(e["pid"].(float64))
		}
	}
	if pid == 0 {
		t.Fatal("no runner.ready of lane net in the log")
	}
	if p, err := os.FindProcess(pid); err != nil || p.Kill() != nil {
		t.Fatalf("killing runner %d: %v", pid, err)
	}
	tb.waitText("#chart-restarts-latest", "net 1 (")

	// An approval that waits until it is answered.
	h := askHook(t, filepath.Join(d.home, "hook.sock"), "make test")
	ev := d.waitEvent("approval.requested", nil)
	tb.waitText("#chart-waiting-latest", "waiting 1 now")
	if _, errOut, code := d.cli("approve", ev["id"].(string)); code != 0 {
		t.Fatalf("approve: exit %d: %s", code, errOut)
	}
	h.answer(t)
	tb.waitText("#chart-waiting-latest", "waiting 0 now (1 at most)")
	tb.waitText("#chart-answer-latest", "over 1, last ")
	if n := eval[int](tb, `document.querySelectorAll("#chart-answer rect[data-series=answered]").length`); n != 1 {
		t.Fatalf("the time to answer: %d bars, want 1", n)
	}

	// An agent's task that used tokens.
	if _, errOut, code := d.cli("prompt", "--executor", "scripted", "--cwd", d.home,
		`{"steps":[{"op":"usage","input_tokens":1200,"output_tokens":345,"cost_usd":0.25},{"op":"status","status":"completed"}]}`); code != 0 {
		t.Fatalf("prompt: exit %d: %s", code, errOut)
	}
	tb.waitText("#chart-tokens-latest", "input 1200 (")
	tb.waitText("#chart-tokens-latest", "output 345 (")
	tb.waitText("#chart-cost-latest", "cost $0.2500 (")
	if n := eval[int](tb, sum("tokens", "input")); n != 1200 {
		t.Fatalf("the input tokens' bars add up to %d, want 1200", n)
	}
	tb.shot("charts")

	// At a phone's width the page does not scroll sideways, and the
	// charts are drawn across it.
	tb.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	defer tb.do(chromedp.EmulateViewport(1280, 800))
	if ok := eval[bool](tb, `document.documentElement.scrollWidth <= window.innerWidth &&
		document.querySelector("#chart-jobs svg").getBoundingClientRect().width > 300`); !ok {
		t.Fatalf("at 390 px the charts page is %v wide", eval[int](tb, `document.documentElement.scrollWidth`))
	}
	if !strings.Contains(eval[string](tb, `document.querySelector("nav").textContent`), "Charts") {
		t.Fatal("the navigation has no Charts")
	}
}
