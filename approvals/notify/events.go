package notify

import "github.com/orchestrd/orchestrd/supervisor/eventlog"

// ApprovalNotifyFailed: [approvals] notify_command did not succeed for an
// approval: it could not start, exited non-zero, was killed by a signal
// (its timeout, or the daemon stopping), or its run was dropped because
// the notifier's queue was full. The approval itself is not affected.
type ApprovalNotifyFailed struct {
	ID         string `json:"id"`
	Error      string `json:"error"`
	ExitCode   *int   `json:"exit_code,omitempty"`   // when it exited
	Signal     string `json:"signal,omitempty"`      // when a signal ended it ("SIGKILL")
	StderrTail string `json:"stderr_tail,omitempty"` // the last 512 bytes it wrote to stderr
}

func (ApprovalNotifyFailed) Kind() string { return "approval.notify_failed" }

func init() { eventlog.Register(ApprovalNotifyFailed{}) }
