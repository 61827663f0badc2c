package executors

import (
	"context"
	"encoding/json"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// The executors domain reaches the rest of the daemon through these small
// interfaces; daemon.Run hands it implementations (the state store, the
// secrets file, the approvals manager), and tests their doubles.

// Log is the executors' durable record: tasks, sessions and their
// messages. The write methods queue the write and return at once (an actor
// must not block): an error if it was refused outright (a full queue, a
// closed store: done is then not called), else done is called once, on
// any goroutine and quickly, with nil when the write is committed or the
// error that ended it.
type Log interface {
	// TaskCreated records a new queued task (and its session, created when
	// new, its updated_at moved otherwise).
	TaskCreated(t api.TaskRecord, done func(error)) error
	// TaskStarted records a task running on t.Instance since t.StartedAt.
	TaskStarted(t api.TaskRecord, done func(error)) error
	// TaskFinished records a task's terminal state, error, message_count
	// and token_usage. A task finishes once: a second TaskFinished fails
	// and changes nothing.
	TaskFinished(t api.TaskRecord, done func(error)) error
	// Messages records report_message notifications. A (task_id, sequence)
	// already recorded is ignored (a duplicate), not an error.
	Messages(ms []api.SessionMessage, done func(error)) error

	Task(ctx context.Context, id string) (api.TaskRecord, bool, error)
	// Tasks lists tasks newest first; limit 0 is no limit.
	Tasks(ctx context.Context, f TaskFilter) ([]api.TaskRecord, error)
	Session(ctx context.Context, id string) (api.SessionRecord, bool, error)
	// SessionMessages lists a session's messages in order: its tasks in the
	// order they were created, each task's by sequence. limit 0 is all;
	// otherwise the last limit messages.
	SessionMessages(ctx context.Context, sessionID string, limit int) ([]api.SessionMessage, error)
	// Unfinished lists the tasks a dead daemon left queued or running.
	Unfinished(ctx context.Context) ([]api.TaskRecord, error)
}

// TaskFilter selects tasks for Log.Tasks.
type TaskFilter struct {
	SessionID string
	Executor  string
	State     api.TaskState // "" is any
	Limit     int
}

// Secrets hands out what secrets.toml holds. Find takes a service
// ("anthropic") or a credential key ("ANTHROPIC_API_KEY"), either as the
// file names it or through the aliases a Secrets implementation knows, and
// says which entry answered: a pool may receive a secret only when one of
// the names its secrets list resolves to that same entry.
type Secrets interface {
	Find(name string) (entry, value string, expiresAt time.Time, ok bool)
}

// PermissionRequest is an executor's request_permission, put to a person
// (or a rule) through the approvals domain.
type PermissionRequest struct {
	Pool      string
	TaskID    string
	SessionID string
	Cwd       string
	ToolName  string
	ToolInput json.RawMessage // a JSON object
	// Suggestions are the agent's permission suggestions (JSON objects):
	// what an AlwaysAllow may record as a rule.
	Suggestions []json.RawMessage
	Timeout     time.Duration // the pool's permission_timeout
}

// PermissionAnswer is the approval's outcome: Approved, and Reason as the
// executor hears it ("user_approved", "rule r-1", "timed out after 30s").
type PermissionAnswer struct {
	Approved   bool
	Reason     string
	ApprovalID string
}

// Permissions puts permission requests to the approvals domain. answer is
// called exactly once, on any goroutine, and must not block (it may be
// called before Ask returns, when a rule answers at once). id is the
// approval's; cancel ends it while pending (the task ended, its executor
// went away).
type Permissions interface {
	Ask(req PermissionRequest, answer func(PermissionAnswer)) (id string, cancel func(reason string), err error)
}
