package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"github.com/orchestrd/orchestrd/api"
)

func init() {
	kinds[KindClaude] = func(o Options) Adapter { return &Claude{Opts: o} }
}

// Claude is the "claude-code" kind: Claude Code (2.1.x) in print mode with
// structured input and output, one process per prompt:
//
//	claude -p --output-format stream-json --input-format stream-json
//	  --verbose --include-partial-messages --permission-prompt-tool stdio
//	  [--permission-mode M] [--tools T,...] [--model M] [--resume ID] [ARGS...]
//
// The prompt goes to its stdin as a stream-json user message; stdin stays
// open for the answers to its control requests (can_use_tool: may this
// tool run?, put to the daemon's approvals as request_permission) and is
// closed once its result came, which ends its session. Its stdout lines
// become the api.Msg* messages (claudestream.go).
type Claude struct{ Opts Options }

// claudeModes are the task's permission modes as Claude Code's
// --permission-mode takes them ("" and default: its own default, no flag).
var claudeModes = map[string]string{
	api.ModeAcceptEdits: "acceptEdits",
	api.ModeBypass:      "bypassPermissions",
	api.ModePlan:        "plan",
}

// Args is Claude Code's command line for t, or why the task may not run.
func (a *Claude) Args(t Task) ([]string, *Result) {
	args := []string{"-p", "--output-format", "stream-json", "--input-format", "stream-json",
		"--verbose", "--include-partial-messages",
		// Its permission prompts come to us as can_use_tool control
		// requests on stdout, not denied by itself as -p does alone.
		"--permission-prompt-tool", "stdio"}
	switch mode := t.PermissionMode; mode {
	case "", api.ModeDefault:
	default:
		m, ok := claudeModes[mode]
		if !ok {
			r := Failed("bad_permission_mode", "Claude Code has no permission mode %q (default, acceptEdits, bypassPermissions, plan)", clean(mode, 64))
			return nil, &r
		}
		if m == "bypassPermissions" && os.Geteuid() == 0 && !a.Opts.Sandboxed {
			// Claude Code refuses to skip its checks as root unless told
			// it is in a sandbox; only the daemon's sandbox may say so.
			r := Failed("bypass_refused", "bypassPermissions as root needs the pool's sandbox: Claude Code skips its permission checks as root only in a sandbox")
			return nil, &r
		}
		args = append(args, "--permission-mode", m)
	}
	if len(t.Tools) > 0 {
		// The task's tools are the built-in tools Claude Code offers the
		// model (--tools), not the ones it may run unasked
		// (--allowedTools): every tool it runs is still asked about
		// unless the permission mode says otherwise, so that the approval
		// inbox sees it.
		args = append(args, "--tools", strings.Join(t.Tools, ","))
	}
	if a.Opts.Model != "" {
		args = append(args, "--model", a.Opts.Model)
	}
	if t.Resume != "" {
		args = append(args, "--resume", t.Resume)
	}
	return append(args, a.Opts.Argv[1:]...), nil
}

// Env is Claude Code's environment: the task's, its key (when the daemon
// gives one), its state directory, no updater or other traffic.
func (a *Claude) Env(t Task, key string) []string {
	env := append([]string(nil), t.Env...)
	if key != "" {
		env = append(env, "ANTHROPIC_API_KEY="+key)
	}
	if a.Opts.StateDir != "" {
		env = append(env, "CLAUDE_CONFIG_DIR="+a.Opts.StateDir)
	}
	env = append(env, "DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")
	if t.PermissionMode == api.ModeBypass && a.Opts.Sandboxed {
		env = append(env, "IS_SANDBOX=1")
	}
	return env
}

func (a *Claude) Run(t Task, h Host) Result {
	args, refused := a.Args(t)
	if refused != nil {
		return *refused
	}
	// Without a key Claude Code runs and says it is not logged in: that
	// is told as auth_failed.
	key, _ := h.APIKey("anthropic")
	if a.Opts.StateDir != "" {
		if err := os.MkdirAll(a.Opts.StateDir, 0o700); err != nil {
			return Failed("start_failed", "making Claude Code's state directory: %v", err)
		}
	}
	cmd := exec.Command(a.Opts.Argv[0], args...)
	cmd.Dir, cmd.Env = t.Cwd, a.Env(t, key)
	pipes, failed := t.Proc.StartPiped(cmd)
	if failed != nil {
		return *failed
	}
	inW, outR, errR := pipes.Stdin, pipes.Stdout, pipes.Stderr
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ReportStderr(errR, h)
	}()
	in := &claudeInput{w: inW}
	in.send(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": t.Prompt},
		"parent_tool_use_id": nil, "session_id": ""})

	s := newClaudeStream()
	var dmu sync.Mutex // the denials the permission goroutines count
	br := bufio.NewReaderSize(outR, 64<<10)
	// A line over LineMax is refused as a message; up to oversizeMax of
	// it is kept to be read for what it tells (a result, a permission).
	var big []byte
	skipping, bigOver := false, false
	keep := func(b []byte) {
		if bigOver || len(big)+len(b) > oversizeMax {
			if !bigOver && len(big) == 0 {
				big = append(big, b[:min(len(b), 256)]...)
			}
			bigOver = true
			return
		}
		big = append(big, b...)
	}
	handle := func(msgs []claudeMsg, perm *claudePermission) {
		for _, m := range msgs {
			h.Report(m.Type, m.Data)
		}
		if perm != nil {
			// The daemon may take minutes (a person): the lines go on
			// meanwhile, and a stop still reaches the process.
			go a.permission(perm, h, in, s, &dmu)
		}
		if s.RateLimited {
			// Claude Code would retry for minutes: stop it now.
			t.Proc.Signal(syscall.SIGKILL)
		}
		if s.ResultSeen {
			in.close()
		}
	}
	for {
		line, err := ReadLine(br, LineMax)
		switch {
		case line.Split:
			if !skipping {
				h.ReportError("line_too_long", fmt.Sprintf("Claude Code wrote a line over %d bytes: refused", LineMax))
			}
			skipping = true
			keep(line.B)
		case skipping:
			// Its last piece.
			skipping = false
			keep(line.B)
			if bigOver {
				// Too big to read: a permission it asks for is denied.
				if id := controlRequestID(big); id != "" {
					handle(nil, &claudePermission{RequestID: id, Tool: "(unknown)", Refused: true})
				}
			} else {
				dmu.Lock()
				msgs, perm := s.Oversized(big)
				dmu.Unlock()
				if perm != nil {
					perm.Refused = true
				}
				handle(msgs, perm)
			}
			big, bigOver = nil, false
		case len(line.B) > 0:
			dmu.Lock()
			msgs, perm := s.Line(line.B)
			dmu.Unlock()
			handle(msgs, perm)
		}
		if err != nil {
			break
		}
	}
	in.close()
	wg.Wait()
	werr := cmd.Wait()

	dmu.Lock()
	defer dmu.Unlock()
	res := a.result(s, werr, t.Proc)
	res.SDKSessionID = s.SessionID
	res.Denied = s.Denied()
	if s.Result != nil {
		res.Usage = s.Result.Usage
	}
	return res
}

// result tells how the run ended: cancelled when stopped, usage_limit,
// auth_failed, failed with the result's error, completed.
func (a *Claude) result(s *claudeStream, werr error, p *Proc) Result {
	switch {
	case p.Stopped():
		return Result{Status: "cancelled"}
	case s.RateLimited:
		r := Failed(api.TaskErrUsageLimit, "the model endpoint's rate or usage limit")
		if s.RetryAt != nil {
			r.Error.Message += "; retry at " + s.RetryAt.Format("2006-01-02T15:04:05Z")
		}
		r.Error.RetryAt = s.RetryAt
		return r
	case s.AuthFailed:
		return Failed(api.TaskErrAuthFailed, "the model endpoint refused the key (or there was none): %s", clean(s.ErrorText, 300))
	case s.Result != nil && s.Result.IsError:
		return Failed("agent_error", "Claude Code: %s", clean(s.ErrorText, 500))
	case s.Result != nil:
		return Result{Status: "completed"}
	}
	r := ExitResult(a.Opts.Argv[0], werr, p)
	if r.Status == "completed" {
		return Failed("no_result", "%s exited without a result", a.Opts.Argv[0])
	}
	return r
}

// permission puts a can_use_tool to the daemon and answers Claude Code.
func (a *Claude) permission(p *claudePermission, h Host, in *claudeInput, s *claudeStream, dmu *sync.Mutex) {
	if p.Tool == "" {
		// A control request the adapter does not serve.
		in.send(map[string]any{"type": "control_response", "response": map[string]any{
			"subtype": "error", "request_id": p.RequestID, "error": "orchestrd does not serve this request"}})
		return
	}
	var d Decision
	var err error
	if p.Refused {
		// Its line was over LineMax: not put to the daemon (nor shown).
		d = Decision{Reason: fmt.Sprintf("orchestrd refused the request: its line is over %d bytes", LineMax)}
		p.Input = nil
	} else if sh, ok := h.(SuggestingHost); ok && len(p.Suggestions) > 0 {
		d, err = sh.PermissionWith(p.Tool, p.Input, p.Suggestions)
	} else {
		d, err = h.Permission(p.Tool, p.Input)
	}
	if err != nil {
		d = Decision{Reason: "orchestrd could not ask for permission: " + err.Error()}
	}
	if d.Approved {
		in.send(controlAnswer(p.RequestID, map[string]any{"behavior": "allow", "updatedInput": p.Input}))
		return
	}
	reason := d.Reason
	if reason == "" {
		reason = "denied by orchestrd"
	}
	dmu.Lock()
	s.deny(p.ToolUseID)
	dmu.Unlock()
	h.Report(api.MsgPermissionDenied, api.PermissionDeniedData{ID: p.ToolUseID, Name: p.Tool, Input: p.Input, Reason: reason})
	in.send(controlAnswer(p.RequestID, map[string]any{"behavior": "deny", "message": reason}))
}

// oversizeMax bounds what is kept of a line over LineMax to be read.
const oversizeMax = 16 * LineMax

// controlRequestID is the request id at the start of a control request
// line (Claude Code writes type, then request_id), else "".
func controlRequestID(b []byte) string {
	const p = `{"type":"control_request","request_id":"`
	rest, ok := strings.CutPrefix(string(b[:min(len(b), 256)]), p)
	if !ok {
		return ""
	}
	id, _, ok := strings.Cut(rest, `"`)
	if !ok || id == "" || len(id) > 128 || strings.ContainsAny(id, "\\") {
		return ""
	}
	return id
}

func controlAnswer(id string, resp any) map[string]any {
	return map[string]any{"type": "control_response", "response": map[string]any{
		"subtype": "success", "request_id": id, "response": resp}}
}

// claudeInput is Claude Code's stdin: one JSON line at a time, closed once.
type claudeInput struct {
	mu     sync.Mutex
	w      io.WriteCloser
	closed bool
}

func (c *claudeInput) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	_, _ = c.w.Write(append(b, '\n'))
}

func (c *claudeInput) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		_ = c.w.Close()
	}
}
