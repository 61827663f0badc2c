package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Gemini is the "gemini" kind: Gemini CLI (0.61) in its Agent Client
// Protocol mode (--acp: JSON-RPC 2.0, one object a line, over its stdin
// and stdout). One process per prompt: initialize, authenticate (the key
// goes over the protocol, never into the agent's environment, so the
// commands it runs do not inherit it), session/new or session/load (the
// task's Resume), session/prompt. Its session/update notifications become
// the api.Msg* messages; each session/request_permission becomes the
// daemon's request_permission and is answered allow_once or reject_once
// (the CLI then tells the model only that the user cancelled the tool:
// the protocol carries no reason). The CLI is told to try the model once
// (general.maxAttempts = 1; it would retry a 429 for minutes): a rate
// limit ends the prompt with an error, usage_limit (retry_at from the
// endpoint's RetryInfo), and so does a refused key, auth_failed.
type Gemini struct{ Opts Options }

func init() { kinds[KindGemini] = func(o Options) Adapter { return &Gemini{Opts: o} } }

// GeminiDefaultModel is the model when the pool names none: naming one
// skips the CLI's router call to another model.
const GeminiDefaultModel = "gemini-2.5-pro"

// GeminiDefaultBaseURL is the Gemini API's endpoint when the pool's env
// names none (GOOGLE_GEMINI_BASE_URL).
const GeminiDefaultBaseURL = "https://generativelanguage.googleapis.com"

// geminiModes maps the task's permission mode to --approval-mode.
var geminiModes = map[string]string{"": "default", api.ModeDefault: "default",
	api.ModeAcceptEdits: "auto_edit", api.ModeBypass: "yolo", api.ModePlan: "plan"}

// geminiToolNames maps the tool names orchestrd's tasks use (Claude
// Code's) to Gemini CLI's; any other name is taken as Gemini's own.
var geminiToolNames = map[string]string{"Bash": "run_shell_command", "Read": "read_file", "Write": "write_file",
	"Edit": "replace", "MultiEdit": "replace", "Glob": "glob", "Grep": "grep_search", "LS": "list_directory",
	"WebFetch": "web_fetch", "WebSearch": "google_web_search", "TodoWrite": "write_todos"}

// geminiStartWait bounds the wait, after session/new or session/load,
// for the agent's available_commands_update: what comes before it is the
// replay of a loaded session's history, not this prompt's.
const geminiStartWait = 5 * time.Second

func (a *Gemini) Run(t Task, h Host) Result {
	mode, ok := geminiModes[t.PermissionMode]
	if !ok {
		return Failed("bad_permission_mode", "Gemini CLI has no approval mode for permission mode %q", t.PermissionMode)
	}
	model := a.Opts.Model
	if model == "" {
		model = GeminiDefaultModel
	}
	env := slices.Clone(t.Env)
	home := a.Opts.StateDir
	if home != "" {
		moved, err := geminiPrepareHome(home)
		if err != nil {
			return Failed("state_dir", "preparing Gemini CLI's home %s: %v", home, err)
		}
		if len(moved) > 0 {
			h.ReportError("state_quarantined", "moved aside from Gemini CLI's home (into .gemini/quarantine): "+strings.Join(moved, ", "))
		}
		// The CLI's own error reports (which quote the conversation)
		// go to its TMPDIR: the state directory, not a shared /tmp.
		env = append(env, "GEMINI_CLI_HOME="+home, "TMPDIR="+filepath.Join(home, "tmp"))
	} else {
		home = geminiHomeOf(env)
	}
	// One node process, not a relaunched child.
	env = append(env, "GEMINI_CLI_NO_RELAUNCH=true")
	// The task's directory is not trusted (its .gemini/settings.json,
	// which an agent or a repository writes, could let commands run
	// without asking, its .env change the endpoint) unless the mode
	// itself lets edits or everything run: the CLI then needs a trusted
	// folder to keep the mode.
	trust := "false"
	if mode == "auto_edit" || mode == "yolo" {
		trust = "true"
	}
	env = append(env, "GEMINI_CLI_TRUST_WORKSPACE="+trust)
	// A .env the CLI reads does not override a variable that is set: the
	// endpoint, and so where the key goes, is the pool's or Google's.
	if geminiEnvOf(env, "GOOGLE_GEMINI_BASE_URL") == "" {
		env = append(env, "GOOGLE_GEMINI_BASE_URL="+GeminiDefaultBaseURL)
	}
	key, kerr := h.APIKey("gemini")
	if kerr != nil {
		h.ReportError("no_api_key", "no key for gemini from the daemon; running without one")
	}
	argv := append(slices.Clone(a.Opts.Argv), "--acp", "-m", model, "--approval-mode", mode)
	if len(t.Tools) > 0 {
		// In the state directory, else the system's temporary one.
		p, err := geminiPolicy(a.Opts.StateDir, t.Tools)
		if err != nil {
			return Failed("state_dir", "writing the task's tool policy: %v", err)
		}
		defer os.Remove(p)
		argv = append(argv, "--policy", p)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = t.Cwd, env
	if t.Resume != "" && home != "" {
		geminiUnshadow(home, t.Resume)
	}
	pipes, failed := t.Proc.StartPiped(cmd)
	if failed != nil {
		return *failed
	}
	stdin, stdout, stderr := pipes.Stdin, pipes.Stdout, pipes.Stderr
	r := &geminiRun{t: t, h: h, w: stdin, lines: make(chan Line, 64)}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(r.lines)
		br := bufio.NewReaderSize(stdout, 64<<10)
		for {
			line, err := ReadLine(br, LineMax)
			if len(line.B) > 0 {
				line.B = bytes.Clone(line.B)
				r.lines <- line
				if line.Split {
					// The rest of an over-long line is dropped.
					for line.Split && err == nil {
						line, err = ReadLine(br, LineMax)
					}
				}
			}
			if err != nil {
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		r.watchStderr(stderr)
	}()
	res := r.run(key)
	_ = stdin.Close()
	// Closing its stdin ends the agent; one that lingers is killed.
	exited := make(chan struct{})
	go func() {
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			t.Proc.Signal(syscall.SIGKILL)
		}
	}()
	for range r.lines {
	}
	wg.Wait()
	werr := cmd.Wait()
	close(exited)
	out := r.result(res, werr)
	if out.Status != "completed" {
		r.reportStderr()
	}
	return out
}

// result is how the run ended: a stop wins, then the protocol's answer,
// else the agent's exit.
func (r *geminiRun) result(res Result, werr error) Result {
	if r.t.Proc.Stopped() {
		return Result{Status: "cancelled", Usage: r.usage, SDKSessionID: r.session, Denied: r.denied}
	}
	if res.Status == "" {
		res = ExitResult("gemini", werr, r.t.Proc)
		if res.Status == "completed" {
			res = Failed("agent_exited", "Gemini CLI exited before it answered the prompt")
		}
		res.SDKSessionID, res.Denied, res.Usage = r.session, r.denied, r.usage
	}
	return res
}

// geminiRun is one prompt's conversation with the agent.
type geminiRun struct {
	t     Task
	h     Host
	w     io.Writer
	lines chan Line

	nextID  int
	session string
	live    bool // past the history a session/load replays
	denied  int
	text    strings.Builder
	usage   *api.TokenUsage

	mu     sync.Mutex
	stderr []string // the last geminiStderrTail lines
}

// geminiTextMax bounds the result's text (the whole of it streamed
// already as text messages).
const geminiTextMax = 64 << 10

// acpMsg is one JSON-RPC message of the agent's.
type acpMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *acpError       `json:"error"`
}

type acpError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

func (e *acpError) Error() string { return fmt.Sprintf("error %d", e.Code) }

// errGeminiGone: the agent's stdout ended before the answer.
var errGeminiGone = errors.New("the agent's output ended")

func (r *geminiRun) run(key string) Result {
	if _, err := r.call("initialize", map[string]any{"protocolVersion": 1,
		"clientCapabilities": map[string]any{"fs": map[string]bool{"readTextFile": false, "writeTextFile": false}, "terminal": false}}); err != nil {
		return r.failure("initialize", err)
	}
	if key != "" {
		if _, err := r.call("authenticate", map[string]any{"methodId": "gemini-api-key", "_meta": map[string]any{"api-key": key}}); err != nil {
			if errors.Is(err, errGeminiGone) {
				return r.failure("authenticate", err)
			}
			return Failed(api.TaskErrAuthFailed, "Gemini CLI refused the API key (authenticate)")
		}
	}
	if r.t.Resume != "" {
		if _, err := r.call("session/load", map[string]any{"sessionId": r.t.Resume, "cwd": r.t.Cwd, "mcpServers": []any{}}); err != nil {
			if errors.Is(err, errGeminiGone) {
				return r.failure("session/load", err)
			}
			r.h.ReportError("resume_failed", "Gemini CLI could not load the session to resume; starting a new one")
		} else {
			r.session = r.t.Resume
		}
	}
	if r.session == "" {
		res, err := r.call("session/new", map[string]any{"cwd": r.t.Cwd, "mcpServers": []any{}})
		if err != nil {
			return r.failure("session/new", err)
		}
		var s struct {
			SessionID string `json:"sessionId"`
		}
		if json.Unmarshal(res, &s) != nil || s.SessionID == "" || len(s.SessionID) > 200 {
			return Failed("protocol_error", "Gemini CLI's session/new answer has no session id")
		}
		r.session = s.SessionID
	}
	r.awaitLive()
	res, err := r.call("session/prompt", map[string]any{"sessionId": r.session,
		"prompt": []any{map[string]string{"type": "text", "text": r.t.Prompt}}})
	if err != nil {
		return r.failure("session/prompt", err)
	}
	var p struct {
		StopReason string `json:"stopReason"`
		Meta       struct {
			Quota struct {
				TokenCount struct {
					Input  int64 `json:"input_tokens"`
					Output int64 `json:"output_tokens"`
					Cached int64 `json:"cached_tokens"`
				} `json:"token_count"`
			} `json:"quota"`
		} `json:"_meta"`
	}
	_ = json.Unmarshal(res, &p)
	tc := p.Meta.Quota.TokenCount
	if tc.Input != 0 || tc.Output != 0 || tc.Cached != 0 {
		r.usage = &api.TokenUsage{InputTokens: tc.Input, OutputTokens: tc.Output, CacheReadTokens: tc.Cached}
		r.h.Report(api.MsgUsage, api.UsageData{TokenUsage: *r.usage, Raw: res})
	}
	status := "completed"
	if p.StopReason == "cancelled" {
		status = "cancelled"
	}
	r.h.Report(api.MsgResult, api.ResultData{Text: r.text.String(), SDKSessionID: r.session, Denied: r.denied,
		Usage: r.usage, IsError: p.StopReason == "refusal", Raw: res})
	return Result{Status: status, Usage: r.usage, SDKSessionID: r.session, Denied: r.denied}
}

// failure is the result of a call that failed: the agent's output ended
// (a crash: its exit says), or the agent answered with an error (a
// refused key, a rate limit...). The model endpoint's own words are not
// copied.
func (r *geminiRun) failure(what string, err error) Result {
	var ae *acpError
	if !errors.As(err, &ae) {
		return Result{} // decided by the agent's exit
	}
	code := geminiErrorCode(ae)
	switch code {
	case api.TaskErrUsageLimit:
		res := Failed(code, "Gemini CLI: the model endpoint's rate limit or quota (%s)", what)
		if m := geminiRetryAfter().FindStringSubmatch(ae.Message); m != nil {
			if sec, err := strconv.ParseFloat(m[1], 64); err == nil {
				at := time.Now().Add(time.Duration(sec * float64(time.Second))).UTC().Truncate(time.Second)
				res.Error.RetryAt = &at
			}
		}
		return res
	case api.TaskErrAuthFailed:
		return Failed(code, "Gemini CLI: the model endpoint refused the API key (%s)", what)
	}
	return Failed("agent_error", "Gemini CLI answered %s with error %d", what, ae.Code)
}

// geminiErrorCode tells a usage limit and a refused key from other errors
// of the agent's.
func geminiErrorCode(e *acpError) string {
	text := e.Message + " " + string(e.Data)
	switch {
	case e.Code == 429 || strings.Contains(text, "RESOURCE_EXHAUSTED") || strings.Contains(text, `"code":429`) ||
		strings.Contains(strings.ToLower(text), "quota"):
		return api.TaskErrUsageLimit
	case e.Code == 401 || e.Code == 403 || strings.Contains(text, "UNAUTHENTICATED") || strings.Contains(text, "PERMISSION_DENIED") ||
		strings.Contains(strings.ToLower(text), "api key") || strings.Contains(text, `"code":401`) || strings.Contains(text, `"code":403`):
		return api.TaskErrAuthFailed
	}
	return ""
}

// send writes one message to the agent.
func (r *geminiRun) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	_, _ = r.w.Write(append(b, '\n'))
}

// call sends a request and handles what the agent says until its answer.
func (r *geminiRun) call(method string, params any) (json.RawMessage, error) {
	r.nextID++
	id := r.nextID
	r.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	want := strconv.Itoa(id)
	for line := range r.lines {
		m, ok := r.handle(line)
		if ok && m.Method == "" && string(m.ID) == want {
			if m.Error != nil {
				return nil, m.Error
			}
			return m.Result, nil
		}
	}
	return nil, errGeminiGone
}

// awaitLive handles what the agent says until its
// available_commands_update, which follows a session/load's replay of
// the history, or geminiStartWait.
func (r *geminiRun) awaitLive() {
	timer := time.NewTimer(geminiStartWait)
	defer timer.Stop()
	for !r.live {
		select {
		case line, ok := <-r.lines:
			if !ok {
				return
			}
			r.handle(line)
		case <-timer.C:
			r.live = true
		}
	}
}

var acpHead = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^\{"jsonrpc":"2\.0","id":(-?[0-9]{1,15}|"[^"\\]{0,100}"),"method":"([a-z/_]{1,64})"`)
})

// handle takes one line of the agent's: the agent's requests are
// answered, its notifications reported. It returns the message decoded
// (ok false: not a JSON-RPC message).
func (r *geminiRun) handle(line Line) (acpMsg, bool) {
	if line.Split {
		// An over-long line is not decoded. A request in it is still
		// answered, or the agent would wait for ever: a permission is
		// refused.
		r.h.ReportError("line_too_long", fmt.Sprintf("an agent line over %d bytes was dropped", LineMax))
		if m := acpHead().FindSubmatch(line.B); m != nil {
			if string(m[2]) == "session/request_permission" {
				r.denied++
				r.h.Report(api.MsgPermissionDenied, api.PermissionDeniedData{Name: "unknown", Reason: "the permission request was too large to show"})
				r.send(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(m[1]), "result": map[string]any{"outcome": map[string]string{"outcome": "cancelled"}}})
			} else {
				r.send(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(m[1]), "error": map[string]any{"code": -32600, "message": "request too large"}})
			}
		}
		return acpMsg{}, false
	}
	raw := json.RawMessage(line.B)
	var m acpMsg
	if json.Unmarshal(line.B, &m) != nil || (m.Method == "" && m.ID == nil) {
		r.agentLine(line.B)
		return acpMsg{}, false
	}
	switch {
	case m.Method != "" && m.ID != nil:
		if m.Method == "session/request_permission" {
			r.permission(m, raw)
			return m, true
		}
		r.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
		r.agentLine(line.B)
	case m.Method == "session/update":
		r.update(m.Params, raw)
	case m.Method != "":
		r.agentLine(line.B)
	}
	return m, true
}

func (r *geminiRun) agentLine(b []byte) {
	line := json.RawMessage(b)
	if !json.Valid(b) {
		s, _ := json.Marshal(string(b))
		line = s
	}
	r.h.Report(api.MsgAgentLine, api.AgentLineData{Agent: KindGemini, Line: line})
}

// acpToolCall is a tool call as session/update and
// session/request_permission carry it.
type acpToolCall struct {
	SessionUpdate string `json:"sessionUpdate"`
	ToolCallID    string `json:"toolCallId"`
	Status        string `json:"status"`
	Title         string `json:"title"`
	Kind          string `json:"kind"`
	Content       []struct {
		Type    string `json:"type"`
		Path    string `json:"path"`
		NewText string `json:"newText"`
		Content struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"content"`
	Locations []struct {
		Path string `json:"path"`
	} `json:"locations"`
	RawInput json.RawMessage `json:"rawInput"`
}

// geminiInputMax bounds a text taken into a tool's input (a file's new
// content).
const geminiInputMax = 16 << 10

var geminiToolName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`) })

// geminiAsTools names Gemini CLI's tools by orchestrd's (Claude Code's)
// names where they are the same tool, so that the approval rules written
// for those (Bash's command, Write's and Edit's file_path) hold for
// Gemini's too.
var geminiAsTools = map[string]string{"run_shell_command": "Bash", "write_file": "Write", "replace": "Edit"}

// nameInput is the tool's name and input as orchestrd shows and matches
// them. The CLI names each call's id "<tool>__<the model's id>"; the
// shell's title is its command, exactly: Bash {command}. The protocol
// carries no other arguments, so for other tools the input is what the
// request shows: the title, the kind, the file and its new content.
func (tc *acpToolCall) nameInput() (string, json.RawMessage) {
	name, _, found := strings.Cut(tc.ToolCallID, "__")
	if !found || !geminiToolName().MatchString(name) {
		name = "unknown"
	}
	if name == "run_shell_command" {
		b, _ := json.Marshal(map[string]string{"command": tc.Title})
		return "Bash", b
	}
	if n, ok := geminiAsTools[name]; ok {
		name = n
	}
	in := map[string]any{"title": tc.Title}
	if tc.Kind != "" {
		in["kind"] = tc.Kind
	}
	for _, c := range tc.Content {
		if c.Type == "diff" {
			in["file_path"] = c.Path
			text := c.NewText
			if len(text) > geminiInputMax {
				text = text[:geminiInputMax]
				in["content_truncated"] = true
			}
			in["content"] = text
			break
		}
	}
	if _, ok := in["file_path"]; !ok && len(tc.Locations) > 0 {
		in["file_path"] = tc.Locations[0].Path
	}
	if len(tc.RawInput) > 0 && len(tc.RawInput) <= geminiInputMax && json.Valid(tc.RawInput) {
		in["input"] = tc.RawInput
	}
	b, _ := json.Marshal(in)
	return name, b
}

// output is what a finished tool call's update shows.
func (tc *acpToolCall) output() string {
	var parts []string
	for _, c := range tc.Content {
		switch c.Type {
		case "content":
			parts = append(parts, c.Content.Text)
		case "diff":
			parts = append(parts, "edited "+c.Path)
		}
	}
	return strings.Join(parts, "\n")
}

func (r *geminiRun) permission(m acpMsg, raw json.RawMessage) {
	var p struct {
		SessionID string      `json:"sessionId"`
		ToolCall  acpToolCall `json:"toolCall"`
		Options   []struct {
			OptionID string `json:"optionId"`
			Kind     string `json:"kind"`
		} `json:"options"`
	}
	_ = json.Unmarshal(m.Params, &p)
	name, input := p.ToolCall.nameInput()
	r.h.Report(api.MsgToolCall, api.ToolCallData{ID: p.ToolCall.ToolCallID, Name: name, Input: input, Raw: raw})
	d, err := r.h.Permission(name, input)
	if err != nil {
		d = Decision{Reason: "the daemon did not answer the permission request"}
	}
	pick := func(kinds ...string) string {
		for _, k := range kinds {
			for _, o := range p.Options {
				if o.Kind == k {
					return o.OptionID
				}
			}
		}
		return ""
	}
	// allow_once, never allow_always: each call is the daemon's to
	// decide (its "always" is its own rule).
	option := ""
	if d.Approved {
		option = pick("allow_once")
	} else {
		option = pick("reject_once", "reject_always")
	}
	outcome := map[string]string{"outcome": "cancelled"}
	if option != "" {
		outcome = map[string]string{"outcome": "selected", "optionId": option}
	}
	if !d.Approved || option == "" {
		r.denied++
		reason := d.Reason
		if d.Approved {
			reason = "the agent offered no way to allow it once"
		}
		if reason == "" {
			reason = "denied"
		}
		r.h.Report(api.MsgPermissionDenied, api.PermissionDeniedData{ID: p.ToolCall.ToolCallID, Name: name, Input: input, Reason: reason})
	}
	r.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"outcome": outcome}})
}

func (r *geminiRun) update(params, raw json.RawMessage) {
	var p struct {
		SessionID string          `json:"sessionId"`
		Update    json.RawMessage `json:"update"`
	}
	_ = json.Unmarshal(params, &p)
	var u struct {
		SessionUpdate string `json:"sessionUpdate"`
		Content       json.RawMessage
	}
	_ = json.Unmarshal(p.Update, &u)
	if u.SessionUpdate == "available_commands_update" {
		r.live = true
		r.h.Report(api.MsgAgentLine, api.AgentLineData{Agent: KindGemini, Line: raw})
		return
	}
	if !r.live || (r.session != "" && p.SessionID != r.session) {
		return // a loaded session's history, reported when it was new
	}
	switch u.SessionUpdate {
	case "agent_message_chunk", "agent_thought_chunk":
		var c struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(u.Content, &c) != nil || c.Type != "text" {
			r.h.Report(api.MsgAgentLine, api.AgentLineData{Agent: KindGemini, Line: raw})
			return
		}
		typ := api.MsgText
		if u.SessionUpdate == "agent_thought_chunk" {
			typ = api.MsgThinking
		} else if r.text.Len()+len(c.Text) <= geminiTextMax {
			r.text.WriteString(c.Text)
		}
		r.h.Report(typ, api.MsgTextData{Text: c.Text, Raw: raw})
	case "tool_call", "tool_call_update":
		var tc acpToolCall
		_ = json.Unmarshal(p.Update, &tc)
		switch {
		case u.SessionUpdate == "tool_call":
			name, input := tc.nameInput()
			r.h.Report(api.MsgToolCall, api.ToolCallData{ID: tc.ToolCallID, Name: name, Input: input, Raw: raw})
		case tc.Status == "completed" || tc.Status == "failed":
			r.h.Report(api.MsgToolResult, api.ToolResultData{ID: tc.ToolCallID, Output: tc.output(), IsError: tc.Status == "failed", Raw: raw})
		default:
			r.h.Report(api.MsgAgentLine, api.AgentLineData{Agent: KindGemini, Line: raw})
		}
	default:
		r.h.Report(api.MsgAgentLine, api.AgentLineData{Agent: KindGemini, Line: raw})
	}
}

// geminiRetryAfter is the delay the CLI quotes from a 429's RetryInfo.
var geminiRetryAfter = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`Suggested retry after ([0-9]{1,7}(?:\.[0-9]{1,3})?)s`)
})

// geminiStderrTail is how many of the agent's last stderr lines a
// failed task reports (a run that goes well writes only noise there).
const geminiStderrTail = 20

// watchStderr keeps the agent's last stderr lines. (The CLI logs each
// retry of a 429 there, but node buffers a pipe's stderr: the lines come
// late, so the run is not stopped on them; general.maxAttempts = 1 makes
// the CLI answer the prompt with the 429 at once instead.)
func (r *geminiRun) watchStderr(rd io.Reader) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		r.mu.Lock()
		r.stderr = append(r.stderr, sc.Text())
		if len(r.stderr) > geminiStderrTail {
			r.stderr = r.stderr[1:]
		}
		r.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, rd)
}

// reportStderr reports the agent's last stderr lines (a failed task's).
func (r *geminiRun) reportStderr() {
	r.mu.Lock()
	lines := r.stderr
	r.stderr = nil
	r.mu.Unlock()
	for _, l := range lines {
		r.h.ReportError("stderr", l)
	}
}

// geminiEnvOf is the value of key in env (the last one wins, as for
// exec).
func geminiEnvOf(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// geminiHomeOf is the home the CLI uses without a state directory.
func geminiHomeOf(env []string) string {
	if v := geminiEnvOf(env, "GEMINI_CLI_HOME"); v != "" {
		return v
	}
	h, _ := os.UserHomeDir()
	return h
}

// geminiPrepareHome makes home/.gemini the CLI's home as orchestrd
// means it, before each run: settings.json written whole (an agent's
// command can write the state directory, and what it wrote there, such
// as tools.allowed, hooks or MCP servers, would let later tasks run tools
// unasked): the API key auth, folder trust by GEMINI_CLI_TRUST_WORKSPACE
// (see Run), no project .env files, no update checks, no usage
// statistics. The home's policies and extensions (which allow tools and
// start commands) and .env files are moved aside into
// .gemini/quarantine; moved names the ones that were.
func geminiPrepareHome(home string) (moved []string, err error) {
	dir := filepath.Join(home, ".gemini")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(home, "tmp"), 0o700); err != nil {
		return nil, err
	}
	for _, rel := range []string{".env", ".gemini/.env", ".gemini/policies", ".gemini/extensions"} {
		p := filepath.Join(home, rel)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		q := filepath.Join(dir, "quarantine")
		if err := os.MkdirAll(q, 0o700); err != nil {
			return moved, err
		}
		dst := filepath.Join(q, fmt.Sprintf("%d-%s", time.Now().UnixNano(), strings.ReplaceAll(rel, "/", "_")))
		if err := os.Rename(p, dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			return moved, err
		}
		moved = append(moved, rel)
	}
	settings := map[string]any{
		"security": map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}, "folderTrust": map[string]any{"enabled": false}},
		"advanced": map[string]any{"ignoreLocalEnv": true},
		"general":  map[string]any{"enableAutoUpdate": false, "enableAutoUpdateNotification": false, "maxAttempts": 1},
		"privacy":  map[string]any{"usageStatisticsEnabled": false},
	}
	b, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		return moved, err
	}
	tmp, err := os.CreateTemp(dir, "settings-*.json")
	if err != nil {
		return moved, err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return moved, err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return moved, err
	}
	return moved, os.Rename(tmp.Name(), filepath.Join(dir, "settings.json"))
}

var geminiSessionFile = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^session-\d{4}-\d\d-\d\dT\d\d-\d\d-([0-9a-f]{8})\.jsonl$`)
})

// geminiUnshadow works around the CLI's session/load: it starts a new
// recording of the session before it reads the old one, in a file named
// by the minute and the session id's first 8 characters, which is the
// old file itself when both fall in the same minute, and the old
// conversation is then lost. The old file gets a name no recording
// takes (the CLI finds a session by its content, not its file name).
func geminiUnshadow(home, session string) {
	if len(session) < 8 {
		return
	}
	short := session[:8]
	dirs, _ := filepath.Glob(filepath.Join(home, ".gemini", "tmp", "*", "chats"))
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			m := geminiSessionFile().FindStringSubmatch(e.Name())
			if m == nil || m[1] != short || !e.Type().IsRegular() {
				continue
			}
			old := filepath.Join(d, e.Name())
			base := strings.TrimSuffix(e.Name(), ".jsonl")
			for i := 1; i < 100; i++ {
				// A link fails where the name is taken: nothing is
				// overwritten.
				if os.Link(old, filepath.Join(d, fmt.Sprintf("%s-%d.jsonl", base, i))) == nil {
					_ = os.Remove(old)
					break
				}
			}
		}
	}
}

// geminiBuiltinTools are Gemini CLI 0.61's own tools (those its
// requests offer the model).
var geminiBuiltinTools = []string{"update_topic", "list_directory", "read_file", "grep_search", "glob", "replace",
	"write_file", "web_fetch", "run_shell_command", "list_background_processes", "read_background_output",
	"google_web_search", "write_todos", "enter_plan_mode", "exit_plan_mode", "invoke_agent", "activate_skill",
	"read_many_files", "save_memory", "ask_user"}

// geminiPolicy writes the task's tool list as a policy file of the CLI's
// (--policy): each built-in tool outside the list is denied, which also
// takes it out of what the model is offered. The tools in the list keep
// the approval mode's own decisions (the CLI's policies cannot say
// "every tool but these" without overriding them).
func geminiPolicy(dir string, tools []string) (string, error) {
	keep := map[string]bool{}
	for _, t := range tools {
		if g, ok := geminiToolNames[t]; ok {
			t = g
		}
		keep[t] = true
	}
	var b strings.Builder
	b.WriteString("# orchestrd: the tools outside this task's list are denied.\n")
	for _, name := range geminiBuiltinTools {
		if !keep[name] {
			fmt.Fprintf(&b, "[[rule]]\ntoolName = %s\ndecision = \"deny\"\npriority = 999\n\n", strconv.Quote(name))
		}
	}
	f, err := os.CreateTemp(dir, "policy-*.toml")
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), f.Close()
}
