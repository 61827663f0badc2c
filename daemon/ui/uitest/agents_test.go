package uitest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/orchestrd/orchestrd/api"
)

// The agents page: a task `orchestrd prompt` runs on an executor pool
// (the test executor, scripted to say something and then work on until
// stopped) appears on the open page with its pool and instance; its page
// shows what the agent said; Stop on the agents page, confirmed, stops
// it: the task ends cancelled (orchestrd tasks), the prompt exits as a
// cancelled task does, and the page shows it so.
func TestAgentsStop(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	exe := tool(t, "github.com/orchestrd/orchestrd/internal/testexecutor")
	d := startDaemon(t, config{extra: fmt.Sprintf("[executors.scripted]\ncommand = [%q]\ninstances = 1\nstop_grace = \"500ms\"\n", exe)})
	tb := newTab(t, d)
	asked := tb.acceptDialogs()
	tb.signIn()
	tb.open("/ui/agents")
	tb.waitJS("the agents page's live stream", `document.body.dataset.page === "agents" && document.body.dataset.stream === "open" && !!document.body.dataset.loaded`)
	tb.waitText("#pools", "scripted")

	r := d.startCLI("prompt", "--executor", "scripted", "--verbose", "--cwd", d.home,
		`{"steps":[{"op":"message","n":1,"text":"working on the widget"},{"op":"hang"}]}`)
	id, _, _ := strings.Cut(r.stderrLine(t, "orchestrd: task "), ",")
	row := `document.getElementById(` + jsID("task-"+id) + `)`
	tb.waitJS("task "+id+" running on the page", row+` && `+row+`.querySelector(".state").textContent === "running"`)
	tb.waitJS("its instance", `[...document.querySelectorAll("#instances tr")].some(r => r.textContent.includes(`+jsID(id)+`))`)
	tb.shot("agents-running")

	tb.click(chromedp.CSS(`#task-` + id + ` a[href="/ui/agents/tasks/` + id + `"]`))
	tb.waitJS("the task's page", `document.body.dataset.page === "task"`)
	tb.waitText("main", "working on the widget")
	tb.shot("task-running")
	tb.do(chromedp.NavigateBack())
	tb.waitJS("the agents page", `document.body.dataset.page === "agents" && !!document.getElementById(`+jsID("task-"+id)+`)`)

	tb.click(chromedp.CSS(`button[aria-label="Stop task ` + id + `"]`))
	tb.waitText("#live", "Stop asked.")
	tb.waitJS("the task cancelled on the page", row+` && `+row+`.querySelector(".state").textContent === "cancelled" && !`+row+`.querySelector("button")`)
	if a := asked(); len(a) != 1 || a[0] != "Stop task "+id+"?" {
		t.Fatalf("Stop asked %q, want one confirmation", a)
	}
	tb.shot("agents-stopped")
	if code := r.exit(t); code != 130 {
		t.Fatalf("orchestrd prompt of a stopped task: exit %d, want 130\n%s", code, r.stderr.String())
	}
	out, errOut, code := d.cli("tasks", "--json")
	if code != 0 {
		t.Fatalf("orchestrd tasks: exit %d: %s", code, errOut)
	}
	var tasks struct{ Tasks []api.TaskRecord }
	if err := json.Unmarshal([]byte(out), &tasks); err != nil {
		t.Fatalf("tasks --json: %v\n%s", err, out)
	}
	if len(tasks.Tasks) != 1 || tasks.Tasks[0].ID != id || tasks.Tasks[0].State != api.TaskCancelled ||
		tasks.Tasks[0].Error == nil || tasks.Tasks[0].Error.Code != api.TaskErrStopped {
		t.Fatalf("the tasks after Stop: %+v", tasks.Tasks)
	}
}

// A built-in agent's conversation on its task's page: the text streamed
// in pieces as one block, its markup shown as text (never as markup), the
// thinking collapsed, each tool call, the denial said as one (the tool
// did not run), the tool the agent refused itself as failed, the usage
// and the result's words.
func TestAgentConversation(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	exe := tool(t, "github.com/orchestrd/orchestrd/internal/testexecutor")
	d := startDaemon(t, config{extra: fmt.Sprintf("[executors.scripted]\ncommand = [%q]\ninstances = 1\n", exe)})
	out, errOut, code := d.cli("prompt", "--executor", "scripted", "--verbose", "--cwd", d.home, `{"steps":[{"op":"conversation"}]}`)
	if code != 0 {
		t.Fatalf("prompt: exit %d\n%s\n%s", code, out, errOut)
	}
	_, rest, _ := strings.Cut(errOut, "orchestrd: task ")
	id, _, _ := strings.Cut(rest, ",")
	tb := newTab(t, d)
	tb.signIn()
	tb.open("/ui/agents/tasks/" + id)
	tb.waitJS("the task's page", `document.body.dataset.page === "task"`)
	tb.waitText("#messages", "did not run")
	tb.shot("task-conversation")
	items, err := chromedp.Run(tb.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#messages li")].map(li => li.className + " | " + li.textContent.replace(/\s+/g, " ").trim())`))
	if err != nil {
		tb.fatalf("reading the messages: %v", err)
	}
	want := []string{
		"msg msg-thinking | thinking Let me look.Let me look.", // its first words, then all of it once opened
		"msg msg-text | I'll list the files.",
		"msg msg-tool | tool Bash ls -la",
		"msg msg-result | Bash a.go b.goa.go b.go", // the same
		"msg msg-tool | tool Bash rm -rf build",
		"msg msg-denied | denied Bash rm -rf build did not run: not the build dir",
		"msg msg-tool | tool Write /etc/motd + x", // its content, as lines added
		"msg msg-error | failed Write Claude requested permissions to write to /etc/motd, but you haven't granted it yet.",
		"msg msg-text | Done <b>bold</b> \x1b[31mred",
		"msg msg-usage | usage 120 tokens in, 30 out, $0.0042",
		"msg msg-final | result 1 tool use denied, 120 tokens in, 30 out, $0.0042",
	}
	if strings.Join(items, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the task's messages:\n%s\nwant\n%s", strings.Join(items, "\n"), strings.Join(want, "\n"))
	}
	closed, err := chromedp.Run(tb.ctx, chromedp.Evaluate[bool](`!document.querySelector("#messages .msg-thinking details").open`))
	if err != nil {
		tb.fatalf("reading the thinking: %v", err)
	}
	markup, err := chromedp.Run(tb.ctx, chromedp.Evaluate[bool](`!!document.querySelector("#messages b")`))
	if err != nil {
		tb.fatalf("looking for markup: %v", err)
	}
	if !closed || markup {
		t.Fatalf("thinking collapsed %v; the agent's markup made an element %v", closed, markup)
	}
}
