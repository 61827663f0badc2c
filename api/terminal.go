package api

import "time"

// TerminalSpec is what terminal.open asks for: a shell on a PTY that an
// executor of the pool spawns (Agor's spawn_terminal).
type TerminalSpec struct {
	Executor string            `json:"executor,omitempty"` // the pool; default as task.execute's
	Cwd      string            `json:"cwd,omitempty"`      // absolute; empty: the executor's own
	Shell    string            `json:"shell,omitempty"`    // bash, zsh, /bin/sh...; empty: the executor's choice
	Env      map[string]string `json:"env,omitempty"`      // added to the shell's environment (TERM, ...)
	Cols     int               `json:"cols,omitempty"`     // default 80
	Rows     int               `json:"rows,omitempty"`     // default 24
}

// Terminal states.
const (
	TerminalOpen   = "open"
	TerminalClosed = "closed"
)

// Reasons a terminal closed (TerminalStatus.Reason, terminal.closed).
const (
	TermExited         = "exited"          // every process on the PTY let go of it (the shell exited)
	TermClosedByUser   = "closed"          // terminal.close
	TermClientGone     = "client_gone"     // the last client waiting on it went away
	TermNotAttached    = "not_attached"    // nobody waited on it within the attach timeout
	TermExecutorExited = "executor_exited" // the executor that spawned it exited
	TermDaemonShutdown = "daemon_shutdown"
)

// TerminalStatus is one terminal as terminal.open, terminal.list and
// terminal.wait show it.
type TerminalStatus struct {
	ID         string     `json:"id"`
	Pool       string     `json:"pool"`
	Executor   string     `json:"executor"`     // the instance that spawned it, "POOL-N"
	ExecTermID string     `json:"exec_term_id"` // the executor's terminal_id
	PtyPid     int        `json:"pty_pid"`
	Cwd        string     `json:"cwd,omitempty"`
	Shell      string     `json:"shell,omitempty"`
	Cols       int        `json:"cols"`
	Rows       int        `json:"rows"`
	State      string     `json:"state"`
	Reason     string     `json:"reason,omitempty"`
	BytesOut   int64      `json:"bytes_out"` // read from the PTY
	BytesIn    int64      `json:"bytes_in"`  // written to it
	Attached   int        `json:"attached"`  // clients waiting on it (terminal.wait)
	OpenedAt   time.Time  `json:"opened_at"`
	ClosedAt   *time.Time `json:"closed_at,omitempty"`
}
