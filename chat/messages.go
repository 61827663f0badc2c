package chat

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
)

// An agent's messages (report_message's event_type and event_data, as its
// executor sent them) become the chat's stream: text as chat.chunk, a tool
// it calls as chat.tool_call, what the tool gave back as chat.tool_result
// (is_error when it failed), a tool use that was refused as a
// chat.tool_result with denied and the reason. api.DecodeAgentMessage
// reads them (the built-in agent kinds' messages, Agor's, Claude Code's
// stream-json lines). Anything else is not part of the reply (thinking,
// usage, the result, which repeats the text). What an agent wrote is
// hostile: it goes to the client only, a tool's output cut at
// maxToolOutput bytes.

// itemKind is what one piece of a reply is.
type itemKind int

const (
	itemText itemKind = iota
	itemToolCall
	itemToolResult
)

// item is one piece of a reply.
type item struct {
	kind    itemKind
	text    string          // itemText
	tool    string          // itemToolCall, itemToolResult
	input   json.RawMessage // itemToolCall: a JSON value ({} when none)
	output  string          // itemToolResult (a denial: its reason)
	isError bool            // itemToolResult: the tool failed, or did not run
	denied  bool            // itemToolResult: the tool use was refused
}

// Bounds on what one reply keeps or sends.
const (
	maxToolOutput = 64 << 10 // a tool result's output, cut past it
	maxToolName   = 256      // a tool's name
)

// parseMessage turns one agent message into the pieces of the reply it
// holds (none for a message that is not part of it, or not understood).
func parseMessage(eventType string, data []byte, tools *api.ToolNames) []item {
	parts, _ := api.DecodeAgentMessage(eventType, data)
	var out []item
	for _, p := range parts {
		tools.Part(&p)
		switch p.Kind {
		case api.MsgText:
			if p.Text != "" {
				out = append(out, item{kind: itemText, text: p.Text})
			}
		case api.MsgToolCall:
			out = append(out, item{kind: itemToolCall, tool: cut(p.Tool, maxToolName), input: p.Input})
		case api.MsgToolResult:
			if p.AfterDenial {
				continue // the denial's tool_result said it
			}
			out = append(out, item{kind: itemToolResult, tool: cut(p.Tool, maxToolName), output: cut(p.Text, maxToolOutput), isError: p.IsError})
		case api.MsgPermissionDenied:
			out = append(out, item{kind: itemToolResult, tool: cut(p.Tool, maxToolName), output: cut(p.Text, maxToolOutput),
				isError: true, denied: true})
		}
	}
	return out
}

// cut shortens s to at most n bytes, on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
