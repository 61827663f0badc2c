package wire

import (
	"encoding/json"
	"fmt"
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

var typeNames = map[MsgType]string{
	TypeHandshake: "Handshake", TypeHandshakeAck: "HandshakeAck",
	TypeJob: "Job", TypeJobAck: "JobAck", TypeResult: "Result",
	TypeCancel: "Cancel", TypeCancelAck: "CancelAck",
	TypeOutputChunk: "OutputChunk",
	TypeHeartbeat:   "Heartbeat", TypeHeartbeatAck: "HeartbeatAck",
	TypeShutdown: "Shutdown",
}

// String names the type as the spec does, or 0xNN for an unknown byte.
func (t MsgType) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("0x%02X", byte(t))
}

// Known reports whether t is one of the spec's frame types.
func (t MsgType) Known() bool { _, ok := typeNames[t]; return ok }

// Handshake is the first frame a runner sends.
type Handshake struct {
	Lane         string   `json:"lane"`
	Pid          uint32   `json:"pid"`
	Version      string   `json:"version"`
	Capabilities []string `json:"capabilities"`
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

// UnmarshalJSON refuses anything but the five variant names.
func (s *ExitStatus) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("decoding exit status: %w", err)
	}
	switch ExitStatus(v) {
	case StatusSuccess, StatusFailed, StatusTimeout, StatusCancelled, StatusError:
		*s = ExitStatus(v)
		return nil
	}
	return fmt.Errorf("unknown exit status %q (want Success, Failed, Timeout, Cancelled or Error)", v)
}

// Result is the spec's ToolResult.
type Result struct {
	JobID        string     `json:"job_id"`
	Status       ExitStatus `json:"status"`
	Output       string     `json:"output"`
	ExitCode     *int32     `json:"exit_code"`
	WasTimeout   bool       `json:"was_timeout"`
	WasCancelled bool       `json:"was_cancelled"`
	DurationMs   uint64     `json:"duration_ms"`
}

// Cancel is the spec's CancelRequest.
type Cancel struct {
	JobID string `json:"job_id"`
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

// UnmarshalJSON refuses anything but Stdout and Stderr.
func (s *Stream) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("decoding output stream: %w", err)
	}
	switch Stream(v) {
	case Stdout, Stderr:
		*s = Stream(v)
		return nil
	}
	return fmt.Errorf("unknown output stream %q (want Stdout or Stderr)", v)
}

// OutputChunk carries streamed job output. Chunk is Bytes: decoded from a
// JSON array of byte values (serde's Vec<u8>) or a base64 string, and encoded
// as an array, so real Loopr peers read what orchestrd sends.
type OutputChunk struct {
	JobID  string `json:"job_id"`
	Chunk  Bytes  `json:"chunk"`
	Stream Stream `json:"stream"`
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
// orchestrd sends {} and accepts any payload.
type Shutdown struct{}
