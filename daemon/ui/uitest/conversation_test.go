package uitest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/orchestrd/orchestrd/internal/modelfake"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// A task's page reads as a conversation: the agent's words, its tool
// calls with their input as the agent's values, their results folded,
// its permission requests inline with their buttons, its cost.

// scriptedPool is the config of pool "scripted", one test executor
// that runs steps (a script's) for every prompt. Its permission requests
// wait ten minutes (not the default 30 s): the tests answer them, and a
// starved machine must not time one out before a test has read it.
func scriptedPool(t *testing.T, steps any) string {
	t.Helper()
	exe := tool(t, "github.com/orchestrd/orchestrd/internal/testexecutor")
	script, err := json.Marshal([]any{map[string]any{"steps": steps}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(testio.ShortTemp(t, "odsc"), "script.json")
	if err := os.WriteFile(file, script, 0o644); err != nil {
		t.Fatal(err)
	}
	return "[executors.scripted]\ncommand = [" + strconv.Quote(exe) + `, "--script", ` + strconv.Quote(file) + "]\ninstances = 1\npermission_timeout = \"10m\"\n"
}

// askButton is the button of decision on the conversation's pending
// permission request.
func askButton(decision string) chromedp.CSS {
	return chromedp.CSS(`#messages li.msg-ask form:has(input[name=decision][value=` + decision + `]) button`)
}

// Claude Code (the pinned CLI, against a scripted Anthropic endpoint on
// loopback) asks to run a Bash command, then to Edit a file it read: both
// requests show inline in the open task's page, after what the agent
// said, as the agent's values (the command as code, `&&` as written; the
// Edit as a diff) and are answered with the page's Allow and Always
// allow; the commands ran, the conversation shows each call, its result
// folded (and Claude Code's own stream lines), the agent's words and the
// task's cost.
func TestConversationClaude(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	cli, err := modelfake.CLI("claude-code")
	if err != nil {
		t.Skip(err)
	}
	work, state := testio.ShortTemp(t, "odcw"), testio.ShortTemp(t, "odcs")
	main := filepath.Join(work, "main.txt")
	if err := os.WriteFile(main, []byte("hello\nworld\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ep, err := modelfake.NewAnthropic(
		modelfake.Turn{Text: []string{"Let me ", "look."}, Tools: []modelfake.ToolUse{{Name: "Bash",
			Input: map[string]string{"command": "echo hi && echo there > hi.txt", "description": "write hi.txt"}}}},
		modelfake.Turn{Tools: []modelfake.ToolUse{{Name: "Read", Input: map[string]string{"file_path": main}}}},
		modelfake.Turn{Tools: []modelfake.ToolUse{{Name: "Edit",
			Input: map[string]any{"file_path": main, "old_string": "world", "new_string": "there <b>"}}}},
		modelfake.Turn{Text: []string{"Done: ", "edited it."}},
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ep.Close() })
	d := startDaemon(t, config{secrets: "anthropic = \"sk-ant-ui-conversation-7f3a\"\n",
		extra: "[executors.claude]\nagent = \"claude-code\"\ncommand = [" + strconv.Quote(cli[0]) + "]\nstate_dir = " + strconv.Quote(state) +
			"\nsecrets = [\"anthropic\"]\nenv = { ANTHROPIC_BASE_URL = " + strconv.Quote(ep.URL) + ", HOME = " + strconv.Quote(state) +
			" }\npermission_timeout = \"3m\"\n"})
	tb := newTab(t, d)
	tb.signIn()

	r := d.startCLI("prompt", "--executor", "claude", "--verbose", "--cwd", work, "write hi.txt and fix main.txt")
	id, _, _ := strings.Cut(r.stderrLine(t, "orchestrd: task "), ",")
	tb.open("/ui/agents/tasks/" + id)
	tb.waitJS("the task's page, live", `document.body.dataset.page === "task" && document.body.dataset.stream === "open"`)

	// The Bash request, inline: its command as the agent wrote it.
	cmd := `(() => { const c = document.querySelector("#messages li.msg-ask pre.cmd"); return c ? c.textContent : ""; })()`
	eval[chromedp.Void](tb, `window.notReloaded = true`)
	tb.waitJS("the Bash permission request in the conversation", cmd+` === "echo hi && echo there > hi.txt"`)
	// What the agent said before it asked is there while it waits: the
	// page shows the messages as they come, without a reload of its own.
	tb.waitJS("the agent's words while the task runs", `document.querySelector("#task-h .state").textContent === "running" && `+
		`[...document.querySelectorAll("#messages li.msg-text")].some(li => li.textContent.includes("Let me look."))`)
	tb.shot("claude-asks-bash")
	tb.click(askButton("Allow"))
	tb.waitText("#live", "Allowed.")

	// The Edit request: a diff of its lines.
	tb.waitJS("the Edit permission request, as a diff",
		`[...document.querySelectorAll("#messages li.msg-ask del.diff-del")].map(e => e.textContent).join("|") === "- world" && `+
			`[...document.querySelectorAll("#messages li.msg-ask ins.diff-add")].map(e => e.textContent).join("|") === "+ there <b>"`)
	tb.shot("claude-asks-edit")
	tb.click(askButton("AlwaysAllow"))
	tb.waitText("#live", "Always allowed.")

	if code := r.exit(t); code != 0 {
		t.Fatalf("orchestrd prompt: exit %d\n%s", code, r.stderr.String())
	}
	tb.waitJS("the task completed on the page", `document.querySelector("#task-h .state").textContent === "completed" && !document.querySelector("#messages li.msg-ask")`)
	tb.waitText("#messages", "Done: edited it.")
	if !eval[bool](tb, `window.notReloaded === true`) {
		t.Fatal("the task's page was reloaded as a whole to follow the conversation")
	}
	tb.shot("claude-conversation")
	if b, err := os.ReadFile(main); err != nil || string(b) != "hello\nthere <b>\n" {
		t.Fatalf("main.txt after the allowed Edit: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(work, "hi.txt")); err != nil || string(b) != "there\n" {
		t.Fatalf("hi.txt after the allowed Bash: %q %v", b, err)
	}

	// The conversation: the text, each call with its input, its result
	// folded, no markup of the agent's made an element, the cost.
	var conv struct {
		Text     string   `json:"text"`
		Commands []string `json:"commands"`
		Del, Ins []string
		Results  []string `json:"results"`
		Folded   bool     `json:"folded"`
		Markup   bool     `json:"markup"`
		Cost     string   `json:"cost"`
		Tokens   string   `json:"tokens"`
	}
	js := eval[string](tb, `JSON.stringify({
  text: [...document.querySelectorAll("#messages li.msg-text")].map(li => li.textContent.trim()).join("|"),
  commands: [...document.querySelectorAll("#messages li.msg-tool pre.cmd")].map(e => e.textContent),
  Del: [...document.querySelectorAll("#messages li.msg-tool del.diff-del")].map(e => e.textContent),
  Ins: [...document.querySelectorAll("#messages li.msg-tool ins.diff-add")].map(e => e.textContent),
  results: [...document.querySelectorAll("#messages li.msg-result details pre")].map(e => e.textContent),
  folded: [...document.querySelectorAll("#messages li.msg-result details, #messages li.msg-raw details")].every(d => !d.open) &&
    !!document.querySelector("#messages li.msg-raw"),
  markup: !!document.querySelector("#messages b"),
  cost: (document.getElementById("task-cost") || {}).textContent || "",
  tokens: [...document.querySelectorAll("dl.record dt")].some(dt => dt.textContent === "Tokens") ? "yes" : ""})`)
	if err := json.Unmarshal([]byte(js), &conv); err != nil {
		t.Fatalf("reading the conversation: %v\n%s", err, js)
	}
	if !strings.Contains(conv.Text, "Let me look.") || !strings.Contains(conv.Text, "Done: edited it.") ||
		strings.Join(conv.Commands, "|") != "echo hi && echo there > hi.txt" ||
		strings.Join(conv.Del, "|") != "- world" || strings.Join(conv.Ins, "|") != "+ there <b>" ||
		len(conv.Results) < 2 || !strings.Contains(strings.Join(conv.Results, "|"), "hi") || !conv.Folded || conv.Markup ||
		!strings.HasPrefix(conv.Cost, "$") || conv.Tokens == "" {
		t.Fatalf("the conversation: %+v\n%s", conv, tb.describe())
	}
	// The answered requests are in the task's history.
	if n := eval[string](tb, `[...document.querySelectorAll("#asked tbody tr .state")].map(e => e.textContent).join("|")`); n != "always_allowed|allowed" {
		t.Fatalf("the task's answered requests: %s, want the Edit always allowed, the Bash allowed\n%s", n, tb.describe())
	}
}

// What an agent writes in a tool's input is its text and nothing else:
// script tags, markup in a tool's name and in a field's name, ANSI
// escapes, a bidi override, a huge command: none makes an element or
// runs, controls show as marks, the huge value is cut and said so; an
// Edit is a diff; the page stays 390 px wide. Its permission request
// reads the same on the approval's page and is denied from the task's.
func TestConversationHostile(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	huge := "<script>window.pwned=3</script> && " + strings.Repeat("A", 100<<10)
	steps := []map[string]any{
		{"op": "message", "type": "tool_call", "data": map[string]any{"id": "u1", "name": "Edit", "input": map[string]any{
			"file_path": "/w/<img src=x onerror=window.pwned=1>.go", "old_string": "<script>window.pwned=1</script>\nkeep",
			"new_string": "\x1b[31mred\x1b[0m\nkeep\n\u202eevil"}}},
		{"op": "message", "type": "tool_call", "data": map[string]any{"id": "u2", "name": "Bash", "input": map[string]any{"command": huge}}},
		{"op": "message", "type": "tool_call", "data": map[string]any{"id": "u3", "name": "<b>Tool</b>", "input": map[string]any{
			"</dd><script>window.pwned=4</script>": "v", "nested": map[string]any{"k": "<i>x</i> & y"}}}},
		{"op": "permission", "tool": "Bash", "input": map[string]any{"command": "rm -rf build && echo <script>window.pwned=2</script>"}},
		{"op": "message", "text": "after the answer"},
	}
	d := startDaemon(t, config{extra: scriptedPool(t, steps)})
	tb := newTab(t, d)
	tb.signIn()
	r := d.startCLI("prompt", "--executor", "scripted", "--verbose", "--cwd", d.home, "go")
	id, _, _ := strings.Cut(r.stderrLine(t, "orchestrd: task "), ",")
	tb.open("/ui/agents/tasks/" + id)
	// The ask is the pending approval's, the calls before it the stored
	// messages': a render can come between the two (the messages are
	// committed in batches), and the page renders again as they come.
	tb.waitJS("the three calls and the permission request in the conversation",
		`document.querySelectorAll("#messages li.msg-tool").length === 3 && !!document.querySelector("#messages li.msg-ask pre.cmd")`)

	var got struct {
		Pwned                     bool
		Elements                  int
		Del, Ins                  []string
		File, Tool, Field, Nested string
		HugeLen                   int
		HugeStart                 string
		Cut, Ask                  string
		Wide                      bool
	}
	read := func() {
		t.Helper()
		js := eval[string](tb, `JSON.stringify({
  Pwned: window.pwned !== undefined,
  Elements: document.querySelectorAll("#messages script, #messages img, #messages b, #messages i").length,
  Del: [...document.querySelectorAll("#messages li.msg-tool del.diff-del")].map(e => e.textContent),
  Ins: [...document.querySelectorAll("#messages li.msg-tool ins.diff-add")].map(e => e.textContent),
  File: (document.querySelector("#messages li.msg-tool .diff-file") || {}).textContent || "",
  Tool: [...document.querySelectorAll("#messages li.msg-tool > strong")].map(e => e.textContent).join("|"),
  Field: [...document.querySelectorAll("#messages li.msg-tool dl.fields dt")].map(e => e.textContent).join("|"),
  Nested: [...document.querySelectorAll("#messages li.msg-tool dl.fields dd")].map(e => e.textContent).join("|"),
  HugeLen: [...document.querySelectorAll("#messages li.msg-tool pre.cmd")].map(e => e.textContent.length)[0] || 0,
  HugeStart: ([...document.querySelectorAll("#messages li.msg-tool pre.cmd")].map(e => e.textContent)[0] || "").slice(0, 40),
  Cut: [...document.querySelectorAll("#messages li.msg-tool p.muted")].map(e => e.textContent).join("|"),
  Ask: (document.querySelector("#messages li.msg-ask pre.cmd") || {}).textContent || "",
  Wide: document.documentElement.scrollWidth > window.innerWidth})`)
		if err := json.Unmarshal([]byte(js), &got); err != nil {
			t.Fatalf("reading the page: %v\n%s", err, js)
		}
	}
	read()
	if got.Pwned || got.Elements != 0 ||
		strings.Join(got.Del, "|") != "- <script>window.pwned=1</script>" ||
		strings.Join(got.Ins, "|") != "+ ␛[31mred␛[0m|+ ⟨U+202E⟩evil" ||
		got.File != "/w/<img src=x onerror=window.pwned=1>.go" || got.Tool != "Edit|Bash|<b>Tool</b>" ||
		got.Field != "</dd><script>window.pwned=4</script>|nested" || !strings.Contains(got.Nested, `{"k":"<i>x</i> & y"}`) ||
		got.HugeLen != 64<<10 || got.HugeStart != "<script>window.pwned=3</script> && AAAAA" ||
		!strings.Contains(got.Cut, "longer than shown") ||
		got.Ask != "rm -rf build && echo <script>window.pwned=2</script>" || got.Wide {
		t.Fatalf("the hostile conversation: %+v\n%s", got, tb.describe())
	}
	tb.shot("hostile-conversation")
	tb.checkNames("task")
	tb.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	read()
	if got.Wide {
		t.Fatalf("at 390 px the task's page is wider than the screen\n%s", tb.describe())
	}
	tb.do(chromedp.EmulateViewport(1280, 800))

	// The approval's own page reads the same, and the inbox too.
	appr := eval[string](tb, `document.querySelector("#messages li.msg-ask .card.approval").id.slice(5)`)
	tb.open("/ui/approvals/" + appr)
	tb.waitJS("the approval's page", `document.body.dataset.page === "approval"`)
	if c := eval[string](tb, `document.querySelector(".toolinput pre.cmd").textContent`); c != "rm -rf build && echo <script>window.pwned=2</script>" {
		t.Fatalf("the approval's page shows the command as %q", c)
	}
	if j := eval[string](tb, `document.querySelector(".toolinput details.json pre").textContent`); strings.Contains(j, `\u0026`) || !strings.Contains(j, "&&") {
		t.Fatalf("the approval's JSON: %q", j)
	}
	tb.shot("hostile-approval")
	tb.open("/ui/approvals")
	tb.waitJS("the inbox", `document.body.dataset.page === "approvals"`)
	if c := eval[string](tb, `document.querySelector("#appr-`+appr+` .toolinput pre.cmd").textContent`); c != "rm -rf build && echo <script>window.pwned=2</script>" {
		t.Fatalf("the inbox shows the command as %q", c)
	}

	// Denied from the conversation: the agent hears it, and goes on.
	tb.open("/ui/agents/tasks/" + id)
	tb.waitJS("the task's page, live", `document.body.dataset.page === "task" && document.body.dataset.stream === "open"`)
	tb.click(askButton("Deny"))
	tb.waitText("#live", "Denied.")
	if code := r.exit(t); code != 0 {
		t.Fatalf("orchestrd prompt: exit %d\n%s", code, r.stderr.String())
	}
	tb.waitText("#messages", "after the answer")
	tb.waitJS("the permission result in the conversation", `[...document.querySelectorAll("#messages li")].some(li => li.textContent.includes("permission_result") && li.textContent.includes('"approved":false'))`)
	if eval[bool](tb, `window.pwned !== undefined || !!document.querySelector("#messages li.msg-ask")`) {
		t.Fatalf("after Deny\n%s", tb.describe())
	}
	tb.shot("hostile-denied")
}

// The chat page: the chat's pool is the test executor, whose replies say
// something and call a tool; a message typed and sent shows with its
// reply (the words, the call's command as code), a second one below it;
// New conversation, confirmed, starts an empty one.
func TestChatConversation(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	reply := []any{
		map[string]any{"op": "message", "text": "Hello from <b>the chat</b>"},
		map[string]any{"op": "message", "type": "tool_call", "data": map[string]any{"id": "c1", "name": "Bash", "input": map[string]any{"command": "ls && pwd"}}},
		map[string]any{"op": "message", "type": "tool_result", "data": map[string]any{"id": "c1", "output": "a.go\n/work"}},
	}
	d := startDaemon(t, config{extra: scriptedPool(t, reply) + "\n[loops]\nchat_executor = \"scripted\"\n"})
	tb := newTab(t, d)
	asked := tb.acceptDialogs()
	tb.signIn()
	tb.click(chromedp.CSS(`nav a[href="/ui/chat"]`))
	tb.waitJS("the chat page, live", `document.body.dataset.page === "chat" && document.body.dataset.stream === "open"`)
	tb.waitText("#messages", "No messages yet")
	tb.shot("chat-empty")

	send := func(msg string) {
		t.Helper()
		tb.do(chromedp.SendKeys(chromedp.ID("chat-message"), msg))
		tb.click(chromedp.CSS(`form[action="/ui/act/chat.send"] button[type=submit]`))
		tb.waitText("#live", "Sent.")
	}
	send("what is <here>?")
	tb.waitJS("the message and its reply", `[...document.querySelectorAll("#messages li.msg-prompt")].map(li => li.querySelector(".agent").textContent).join("|") === "what is <here>?" && `+
		`[...document.querySelectorAll("#messages li.msg-text")].some(li => li.textContent.includes("Hello from <b>the chat</b>")) && `+
		`[...document.querySelectorAll("#messages li.msg-tool pre.cmd")].some(p => p.textContent === "ls && pwd")`)
	tb.waitJS("the reply done", `!document.querySelector('form[action="/ui/act/chat.send"] button[disabled]')`)
	tb.checkNames("chat")
	// The second by keyboard: type, Tab past the directory's fold to
	// Send, Enter.
	eval[chromedp.Void](tb, `document.getElementById("chat-message").focus()`)
	tb.do(chromedp.KeyEvent("and then?"), chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Tab))
	if f := eval[focused](tb, focusedJS); f.Name != "button Send" || f.Ring == "none" {
		t.Fatalf("Tab Tab from the message is on %+v, want the Send button, its focus ring seen", f)
	}
	tb.do(chromedp.KeyEvent(kb.Enter))
	tb.waitText("#live", "Sent.")
	tb.waitJS("the second message below the first", `[...document.querySelectorAll("#messages li.msg-prompt")].map(li => li.querySelector(".agent").textContent).join("|") === "what is <here>?|and then?" && `+
		`document.querySelectorAll("#messages li.msg-text").length === 2`)
	if eval[bool](tb, `!!document.querySelector("#messages b")`) {
		t.Fatalf("the agent's markup made an element\n%s", tb.describe())
	}
	tb.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	if eval[bool](tb, `document.documentElement.scrollWidth > window.innerWidth`) {
		t.Fatalf("at 390 px the chat page is wider than the screen\n%s", tb.describe())
	}
	tb.do(chromedp.EmulateViewport(1280, 800))
	tb.shot("chat-conversation")

	tb.waitJS("the reply done", `!document.querySelector('form[action="/ui/act/chat.send"] button[disabled]')`)
	tb.click(chromedp.CSS(`form[action="/ui/act/chat.clear"] button`))
	tb.waitText("#messages", "No messages yet")
	if a := asked(); len(a) != 1 || !strings.HasPrefix(a[0], "Start a new conversation?") {
		t.Fatalf("New conversation asked %q", a)
	}
}
