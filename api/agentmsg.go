package api

import "encoding/json"

// The messages of a task run by a built-in agent kind ([executors.NAME]
// agent = "claude-code", "codex", "gemini"): each adapter turns its
// agent's own event stream into report_messages of these event types, so
// that every front-end shows one conversation whatever the agent. Each
// structured message carries, in Raw, the agent's line it came from (the
// first message of a line that gives several); a line that gives none is
// an AgentLine. A command executor's messages are whatever its command
// printed (Agor's content_block_delta, tool_use... or these).
const (
	MsgText             = "text"              // MsgTextData: text as it is generated (a part of it)
	MsgThinking         = "thinking"          // MsgTextData
	MsgToolCall         = "tool_call"         // ToolCallData
	MsgToolResult       = "tool_result"       // ToolResultData
	MsgPermissionDenied = "permission_denied" // PermissionDeniedData: a tool use that did not run
	MsgUsage            = "usage"             // UsageData: what one model call (or the run) spent
	MsgResult           = "result"            // ResultData: the run's end, once
	MsgAgentLine        = "agent_line"        // AgentLineData: an agent line with no message of its own
)

// MsgTextData is a text or thinking message.
type MsgTextData struct {
	Text string          `json:"text"`
	Raw  json.RawMessage `json:"raw,omitempty"`
}

// ToolCallData is a tool the agent calls (before it runs or is asked about).
type ToolCallData struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"` // a JSON object
	Raw   json.RawMessage `json:"raw,omitempty"`
}

// ToolResultData is what a tool call gave back.
type ToolResultData struct {
	ID      string          `json:"id"`
	Output  string          `json:"output"`
	IsError bool            `json:"is_error,omitempty"`
	Raw     json.RawMessage `json:"raw,omitempty"`
}

// PermissionDeniedData is a tool use that was refused: by a person, a rule,
// a timeout or the agent itself. Reason is what the agent was told.
type PermissionDeniedData struct {
	ID     string          `json:"id,omitempty"`
	Name   string          `json:"name"`
	Input  json.RawMessage `json:"input,omitempty"`
	Reason string          `json:"reason"`
	Raw    json.RawMessage `json:"raw,omitempty"`
}

// UsageData is tokens and cost, as the agent reported them.
type UsageData struct {
	TokenUsage
	Raw json.RawMessage `json:"raw,omitempty"`
}

// ResultData is the end of an agent's run.
type ResultData struct {
	Text    string `json:"text,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// SDKSessionID is the agent's own session (Claude Code's session_id,
	// Codex's thread id, Gemini's session): the next task of the same
	// orchestrd session resumes it.
	SDKSessionID string          `json:"sdk_session_id,omitempty"`
	Denied       int             `json:"denied,omitempty"` // tool uses refused in the run
	Turns        int             `json:"turns,omitempty"`
	Usage        *TokenUsage     `json:"usage,omitempty"`
	Raw          json.RawMessage `json:"raw,omitempty"`
}

// AgentLineData is one line of the agent's stream that has no message of
// its own (an init, a stream's start), kept for --json.
type AgentLineData struct {
	Agent string          `json:"agent"`
	Line  json.RawMessage `json:"line"` // JSON as the agent printed it, else a JSON string of the line
}
