package executors

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

// Task events. Every one carries task_id.

// TaskQueued: task.execute recorded a task; it waits for an executor.
type TaskQueued struct {
	TaskID    string `json:"task_id"`
	SessionID string `json:"session_id"`
	Executor  string `json:"executor"`
}

func (TaskQueued) Kind() string { return "task.queued" }

// TaskStarted: execute_prompt was sent to an executor instance.
type TaskStarted struct {
	TaskID    string `json:"task_id"`
	SessionID string `json:"session_id"`
	Executor  string `json:"executor"`
	Instance  string `json:"instance"`
	Pid       int    `json:"pid"`
}

func (TaskStarted) Kind() string { return "task.started" }

// TaskMessage is one report_message, published once it is committed to
// the store, in sequence order per task. Ephemeral: the store has it.
type TaskMessage struct {
	TaskID    string          `json:"task_id"`
	SessionID string          `json:"session_id"`
	Sequence  int64           `json:"sequence"`
	EventType string          `json:"event_type"`
	EventData json.RawMessage `json:"event_data,omitempty"`
}

func (TaskMessage) Kind() string { return "task.message" }
func (TaskMessage) Ephemeral()   {}

// AppendJSON writes the event as json.Marshal would, without reflection:
// there is one per report_message. EventData is JSON the store took (it
// checked it); one spread over lines is compacted.
func (e TaskMessage) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"task_id":`...)
	dst = wire.AppendJSONString(dst, e.TaskID, false)
	dst = append(dst, `,"session_id":`...)
	dst = wire.AppendJSONString(dst, e.SessionID, false)
	dst = append(dst, `,"sequence":`...)
	dst = strconv.AppendInt(dst, e.Sequence, 10)
	dst = append(dst, `,"event_type":`...)
	dst = wire.AppendJSONString(dst, e.EventType, false)
	if len(e.EventData) > 0 {
		dst = append(dst, `,"event_data":`...)
		if bytes.ContainsAny(e.EventData, "\r\n") {
			var b bytes.Buffer
			if json.Compact(&b, e.EventData) == nil {
				dst = append(dst, b.Bytes()...)
			} else {
				dst = append(dst, "null"...)
			}
		} else {
			dst = append(dst, e.EventData...)
		}
	}
	return append(dst, '}')
}

// TaskProgress is a report_progress; ephemeral.
type TaskProgress struct {
	TaskID   string          `json:"task_id"`
	Progress json.RawMessage `json:"progress"`
}

func (TaskProgress) Kind() string { return "task.progress" }
func (TaskProgress) Ephemeral()   {}

// TaskErrorReported is a report_error: an error the agent went on after.
// Its message is the agent's words (a command's stderr): the log line
// carries it as eventlog.Ident does (a short plain word as it is, else
// its size and hash), a subscriber (prompt, Agor's client) the text.
type TaskErrorReported struct {
	TaskID  string `json:"task_id"`
	Code    string `json:"code"`
	Message string `json:"-"`
}

func (TaskErrorReported) Kind() string { return "task.error" }

// MarshalJSON is the log line's form.
func (e TaskErrorReported) MarshalJSON() ([]byte, error) {
	return json.Marshal(taskError{e.TaskID, eventlog.Ident(e.Code), eventlog.Ident(e.Message)})
}

// WireData is the subscribers' form: the message whole.
func (e TaskErrorReported) WireData() any { return taskError{e.TaskID, e.Code, e.Message} }

type taskError struct {
	TaskID  string `json:"task_id"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// TaskFinished: a task reached its terminal state.
type TaskFinished struct {
	TaskID       string          `json:"task_id"`
	SessionID    string          `json:"session_id"`
	Executor     string          `json:"executor"`
	State        api.TaskState   `json:"state"`
	Error        *api.TaskError  `json:"error,omitempty"`
	MessageCount int64           `json:"message_count"`
	TokenUsage   *api.TokenUsage `json:"token_usage,omitempty"`
	Denied       int             `json:"denied,omitempty"` // tool uses refused in it
	// Usage is what the executor's tree used while it ran (the record's).
	Usage *api.Usage `json:"usage,omitempty"`
	// theirs: Error holds what the executor wrote (its error's code and
	// message, its status): the log line has their digests, the
	// subscribers (the dashboard, a watching CLI) the error whole.
	theirs bool
}

func (TaskFinished) Kind() string { return "task.finished" }

// taskFinishedLine is TaskFinished without its methods.
type taskFinishedLine TaskFinished

// MarshalJSON is the log line's form.
func (e TaskFinished) MarshalJSON() ([]byte, error) {
	if e.theirs && e.Error != nil {
		e.Error = &api.TaskError{Code: eventlog.Ident(e.Error.Code), Message: eventlog.Ident(e.Error.Message),
			RetryAt: e.Error.RetryAt}
	}
	return json.Marshal(taskFinishedLine(e))
}

// WireData is the subscribers' form: the error whole.
func (e TaskFinished) WireData() any { return taskFinishedLine(e) }

// TaskPermissionRequested: the task's agent asked to use a tool and a
// person (or a rule) is asked, as approval approval_id.
type TaskPermissionRequested struct {
	TaskID     string `json:"task_id"`
	ToolName   string `json:"tool_name"`
	ApprovalID string `json:"approval_id,omitempty"`
}

func (TaskPermissionRequested) Kind() string { return "task.permission_requested" }

// TaskPermissionDecided: a permission answered without a person (the
// task's permission_mode) or by the approval.
type TaskPermissionDecided struct {
	TaskID   string `json:"task_id"`
	ToolName string `json:"tool_name"`
	Approved bool   `json:"approved"`
	Reason   string `json:"reason"`
}

func (TaskPermissionDecided) Kind() string { return "task.permission_decided" }

// TaskRecovered: a task a dead daemon left queued or running, failed at
// the next start (daemon_lost: it may have run; never run again).
type TaskRecovered struct {
	TaskID        string        `json:"task_id"`
	PreviousState api.TaskState `json:"previous_state"`
}

func (TaskRecovered) Kind() string { return "task.recovered" }

// TaskSequencesSkipped: an executor sent report_message sequences out of
// order and left gaps unfilled while more than Limit (4 x high_water)
// later ones arrived; the daemon stopped waiting for the gaps in
// From..To (Missing sequences of that range it never received), so that
// what it holds per task stays bounded. A message of those sequences
// that arrives later is dropped as a duplicate; every message received
// is kept.
type TaskSequencesSkipped struct {
	TaskID   string `json:"task_id"`
	Executor string `json:"executor"`
	From     int64  `json:"from"`
	To       int64  `json:"to"`
	Missing  int64  `json:"missing"`
	Limit    int    `json:"limit"`
}

func (TaskSequencesSkipped) Kind() string { return "task.sequences_skipped" }

// SecretIssued: get_api_key handed a secret to a task's executor. Never
// the value. Service is the name asked for (eventlog.Ident: a name that is
// not a plain identifier is shown as its length and hash), Entry the
// secrets file's entry that answered.
type SecretIssued struct {
	TaskID   string `json:"task_id"`
	Service  string `json:"service"`
	Executor string `json:"executor"`
	Pool     string `json:"pool"`
	Entry    string `json:"entry"`
}

func (SecretIssued) Kind() string { return "secret.issued" }

// SecretRefused: get_api_key asked for a secret that is not configured
// (reason not_configured) or that the pool's secrets do not list
// (not_allowed). Service is the name asked for, as in SecretIssued.
type SecretRefused struct {
	TaskID   string `json:"task_id"`
	Service  string `json:"service"`
	Executor string `json:"executor"`
	Pool     string `json:"pool"`
	Reason   string `json:"reason"`
}

func (SecretRefused) Kind() string { return "secret.refused" }

// Executor process events.

// ExecutorSpawned: an executor process started.
type ExecutorSpawned struct {
	Pool     string `json:"pool"`
	Executor string `json:"executor"`
	Pid      int    `json:"pid"`
	Socket   string `json:"socket,omitempty"` // transport socket: the path it listens on
	// Transport is how the daemon reaches it: socket or fd (a socketpair).
	Transport string `json:"transport"`
}

func (ExecutorSpawned) Kind() string { return "executor.spawned" }

// ExecutorConnected: the daemon connected to the executor's socket; it
// takes tasks.
type ExecutorConnected struct {
	Pool     string `json:"pool"`
	Executor string `json:"executor"`
	Pid      int    `json:"pid"`
	StartMs  int64  `json:"start_ms"`
}

func (ExecutorConnected) Kind() string { return "executor.connected" }

// ExecutorStartFailed: an executor could not be started, or did not
// listen within startup_timeout (then it was killed).
type ExecutorStartFailed struct {
	Pool     string `json:"pool"`
	Executor string `json:"executor"`
	Reason   string `json:"reason"`
}

func (ExecutorStartFailed) Kind() string { return "executor.start_failed" }

// ExecutorPeerRefused: what listened on an executor's socket was not the
// process the daemon spawned for it (nor one of that process's own
// children), so the daemon spoke no word to it and killed the executor.
// PeerPid is 0 when the listener lives where the daemon cannot see it.
type ExecutorPeerRefused struct {
	Pool     string `json:"pool"`
	Executor string `json:"executor"`
	Pid      int    `json:"pid"`
	PeerPid  int32  `json:"peer_pid"`
	PeerUID  uint32 `json:"peer_uid"`
	Reason   string `json:"reason"`
}

func (ExecutorPeerRefused) Kind() string { return "executor.peer_refused" }

// ExecutorExited: an executor process ended; Task is the task it held
// (failed executor_lost), if any.
type ExecutorExited struct {
	Pool     string `json:"pool"`
	Executor string `json:"executor"`
	Pid      int    `json:"pid"`
	Code     int    `json:"code"`
	Signal   string `json:"signal,omitempty"`
	Task     string `json:"task_id,omitempty"`
	Expected bool   `json:"expected"` // the daemon asked it to stop
	// Stderr: the last lines it wrote to stderr, when it exited before it
	// connected (at most 5 of 300 bytes, control characters as '?').
	Stderr []string `json:"stderr,omitempty"`
}

func (ExecutorExited) Kind() string { return "executor.exited" }

// ExecutorRestartScheduled: a warm instance that died is started again
// after DelayMs (0 but in a crash loop).
type ExecutorRestartScheduled struct {
	Pool             string `json:"pool"`
	DelayMs          int64  `json:"delay_ms"`
	RestartsInWindow int    `json:"restarts_in_window"`
	Policy           string `json:"policy"`
}

func (ExecutorRestartScheduled) Kind() string { return "executor.restart_scheduled" }

// ExecutorPaused / ExecutorResumed: pause_notifications and
// resume_notifications sent, with the notifications read and not yet
// committed.
type ExecutorPaused struct {
	Pool     string `json:"pool"`
	Executor string `json:"executor"`
	Pending  int    `json:"pending"`
}

func (ExecutorPaused) Kind() string { return "executor.paused" }

type ExecutorResumed struct {
	Pool     string `json:"pool"`
	Executor string `json:"executor"`
	Pending  int    `json:"pending"`
}

func (ExecutorResumed) Kind() string { return "executor.resumed" }

// ExecutorBadToken: a request or notification whose session_token is not
// the live token of a task on that executor. Never the token.
type ExecutorBadToken struct {
	Pool     string `json:"pool"`
	Executor string `json:"executor"`
	Method   string `json:"method"`
}

func (ExecutorBadToken) Kind() string { return "executor.bad_token" }

// ExecutorProtocolError: a line the executor sent that could not be used.
type ExecutorProtocolError struct {
	Pool     string `json:"pool"`
	Executor string `json:"executor"`
	Problem  string `json:"problem"`
}

func (ExecutorProtocolError) Kind() string { return "executor.protocol_error" }

// ExecutorStopping: the daemon sent shutdown (reason idle_timeout or
// server_restart) and kills the group after timeout_ms.
type ExecutorStopping struct {
	Pool      string `json:"pool"`
	Executor  string `json:"executor"`
	Reason    string `json:"reason"`
	TimeoutMs int64  `json:"timeout_ms"`
}

func (ExecutorStopping) Kind() string { return "executor.stopping" }

// ExecutorKilled: the daemon killed an executor's process group.
type ExecutorKilled struct {
	Pool     string `json:"pool"`
	Executor string `json:"executor"`
	Pid      int    `json:"pid"`
	Reason   string `json:"reason"`
}

func (ExecutorKilled) Kind() string { return "executor.killed" }

// TerminalOpened: an executor spawned a terminal and passed its PTY.
type TerminalOpened struct {
	TerminalID string `json:"terminal_id"`
	Pool       string `json:"pool"`
	Executor   string `json:"executor"`
	PtyPid     int    `json:"pty_pid"`
	Cwd        string `json:"cwd,omitempty"`
	Cols       int    `json:"cols"`
	Rows       int    `json:"rows"`
}

func (TerminalOpened) Kind() string { return "terminal.opened" }

// TerminalClosed: a terminal ended; Reason is one of api.Term*.
type TerminalClosed struct {
	TerminalID string `json:"terminal_id"`
	Pool       string `json:"pool"`
	Executor   string `json:"executor"`
	PtyPid     int    `json:"pty_pid"`
	Reason     string `json:"reason"`
	BytesOut   int64  `json:"bytes_out"`
	BytesIn    int64  `json:"bytes_in"`
	DurationMs int64  `json:"duration_ms"`
}

func (TerminalClosed) Kind() string { return "terminal.closed" }

// TerminalOpenFailed: terminal.open got no terminal, and why.
type TerminalOpenFailed struct {
	Pool     string `json:"pool"`
	Executor string `json:"executor,omitempty"`
	Reason   string `json:"reason"`
}

func (TerminalOpenFailed) Kind() string { return "terminal.open_failed" }

func init() {
	eventlog.Register(TerminalOpened{}, TerminalClosed{}, TerminalOpenFailed{},
		TaskQueued{}, TaskStarted{}, TaskMessage{}, TaskProgress{}, TaskErrorReported{},
		TaskFinished{}, TaskPermissionRequested{}, TaskPermissionDecided{}, TaskRecovered{}, TaskSequencesSkipped{}, SecretIssued{},
		SecretRefused{}, ExecutorSpawned{}, ExecutorConnected{}, ExecutorStartFailed{}, ExecutorPeerRefused{}, ExecutorExited{},
		ExecutorRestartScheduled{}, ExecutorPaused{}, ExecutorResumed{}, ExecutorBadToken{},
		ExecutorProtocolError{}, ExecutorStopping{}, ExecutorKilled{})
}
