package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
	"github.com/orchestrd/orchestrd/daemon/control/client"
	"github.com/orchestrd/orchestrd/wire"
)

// ---- prompt ----

const promptUsage = `orchestrd prompt [--home DIR] [--executor E] [--mode M] [--cwd D] [--session S]
                 [--tool T]... [--timeout D] [--json] [--verbose] TEXT...

Runs TEXT as a task on an executor pool and streams what the agent does:
its text as it comes, each tool call as one line. When stdin is a terminal
a permission the agent asks for is asked here ([y]es [n]o [a]lways); else
it waits for 'orchestrd approve ID'. Ctrl-C stops the task. Exits 0 when the
task completed, 1 when it failed, 124 on its timeout, 130 when cancelled.`

// taskKinds are the events prompt follows.
var taskKinds = []string{"task.message", "task.error", "task.finished", "task.permission_requested"}

func cmdPrompt(args []string, stdout, stderr io.Writer) int {
	// An agent's text, on a terminal, with its control characters escaped.
	stdout, stderr = terminalSafe(stdout), terminalSafe(stderr)
	fs := newFlags("prompt")
	home := homeFlag(fs)
	executor := fs.String("executor", "", "executor pool `E` (default: the only pool, or \"default\")")
	mode := fs.String("mode", "", "permission mode `M`: default, acceptEdits, bypassPermissions or plan")
	cwd := fs.String("cwd", "", "working `DIR` of the agent (default: the current directory)")
	session := fs.String("session", "", "continue session `S` (default: a new session)")
	var tools listFlag
	fs.Var(&tools, "tool", "a tool `T` the agent may use (repeatable; default: the executor's)")
	timeout := new(time.Duration)
	fs.Var(timeoutFlag{timeout}, "timeout", "stop the task after `D` (default: the pool's task_timeout)")
	asJSON := fs.Bool("json", false, "print each of the task's events as one JSON line instead of text")
	verbose := fs.Bool("verbose", false, "also print tool results and the messages text mode leaves out, one line each")
	pos, code, ok := parseInterspersed(fs, promptUsage, args, stdout, stderr)
	if !ok {
		return code
	}
	text := strings.Join(pos, " ")
	if strings.TrimSpace(text) == "" {
		return usageError(fs, promptUsage, stderr, "no prompt TEXT given")
	}
	if *timeout < 0 {
		return usageError(fs, promptUsage, stderr, "--timeout must not be negative")
	}
	switch *mode {
	case "", api.ModeDefault, api.ModeAcceptEdits, api.ModeBypass, api.ModePlan:
	default:
		return usageError(fs, promptUsage, stderr, "--mode must be default, acceptEdits, bypassPermissions or plan, got %q", *mode)
	}
	dir, err := workDir(*cwd)
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd: %v\n", err)
		return exitFailure
	}
	spec := api.TaskSpec{Executor: *executor, Prompt: text, Cwd: dir, SessionID: *session, Tools: tools,
		PermissionMode: *mode, TimeoutMs: timeout.Milliseconds()}
	c, ok := dial(resolveHome(*home), stderr)
	if !ok {
		return exitFailure
	}
	defer c.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	f := &taskFollower{c: c, stdout: stdout, stderr: stderr, json: *asJSON, verbose: *verbose,
		lineStart: true, do: make(chan func(), 16)}
	if t, err := newTerminal(os.Stdin); err == nil && !*asJSON {
		f.term = t
		defer t.restore()
	}
	return f.run(spec, sig)
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// taskFollower follows one task for prompt: one loop over pushed events,
// call results and keys.
type taskFollower struct {
	c              *client.Client
	stdout, stderr io.Writer
	json, verbose  bool
	term           *terminal // nil when stdin is not a terminal
	taskID         string
	pending        []wire.Event // events before the task id was known
	lineStart      bool         // stdout is at the start of a line
	asking         string       // the approval the prompt on screen asks about
	queue          []api.Approval
	dropped        uint64
	waiting        bool
	tools          api.ToolNames // the tool calls seen, to name their results
	thinking       bool          // the text being streamed is thinking (--verbose)
	sawResult      bool          // the task's result message was shown
	do             chan func()
	doneRec        *api.TaskRecord // set by a continuation that saw the task's end
}

func (f *taskFollower) run(spec api.TaskSpec, sig <-chan os.Signal) int {
	if err := call(f.c, "events.subscribe", map[string]any{"kinds": taskKinds}, nil); err != nil {
		return callErr(f.stderr, err)
	}
	type executed struct {
		id, session string
		err         error
	}
	started := make(chan executed, 1)
	go func() {
		var res struct {
			TaskID    string `json:"task_id"`
			SessionID string `json:"session_id"`
		}
		err := call(f.c, "task.execute", spec, &res)
		started <- executed{res.TaskID, res.SessionID, err}
	}()
	interrupted := false
	events := f.c.Events()
	var keys <-chan termInput
	if f.term != nil {
		keys = f.term.results
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				err := f.c.Call(context.Background(), "ping", nil, nil)
				f.endLine()
				fmt.Fprintf(f.stderr, "orchestrd: lost the connection to the daemon: %v\n", err)
				return exitFailure
			}
			if f.taskID == "" {
				f.pending = append(f.pending, ev)
				continue
			}
			if rec, done := f.event(ev); done {
				return f.finished(rec)
			}
		case s := <-started:
			if s.err != nil {
				return callErr(f.stderr, s.err)
			}
			f.taskID = s.id
			if f.verbose && !f.json {
				fmt.Fprintf(f.stderr, "orchestrd: task %s, session %s\n", s.id, s.session)
			}
			if interrupted {
				return f.stop()
			}
			for _, ev := range f.pending {
				if rec, done := f.event(ev); done {
					return f.finished(rec)
				}
			}
			f.pending = nil
		case fn := <-f.do:
			if rec, done := f.runDone(fn); done {
				return f.finished(rec)
			}
		case in := <-keys:
			f.term.reading = false
			if in.err != nil {
				keys = nil
				continue
			}
			f.key(in.key)
		case <-sig:
			if f.taskID == "" {
				interrupted = true
				continue
			}
			return f.stop()
		}
	}
}

// runDone runs a call's continuation on the loop; a task.wait's answer
// ends the task.
func (f *taskFollower) runDone(fn func()) (api.TaskRecord, bool) {
	f.doneRec = nil
	fn()
	if f.doneRec != nil {
		return *f.doneRec, true
	}
	return api.TaskRecord{}, false
}

// event handles one pushed event; done reports the task's end.
func (f *taskFollower) event(ev wire.Event) (api.TaskRecord, bool) {
	var head struct {
		TaskID string `json:"task_id"`
	}
	if ev.Event == "events.dropped" {
		var d struct {
			Dropped uint64 `json:"dropped"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		f.dropped += max(d.Dropped, 1)
		f.waitForEnd()
		return api.TaskRecord{}, false
	}
	if json.Unmarshal(ev.Data, &head) != nil || head.TaskID != f.taskID {
		return api.TaskRecord{}, false
	}
	if f.json {
		line, _ := json.Marshal(map[string]any{"event": ev.Event, "data": ev.Data})
		f.stdout.Write(append(line, '\n'))
	}
	switch ev.Event {
	case "task.message":
		if f.json {
			return api.TaskRecord{}, false
		}
		var m struct {
			EventType string          `json:"event_type"`
			EventData json.RawMessage `json:"event_data"`
		}
		if json.Unmarshal(ev.Data, &m) == nil {
			f.print(m.EventType, m.EventData)
		}
	case "task.error":
		if f.json {
			return api.TaskRecord{}, false
		}
		var e struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		if json.Unmarshal(ev.Data, &e) == nil {
			f.endLine()
			fmt.Fprintf(f.stderr, "orchestrd: agent error %s: %s\n", e.Code, e.Message)
		}
	case "task.permission_requested":
		var p struct {
			ApprovalID string `json:"approval_id"`
			ToolName   string `json:"tool_name"`
		}
		if json.Unmarshal(ev.Data, &p) == nil && p.ApprovalID != "" {
			f.permission(p.ApprovalID, p.ToolName)
		}
	case "task.finished":
		var t struct {
			Task api.TaskRecord `json:"task"`
		}
		if json.Unmarshal(ev.Data, &t) == nil && t.Task.ID == f.taskID {
			return t.Task, true
		}
		// The event carries the task's fields flat.
		var rec api.TaskRecord
		if json.Unmarshal(ev.Data, &rec) == nil {
			rec.ID = f.taskID
			return f.record(rec)
		}
	}
	return api.TaskRecord{}, false
}

// record completes a task.finished that carries the task's fields flat
// (task_id, state, error...) with task.get, which has all of them; when
// that fails, the event's fields are enough.
func (f *taskFollower) record(rec api.TaskRecord) (api.TaskRecord, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var res struct {
		Task api.TaskRecord `json:"task"`
	}
	if err := f.c.Call(ctx, "task.get", map[string]any{"id": f.taskID}, &res); err == nil && res.Task.State.Terminal() {
		return res.Task, true
	}
	return rec, true
}

// print writes one agent message as a person reads it (api.DecodeAgentMessage
// reads it): text as it comes (a streamed piece appended, a block ended as a
// line), each tool call as one line ("> Bash ls -la"), a denial as one line
// that says so ("! denied Bash ls: REASON": never as if the tool ran), a
// tool's error as one, the result's line (denials, tokens, cost); with
// --verbose also thinking, tool results, usage and the messages it does
// not know, as their type and data. Text written goes through
// terminalSafe (cmdPrompt, cmdSession): on a terminal its escapes are
// neutralised; lines are on one line (render.OneLine).
func (f *taskFollower) print(eventType string, data json.RawMessage) {
	parts, known := api.DecodeAgentMessage(eventType, data)
	if !known {
		if f.verbose {
			f.line(render.OtherLine(eventType, compactJSON(data)))
		}
		return
	}
	for _, p := range parts {
		f.tools.Part(&p)
		f.part(p)
	}
}

func (f *taskFollower) part(p api.AgentPart) {
	switch p.Kind {
	case api.MsgText:
		f.stream(false, p.Text, p.Block)
	case api.MsgThinking:
		if f.verbose {
			f.stream(true, p.Text, p.Block)
		}
	case api.MsgToolCall:
		f.line(render.ToolLine(p.Tool, p.Input))
	case api.MsgToolResult:
		switch {
		case p.AfterDenial && !f.verbose:
			// The denial's line said it.
		case p.IsError:
			f.line(render.FailedLine(p.Tool, p.Text))
		case f.verbose:
			f.line(render.ToolResultLine(p.Tool, p.Text))
		}
	case api.MsgPermissionDenied:
		f.line(render.DeniedLine(p.Tool, p.Input, p.Text))
	case api.MsgResult:
		f.sawResult = true
		f.line(render.ResultLine(p.IsError, p.Text, p.Denied, p.Usage))
	case api.PartError:
		f.line(render.ErrorLine(p.Text))
	case api.MsgUsage:
		if f.verbose {
			f.line("[usage] " + render.Usage(p.Usage))
		}
	case api.PartUser, api.MsgAgentLine:
		if f.verbose {
			f.line(render.OtherLine(p.Kind, p.Text))
		}
	}
}

// stream writes text as it comes: thinking (--verbose) set apart from the
// answer by a "[thinking]" line start; a block ends its line.
func (f *taskFollower) stream(thinking bool, text string, block bool) {
	if thinking != f.thinking {
		f.endLine()
		f.thinking = thinking
		if thinking {
			io.WriteString(f.stdout, "[thinking] ")
			f.lineStart = false
		}
	}
	if block && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	io.WriteString(f.stdout, text)
	f.lineStart = strings.HasSuffix(text, "\n")
}

// line writes one whole line, on a line of its own.
func (f *taskFollower) line(l string) {
	f.endLine()
	f.thinking = false
	fmt.Fprintln(f.stdout, l)
}

func (f *taskFollower) endLine() {
	if !f.lineStart {
		io.WriteString(f.stdout, "\n")
		f.lineStart = true
	}
}

func compactJSON(data json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, data) != nil {
		return string(data)
	}
	return b.String()
}

// permission shows a permission the task waits for: asked at once on a
// terminal (after fetching what the tool would do), else said with the
// commands that answer it.
func (f *taskFollower) permission(id, tool string) {
	if f.term == nil {
		f.endLine()
		fmt.Fprintf(f.stderr, "orchestrd: the agent asks to use %s (approval %s): orchestrd approve %s, or orchestrd deny %s\n",
			tool, id, id, id)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var res struct {
			Approval api.Approval `json:"approval"`
		}
		err := f.c.Call(ctx, "approval.get", map[string]any{"id": id}, &res)
		if err != nil {
			res.Approval = api.Approval{ID: id, Kind: api.KindTool, ToolName: tool, State: api.ApprovalPending}
		}
		f.do <- func() {
			if res.Approval.State != api.ApprovalPending {
				return
			}
			f.queue = append(f.queue, res.Approval)
			f.ask()
		}
	}()
}

// ask puts the oldest queued approval's question on the screen.
func (f *taskFollower) ask() {
	if f.asking != "" || len(f.queue) == 0 {
		return
	}
	a := f.queue[0]
	f.asking = a.ID
	f.endLine()
	fmt.Fprintf(f.stderr, "Allow %s %s? [y]es [n]o [a]lways ", render.OneLine(a.ToolName), render.Cut(dash(render.ApprovalSummary(a)), 120))
	if !f.term.reading {
		f.term.read(false)
	}
}

func (f *taskFollower) key(k byte) {
	if f.asking == "" {
		return
	}
	var d api.Decision
	switch k {
	case 'y', 'Y':
		d = api.DecisionAllow
	case 'n', 'N':
		d = api.DecisionDeny
	case 'a', 'A':
		d = api.DecisionAlwaysAllow
	default:
		f.term.read(false)
		return
	}
	id := f.asking
	fmt.Fprintln(f.stderr, string(d))
	f.asking = ""
	f.queue = f.queue[1:]
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := f.c.Call(ctx, "approval.resolve", map[string]any{"id": id, "decision": d, "by": api.ByCLI}, nil)
		f.do <- func() {
			if err != nil {
				callErr(f.stderr, err)
			}
			f.ask()
		}
	}()
}

// waitForEnd asks for the task's end with task.wait: after the daemon
// dropped events for us, task.finished may be among them.
func (f *taskFollower) waitForEnd() {
	if f.waiting || f.taskID == "" {
		return
	}
	f.waiting = true
	id := f.taskID
	go func() {
		var res struct {
			Task api.TaskRecord `json:"task"`
		}
		err := f.c.Call(context.Background(), "task.wait", map[string]any{"id": id}, &res)
		f.do <- func() {
			if err != nil {
				callErr(f.stderr, err)
				return
			}
			f.doneRec = &res.Task
		}
	}()
}

// stop stops the task after Ctrl-C and waits for its end.
func (f *taskFollower) stop() int {
	f.endLine()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res struct {
		Task api.TaskRecord `json:"task"`
	}
	if err := f.c.Call(ctx, "task.stop", map[string]any{"id": f.taskID}, &res); err != nil {
		fmt.Fprintf(f.stderr, "orchestrd: stopping task %s: %v\n", f.taskID, err)
		return exitCancelled
	}
	fmt.Fprintf(f.stderr, "orchestrd: task %s was stopped (interrupted)\n", f.taskID)
	return exitCancelled
}

// finished says how the task ended and returns the exit code for it.
func (f *taskFollower) finished(rec api.TaskRecord) int {
	f.endLine()
	if f.dropped > 0 {
		fmt.Fprintf(f.stderr, "orchestrd: %s dropped while this client fell behind: the output above is incomplete; 'orchestrd session %s' has all of it\n",
			api.Count(int(f.dropped), "event")+" were", rec.SessionID)
	}
	if !f.sawResult && !f.json && (rec.Denied > 0 || (rec.TokenUsage != nil && rec.TokenUsage.CostUSD > 0)) {
		// No result message was seen (an agent that sends none, or
		// events dropped): the record says the same.
		f.line(render.ResultLine(false, "", rec.Denied, rec.TokenUsage))
	}
	why := ""
	if rec.Error != nil {
		why = ": " + render.TaskError(rec.Error)
	}
	if rec.Denied > 0 {
		fmt.Fprintf(f.stderr, "orchestrd: %s in task %s\n", render.DeniedOfAgent(rec.Denied), rec.ID)
	}
	switch rec.State {
	case api.TaskCompleted:
		return exitOK
	case api.TaskTimeout:
		fmt.Fprintf(f.stderr, "orchestrd: task %s timed out%s\n", rec.ID, why)
		return exitTimeout
	case api.TaskCancelled:
		fmt.Fprintf(f.stderr, "orchestrd: task %s was cancelled%s\n", rec.ID, why)
		return exitCancelled
	default:
		fmt.Fprintf(f.stderr, "orchestrd: task %s %s%s\n", rec.ID, rec.State, why)
		return exitFailure
	}
}

// ---- tasks ----

const tasksUsage = `orchestrd tasks [--home DIR] [--executor E] [--session S] [--state S] [--limit N] [--json]

Lists executor tasks, newest first.`

func cmdTasks(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("tasks")
	home := homeFlag(fs)
	executor := fs.String("executor", "", "only pool `E`'s tasks")
	session := fs.String("session", "", "only session `S`'s tasks")
	state := fs.String("state", "", "only tasks in `STATE` (queued, running, completed, failed, cancelled, timeout)")
	limit := fs.Int("limit", 50, "show at most `N` tasks (0: all)")
	asJSON := fs.Bool("json", false, "print the tasks as JSON")
	c, code, ok := parseNoArgsAndDial(fs, tasksUsage, args, home, stdout, stderr)
	if !ok {
		return code
	}
	defer c.Close()
	if *session != "" {
		if *session, ok = resolveArg(c, stderr, *session, sessionIDs); !ok {
			return exitFailure
		}
	}
	params := map[string]any{"limit": *limit}
	for k, v := range map[string]string{"executor": *executor, "session_id": *session, "state": *state} {
		if v != "" {
			params[k] = v
		}
	}
	var res struct {
		Tasks     []api.TaskRecord `json:"tasks"`
		Truncated bool             `json:"truncated"`
	}
	if err := call(c, "task.list", params, &res); err != nil {
		return callErr(stderr, err)
	}
	if res.Truncated {
		next := slices.Concat([]string{"tasks"}, opt("--home", *home), opt("--executor", *executor),
			opt("--session", *session), opt("--state", *state), []string{"--limit", "0"}, optIf("--json", *asJSON))
		defer moreHint(stderr, len(res.Tasks), "task", cmdLine(next...))
	}
	now := time.Now()
	return printTable(stdout, stderr, *asJSON, "tasks", res.Tasks, listCut{truncated: res.Truncated}, "no tasks",
		"ID\tSTATE\tEXECUTOR\tSESSION\tAGE\tMSGS\tCOST\tCPU\tPEAK RSS\tPROMPT", func(w io.Writer, t api.TaskRecord) {
			cpu, rss := render.TaskCPU(t)
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", t.ID, render.TaskState(t), t.Executor, render.OneLine(t.SessionID),
				render.Age(now.Sub(t.CreatedAt)), t.MessageCount, render.Cost(t.TokenUsage), cpu, rss,
				render.Cut(render.OneLine(t.Prompt), 50))
		})
}

// ---- stop ----

const stopUsage = `orchestrd stop [--home DIR] [--force] TASK

Stops a running or queued executor task: stop_task, then cancel_task after
the pool's stop_grace, then the executor is killed. --force kills at once.`

func cmdStop(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("stop")
	home := homeFlag(fs)
	force := fs.Bool("force", false, "kill the task's executor at once")
	c, id, code, ok := parseOneIDAndDial(fs, stopUsage, args, home, "want exactly one TASK id", stdout, stderr, taskIDs)
	if !ok {
		return code
	}
	defer c.Close()
	var res struct {
		Task api.TaskRecord `json:"task"`
	}
	params := map[string]any{"id": id}
	if *force {
		params["force"] = true
	}
	if err := call(c, "task.stop", params, &res); err != nil {
		return callErr(stderr, err)
	}
	line := res.Task.ID + " " + render.OneLine(string(res.Task.State))
	if res.Task.Error != nil {
		line += " (" + render.OneLine(res.Task.Error.Code) + ")"
	}
	fmt.Fprintln(stdout, line)
	return exitOK
}

// ---- session ----

const sessionUsage = `orchestrd session [--home DIR] [--limit N] [--json] ID

Prints a session's transcript: every message of its tasks, in order.`

func cmdSession(args []string, stdout, stderr io.Writer) int {
	// An agent's text, on a terminal, with its control characters escaped.
	stdout, stderr = terminalSafe(stdout), terminalSafe(stderr)
	fs := newFlags("session")
	home := homeFlag(fs)
	limit := fs.Int("limit", 0, "only the last `N` messages (0: all)")
	asJSON := fs.Bool("json", false, "print the session and its messages as JSON")
	verbose := fs.Bool("verbose", false, "also print the messages text mode leaves out, one line each")
	c, id, code, ok := parseOneIDAndDial(fs, sessionUsage, args, home, "want exactly one session ID", stdout, stderr, sessionIDs)
	if !ok {
		return code
	}
	defer c.Close()
	var res struct {
		Session  api.SessionRecord    `json:"session"`
		Messages []api.SessionMessage `json:"messages"`
	}
	params := map[string]any{"id": id}
	if *limit > 0 {
		params["limit"] = *limit
	}
	if err := call(c, "session.get", params, &res); err != nil {
		return callErr(stderr, err)
	}
	if *asJSON {
		return printJSON(stdout, stderr, res)
	}
	f := &taskFollower{stdout: stdout, stderr: stderr, verbose: *verbose, lineStart: true}
	task := ""
	for _, m := range res.Messages {
		if m.TaskID != task {
			task = m.TaskID
			f.line("--- task " + task)
		}
		f.print(m.EventType, m.EventData)
	}
	f.endLine()
	sessionSummary(stderr, res.Session)
	return exitOK
}

// sessionSummary is session's last line, on stderr (stdout is the
// transcript alone): its tasks, the agent's own session the next task
// resumes, what its tokens cost.
func sessionSummary(w io.Writer, s api.SessionRecord) {
	line := fmt.Sprintf("--- session %s: %s", s.ID, api.Count(s.Tasks, "task"))
	if s.SDKSessionID != "" {
		line += ", agent session " + printable(s.SDKSessionID)
	}
	if s.TokenUsage != nil {
		line += ", " + render.Usage(s.TokenUsage)
	}
	fmt.Fprintln(w, line)
}
