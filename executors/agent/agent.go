// Package agent is the executor process's side of a task: the adapters
// that run one agent CLI per prompt and turn what it does into Agor's
// executor protocol. `orchestrd executor` owns the connection with the
// daemon (JSON-RPC over its socket); for each execute_prompt it hands an
// adapter a Task and a Host (report_message, report_error,
// request_permission, get_api_key on that connection) and answers with
// the adapter's Result.
//
// The kinds: "command" runs any command line (a JSON line with a "type"
// passes through, a plain line is text); "claude-code", "codex" and
// "gemini" speak their CLI's own structured protocol, stream its events as
// the api.Msg* messages, put its tool permissions to the daemon, resume
// its sessions and tell its failures apart (usage_limit, auth_failed).
package agent

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Kinds of agent ([executors.NAME] agent).
const (
	KindCommand = "command"
	KindClaude  = "claude-code"
	KindCodex   = "codex"
	KindGemini  = "gemini"
)

// Task is one execute_prompt, as an adapter runs it.
type Task struct {
	ID        string
	SessionID string // orchestrd's session
	// Resume is the agent's own session to continue (the sdk_session_id
	// the daemon recorded for SessionID); "" starts a new conversation.
	Resume         string
	Prompt         string
	Cwd            string
	PermissionMode string   // api.Mode*; "" is default
	Tools          []string // the tools the agent may use; empty: its own set
	Loop           *api.TaskLoop
	// Env is the agent's environment: the executor's own, with the loop's
	// variables. The adapter adds its key and its state directory.
	Env []string
	// Proc runs the agent's process; stop_task and cancel_task reach it.
	Proc *Proc
}

// Options are the executor's flags that configure an adapter (the
// daemon derives them from the pool's table).
type Options struct {
	// Argv is the agent's binary and extra arguments (default: the kind's
	// name on PATH).
	Argv []string
	// StateDir is where the agent keeps its sessions and settings
	// (CLAUDE_CONFIG_DIR, CODEX_HOME, Gemini's home); "" leaves the
	// agent's default (the user's ~/.claude...).
	StateDir string
	// Model is the pool's model_config.model; "" is the agent's default.
	Model string
	// Sandboxed: the daemon runs the executor in its sandbox (user, mount
	// and pid namespaces). A CLI that refuses to skip its permission
	// checks as root outside a sandbox (Claude Code) may be told it is in
	// one (IS_SANDBOX=1); without it, bypass as root is refused.
	Sandboxed bool
	// KeyEnv/KeyService: the command kind's --key-env and --key-service.
	KeyEnv, KeyService string
}

// Decision is the daemon's answer to a request_permission.
type Decision struct {
	Approved bool
	Reason   string
}

// Host is what an adapter uses of the executor's connection, for one
// task. Its methods are safe to call from any goroutine.
type Host interface {
	// Report sends one report_message (data is marshalled to JSON; a
	// json.RawMessage passes as it is). It waits while the daemon has
	// paused notifications.
	Report(eventType string, data any)
	// ReportError sends report_error.
	ReportError(code, message string)
	// Permission asks the daemon whether a tool may run
	// (request_permission) and waits for the answer. An error is a
	// connection or protocol failure: the adapter denies the tool.
	Permission(tool string, input json.RawMessage) (Decision, error)
	// APIKey fetches a secret by its service or credential key
	// (get_api_key); an error when the pool may not receive it.
	APIKey(service string) (string, error)
}

// SuggestingHost is a Host that can carry an agent's permission
// suggestions with a request_permission (Claude Code's
// permission_suggestions: the rules an "always" would record), so that an
// `approve --always` becomes an orchestrd rule.
type SuggestingHost interface {
	Host
	PermissionWith(tool string, input json.RawMessage, suggestions []json.RawMessage) (Decision, error)
}

// Result is execute_prompt's result.
type Result struct {
	Status       string // completed, failed, cancelled
	Error        *api.TaskError
	Usage        *api.TokenUsage
	SDKSessionID string
	Denied       int
}

// Wire is the result as execute_prompt's response carries it.
func (r Result) Wire(messages int64) map[string]any {
	res := map[string]any{"status": r.Status, "message_count": messages}
	if r.Error != nil {
		e := map[string]any{"code": r.Error.Code, "message": r.Error.Message}
		if r.Error.RetryAt != nil {
			e["retry_at"] = r.Error.RetryAt.UTC().Format(time.RFC3339)
		}
		res["error"] = e
	}
	if r.Usage != nil {
		res["token_usage"] = r.Usage
	}
	if r.SDKSessionID != "" {
		res["sdk_session_id"] = r.SDKSessionID
	}
	if r.Denied > 0 {
		res["denied"] = r.Denied
	}
	return res
}

// Failed is a failed result.
func Failed(code, format string, args ...any) Result {
	return Result{Status: "failed", Error: &api.TaskError{Code: code, Message: fmt.Sprintf(format, args...)}}
}

// Adapter runs one kind of agent.
type Adapter interface {
	// Run runs the agent for one prompt, reports what it does through h
	// and says how it ended. It starts the agent with t.Proc.Start, so
	// that a stop reaches it; a stopped task's result is cancelled.
	Run(t Task, h Host) Result
}

// New returns the adapter of kind.
func New(kind string, o Options) (Adapter, error) {
	switch kind {
	case "", KindCommand:
		if len(o.Argv) == 0 {
			return nil, fmt.Errorf("the command kind needs a command after --")
		}
		return &Command{Opts: o}, nil
	}
	mk, ok := kinds[kind]
	if !ok {
		return nil, fmt.Errorf("unknown agent kind %q (known: %s)", kind, strings.Join(Known(), ", "))
	}
	if len(o.Argv) == 0 {
		o.Argv = []string{DefaultBinary(kind)}
	}
	return mk(o), nil
}

// kinds are the built-in agent kinds beside command, registered by their
// files' init.
var kinds = map[string]func(Options) Adapter{}

// Known lists the kinds New takes.
func Known() []string {
	k := []string{KindCommand}
	for name := range kinds {
		k = append(k, name)
	}
	slices.Sort(k[1:])
	return k
}

// DefaultBinary is the program a kind runs when the pool names none.
func DefaultBinary(kind string) string {
	switch kind {
	case KindClaude:
		return "claude"
	}
	return kind
}
