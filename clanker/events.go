package clanker

import "github.com/orchestrd/orchestrd/supervisor/eventlog"

// The event kinds the clanker domain emits, each with the repo's path.
// The task kinds are the ones the issue names (clanker.task_created,
// task_prompted, task_status, handoff, note, pod_stale, paused, resumed);
// the repo's and the spool's are noun.verb_past. Field names are stable
// snake_case and only ever added to; empty optional fields are omitted.
// A task's prompt is never in an event (it can be long): it is in the
// task's file.

// RepoStarted: a repo's actor serves its socket.
type RepoStarted struct {
	Repo   string `json:"repo"`
	Socket string `json:"socket"`
	Tasks  int    `json:"tasks"`
	// Imported counts task files written by clanker itself (its
	// filesystem fallback) while orchestrd was away, taken in at start.
	Imported int `json:"imported,omitempty"`
}

func (RepoStarted) Kind() string { return "clanker.repo_started" }

// RepoFailed: a repo could not start (its state, its socket); the other
// repos and the daemon go on.
type RepoFailed struct {
	Repo  string `json:"repo"`
	Error string `json:"error"`
}

func (RepoFailed) Kind() string { return "clanker.repo_failed" }

// RepoStopped: a repo's actor stopped (the daemon stops).
type RepoStopped struct {
	Repo string `json:"repo"`
}

func (RepoStopped) Kind() string { return "clanker.repo_stopped" }

// TaskCreated: a task_create made a task (or replaced one of the same id).
type TaskCreated struct {
	Repo     string `json:"repo"`
	TaskID   string `json:"task_id"`
	Status   string `json:"status"`
	Replaced bool   `json:"replaced,omitempty"`
	Via      string `json:"via"` // ipc, spool
}

func (TaskCreated) Kind() string { return "clanker.task_created" }

// TaskImported: a task file clanker wrote itself (its filesystem fallback)
// was taken in; Removed: the file was gone (archived).
type TaskImported struct {
	Repo    string `json:"repo"`
	TaskID  string `json:"task_id"`
	Status  string `json:"status,omitempty"`
	Removed bool   `json:"removed,omitempty"`
}

func (TaskImported) Kind() string { return "clanker.task_imported" }

// TaskPrompted: a pod was handed a task's prompt (Role slave or judge).
type TaskPrompted struct {
	Repo   string `json:"repo"`
	TaskID string `json:"task_id"`
	Pod    string `json:"pod"`
	Role   string `json:"role"`
	Status string `json:"status"`
	Resent bool   `json:"resent,omitempty"`
}

func (TaskPrompted) Kind() string { return "clanker.task_prompted" }

// TaskStatus: a task's status changed (task_status).
type TaskStatus struct {
	Repo   string `json:"repo"`
	TaskID string `json:"task_id"`
	From   string `json:"from"`
	Status string `json:"status"`
	Pod    string `json:"pod,omitempty"` // the pod it was assigned to
	Via    string `json:"via"`
}

func (TaskStatus) Kind() string { return "clanker.task_status" }

// Handoff: a pod handed a task off (task_handoff).
type Handoff struct {
	Repo   string `json:"repo"`
	TaskID string `json:"task_id"`
	Role   string `json:"role"`
	Via    string `json:"via"`
}

func (Handoff) Kind() string { return "clanker.handoff" }

// Note: a pod left a note on a task (task_note).
type Note struct {
	Repo   string `json:"repo"`
	TaskID string `json:"task_id"`
	Role   string `json:"role"`
	Via    string `json:"via"`
}

func (Note) Kind() string { return "clanker.note" }

// PodStale: a pod sent no heartbeat for 30 s. Said once, until it sends
// one again.
type PodStale struct {
	Repo       string `json:"repo"`
	Pod        string `json:"pod"`
	Role       string `json:"role,omitempty"`
	Pid        int    `json:"pid,omitempty"`
	LastSeenMs int64  `json:"last_seen_ms"` // how long ago, at the check
}

func (PodStale) Kind() string { return "clanker.pod_stale" }

// Paused: a pod reported a usage limit; the repo's fleet is handed no
// work until Until (or orchestrd clanker resume).
type Paused struct {
	Repo    string `json:"repo"`
	Pod     string `json:"pod"`
	Role    string `json:"role"`
	Message string `json:"message"`
	Until   string `json:"until"`
}

func (Paused) Kind() string { return "clanker.paused" }

// Resumed: the fleet is handed work again (Reason: command, timeout).
type Resumed struct {
	Repo     string `json:"repo"`
	Reason   string `json:"reason"`
	PausedMs int64  `json:"paused_ms"`
}

func (Resumed) Kind() string { return "clanker.resumed" }

// RequestRefused: a pod's line was not a request, or its handler refused
// it; the pod was answered. What the pod sent is never in an event: Type
// is one of the nine types (omitted for another), Error says what was
// wrong without quoting the line (the pod's answer does).
type RequestRefused struct {
	Repo  string `json:"repo"`
	Type  string `json:"type,omitempty"`
	Error string `json:"error"`
	Via   string `json:"via"` // ipc, spool
	// LineBytes and LineSHA256 (the first 128 bits of its SHA-256, in
	// hex) name a line the socket refused before it reached the repo.
	LineBytes  int    `json:"line_bytes,omitempty"`
	LineSHA256 string `json:"line_sha256,omitempty"`
}

func (RequestRefused) Kind() string { return "clanker.request_refused" }

// SpoolDrained: one tick's drain of the spool.
type SpoolDrained struct {
	Repo    string `json:"repo"`
	Lines   int    `json:"lines"`   // read this tick
	Applied int    `json:"applied"` // applied
	Dead    int    `json:"dead"`    // sent to the dead-letter file
	// More: lines left for the next ticks (the batch is 200).
	More bool `json:"more,omitempty"`
}

func (SpoolDrained) Kind() string { return "clanker.spool_drained" }

// SpoolDeadLettered: a spool line was not valid or its handler refused it;
// it is in ipc-spool.dead.ndjson (0600) with the error as the pod would
// have heard it, and never retried. The event holds none of the line:
// its length, its hash, one of the nine types (omitted for another) and
// what was wrong.
type SpoolDeadLettered struct {
	Repo  string `json:"repo"`
	Type  string `json:"type,omitempty"`
	Error string `json:"error"`
	// LineBytes is the line's length (without its newline); LineSHA256
	// the first 128 bits of its SHA-256, in hex (of its first part, for a
	// line over 1 MiB).
	LineBytes  int    `json:"line_bytes"`
	LineSHA256 string `json:"line_sha256"`
}

func (SpoolDeadLettered) Kind() string { return "clanker.line_dead_lettered" }

// FileRefused: a file or directory of a repo (its root, .clanker or what
// is in it) is not one orchestrd reads or writes: a symbolic link, a hard
// link to another file, a FIFO, a device or a socket, or another uid's.
// It was neither read nor written nor followed: a spool is not drained, a
// file's lines wait in the store, a state.json or task file is replaced by
// the daemon's own. Path is absolute (orchestrd's name for the file, never
// a pod's text). Said once per path and reason until it changes.
type FileRefused struct {
	Repo   string `json:"repo"`
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

func (FileRefused) Kind() string { return "clanker.file_refused" }

// WriteFailed: writing a repo's .clanker files failed (disk full, a
// permission); the store keeps the truth and the write is tried again.
type WriteFailed struct {
	Repo  string `json:"repo"`
	Path  string `json:"path"`
	Error string `json:"error"`
}

func (WriteFailed) Kind() string { return "clanker.write_failed" }

// LineSHA256 is the line_sha256 of a line: the first 128 bits of its
// SHA-256, in hex.
func LineSHA256(line []byte) string { return hashOf(line) }

func init() {
	eventlog.Register(RepoStarted{}, RepoFailed{}, RepoStopped{}, TaskCreated{}, TaskImported{}, TaskPrompted{},
		TaskStatus{}, Handoff{}, Note{}, PodStale{}, Paused{}, Resumed{}, RequestRefused{}, SpoolDrained{},
		SpoolDeadLettered{}, WriteFailed{}, FileRefused{})
}
