package chat

import (
	"encoding/json"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// The chat's stream, as Loopr's client reads it (chat.chunk {text, done},
// chat.tool_call {tool, input}, chat.tool_result {tool, output, is_error?,
// denied?}), plus the message it belongs to: ephemeral, never in the log
// (they carry what the agent wrote; the store keeps the reply as the
// task's messages). Their kinds are Loopr's names. The log gets the chat's lifecycle, sizes only
// (chat.sent, chat.replied, chat.cancelled, chat.cleared).

// ChatChunk is a piece of the reply's text; the last of a reply has Done
// (and no text), with how its task ended.
type ChatChunk struct {
	Text      string `json:"text"`
	Done      bool   `json:"done"`
	MessageID string `json:"message_id"`
	// The last chunk's: the task's end state and, when it did not
	// complete, its error.
	State api.TaskState  `json:"state,omitempty"`
	Error *api.TaskError `json:"error,omitempty"`
}

func (ChatChunk) Kind() string { return "chat.chunk" }
func (ChatChunk) Ephemeral()   {}

// ChatToolCall: the agent calls a tool.
type ChatToolCall struct {
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input"`
	MessageID string          `json:"message_id"`
}

func (ChatToolCall) Kind() string { return "chat.tool_call" }
func (ChatToolCall) Ephemeral()   {}

// ChatToolResult: what a tool gave back (cut at 64 KiB). IsError: the
// tool failed or did not run; Denied: the tool use was refused (by a
// person, a rule or the agent itself) and did not run, Output the reason.
type ChatToolResult struct {
	Tool      string `json:"tool"`
	Output    string `json:"output"`
	IsError   bool   `json:"is_error,omitempty"`
	Denied    bool   `json:"denied,omitempty"`
	MessageID string `json:"message_id"`
}

func (ChatToolResult) Kind() string { return "chat.tool_result" }
func (ChatToolResult) Ephemeral()   {}

// ChatSent: chat.send's message became the executor task TaskID of the
// conversation SessionID; Bytes is its size (never its text).
type ChatSent struct {
	MessageID  string `json:"message_id"`
	TaskID     string `json:"task_id"`
	SessionID  string `json:"session_id"`
	Executor   string `json:"executor"`
	Bytes      int    `json:"bytes"`
	NewSession bool   `json:"new_session"`
}

func (ChatSent) Kind() string { return "chat.sent" }

// ChatReplied: a reply ended (its task did): how, and its size.
type ChatReplied struct {
	MessageID   string        `json:"message_id"`
	TaskID      string        `json:"task_id"`
	State       api.TaskState `json:"state"`
	ErrorCode   string        `json:"error_code,omitempty"`
	Chunks      int           `json:"chunks"`
	Bytes       int           `json:"bytes"`
	ToolCalls   int           `json:"tool_calls"`
	ToolResults int           `json:"tool_results"`
	Denied      int           `json:"denied,omitempty"` // tool uses refused
	Cancelled   bool          `json:"cancelled"`
}

func (ChatReplied) Kind() string { return "chat.replied" }

// ChatCancelled: chat.cancel stopped the reply being streamed.
type ChatCancelled struct {
	MessageID string `json:"message_id"`
	TaskID    string `json:"task_id,omitempty"`
}

func (ChatCancelled) Kind() string { return "chat.cancelled" }

// ChatCleared: chat.clear started a new conversation; SessionID was the
// old one's executor session ("" if it had none yet).
type ChatCleared struct {
	SessionID string `json:"session_id,omitempty"`
}

func (ChatCleared) Kind() string { return "chat.cleared" }

func init() {
	eventlog.Register(ChatChunk{}, ChatToolCall{}, ChatToolResult{}, ChatSent{}, ChatReplied{}, ChatCancelled{}, ChatCleared{})
}
