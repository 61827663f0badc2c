package api

import (
	"encoding/json"
	"time"
)

// TaskState is an executor task's lifecycle state: queued -> running ->
// exactly one of completed, failed, cancelled, timeout.
type TaskState string

const (
	TaskQueued    TaskState = "queued"
	TaskRunning   TaskState = "running"
	TaskCompleted TaskState = "completed"
	TaskFailed    TaskState = "failed"
	TaskCancelled TaskState = "cancelled"
	TaskTimeout   TaskState = "timeout"
)

// Terminal reports whether s is a final state.
func (s TaskState) Terminal() bool {
	switch s {
	case TaskCompleted, TaskFailed, TaskCancelled, TaskTimeout:
		return true
	}
	return false
}

// Permission modes of a task (Agor's PermissionMode).
const (
	ModeDefault     = "default"
	ModeAcceptEdits = "acceptEdits"
	ModeBypass      = "bypassPermissions"
	// ModePlan: the agent plans and changes nothing (Claude Code's and
	// Gemini CLI's plan mode; Codex runs read-only).
	ModePlan = "plan"
)

// Task error codes, TaskError.Code, for tasks that did not end on their own
// (an executor's own error codes pass through as it gave them).
const (
	TaskErrExecutorLost   = "executor_lost"   // the executor process died or its socket closed mid-task
	TaskErrTimeout        = "timeout"         // timeout_ms passed
	TaskErrStopped        = "stopped"         // task.stop
	TaskErrDaemonShutdown = "daemon_shutdown" // the daemon stopped while it ran
	TaskErrDaemonLost     = "daemon_lost"     // the daemon died while it ran; found at the next start
	TaskErrStartFailed    = "executor_start_failed"
	TaskErrPoolRemoved    = "executor_removed" // queued for a pool the restarted daemon has not got
	TaskErrActorFailed    = "actor_failed"     // the daemon's actor of the task failed (a bug: see actor.panicked)
	// An agent's own failures, as a built-in agent kind's adapter tells
	// them apart: its model endpoint's rate or usage limit (TaskError's
	// RetryAt says when to try again, when the agent said), and a key the
	// endpoint refused.
	TaskErrUsageLimit = "usage_limit"
	TaskErrAuthFailed = "auth_failed"
)

// TaskSpec is task.execute's params.
type TaskSpec struct {
	Executor       string   `json:"executor,omitempty"` // pool name; "" is the only pool or "default"
	Prompt         string   `json:"prompt"`
	Cwd            string   `json:"cwd"`
	SessionID      string   `json:"session_id,omitempty"` // "" starts a new session
	Tools          []string `json:"tools,omitempty"`
	PermissionMode string   `json:"permission_mode,omitempty"` // "" is ModeDefault
	TimeoutMs      int64    `json:"timeout_ms,omitempty"`      // 0 is the pool's default
	// Loop is the loop this task is an iteration of (the loops domain's
	// tasks): execute_prompt carries it as "loop".
	Loop *TaskLoop `json:"loop,omitempty"`
	// Confine, set only by another domain in the daemon (a loop's
	// iteration; never on the wire), runs the task on an executor of its
	// own, started for it and gone with it, that may write only there.
	Confine *TaskConfine `json:"-"`
}

// TaskConfine is where a task's agent may write: its worktree. The
// repository the worktree belongs to is read-only to it: its shared git
// directory always, its main checkout unless the pool's write_checkout
// says otherwise. Every process the task started is gone when its end is
// told.
type TaskConfine struct {
	Repo     string // the repository's top directory (its .git is inside)
	Worktree string // the one directory of it the agent writes
}

// TokenUsage is what a task's agent spent, as its executor reported.
type TokenUsage struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	// CostUSD is what the agent said the tokens cost (Claude Code reports
	// it; 0 when the agent does not).
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// TaskError says why a task failed, timed out or was cancelled.
type TaskError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// RetryAt: a usage_limit's reset time, when the agent gave one.
	RetryAt *time.Time `json:"retry_at,omitempty"`
}

// TaskRecord is a task as task.get, task.list and the store show it.
type TaskRecord struct {
	ID             string       `json:"id"`
	SessionID      string       `json:"session_id"`
	Executor       string       `json:"executor"`           // pool name
	Instance       string       `json:"instance,omitempty"` // executor instance id that ran it
	State          TaskState    `json:"state"`
	Prompt         string       `json:"prompt"`
	Cwd            string       `json:"cwd"`
	Tools          []string     `json:"tools"`
	PermissionMode string       `json:"permission_mode"`
	TimeoutMs      int64        `json:"timeout_ms"`
	Loop           *TaskLoop    `json:"loop,omitempty"` // the loop it is an iteration of
	Confine        *TaskConfine `json:"-"`              // TaskSpec's: in memory only
	Error          *TaskError   `json:"error,omitempty"`
	MessageCount   int64        `json:"message_count"`
	TokenUsage     *TokenUsage  `json:"token_usage,omitempty"`
	// Denied counts the tool uses refused in the task (a built-in agent
	// kind reports it): a task can complete with all of them denied.
	Denied int `json:"denied,omitempty"`
	// Usage is what the executor's process tree used while the task ran
	// (Scope "executor"), as of its last sample; nil when the daemon does
	// not sample (usage_sample_interval 0) or the task never ran.
	Usage *Usage `json:"usage,omitempty"`
	// SDKSessionID is the agent's own session id the task ended in.
	SDKSessionID string     `json:"sdk_session_id,omitempty"`
	CreatedAt    time.Time  `json:"created_at"`
	StartedAt    *time.Time `json:"started_at,omitempty"`
	FinishedAt   *time.Time `json:"finished_at,omitempty"`
}

// SessionRecord is an agent session: the tasks that share one history.
type SessionRecord struct {
	ID        string    `json:"id"`
	Executor  string    `json:"executor"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	Tasks     int       `json:"tasks"`
	// SDKSessionID is the agent's own session the next task resumes
	// (Claude Code's --resume, codex exec resume), as its last task
	// ended; "" until an agent reported one.
	SDKSessionID string `json:"sdk_session_id,omitempty"`
	// TokenUsage sums its tasks' tokens and cost; nil when none reported
	// any.
	TokenUsage *TokenUsage `json:"token_usage,omitempty"`
}

// Add adds o to u (nil o adds nothing).
func (u *TokenUsage) Add(o *TokenUsage) {
	if o == nil {
		return
	}
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.CacheReadTokens += o.CacheReadTokens
	u.CacheWriteTokens += o.CacheWriteTokens
	u.CostUSD += o.CostUSD
}

// SessionMessage is one report_message of a session's task, as stored.
// EventData is kept as the executor sent it, byte for byte.
type SessionMessage struct {
	SessionID  string          `json:"session_id"`
	TaskID     string          `json:"task_id"`
	Sequence   int64           `json:"sequence"`
	EventType  string          `json:"event_type"`
	EventData  json.RawMessage `json:"event_data,omitempty"`
	Timestamp  int64           `json:"timestamp,omitempty"` // the executor's epoch ms
	ReceivedAt time.Time       `json:"received_at"`
}

// ExecutorStatus is one executor process as executor.list shows it.
type ExecutorStatus struct {
	Pool      string    `json:"pool"`
	ID        string    `json:"id"` // instance id, "POOL-N"
	Pid       int       `json:"pid,omitempty"`
	State     string    `json:"state"` // starting, idle, busy, stopping
	TaskID    string    `json:"task_id,omitempty"`
	Paused    bool      `json:"paused"`  // pause_notifications in force
	Pending   int       `json:"pending"` // notifications read but not yet committed
	StartedAt time.Time `json:"started_at"`
}

// PoolStatus is one [executors.NAME] pool as executor.list shows it.
type PoolStatus struct {
	Name         string           `json:"name"`
	Instances    int              `json:"instances"`
	MaxInstances int              `json:"max_instances"`
	Queued       int              `json:"queued"`
	Executors    []ExecutorStatus `json:"executors"`
}
