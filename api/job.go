package api

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/wire"
)

// State is a job's lifecycle state. A job moves queued -> dispatched ->
// running and ends in exactly one terminal state.
type State string

const (
	StateQueued     State = "queued"
	StateDispatched State = "dispatched"
	StateRunning    State = "running"
	StateSucceeded  State = "succeeded"
	StateFailed     State = "failed"
	StateTimeout    State = "timeout"
	StateCancelled  State = "cancelled"
	StateError      State = "error"
)

// Terminal reports whether s is a final state.
func (s State) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateTimeout, StateCancelled, StateError:
		return true
	}
	return false
}

// ValidState reports whether s names a state.
func ValidState(s string) bool {
	switch State(s) {
	case StateQueued, StateDispatched, StateRunning:
		return true
	}
	return State(s).Terminal()
}

// Job errors recorded in JobRecord.Error for jobs that did not end on their
// own.
const (
	ErrRunnerLost         = "runner_lost"
	ErrRunnerUnresponsive = "runner_unresponsive"
	ErrRunnerMemory       = "runner_memory_exceeded"
	ErrDaemonShutdown     = "daemon_shutdown"
	ErrCancelled          = "cancelled_by_request"
	// ErrDaemonLost: the daemon died (kill -9, a crash) while the job was
	// dispatched or running; the daemon that started next failed it, since
	// it may have run (it is never run again).
	ErrDaemonLost = "daemon_lost"
	// ErrNodeLost: the fleet node running the cluster job stopped
	// heartbeating and was declared lost; the job may have run (it is
	// never run again), and a result the node sends later is not recorded.
	ErrNodeLost = "node_lost"
	// ErrLaneRemoved: the daemon died while the job was queued, and the
	// daemon that started next has no lane of its name in its config.
	ErrLaneRemoved = "lane_removed"
	// ErrStdinLost: the daemon died while the job was queued, and its
	// stdin was to be streamed by a client that is gone with it.
	ErrStdinLost = "stdin_lost"
	// ErrSecretMissing: a secret the job was submitted with could not be
	// found when it was to be dispatched (a job queued again after a
	// crash, by a daemon whose secrets.toml no longer has it).
	ErrSecretMissing = "secret_missing"
	// ErrMemoryExceeded, ErrCPUExceeded: the job's process tree went over
	// its lane's max_memory_bytes (resident) or max_cpu_seconds (user and
	// system), as the daemon measured it; it was stopped (SIGTERM, the kill
	// grace, SIGKILL) and ended failed.
	ErrMemoryExceeded = "memory_exceeded"
	ErrCPUExceeded    = "cpu_exceeded"
)

// DefaultLane is the lane of a job submitted without one.
const DefaultLane = "no-net"

// JobSpec is what a client submits (the params of job.submit).
type JobSpec struct {
	Lane           string            `json:"lane,omitempty"`
	Command        string            `json:"command,omitempty"`
	Argv           []string          `json:"argv,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	WorktreeDir    string            `json:"worktree_dir,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	TimeoutMs      uint64            `json:"timeout_ms,omitempty"`
	MaxOutputBytes uint64            `json:"max_output_bytes,omitempty"`
	FilePaths      []string          `json:"file_paths,omitempty"`
	AgentID        string            `json:"agent_id,omitempty"`
	ToolName       string            `json:"tool_name,omitempty"`
	// The job's standard input, at most MaxStdinBytes: text in stdin, or
	// any bytes base64-encoded in stdin_b64. Without either it reads
	// /dev/null.
	Stdin    string `json:"stdin,omitempty"`
	StdinB64 []byte `json:"stdin_b64,omitempty"`
	// KillGraceMs is how long the job has between SIGTERM and SIGKILL when
	// it is cancelled or times out: 0 is SIGKILL at once, absent the
	// lane's kill_grace; at most MaxKillGraceMs.
	KillGraceMs *uint64 `json:"kill_grace_ms,omitempty"`
	// StdinStream: the job's stdin comes while it runs, through job.stdin
	// calls (any size, flow-controlled), until one with eof or until the
	// client streaming it goes away. Not with stdin or stdin_b64. Not
	// durable: a job still queued when the daemon died fails stdin_lost.
	StdinStream bool `json:"stdin_stream,omitempty"`
	// Secrets are environment variables the job is given from the
	// daemon's secrets.toml, by name: variable -> secret (a key of the
	// file, or a name it answers to, as "anthropic" for
	// ANTHROPIC_API_KEY). Only the names are kept with the job; the lane
	// looks the values up when it dispatches the job and sends them to
	// the runner in its Job frame, with env, and nowhere else (the state
	// store, events, records and errors never hold them). Not on a shared
	// lane: the fleet would carry the names to other nodes' secrets.
	Secrets map[string]string `json:"secrets,omitempty"`
}

// MaxKillGraceMs is the longest kill grace a job or a lane can have: an
// hour.
const MaxKillGraceMs = 3_600_000

// JobRecord is the queryable state of a job.
type JobRecord struct {
	ID           string     `json:"id"`
	Lane         string     `json:"lane"`
	RunnerID     string     `json:"runner_id,omitempty"`
	RunnerPid    int        `json:"runner_pid,omitempty"`
	State        State      `json:"state"`
	ExitCode     *int32     `json:"exit_code"`
	Output       string     `json:"-"` // see OutputBytes and MarshalJSON
	WasTimeout   bool       `json:"was_timeout"`
	WasCancelled bool       `json:"was_cancelled"`
	DurationMs   int64      `json:"duration_ms"`
	Error        string     `json:"error,omitempty"`
	Command      string     `json:"command,omitempty"`
	Argv         []string   `json:"argv,omitempty"`
	Cwd          string     `json:"cwd,omitempty"`
	CreatedAt    time.Time  `json:"created_at"`
	DispatchedAt *time.Time `json:"dispatched_at,omitempty"`
	FinishedAt   *time.Time `json:"finished_at,omitempty"`

	// Signal names the signal that ended the job's process ("SIGSEGV"); the
	// job then has no exit code.
	Signal string `json:"signal,omitempty"`
	// StoppedBy says how a cancelled or timed-out job was stopped: "sigterm"
	// (it ended within its kill grace after SIGTERM) or "sigkill" (it
	// needed SIGKILL: the grace ran out or was 0, or the cancel was forced
	// or repeated). Absent when nothing had to be stopped.
	StoppedBy string `json:"stopped_by,omitempty"`
	// Output is the output kept of a finished job: the first
	// max_output_bytes it wrote, stdout and stderr as they came, byte for
	// byte (not necessarily UTF-8). In JSON it is "output" when it is valid
	// UTF-8, else "output_b64" (see MarshalJSON). OutputBytes counts every
	// byte the job wrote, kept or not; OutputTruncated says Output holds
	// only the first max_output_bytes of them.
	OutputBytes     int64 `json:"output_bytes"`
	OutputTruncated bool  `json:"output_truncated"`
	// OutputEvicted: Output was dropped after the job finished. Daemons
	// before issue 25 dropped it from memory past [daemon]
	// finished_output_bytes; now every finished job's output is read from
	// the state store and this is never set (kept for clients of both).
	OutputEvicted bool `json:"output_evicted,omitempty"`
	// OutputCut: after the job and what it left behind were killed,
	// something that outlived them still held the job's output open, so
	// the runner stopped reading it; whatever that wrote later is not in
	// the output. A client reading the output says it may be incomplete.
	OutputCut bool `json:"output_cut,omitempty"`
	// Node is the fleet node a cluster job ran on (or was taken by);
	// absent for a job of a lane that is not shared.
	Node string `json:"node,omitempty"`
	// Usage is what the job's process tree cost the machine, sampled while
	// it ran (lanes' usage sampler); absent when no sample was taken.
	Usage *Usage `json:"usage,omitempty"`
}

// Usage is what a process tree (a job's, an agent task's) cost, sampled
// while it ran: CPU seconds, the most memory it held at once, the bytes it
// read and wrote, the most threads it had. Source says where the figures
// come from: "cgroup" (the tree's own cgroup v2 counters) or "procfs" (its
// processes' /proc files, summed over every process a sample saw: a child
// that lived and died between two samples is missed; for a job, CPU and
// peak RSS are its runner's wait4 figures of the root at its end where
// those are larger).
type Usage struct {
	Source        string  `json:"source"`
	UserSeconds   float64 `json:"user_seconds"`
	SystemSeconds float64 `json:"system_seconds"`
	PeakRSSBytes  uint64  `json:"peak_rss_bytes"`
	ReadBytes     uint64  `json:"read_bytes"`
	WriteBytes    uint64  `json:"write_bytes"`
	PeakThreads   int     `json:"peak_threads"`
	Samples       int     `json:"samples"`
	// Scope says whose tree was measured: "" the job's own, "executor"
	// (an agent task's) the executor's process tree while the task ran:
	// its CPU and bytes counted from the task's start (the executor's
	// long-lived processes from the first sample), its peak RSS and
	// threads the whole tree's, the executor's own included. A task's
	// usage with no sample (Samples 0) ended before its first one.
	Scope string `json:"scope,omitempty"`
	// CgroupFigures names the figures Source "cgroup" gave ("cpu": a job's
	// cgroup's cpu.stat over its run); the others are procfs's.
	CgroupFigures string `json:"cgroup_figures,omitempty"`
}

// UsageScopeExecutor is Usage.Scope of an agent task's usage.
const UsageScopeExecutor = "executor"

// UsageSourceCgroup and UsageSourceProcfs are Usage.Source's values;
// UsageCgroupCPU is a Usage.CgroupFigures.
const (
	UsageSourceCgroup = "cgroup"
	UsageSourceProcfs = "procfs"
	UsageCgroupCPU    = "cpu"
)

// jobRecordFields is JobRecord without its JSON methods.
type jobRecordFields JobRecord

// MarshalJSON writes the record as AppendJSON does.
func (r JobRecord) MarshalJSON() ([]byte, error) { return r.AppendJSON(nil), nil }

// AppendJSON appends the record as one compact JSON object: its members in
// the order of its fields, then its output as "output" (a string) when it
// is valid UTF-8 and as "output_b64" (standard base64) otherwise, so that
// every byte survives (encoding/json would turn the bytes of a string that
// are not UTF-8 into U+FFFD). A record that does not hold its job's output
// (HoldsOutput) has neither: never an "output": "" for output that exists.
// Strings are escaped as encoding/json does without HTML escaping ("a < b"
// stays readable). It writes the output in one pass into dst, grown once:
// job.get of a job with megabytes of output copies them once
// (wire.JSONAppender).
func (r JobRecord) AppendJSON(dst []byte) []byte {
	holds := r.HoldsOutput()
	b64 := holds && !utf8.ValidString(r.Output)
	n := 512 + len(r.Command) + len(r.Error) + len(r.Cwd)
	for _, a := range r.Argv {
		n += len(a) + 4
	}
	switch {
	case b64:
		n += base64.StdEncoding.EncodedLen(len(r.Output))
	case holds:
		n += len(r.Output) + len(r.Output)/8 // room for some escapes
	}
	dst = slices.Grow(dst, n)
	str := func(name, v string, omitEmpty bool) {
		if omitEmpty && v == "" {
			return
		}
		dst = append(append(dst, ',', '"'), name...)
		dst = wire.AppendJSONString(append(dst, '"', ':'), v, false)
	}
	num := func(name string, v int64) {
		dst = append(append(dst, ',', '"'), name...)
		dst = strconv.AppendInt(append(dst, '"', ':'), v, 10)
	}
	boolean := func(name string, v, omitFalse bool) {
		if omitFalse && !v {
			return
		}
		dst = append(append(dst, ',', '"'), name...)
		dst = strconv.AppendBool(append(dst, '"', ':'), v)
	}
	tm := func(name string, t *time.Time) {
		if t == nil {
			return
		}
		dst = append(append(dst, ',', '"'), name...)
		dst = append(t.AppendFormat(append(dst, '"', ':', '"'), time.RFC3339Nano), '"')
	}
	dst = append(dst, `{"id":`...)
	dst = wire.AppendJSONString(dst, r.ID, false)
	str("lane", r.Lane, false)
	str("runner_id", r.RunnerID, true)
	if r.RunnerPid != 0 {
		num("runner_pid", int64(r.RunnerPid))
	}
	str("state", string(r.State), false)
	if r.ExitCode != nil {
		num("exit_code", int64(*r.ExitCode))
	} else {
		dst = append(dst, `,"exit_code":null`...)
	}
	boolean("was_timeout", r.WasTimeout, false)
	boolean("was_cancelled", r.WasCancelled, false)
	num("duration_ms", r.DurationMs)
	str("error", r.Error, true)
	str("command", r.Command, true)
	if len(r.Argv) > 0 {
		dst = append(dst, `,"argv":[`...)
		for i, a := range r.Argv {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = wire.AppendJSONString(dst, a, false)
		}
		dst = append(dst, ']')
	}
	str("cwd", r.Cwd, true)
	tm("created_at", &r.CreatedAt)
	tm("dispatched_at", r.DispatchedAt)
	tm("finished_at", r.FinishedAt)
	str("signal", r.Signal, true)
	str("stopped_by", r.StoppedBy, true)
	num("output_bytes", r.OutputBytes)
	boolean("output_truncated", r.OutputTruncated, false)
	boolean("output_evicted", r.OutputEvicted, true)
	boolean("output_cut", r.OutputCut, true)
	str("node", r.Node, true)
	if r.Usage != nil {
		u, _ := json.Marshal(r.Usage) // plain numbers and a fixed word: cannot fail
		dst = append(append(dst, `,"usage":`...), u...)
	}
	switch {
	case b64:
		dst = append(dst, `,"output_b64":"`...)
		var buf [3 << 10]byte // whole 3-byte groups: padding only at the end
		for out := r.Output; len(out) > 0; {
			k := copy(buf[:], out)
			dst = base64.StdEncoding.AppendEncode(dst, buf[:k])
			out = out[k:]
		}
		dst = append(dst, '"')
	case holds:
		str("output", r.Output, false)
	}
	return append(dst, '}')
}

// HoldsOutput reports whether the record carries its job's output, as
// job.get and job.wait give a finished job's: some output, or a finished
// job's that wrote none. A record job.list gives (without output), a
// job's that has not finished and one whose output was evicted do not.
func (r JobRecord) HoldsOutput() bool {
	return r.Output != "" || r.State.Terminal() && r.OutputBytes == 0 && !r.OutputEvicted
}

// DurationKnown reports whether DurationMs is how long the job's run
// took: not while it runs, and not for a job whose end nobody saw
// (daemon_lost: the daemon died while it ran; node_lost: so did the fleet
// node it ran on; lane_removed: it never ran), whose record says 0.
func (r JobRecord) DurationKnown() bool {
	if !r.State.Terminal() && r.DurationMs == 0 {
		return false
	}
	return r.Error != ErrDaemonLost && r.Error != ErrNodeLost && r.Error != ErrLaneRemoved
}

// UnmarshalJSON reads a record written by MarshalJSON: its output from
// "output" or "output_b64".
func (r *JobRecord) UnmarshalJSON(b []byte) error {
	var v struct {
		jobRecordFields
		Output    *string `json:"output"`
		OutputB64 []byte  `json:"output_b64"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	out, err := wire.BytesField("output", v.Output, v.OutputB64)
	if err != nil {
		return err
	}
	*r = JobRecord(v.jobRecordFields)
	r.Output = out
	return nil
}

// Filter selects jobs for List (the params of job.list); empty fields
// match everything.
type Filter struct {
	State string `json:"state,omitempty"`
	Lane  string `json:"lane,omitempty"`
	// Since keeps jobs created at or after a time: RFC 3339
	// ("2026-01-02T15:04:05Z"), or a Go duration ("1h", "90m") meaning
	// that long ago.
	Since string `json:"since,omitempty"`
	// Limit pages the list: at most Limit jobs (1 to MaxListLimit),
	// newest first, and next_cursor when there are more. Without it every
	// matching job comes, oldest first.
	Limit int `json:"limit,omitempty"`
	// Cursor continues a paged list: the next_cursor of the page before
	// (with the same filter and limit).
	Cursor string `json:"cursor,omitempty"`
}

// ClusterJobPrefix starts the id of every job of a fleet's shared lanes
// (the ids a fleet gives); no other job's id starts with it.
const ClusterJobPrefix = "c-"

// MaxListLimit is the largest page job.list gives.
const MaxListLimit = 10000

// RunnerStatus describes one runner of a lane.
type RunnerStatus struct {
	ID          string `json:"id"`
	Pid         int    `json:"pid,omitempty"`      // its process, while it has one
	LastPid     int    `json:"last_pid,omitempty"` // the process it had, while it has none (backoff, stopped)
	State       string `json:"state"`              // starting, ready, backoff, stopping
	Restarts    int    `json:"restarts"`           // times its process was started again (tree.get's panic_restarts are its actor's)
	ActiveJobs  int    `json:"active_jobs"`
	MemoryBytes uint64 `json:"memory_bytes"`
	Spawned     bool   `json:"spawned"`         // false: bring-your-own
	Spare       bool   `json:"spare,omitempty"` // ready, but kept idle to replace a lost runner at once
	UptimeMs    int64  `json:"uptime_ms"`
}

// LaneStatus describes one lane.
type LaneStatus struct {
	Name       string         `json:"name"`
	Network    string         `json:"network"`
	Slots      int            `json:"slots"`  // per runner
	Spares     int            `json:"spares"` // configured spare runners
	QueueLimit int            `json:"queue_limit"`
	Queued     int            `json:"queued"`
	Running    int            `json:"running"`
	Degraded   bool           `json:"degraded"`
	Runners    []RunnerStatus `json:"runners"`
}

// Metrics is the answer to metrics.get. Each part comes from its owner:
// the daemon (uptime, goroutines, descriptors, all of the process), the
// lanes (LaneMetrics, FinishedOutputBytes) and the control socket
// (ConnMetrics).
type Metrics struct {
	UptimeMs int64 `json:"uptime_ms"`
	LaneMetrics
	Goroutines int `json:"goroutines"`
	OpenFDs    int `json:"open_fds"`
	ConnMetrics
	// FinishedOutputBytes is what the cache of recently finished jobs
	// holds now, their records and output, at most [daemon]
	// finished_output_bytes.
	FinishedOutputBytes int64 `json:"finished_output_bytes"`
	LoopMetrics
}

// LoopMetrics count the loops (Loopr's metrics.get has running_loops).
type LoopMetrics struct {
	RunningLoops  int                `json:"running_loops"`
	LoopsByStatus map[LoopStatus]int `json:"loops_by_status"`
}

// LaneMetrics are the lanes' job and runner counters.
type LaneMetrics struct {
	JobsByState    map[State]int64  `json:"jobs_by_state"`
	JobsSubmitted  int64            `json:"jobs_submitted"`
	RunnerRestarts int64            `json:"runner_restarts"`
	OrphanedJobs   int64            `json:"orphaned_jobs"`
	RunnersByLane  map[string]int64 `json:"runners_by_lane"` // ready runners
}

// ConnMetrics count a front-end's connections.
type ConnMetrics struct {
	Connections     int64 `json:"connections"`      // open now
	ConnectionsSeen int64 `json:"connections_seen"` // ever
}

// MaxStdinBytes is the most standard input a job can be given with
// job.submit. Sent as base64 it fits the control socket's default line
// (wire.DefaultMaxLine) and the runner frame limit; larger input belongs in
// a file the job reads.
const MaxStdinBytes = 512 << 10
