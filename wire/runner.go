package wire

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// MsgType is the type byte of a runner-protocol frame.
type MsgType byte

// Frame types, exactly as the Loopr IPC spec numbers them.
const (
	TypeHandshake    MsgType = 0x01 // runner -> daemon
	TypeHandshakeAck MsgType = 0x02 // daemon -> runner
	TypeJob          MsgType = 0x10 // daemon -> runner
	TypeJobAck       MsgType = 0x11 // runner -> daemon
	TypeResult       MsgType = 0x12 // runner -> daemon
	TypeCancel       MsgType = 0x20 // daemon -> runner
	TypeCancelAck    MsgType = 0x21 // runner -> daemon
	TypeOutputChunk  MsgType = 0x30 // runner -> daemon
	TypeHeartbeat    MsgType = 0x40 // runner -> daemon
	TypeHeartbeatAck MsgType = 0x41 // daemon -> runner
	TypeShutdown     MsgType = 0xF0 // daemon -> runner
)

// orchestrd's extension frames, numbered outside the spec's (0xE0-0xEF).
// Each belongs to a capability a runner announces in its Handshake; a
// runner that does not announce it never gets them, and an orchestrd runner
// sends them only to a daemon that agreed (see RunnerConfig.OutputWindow,
// Job.StdinStream).
const (
	TypeOutputAck  MsgType = 0xE0 // daemon -> runner, CapOutputCredit
	TypeStdinChunk MsgType = 0xE1 // daemon -> runner, CapStdinStream
	TypeStdinAck   MsgType = 0xE2 // runner -> daemon, CapStdinStream
	TypeOutputRaw  MsgType = 0xE3 // runner -> daemon, CapOutputRaw
	TypeJobStarted MsgType = 0xE4 // runner -> daemon, CapJobUsage
)

// Capabilities of orchestrd's extensions, as a runner announces them.
const (
	// CapOutputCredit: the runner sends at most RunnerConfig.OutputWindow
	// bytes of a job's output beyond what the daemon acknowledged
	// (OutputAck), and stops reading the job's pipes until it does.
	CapOutputCredit = "output_credit"
	// CapStdinStream: the runner takes a job's stdin as StdinChunk frames
	// while it runs (Job.StdinStream) and acknowledges each (StdinAck).
	CapStdinStream = "stdin_stream"
	// CapOutputRaw: the runner can send a job's output as OutputRaw frames
	// (an OutputChunk's fields in binary, the chunk's bytes as they are:
	// no JSON, no base64); it does so to a daemon that set
	// RunnerConfig.OutputRaw.
	CapOutputRaw = "output_raw"
	// CapJobUsage: the runner can tell the daemon each job's root process
	// once it started it (JobStarted) and what the root used, its reaped
	// descendants included, in the job's Result (Result.Rusage); it does
	// so to a daemon that set RunnerConfig.JobUsage.
	CapJobUsage = "job_usage"
)

var typeNames = map[MsgType]string{
	TypeHandshake: "Handshake", TypeHandshakeAck: "HandshakeAck",
	TypeJob: "Job", TypeJobAck: "JobAck", TypeResult: "Result",
	TypeCancel: "Cancel", TypeCancelAck: "CancelAck",
	TypeOutputChunk: "OutputChunk",
	TypeHeartbeat:   "Heartbeat", TypeHeartbeatAck: "HeartbeatAck",
	TypeShutdown:   "Shutdown",
	TypeOutputAck:  "OutputAck",
	TypeStdinChunk: "StdinChunk", TypeStdinAck: "StdinAck",
	TypeOutputRaw: "OutputRaw", TypeJobStarted: "JobStarted",
}

// typeNameTable is typeNames indexed by the type byte, so String and Known
// cost no map lookup on the hot path.
var typeNameTable = func() (t [256]string) {
	for k, v := range typeNames {
		t[k] = v
	}
	return t
}()

// String names the type as the spec does, or 0xNN for an unknown byte.
func (t MsgType) String() string {
	if n := typeNameTable[t]; n != "" {
		return n
	}
	return fmt.Sprintf("0x%02X", byte(t))
}

// Known reports whether t is one of the spec's frame types or orchestrd's
// extensions.
func (t MsgType) Known() bool { return typeNameTable[t] != "" }

// Handshake is the first frame a runner sends.
type Handshake struct {
	Lane         string   `json:"lane"`
	Pid          uint32   `json:"pid"`
	Version      string   `json:"version"`
	Capabilities []string `json:"capabilities"`
	// Token is an orchestrd extension: a bring-your-own runner proves with
	// it that it may join the lane (the lane's join token, see `orchestrd
	// lane token`). Runners the daemon spawns do not send one.
	Token string `json:"token,omitempty"`
}

// MarshalJSON writes a nil Capabilities as [] rather than null: serde's
// Vec<String> refuses null. Otherwise the output is what encoding/json
// would write, produced without reflection: a runner sends one Handshake
// as it starts, before anything else of it has used encoding/json.
func (h Handshake) MarshalJSON() ([]byte, error) { return h.appendJSON(nil), nil }

func (h *Handshake) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"lane":`...)
	dst = appendJSONString(dst, h.Lane)
	dst = append(dst, `,"pid":`...)
	dst = strconv.AppendUint(dst, uint64(h.Pid), 10)
	dst = append(dst, `,"version":`...)
	dst = appendJSONString(dst, h.Version)
	dst = append(dst, `,"capabilities":`...)
	dst = appendStringArray(dst, h.Capabilities)
	if h.Token != "" {
		dst = append(dst, `,"token":`...)
		dst = appendJSONString(dst, h.Token)
	}
	return append(dst, '}')
}

// HandshakeAck answers a Handshake.
type HandshakeAck struct {
	Accepted bool         `json:"accepted"`
	Slots    int          `json:"slots"`
	Config   RunnerConfig `json:"config"`
}

// RunnerConfig is the spec's opaque RunnerConfig. The spec gives no fields;
// these are orchestrd's choice, and a runner must ignore fields it does not
// know. Reason is set when Accepted is false.
type RunnerConfig struct {
	Lane                string `json:"lane"`
	HeartbeatIntervalMs uint64 `json:"heartbeat_interval_ms"`
	MaxFrameBytes       uint32 `json:"max_frame_bytes"`
	Reason              string `json:"reason,omitempty"`
	// Env and InheritEnv are orchestrd extensions: a job's environment is
	// the runner's own, cut to the base variables and those InheritEnv
	// names (a name or a prefix ending in "*"), then Env, then the job's.
	Env        map[string]string `json:"env,omitempty"`
	InheritEnv []string          `json:"inherit_env,omitempty"`
	// OutputWindow is an orchestrd extension, set only for a runner that
	// announced CapOutputCredit: it may send at most this many bytes of a
	// job's output beyond what the daemon acknowledged with OutputAck.
	// Absent (a Loopr daemon): the runner streams without waiting.
	// Present, the daemon takes a job's output from its OutputChunks
	// only: the runner's Results carry no output (but for an Error's,
	// which says why the job did not run).
	OutputWindow uint64 `json:"output_window,omitempty"`
	// OutputRaw is an orchestrd extension, set only for a runner that
	// announced CapOutputRaw: it sends job output as OutputRaw frames
	// rather than OutputChunk.
	OutputRaw bool `json:"output_raw,omitempty"`
	// JobUsage is an orchestrd extension, set only for a runner that
	// announced CapJobUsage: it sends a JobStarted frame for each job it
	// starts and Result.Rusage with each Result.
	JobUsage bool `json:"job_usage,omitempty"`
}

// Job is the spec's ToolJob: one command for a runner to execute.
type Job struct {
	JobID          string            `json:"job_id"`
	AgentID        string            `json:"agent_id"`
	ToolName       string            `json:"tool_name"`
	Command        string            `json:"command"`
	Argv           []string          `json:"argv"`
	Cwd            string            `json:"cwd"`
	WorktreeDir    string            `json:"worktree_dir"`
	Env            map[string]string `json:"env"`
	TimeoutMs      uint64            `json:"timeout_ms"`
	MaxOutputBytes uint64            `json:"max_output_bytes"`
	FilePaths      []string          `json:"file_paths"`
	// Stdin is what the job reads on its standard input (orchestrd's
	// extension, not in the spec): base64 in "stdin_b64", and omitted when
	// empty, so a Job without input is byte for byte the spec's ToolJob and a
	// Loopr runner, which ignores unknown fields, is unaffected. Without it
	// the job's stdin is /dev/null.
	Stdin []byte `json:"stdin_b64,omitempty"`
	// KillGraceMs is orchestrd's extension too: how long the job has
	// between SIGTERM and SIGKILL when it is cancelled or times out (0:
	// SIGKILL at once). Omitted, the runner's default (DefaultKillGraceMs)
	// applies; the daemon omits it when it is that default, so such a Job
	// is the spec's ToolJob byte for byte.
	KillGraceMs *uint64 `json:"kill_grace_ms,omitempty"`
	// StdinStream is an orchestrd extension, sent only to a runner that
	// announced CapStdinStream: the job's stdin is a pipe fed by StdinChunk
	// frames while it runs, until one with EOF. Omitted when false.
	StdinStream bool `json:"stdin_stream,omitempty"`
}

// DefaultKillGraceMs is a job's kill grace when its Job frame gives none:
// 10 s between SIGTERM and SIGKILL.
const DefaultKillGraceMs = 10000

// MarshalJSON writes nil Argv, FilePaths and Env as [] and {} rather than
// null: serde's Vec and HashMap refuse null, so a Loopr runner would reject
// the whole job. Otherwise the output is what encoding/json would write
// (map keys sorted, HTML-safe escaping), produced without reflection.
func (j Job) MarshalJSON() ([]byte, error) { return j.appendJSON(nil), nil }

func (j *Job) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"job_id":`...)
	dst = appendJSONString(dst, j.JobID)
	dst = append(dst, `,"agent_id":`...)
	dst = appendJSONString(dst, j.AgentID)
	dst = append(dst, `,"tool_name":`...)
	dst = appendJSONString(dst, j.ToolName)
	dst = append(dst, `,"command":`...)
	dst = appendJSONString(dst, j.Command)
	dst = append(dst, `,"argv":`...)
	dst = appendStringArray(dst, j.Argv)
	dst = append(dst, `,"cwd":`...)
	dst = appendJSONString(dst, j.Cwd)
	dst = append(dst, `,"worktree_dir":`...)
	dst = appendJSONString(dst, j.WorktreeDir)
	dst = append(dst, `,"env":`...)
	dst = appendStringMap(dst, j.Env)
	dst = append(dst, `,"timeout_ms":`...)
	dst = strconv.AppendUint(dst, j.TimeoutMs, 10)
	dst = append(dst, `,"max_output_bytes":`...)
	dst = strconv.AppendUint(dst, j.MaxOutputBytes, 10)
	dst = append(dst, `,"file_paths":`...)
	dst = appendStringArray(dst, j.FilePaths)
	if len(j.Stdin) > 0 {
		dst = append(dst, `,"stdin_b64":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, j.Stdin)
		dst = append(dst, '"')
	}
	if j.KillGraceMs != nil {
		dst = append(dst, `,"kill_grace_ms":`...)
		dst = strconv.AppendUint(dst, *j.KillGraceMs, 10)
	}
	if j.StdinStream {
		dst = append(dst, `,"stdin_stream":true`...)
	}
	return append(dst, '}')
}

// JobAck tells the daemon a runner received a Job.
type JobAck struct {
	JobID    string  `json:"job_id"`
	Accepted bool    `json:"accepted"`
	Error    *string `json:"error,omitempty"`
}

// ExitStatus is the spec's ToolExitStatus, serialised as its variant name.
type ExitStatus string

const (
	StatusSuccess   ExitStatus = "Success"
	StatusFailed    ExitStatus = "Failed"
	StatusTimeout   ExitStatus = "Timeout"
	StatusCancelled ExitStatus = "Cancelled"
	StatusError     ExitStatus = "Error"
)

// UnmarshalJSON refuses anything but the five variant names, naming the
// value it got. null is refused too, as serde refuses it for a unit enum.
func (s *ExitStatus) UnmarshalJSON(b []byte) error {
	v, err := variantName(b, "exit status")
	if err != nil {
		return err
	}
	switch string(v) {
	case "Success":
		*s = StatusSuccess
	case "Failed":
		*s = StatusFailed
	case "Timeout":
		*s = StatusTimeout
	case "Cancelled":
		*s = StatusCancelled
	case "Error":
		*s = StatusError
	default:
		return fmt.Errorf("unknown exit status %s (want Success, Failed, Timeout, Cancelled or Error)", excerpt(v))
	}
	return nil
}

// variantName returns the unquoted content of a JSON string holding a serde
// unit-variant name, without allocating when it has no escapes.
func variantName(b []byte, what string) ([]byte, error) {
	b = trimJSONSpace(b)
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		inner := b[1 : len(b)-1]
		if plainStringContent(inner) {
			return inner, nil
		}
		var s string
		if err := json.Unmarshal(b, &s); err == nil {
			return []byte(s), nil
		}
	}
	return nil, fmt.Errorf("%s must be a string naming a variant, got %s", what, excerpt(b))
}

// Result is the spec's ToolResult, plus one orchestrd extension: Signal.
type Result struct {
	JobID        string     `json:"job_id"`
	Status       ExitStatus `json:"status"`
	Output       string     `json:"output"`
	ExitCode     *int32     `json:"exit_code"`
	WasTimeout   bool       `json:"was_timeout"`
	WasCancelled bool       `json:"was_cancelled"`
	DurationMs   uint64     `json:"duration_ms"`
	// Signal names the signal that ended the job's process ("SIGSEGV"),
	// when one did; ExitCode is then null. It is orchestrd's extension and
	// omitted when empty, so a Result without it is byte for byte the
	// spec's, and Loopr peers (serde ignores unknown fields) read it as such.
	Signal string `json:"signal,omitempty"`
	// Killed is an orchestrd extension: the processes the job left behind
	// when it ended (in its process group, its cgroup, or daemonised out of
	// both), which the runner killed. Loopr peers ignore it.
	Killed []KilledProcess `json:"killed,omitempty"`
	// StoppedBy is an orchestrd extension: how a cancelled or timed-out
	// job was stopped. StoppedBySIGTERM: it ended within its kill grace
	// after SIGTERM; StoppedBySIGKILL: it needed SIGKILL (the grace ran
	// out, was 0, or the cancel was forced or repeated). Empty for a job
	// that was not stopped.
	StoppedBy string `json:"stopped_by,omitempty"`
	// OutputCut is an orchestrd extension: after the job and what it left
	// were killed, something outside them still held its output open and
	// wrote nothing for a while, so the runner stopped reading it. What
	// that holder wrote later was not read. Loopr peers ignore it.
	OutputCut bool `json:"output_cut,omitempty"`
	// Rusage is an orchestrd extension, sent only to a daemon that set
	// RunnerConfig.JobUsage: what the job's root process used, as the
	// runner's wait for it returned it (its reaped descendants included).
	// Absent when the job had no process.
	Rusage *JobRusage `json:"rusage,omitempty"`
}

// Result.StoppedBy values.
const (
	StoppedBySIGTERM = "sigterm"
	StoppedBySIGKILL = "sigkill"
)

// KilledProcess is one process a job left running when it ended.
type KilledProcess struct {
	Pid  int    `json:"pid"`
	Comm string `json:"comm,omitempty"`
}

// UnmarshalJSON decodes a Result like encoding/json does, but refuses one
// without a status (or with status null): ExitStatus has no valid zero
// value, and serde refuses a ToolResult without one too. Other absent fields
// are left as they are. On error r is not changed.
func (r *Result) UnmarshalJSON(b []byte) error {
	type plain Result
	p := plain(*r)
	p.Status = ""
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	if p.Status == "" {
		return errors.New("result has no status (want Success, Failed, Timeout, Cancelled or Error)")
	}
	*r = Result(p)
	return nil
}

// Cancel is the spec's CancelRequest. A runner gives the job SIGTERM and
// SIGKILL after its kill grace; a Cancel of a job already being stopped
// SIGKILLs it at once.
type Cancel struct {
	JobID string `json:"job_id"`
	// Force is orchestrd's extension, omitted when false: SIGKILL at once,
	// without the grace.
	Force bool `json:"force,omitempty"`
}

// CancelAck answers a Cancel.
type CancelAck struct {
	JobID      string `json:"job_id"`
	WasRunning bool   `json:"was_running"`
}

// Stream is the spec's OutputStream.
type Stream string

const (
	Stdout Stream = "Stdout"
	Stderr Stream = "Stderr"
)

// UnmarshalJSON refuses anything but Stdout and Stderr, naming the value it
// got. null is refused too, as serde refuses it for a unit enum.
func (s *Stream) UnmarshalJSON(b []byte) error {
	v, err := variantName(b, "output stream")
	if err != nil {
		return err
	}
	switch string(v) {
	case "Stdout":
		*s = Stdout
	case "Stderr":
		*s = Stderr
	default:
		return fmt.Errorf("unknown output stream %s (want Stdout or Stderr)", excerpt(v))
	}
	return nil
}

// OutputChunk carries streamed job output. Chunk is Bytes: decoded from a
// JSON array of byte values (serde's Vec<u8>) or a base64 string, and encoded
// as an array, so real Loopr peers read what orchestrd sends.
type OutputChunk struct {
	JobID  string `json:"job_id"`
	Chunk  Bytes  `json:"chunk"`
	Stream Stream `json:"stream"`
}

// UnmarshalJSON decodes an OutputChunk like encoding/json does, but refuses
// one without a stream: Stream has no valid zero value, and serde refuses an
// OutputChunk without one too. Other absent fields are left as they are. On
// error c is not changed. (Unmarshal takes a faster path to the same
// result.)
func (c *OutputChunk) UnmarshalJSON(b []byte) error {
	type plain OutputChunk
	p := plain(*c)
	p.Stream = ""
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	if p.Stream == "" {
		return errors.New("output chunk has no stream (want Stdout or Stderr)")
	}
	*c = OutputChunk(p)
	return nil
}

// OutputAck acknowledges a job's output (CapOutputCredit): Acked is every
// byte of it, stdout and stderr together, the daemon has taken so far. The
// runner may send up to Acked + RunnerConfig.OutputWindow. It only grows;
// an older one (a smaller Acked) changes nothing.
type OutputAck struct {
	JobID string `json:"job_id"`
	Acked uint64 `json:"acked"`
}

// StdinChunk is a piece of a job's stdin (CapStdinStream), in order; EOF
// closes the job's stdin after Data. The daemon sends at most its stdin
// window beyond what the runner acknowledged.
type StdinChunk struct {
	JobID string `json:"job_id"`
	Data  []byte `json:"data"` // base64
	EOF   bool   `json:"eof,omitempty"`
}

// StdinAck says how many bytes of a job's stdin the runner is done with,
// in all: written to the job's pipe, or dropped because the job no longer
// reads it (it closed its stdin or ended).
type StdinAck struct {
	JobID string `json:"job_id"`
	Bytes uint64 `json:"bytes"`
}

// Heartbeat is sent by a runner every second.
type Heartbeat struct {
	ActiveJobs  int    `json:"active_jobs"`
	UptimeSecs  uint64 `json:"uptime_secs"`
	MemoryBytes uint64 `json:"memory_bytes"`
}

// HeartbeatAck answers a Heartbeat; Timestamp is Unix milliseconds.
type HeartbeatAck struct {
	Timestamp uint64 `json:"timestamp"`
}

// Shutdown asks a runner to finish cleanly. The spec gives it no fields;
// orchestrd sends {} and accepts any payload: Unmarshal takes an empty or
// even non-JSON Shutdown payload, and UnmarshalJSON takes any JSON value
// (serde writes a unit struct as null).
type Shutdown struct{}

// UnmarshalJSON accepts any value; Shutdown carries nothing.
func (*Shutdown) UnmarshalJSON([]byte) error { return nil }
