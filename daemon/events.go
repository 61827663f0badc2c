package daemon

import "github.com/orchestrd/orchestrd/supervisor/eventlog"

// The event kinds the daemon emits: its own lifecycle (daemon.*) and the
// actor system's panics and restarts (actor.*). Kinds are noun.verb_past;
// field names are stable snake_case and only ever added to. They are
// registered with the event log below.

// DaemonStarted: the daemon serves. Recovered says the previous daemon
// died leaving unfinished jobs, of which Requeued were queued again and
// Failed ended failed (job.recovered has each).
type DaemonStarted struct {
	Pid       int      `json:"pid"`
	Version   string   `json:"version"`
	Home      string   `json:"home"`
	Lanes     []string `json:"lanes"`
	Recovered bool     `json:"recovered"`
	Requeued  int      `json:"requeued"`
	Failed    int      `json:"failed"`
	// SeqSkipped: how many seq numbers were skipped since the last line
	// of the log, the unused rest of the range a daemon that died had
	// reserved (see supervisor/eventlog); omitted when none.
	SeqSkipped uint64 `json:"seq_skipped,omitempty"`
}

func (DaemonStarted) Kind() string { return "daemon.started" }

type DaemonStopping struct {
	Signal string `json:"signal,omitempty"`
	Reason string `json:"reason"`
}

func (DaemonStopping) Kind() string { return "daemon.stopping" }

type DaemonStopped struct {
	UptimeMs int64 `json:"uptime_ms"`
	Killed   int   `json:"killed_runners"`
}

func (DaemonStopped) Kind() string { return "daemon.stopped" }

type ActorPanicked struct {
	Actor     string `json:"actor"` // kind/id
	Panic     string `json:"panic"`
	Stack     string `json:"stack"`
	Directive string `json:"directive"` // restart, stop
}

func (ActorPanicked) Kind() string { return "actor.panicked" }

type ActorRestarted struct {
	Actor    string `json:"actor"`
	Restarts int    `json:"restarts"`
}

func (ActorRestarted) Kind() string { return "actor.restarted" }

// JobsPruned: finished jobs were deleted from the state store, past
// [state] retain_jobs (the most recently finished kept; 0: no bound) or
// older than retain_for ("0s": no bound). Only a prune that deleted
// something is logged.
type JobsPruned struct {
	Count      int    `json:"count"`
	RetainJobs int    `json:"retain_jobs"`
	RetainFor  string `json:"retain_for"`
}

func (JobsPruned) Kind() string { return "jobs.pruned" }

// ApprovalsPruned: finished approvals were deleted from the state store by
// the same [state] keys as jobs (retain_jobs counts approvals apart from
// jobs). Pending approvals and recorded rules are never pruned.
type ApprovalsPruned struct {
	Count      int    `json:"count"`
	RetainJobs int    `json:"retain_jobs"`
	RetainFor  string `json:"retain_for"`
}

func (ApprovalsPruned) Kind() string { return "approvals.pruned" }

func init() {
	eventlog.Register(JobsPruned{}, ApprovalsPruned{})
	eventlog.Register(DaemonStarted{}, DaemonStopping{}, DaemonStopped{}, ActorPanicked{},
		ActorRestarted{})
}
