package uitest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/orchestrd/orchestrd/api"
)

// signedInOn starts a daemon with cfg, signs a tab in and opens path,
// the page named page, once its live stream is open.
func signedInOn(t *testing.T, cfg config, path, page string) (*daemon, *tab) {
	t.Helper()
	d, tb := signedIn(t, cfg)
	tb.openLive(path, page)
	return d, tb
}

// openLive opens path, the page named page, and waits for its live
// stream.
func (tb *tab) openLive(path, page string) {
	tb.t.Helper()
	tb.open(path)
	tb.waitJS("the "+page+" page's live stream", `document.body.dataset.page === `+jsID(page)+` && document.body.dataset.stream === "open"`)
}

// landedOn waits for the tab to be on the page of a new thing under
// prefix (/ui/jobs/, /ui/loops/, /ui/agents/tasks/) and returns its id.
func (tb *tab) landedOn(page, prefix string) string {
	tb.t.Helper()
	tb.waitJS("the new "+page+"'s page", `document.body.dataset.page === `+jsID(page)+` && location.pathname.startsWith(`+jsID(prefix)+`)`)
	return strings.TrimPrefix(eval[string](tb, `location.pathname`), prefix)
}

// fitsPhone fails the test when the page is wider than a phone's 390 px
// (the tab is left at 1280x800).
func (tb *tab) fitsPhone(what string) {
	tb.t.Helper()
	tb.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	w := eval[int](tb, `document.documentElement.scrollWidth`)
	tb.do(chromedp.EmulateViewport(1280, 800))
	if w > 390 {
		tb.fatalf("%s at 390 px wide is %d px wide", what, w)
	}
}

// The jobs page's "Run a job", by keyboard: Enter on its summary opens
// it, the lane is chosen with the arrow keys, the command and the stdin
// typed, and Enter in the command runs it. The tab lands on the job's
// page, where its output (stdin, upper-cased) shows; its record is what
// `orchestrd run --lane net -- sh -c LINE` with that stdin would have
// made. Refused forms say why in words in the form, which keeps what was
// typed, through the live reloads of the page: an empty command, a lane
// the daemon does not have, a stdin over 64 KiB.
func TestRunJobForm(t *testing.T) {
	t.Parallel()
	d, tb := signedInOn(t, config{}, "/ui/jobs", "jobs")
	if eval[bool](tb, `document.getElementById("start-job").open`) {
		t.Fatal("the run form is open before it is asked for")
	}
	tb.fitsPhone("the jobs page")
	eval[chromedp.Void](tb, `document.querySelector("#start-job > summary").focus()`)
	tb.do(chromedp.KeyEvent(kb.Enter))
	tb.waitJS("the form open", `document.getElementById("start-job").open`)
	if v := eval[string](tb, `document.getElementById("job-lane").value`); v != "no-net" {
		t.Fatalf("the form's lane is %q at first, want no-net (the CLI's default)", v)
	}
	tb.do(chromedp.KeyEvent(kb.Tab))
	if f := eval[focused](tb, focusedJS); f.Name != "select job-lane" {
		t.Fatalf("Tab after the summary is on %s, want the lane", f.Name)
	}
	for i := 0; i < 5 && eval[string](tb, `document.getElementById("job-lane").value`) != "net"; i++ {
		tb.do(chromedp.KeyEvent(kb.ArrowUp))
	}
	tb.do(chromedp.SendKeys(chromedp.ID("job-stdin"), "hello from the form\nsecond line\n"),
		chromedp.SendKeys(chromedp.ID("job-timeout"), "30"),
		chromedp.SendKeys(chromedp.ID("job-command"), `tr a-z A-Z && echo "job=$ORCHESTRD_JOB_ID"`))
	tb.fitsPhone("the run form")
	tb.shot("run-form-filled")
	tb.do(chromedp.KeyEvent(kb.Enter)) // in the command: submits
	id := tb.landedOn("job", "/ui/jobs/")
	tb.waitText("#output", "job="+id)
	tb.waitText("h1 .state", "succeeded")
	if out := eval[string](tb, `document.getElementById("output").textContent`); out != "HELLO FROM THE FORM\nSECOND LINE\njob="+id+"\n" {
		t.Fatalf("the job's output on its page: %q", out)
	}
	tb.shot("run-form-job")
	rec := d.job(id)
	if rec.Lane != "net" || rec.Command != `tr a-z A-Z && echo "job=$ORCHESTRD_JOB_ID"` || len(rec.Argv) != 0 || rec.State != api.StateSucceeded {
		t.Fatalf("the form's job: %+v", rec)
	}
	d.waitEvent("job.queued", func(e map[string]any) bool { return e["job_id"] == id })

	// Refusals, in the form, with what was typed kept.
	tb.openLive("/ui/jobs", "jobs")
	tb.click(chromedp.CSS("#start-job > summary"))
	tb.do(chromedp.SendKeys(chromedp.ID("job-stdin"), "kept input"))
	tb.click(chromedp.CSS("#form-job button[type=submit]"))
	tb.waitText("#form-job-error", "command: give a shell line to run (it is empty)")
	tb.shot("run-form-empty-command")

	eval[chromedp.Void](tb, `(() => { const s = document.getElementById("job-lane"); s.add(new Option("gpu", "gpu", true, true)); })()`)
	tb.do(chromedp.SendKeys(chromedp.ID("job-command"), "true"))
	tb.click(chromedp.CSS("#form-job button[type=submit]"))
	tb.waitText("#form-job-error", `unknown lane "gpu"; the daemon's lanes are`)
	if txt := eval[string](tb, `document.getElementById("form-job-error").textContent`); strings.Contains(txt, "{") || strings.Contains(txt, "code") {
		t.Fatalf("the refusal reads %q: want words, not JSON or a code", txt)
	}
	tb.shot("run-form-unknown-lane")

	// The page reloads its content on a job's events: the refused form
	// stays as it is (open, its lane, its text, its error).
	eval[chromedp.Void](tb, `window.loadedBefore = document.body.dataset.loaded || ""`)
	if _, errOut, code := d.cli("run", "--lane", "net", "--", "true"); code != 0 {
		t.Fatalf("orchestrd run: exit %d: %s", code, errOut)
	}
	tb.waitJS("the page's reload", `(document.body.dataset.loaded || "") !== window.loadedBefore`)
	if got := eval[string](tb, `[document.getElementById("start-job").open, document.getElementById("job-lane").value, `+
		`document.getElementById("job-command").value, document.getElementById("job-stdin").value, `+
		`document.getElementById("form-job-error").textContent.includes("unknown lane")].join("|")`); got != "true|gpu|true|kept input|true" {
		t.Fatalf("after a reload of the page the form is %q", got)
	}

	// A stdin over its bound, set as a script would (the box's maxlength
	// stops typing).
	eval[chromedp.Void](tb, `(() => { document.getElementById("job-lane").value = "net"; document.getElementById("job-stdin").value = "y".repeat(70000); })()`)
	tb.click(chromedp.CSS("#form-job button[type=submit]"))
	tb.waitText("#form-job-error", "stdin: at most 64 KiB, got 70000 bytes")
	tb.shot("run-form-stdin-too-big")
	if p := eval[string](tb, `location.pathname`); p != "/ui/jobs" {
		t.Fatalf("a refused form left the page for %s", p)
	}
	var jobs struct{ Jobs []api.JobRecord }
	if err := jsonCLI(d, &jobs, "jobs", "--json"); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Jobs) != 2 {
		t.Fatalf("%d jobs after the refused forms, want 2 (the form's and the CLI's)", len(jobs.Jobs))
	}
}

// The loops page's "Start a loop": a plan loop for a repository, started
// from the form, lands on its page, where the plan its agent wrote waits
// for approval; a repository that is not one is refused in words, the
// form kept.
func TestStartLoopForm(t *testing.T) {
	t.Parallel()
	cfg, repo := planLoopConfig(t)
	d, tb := signedInOn(t, cfg, "/ui/loops", "loops")
	tb.click(chromedp.CSS("#start-loop > summary"))
	notRepo := t.TempDir()
	tb.do(chromedp.SendKeys(chromedp.ID("loop-repo"), notRepo),
		chromedp.SendKeys(chromedp.ID("loop-description"), "build the widget\nwith care"))
	tb.click(chromedp.CSS("#form-loop button[type=submit]"))
	tb.waitJS("the refusal", `document.getElementById("form-loop-error").textContent.includes(`+jsID(notRepo)+`)`)
	if v := eval[string](tb, `document.getElementById("loop-description").value`); v != "build the widget\nwith care" {
		t.Fatalf("the refused form's description is %q", v)
	}
	tb.fitsPhone("the loop form, refused")
	tb.shot("loop-form-refused")

	eval[chromedp.Void](tb, `document.getElementById("loop-repo").value = ""`)
	tb.do(chromedp.SendKeys(chromedp.ID("loop-repo"), repo))
	tb.click(chromedp.CSS("#form-loop button[type=submit]"))
	id := tb.landedOn("loop", "/ui/loops/")
	tb.waitJS("the plan awaiting approval", `!!document.getElementById("plan-approve") && document.querySelector("pre[aria-label='The plan']").textContent.includes("## Specs to Create")`)
	tb.shot("loop-form-started")
	var g api.LoopGetResult
	if err := jsonCLI(d, &g, "loop", "show", "--json", id); err != nil {
		t.Fatal(err)
	}
	if g.Loop.LoopType != api.LoopPlan || g.Loop.ParentID != nil || !strings.Contains(string(g.Loop.Context), "build the widget\\nwith care") {
		t.Fatalf("the form's loop: %+v %s", g.Loop, g.Loop.Context)
	}
}

// The agents page's "Send a prompt": a prompt sent to a pool lands on its
// task's page, where what the agent said shows.
func TestSendPromptForm(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	pool := fmt.Sprintf("[executors.scripted]\ncommand = [%q]\n", tool(t, "github.com/orchestrd/orchestrd/internal/testexecutor"))
	d, tb := signedInOn(t, config{extra: pool}, "/ui/agents", "agents")
	tb.click(chromedp.CSS("#start-prompt > summary"))
	tb.do(chromedp.SendKeys(chromedp.ID("prompt-text"), `{"steps":[{"op":"message","n":1,"text":"hello from the prompt form"}]}`))
	tb.click(chromedp.CSS("#form-prompt button[type=submit]"))
	tb.waitText("#form-prompt-error", "cwd: give an absolute path (it is empty)")
	tb.do(chromedp.SendKeys(chromedp.ID("prompt-cwd"), d.home))
	tb.fitsPhone("the prompt form")
	tb.shot("prompt-form-filled")
	tb.click(chromedp.CSS("#form-prompt button[type=submit]"))
	id := tb.landedOn("task", "/ui/agents/tasks/")
	tb.waitText("main", "hello from the prompt form")
	tb.shot("prompt-form-task")
	var task struct{ Tasks []api.TaskRecord }
	if err := jsonCLI(d, &task, "tasks", "--json"); err != nil {
		t.Fatal(err)
	}
	if len(task.Tasks) != 1 || task.Tasks[0].ID != id || task.Tasks[0].Executor != "scripted" || task.Tasks[0].Cwd != d.home {
		t.Fatalf("the form's task: %+v", task.Tasks)
	}
}

// jsonCLI runs the CLI with args on d's home and decodes its stdout into
// v.
func jsonCLI(d *daemon, v any, args ...string) error {
	d.t.Helper()
	out, errOut, code := d.cli(args...)
	if code != 0 {
		return fmt.Errorf("orchestrd %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("orchestrd %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Starting work from the dashboard is a person's act: a job holding a
// session's cookie and CSRF token (signed in by the test, a person) is
// refused each start form and the chat's Send, 403 with conn.refused
// naming the method, and nothing starts; the same requests from the
// test's own process start a job.
func TestStartFormsArePersonOnly(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, config{})
	c := httpClient(t)
	resp, err := c.PostForm(d.base+"/ui/login", url.Values{"key": {d.key}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie string
	for _, ck := range resp.Cookies() {
		if strings.HasPrefix(ck.Name, "orchestrd_ui") {
			cookie = ck.Name + "=" + ck.Value
		}
	}
	if resp.StatusCode != http.StatusSeeOther || cookie == "" {
		t.Fatalf("sign in: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	req, _ := http.NewRequest("GET", d.base+"/ui/jobs", nil)
	req.Header.Set("Cookie", cookie)
	page, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(page.Body)
	page.Body.Close()
	_, after, ok := strings.Cut(string(b), `data-csrf="`)
	if !ok {
		t.Fatalf("no CSRF token on the jobs page (%d)", page.StatusCode)
	}
	csrf := after[:strings.IndexByte(after, '"')]

	script := `post() { curl -s -o /dev/null -w '%{http_code}\n' -X POST -H "Cookie: $CK" -H "X-CSRF-Token: $CSRF" ` +
		`-H 'Accept: application/json' "$@"; }
post -F lane=net -F 'command=touch /tmp/pwned' "$ROOT/ui/start/job"
post -F type=code -F description=pwn -F repo=/tmp "$ROOT/ui/start/loop"
post -F prompt=pwn -F cwd=/tmp -F mode=bypassPermissions "$ROOT/ui/start/prompt"
post -d message=pwn "$ROOT/ui/act/chat.send"`
	out, errOut, code := d.cli("run", "--lane", "net", "--env", "CK="+cookie, "--env", "CSRF="+csrf, "--env", "ROOT="+d.base,
		"--", "sh", "-c", script)
	if code != 0 || out != "403\n403\n403\n403\n" {
		t.Fatalf("the job's posts: exit %d %q %s; want four 403s", code, out, errOut)
	}
	for _, m := range []string{"job.submit", "loop.create", "task.execute", "chat.send"} {
		e := d.waitEvent("conn.refused", func(e map[string]any) bool { return e["method"] == m })
		if r, _ := e["reason"].(string); !strings.Contains(r, "a process this daemon started") {
			t.Fatalf("conn.refused for %s: %v", m, e)
		}
	}
	var jobs struct{ Jobs []api.JobRecord }
	if err := jsonCLI(d, &jobs, "jobs", "--json"); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Jobs) != 1 {
		t.Fatalf("%d jobs, want only the test's own: %+v", len(jobs.Jobs), jobs.Jobs)
	}

	// The positive control: the same post from the test's process.
	form := url.Values{"csrf": {csrf}, "lane": {"net"}, "command": {"true"}}
	req, _ = http.NewRequest("POST", d.base+"/ui/start/job", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Cookie", cookie)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/jobs/j-") {
		t.Fatalf("the test's own post: %d to %q, want 303 to the job's page", resp.StatusCode, loc)
	}
}
