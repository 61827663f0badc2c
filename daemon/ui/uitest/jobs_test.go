package uitest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/orchestrd/orchestrd/api"
)

// jsID quotes s for a script.
func jsID(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }

// With the jobs page open, a job `orchestrd run` submits appears in the
// table without a reload; its page streams its output live (the first
// line before the file it waits for exists, the second after), and ends
// with the job. A job that writes bytes that are not UTF-8 shows them as
// binary, not as garbage.
func TestJobsLive(t *testing.T) {
	t.Parallel()
	d, tb := signedIn(t, config{})
	tb.open("/ui/jobs")
	tb.waitJS("the jobs page's live stream", `document.body.dataset.page === "jobs" && document.body.dataset.stream === "open"`)
	tb.shot("jobs-empty")
	// A mark that a reload would lose.
	eval[chromedp.Void](tb, `window.notReloaded = true`)

	flag := filepath.Join(t.TempDir(), "go-on")
	r := d.startCLI("run", "--lane", "net", "--", "sh", "-c",
		`echo "id=$ORCHESTRD_JOB_ID"; echo "first line"; while [ ! -e "$1" ]; do sleep 0.05; done; echo "second line"`, "sh", flag)
	id := r.line(t, "id=")
	row := `document.getElementById(` + jsID("job-"+id) + `)`
	tb.waitJS("job "+id+"'s row, running", row+` && `+row+`.querySelector(".state").textContent === "running"`)
	if !eval[bool](tb, `window.notReloaded === true`) {
		t.Fatal("the jobs page was reloaded to show the new job")
	}
	tb.shot("jobs-running")

	// Its page, from its row.
	tb.click(chromedp.CSS(`#job-` + id + ` a[href="/ui/jobs/` + id + `"]`))
	tb.waitJS("the job's page", `document.body.dataset.page === "job" && location.pathname === `+jsID("/ui/jobs/"+id))
	tb.waitText("#output", "first line")
	if out := eval[string](tb, `document.getElementById("output").textContent`); strings.Contains(out, "second line") {
		t.Fatalf("the output shows the second line before the job could write it: %q", out)
	}
	if st := eval[string](tb, `document.getElementById("output-state").textContent`); st != "streaming…" {
		t.Fatalf("a running job's output says %q, want streaming…", st)
	}
	tb.shot("job-streaming")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tb.waitText("#output", "second line")
	tb.waitOutputEnd(id)
	tb.waitText("h1 .state", "succeeded")
	if out := eval[string](tb, `document.getElementById("output").textContent`); out != "id="+id+"\nfirst line\nsecond line\n" {
		t.Fatalf("the page's output is %q", out)
	}
	tb.shot("job-succeeded")
	if code := r.exit(t); code != 0 {
		t.Fatalf("orchestrd run: exit %d", code)
	}

	// Bytes that are not UTF-8, between lines that are.
	out, errOut, code := d.cli("run", "--lane", "net", "--", "sh", "-c", `echo "id=$ORCHESTRD_JOB_ID"; printf 'text before\n'; printf '\377\376\375\374'; printf 'text after\n'`)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	bin, _, _ := strings.Cut(strings.TrimPrefix(out, "id="), "\n")
	tb.open("/ui/jobs/" + bin)
	tb.waitOutputEnd(bin)
	shown := eval[string](tb, `document.getElementById("output").textContent`)
	if !strings.Contains(shown, "text before") || !strings.Contains(shown, "bytes of binary output]") || strings.ContainsRune(shown, '\uFFFD') || strings.ContainsAny(shown, "ÿþýü") {
		t.Fatalf("a job's binary output shows as %q; want its text and the binary said as such", shown)
	}
	if !strings.Contains(shown, "text after") {
		t.Fatalf("the text after binary output is lost: %q", shown)
	}
	tb.shot("job-binary")
}

// Cancel on a running job's page cancels it: the page says so and shows
// it cancelled, its record (orchestrd job) ends cancelled, and the
// `orchestrd run` that started it exits as a cancelled job does.
func TestJobCancel(t *testing.T) {
	t.Parallel()
	d, tb := signedIn(t, config{})
	r, id := d.runSleeper("net")
	tb.open("/ui/jobs/" + id)
	tb.waitText("h1 .state", "running")
	tb.waitText("#output", "id="+id)
	tb.shot("job-running")
	if rec := d.job(id); rec.State != api.StateRunning {
		t.Fatalf("job %s is %s before the click", id, rec.State)
	}
	tb.click(chromedp.CSS(`.actions form.act:not(:has(input[name=force])) button`))
	tb.waitText("#live", "Done.")
	tb.waitText("h1 .state", "cancelled")
	tb.waitOutputEnd(id)
	if n := eval[int](tb, `document.querySelectorAll(".actions button").length`); n != 0 {
		t.Fatalf("a cancelled job's page still has %d buttons", n)
	}
	tb.shot("job-cancelled")
	rec := d.job(id)
	if rec.State != api.StateCancelled || !rec.WasCancelled {
		t.Fatalf("job %s after Cancel: %+v", id, rec)
	}
	if code := r.exit(t); code != 130 {
		t.Fatalf("orchestrd run of a cancelled job: exit %d, want 130", code)
	}
	d.waitEvent("job.cancel_requested", func(e map[string]any) bool { return e["job_id"] == id })
}

// waitOutputEnd waits for the end of the output job id's page streams.
// The output and what the page says of it (ended, N bytes) are the tab's
// own and must outlive a reload of the page's content: one is made to
// happen (orchestrd logs reads the job, its job.stream_opened reloads
// the page) and the page must still say so after it.
func (tb *tab) waitOutputEnd(id string) {
	tb.t.Helper()
	tb.waitJS("the output's end", `document.getElementById("output").dataset.ended === "true"`)
	tb.waitText("#output-state", "ended: ")
	out := eval[string](tb, `document.getElementById("output").textContent`)
	eval[chromedp.Void](tb, `window.loadedBefore = document.body.dataset.loaded || ""`)
	tb.d.cli("logs", id) // it exits as the job did
	tb.waitJS("the page's reload", `(document.body.dataset.loaded || "") !== window.loadedBefore`)
	if st := eval[string](tb, `document.getElementById("output-state").textContent`); !strings.HasPrefix(st, "ended: ") {
		tb.fatalf("after a reload the output says %q, want ended: ...", st)
	}
	if again := eval[string](tb, `document.getElementById("output").textContent`); again != out {
		tb.fatalf("after a reload the output is %q, was %q", again, out)
	}
}
