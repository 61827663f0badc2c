package lanes

import (
	"encoding/json"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

// The event kinds lanes emits: its runners (runner.*), lanes (lane.*),
// jobs (job.*) and the job processes killed for outliving their job or
// runner (process.orphan_killed). Kinds are noun.verb_past; field names are
// stable snake_case and only ever added to. Empty optional fields are
// omitted. They are registered with the event log below, so the log and
// `orchestrd events` know them.

type RunnerSpawned struct {
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
	Pid      int    `json:"pid"`
	Attempt  int    `json:"attempt"`
	Network  string `json:"network"`
}

func (RunnerSpawned) Kind() string { return "runner.spawned" }

type RunnerSpawnFailed struct {
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
	Error    string `json:"error"`
}

func (RunnerSpawnFailed) Kind() string { return "runner.spawn_failed" }

type RunnerReady struct {
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
	Pid      int    `json:"pid"`
	Slots    int    `json:"slots"`
	Spawned  bool   `json:"spawned"` // false for a bring-your-own runner
	Version  string `json:"version"`
	StartMs  int64  `json:"start_ms"` // spawn to handshake, spawned runners only
}

func (RunnerReady) Kind() string { return "runner.ready" }

type RunnerExited struct {
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
	Pid      int    `json:"pid"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	UptimeMs int64  `json:"uptime_ms"`
	Cause    string `json:"cause"` // exited, socket_closed, killed_runner_unresponsive, killed_memory_limit, protocol_error, shutdown, ...
	Spawned  bool   `json:"spawned"`
}

func (RunnerExited) Kind() string { return "runner.exited" }

type RunnerKilled struct {
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
	Pid      int    `json:"pid"`
	Reason   string `json:"reason"` // runner_unresponsive, memory_limit, shutdown_timeout, protocol_error
	Detail   string `json:"detail,omitempty"`
}

func (RunnerKilled) Kind() string { return "runner.killed" }

// RunnerHeartbeatBehind: a runner's heartbeat was due and had not been
// taken, but bytes it wrote wait unread in its socket: the daemon is
// behind (its reader starved by a burst of work), not the runner, which
// is given another heartbeat timeout rather than killed.
type RunnerHeartbeatBehind struct {
	Lane        string `json:"lane"`
	RunnerID    string `json:"runner_id"`
	Pid         int    `json:"pid"`
	UnreadBytes int    `json:"unread_bytes"`
	TimeoutMs   int64  `json:"timeout_ms"`
}

func (RunnerHeartbeatBehind) Kind() string { return "runner.heartbeat_behind" }

// RunnerRestartScheduled: a runner slot's process is gone and will be
// started again after DelayMs. Reason is why it is being restarted: the
// cause of its runner.exited (exited, socket_closed, killed_memory_limit,
// killed_runner_unresponsive, protocol_error, spawn_failed). Policy is the
// restart policy's verdict on the delay: stable_exit (it had been up
// restart.stable: at once), crash_loop (it died sooner: backoff) or
// degraded (the lane is over its restart intensity: at the cap).
type RunnerRestartScheduled struct {
	Lane             string `json:"lane"`
	RunnerID         string `json:"runner_id"`
	DelayMs          int64  `json:"delay_ms"`
	RestartsInWindow int    `json:"restarts_in_window"`
	Reason           string `json:"reason"`
	Policy           string `json:"policy"`
}

func (RunnerRestartScheduled) Kind() string { return "runner.restart_scheduled" }

// RunnerPromoted: a lane lost a serving runner and a ready spare took its
// place (lanes with spares > 0). Replaces is the lost runner's id.
type RunnerPromoted struct {
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
	Pid      int    `json:"pid"`
	Replaces string `json:"replaces"`
}

func (RunnerPromoted) Kind() string { return "runner.promoted" }

type RunnerRejected struct {
	Lane   string `json:"lane"`
	Pid    int    `json:"pid,omitempty"`
	Reason string `json:"reason"`
}

func (RunnerRejected) Kind() string { return "runner.rejected" }

type LaneStarted struct {
	Lane    string `json:"lane"`
	Runners int    `json:"runners"`
	Slots   int    `json:"slots"`
	Network string `json:"network"`
	Socket  string `json:"socket"`
}

func (LaneStarted) Kind() string { return "lane.started" }

type LaneDegraded struct {
	Lane             string `json:"lane"`
	RestartsInWindow int    `json:"restarts_in_window"`
	MaxR             int    `json:"max_r"`
	MaxTMs           int64  `json:"max_t_ms"`
}

func (LaneDegraded) Kind() string { return "lane.degraded" }

// LanePaused: the node's available memory fell below the lane's
// min_free_memory; the lane starts none of its jobs (they stay queued)
// and, in a fleet, takes none from the fleet until LaneResumed.
type LanePaused struct {
	Lane           string `json:"lane"`
	Reason         string `json:"reason"` // min_free_memory
	AvailableBytes uint64 `json:"available_bytes"`
	MinFreeMemory  uint64 `json:"min_free_memory"`
}

func (LanePaused) Kind() string { return "lane.paused" }

// LaneResumed: the node's available memory is back at or above the lane's
// min_free_memory; the lane starts and takes jobs again.
type LaneResumed struct {
	Lane           string `json:"lane"`
	Reason         string `json:"reason"`
	AvailableBytes uint64 `json:"available_bytes"`
	MinFreeMemory  uint64 `json:"min_free_memory"`
}

func (LaneResumed) Kind() string { return "lane.resumed" }

type LaneRecovered struct {
	Lane string `json:"lane"`
}

func (LaneRecovered) Kind() string { return "lane.recovered" }

type JobQueued struct {
	JobID  string `json:"job_id"`
	Lane   string `json:"lane"`
	Queued int    `json:"queued"`
}

func (JobQueued) Kind() string { return "job.queued" }

type JobRejected struct {
	JobID  string `json:"job_id,omitempty"` // a job refused after its id was chosen (store_unavailable)
	Lane   string `json:"lane"`
	Reason string `json:"reason"` // queue_full, store_unavailable
}

func (JobRejected) Kind() string { return "job.rejected" }

type JobDispatched struct {
	JobID    string `json:"job_id"`
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
	Pid      int    `json:"pid"`
}

func (JobDispatched) Kind() string { return "job.dispatched" }

// JobFinished is logged with the summary fields; subscribers receive
// {"job": <full record>} (see WireData).
type JobFinished struct {
	JobID      string `json:"job_id"`
	Lane       string `json:"lane"`
	RunnerID   string `json:"runner_id,omitempty"`
	State      string `json:"state"`
	ExitCode   *int32 `json:"exit_code,omitempty"`
	Error      string `json:"error,omitempty"`
	DurationMs int64  `json:"duration_ms"`
	Record     any    `json:"-"`

	// Signal names the signal that ended the job's process (there is no
	// exit_code then). OutputBytes is all the output the job wrote;
	// OutputTruncated says its record kept only the first max_output_bytes.
	Signal          string `json:"signal,omitempty"`
	OutputBytes     int64  `json:"output_bytes,omitempty"`
	OutputTruncated bool   `json:"output_truncated,omitempty"`
	// StoppedBy: how a cancelled or timed-out job was stopped, sigterm (it
	// ended within its kill grace) or sigkill (it needed SIGKILL).
	StoppedBy string `json:"stopped_by,omitempty"`
	// OutputCut: the runner stopped reading the job's output while
	// something that outlived the job held it open (api.JobRecord).
	OutputCut bool `json:"output_cut,omitempty"`
}

func (JobFinished) Kind() string { return "job.finished" }
func (e JobFinished) WireData() any {
	return struct {
		Job any `json:"job"`
	}{e.Record}
}

// JobCancelRequested: job.cancel (or a Loopsy cancel, a client gone)
// reached a live job. State is the state it was in: a queued job ends
// cancelled at once; a dispatched or running one gets SIGTERM, and SIGKILL
// after its kill grace, or at once when Force or Again (a cancel had gone
// to its runner already).
type JobCancelRequested struct {
	JobID string `json:"job_id"`
	Lane  string `json:"lane"`
	State string `json:"state"`
	Force bool   `json:"force,omitempty"`
	Again bool   `json:"again,omitempty"`
}

func (JobCancelRequested) Kind() string { return "job.cancel_requested" }

type JobOrphaned struct {
	JobID    string `json:"job_id"`
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
	Reason   string `json:"reason"` // runner_lost, runner_unresponsive, runner_memory
}

func (JobOrphaned) Kind() string { return "job.orphaned" }

// JobLimitExceeded: the daemon measured a running job's process tree over
// its lane's max_memory_bytes (limit "memory", bytes) or max_cpu_seconds
// (limit "cpu", seconds); the job is being stopped (SIGTERM, its kill
// grace, SIGKILL) and ends failed with memory_exceeded or cpu_exceeded.
type JobLimitExceeded struct {
	JobID    string  `json:"job_id"`
	Lane     string  `json:"lane"`
	RunnerID string  `json:"runner_id"`
	Limit    string  `json:"limit"` // memory, cpu
	Measured float64 `json:"measured"`
	Max      float64 `json:"max"`
}

func (JobLimitExceeded) Kind() string { return "job.limit_exceeded" }

// JobRequeued: a job dispatched to a runner that was gone before the job
// could be written to it goes back to the head of its lane's queue. It never
// reached a runner, so this is not a retry.
type JobRequeued struct {
	JobID    string `json:"job_id"`
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"` // the runner it was meant for
	Reason   string `json:"reason"`
}

func (JobRequeued) Kind() string { return "job.requeued" }

// JobOutput is streamed output; ephemeral. Data holds the bytes exactly as
// the job wrote them, which need not be UTF-8. In JSON (see MarshalJSON)
// they are "data", a string, when they are valid UTF-8, and otherwise
// "data_b64", standard base64, with no "data".
type JobOutput struct {
	JobID  string `json:"job_id"`
	Stream string `json:"stream"` // stdout or stderr
	Data   string `json:"data"`
}

func (JobOutput) Kind() string { return "job.output" }
func (JobOutput) Ephemeral()   {}

// MarshalJSON writes Data as "data" or "data_b64" (see JobOutput).
func (e JobOutput) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 48+len(e.JobID)+len(e.Stream)+len(e.Data)*4/3+8)
	b = append(b, `{"job_id":`...)
	b = wire.AppendJSONString(b, e.JobID, false)
	b = append(b, `,"stream":`...)
	b = wire.AppendJSONString(b, e.Stream, false)
	b = wire.AppendBytesField(b, "data", e.Data)
	return append(b, '}'), nil
}

// UnmarshalJSON reads "data" or "data_b64" into Data.
func (e *JobOutput) UnmarshalJSON(b []byte) error {
	var v struct {
		JobID   string  `json:"job_id"`
		Stream  string  `json:"stream"`
		Data    *string `json:"data"`
		DataB64 []byte  `json:"data_b64"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	data, err := wire.BytesField("data", v.Data, v.DataB64)
	if err != nil {
		return err
	}
	*e = JobOutput{JobID: v.JobID, Stream: v.Stream, Data: data}
	return nil
}

// JobStreamOpened: a reader that must not lose bytes attached to a job's
// output (run, logs -f, /execute/stream): from the start (attached at
// submission), running (the kept bytes, then live) or record (a finished
// job's kept output). While it is behind, the job's runner waits for it.
type JobStreamOpened struct {
	JobID  string `json:"job_id"`
	Reader string `json:"reader"` // control, http
	From   string `json:"from"`   // start, running, record, fleet (a cluster job followed from the fleet)
}

func (JobStreamOpened) Kind() string { return "job.stream_opened" }

// JobStreamClosed: such a reader let go: it read to the end (ended) or its
// client went away (detached). Bytes it delivered, Missed it did not get
// (not kept before it attached, or past the daemon's bound behind a runner
// without flow control).
type JobStreamClosed struct {
	JobID  string `json:"job_id"`
	Reader string `json:"reader"`
	Reason string `json:"reason"` // ended, detached
	Bytes  int64  `json:"bytes"`
	Missed int64  `json:"missed,omitempty"`
}

func (JobStreamClosed) Kind() string { return "job.stream_closed" }

// OrphanKilled: a job process was killed because it outlived what it
// belonged to: its job ended (reason job_ended; the runner killed it and
// said so in the job's Result) or its runner died (runner_gone; the daemon,
// as child subreaper, found it). One event per process, once.
type OrphanKilled struct {
	Pid     int    `json:"pid"`
	Pgid    int    `json:"pgid,omitempty"`
	JobID   string `json:"job_id,omitempty"`
	Lane    string `json:"lane,omitempty"`
	Command string `json:"command,omitempty"` // the process's name (comm)
	Reason  string `json:"reason"`            // job_ended, runner_gone
}

func (OrphanKilled) Kind() string { return "process.orphan_killed" }

// JobRecovered: at start, a job the previous daemon left unfinished (it
// died: kill -9, a crash). Action "requeued": it was only queued (no
// runner ever saw it) and is queued again under its id. Action "failed":
// it ended failed with Error daemon_lost, not retried, because Was
// (dispatched or running) says a runner may have run it; or with
// lane_removed, its lane being gone from the config.
type JobRecovered struct {
	JobID  string `json:"job_id"`
	Lane   string `json:"lane"`
	Action string `json:"action"`          // requeued, failed
	Was    string `json:"was,omitempty"`   // the state it was recorded in, for failed
	Error  string `json:"error,omitempty"` // daemon_lost, lane_removed, for failed
}

func (JobRecovered) Kind() string { return "job.recovered" }

// StateWriteFailed: a write to the state store failed (a full disk, a
// failing file, the store closed). What says what was being recorded; a
// job.submit whose record failed was refused (store_unavailable).
type StateWriteFailed struct {
	What  string `json:"what"`
	Error string `json:"error"`
}

func (StateWriteFailed) Kind() string { return "state.write_failed" }

func init() {
	eventlog.Register(JobRecovered{}, StateWriteFailed{})
	eventlog.Register(RunnerSpawned{}, RunnerSpawnFailed{}, RunnerReady{}, RunnerExited{},
		RunnerKilled{}, RunnerHeartbeatBehind{}, RunnerRestartScheduled{}, RunnerPromoted{}, RunnerRejected{}, LaneStarted{},
		LaneDegraded{}, LaneRecovered{}, JobQueued{}, JobRejected{}, JobDispatched{}, JobFinished{},
		JobCancelRequested{}, JobOrphaned{}, JobRequeued{}, JobOutput{}, OrphanKilled{},
		JobStreamOpened{}, JobStreamClosed{}, JobLimitExceeded{}, LanePaused{}, LaneResumed{})
}
